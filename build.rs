//! `lockrun --version` names the commit it was built from, when it was built
//! from a git checkout; a source tarball gives the version alone. And the
//! cfgs that list the integration tests needing real engine binaries as
//! ignored, with the reason, where those binaries are absent.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    // The real Consul binaries the suite runs against, beside the
    // repository; a user's clone has none, and the tests that need them are
    // then listed as ignored with that reason.
    println!("cargo:rerun-if-env-changed=LOCKRUN_TEST_CONSUL_BINARIES");
    println!("cargo:rustc-check-cfg=cfg(no_real_consul)");
    let binaries = match std::env::var_os("LOCKRUN_TEST_CONSUL_BINARIES") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/consul"),
    };
    println!("cargo:rerun-if-changed={}", binaries.display());
    if !binaries.join("consul-1.6.2.xz").is_file() {
        println!("cargo:rustc-cfg=no_real_consul");
    }
    // etcd 3.5 for the suite's second etcd run, beside the `etcd` on PATH:
    // .ci/deps installs it where .cargo/config.toml names its folder, so
    // missing fails the test with the command that installs it; emptied
    // in the environment, it is listed as ignored with the reason.
    println!("cargo:rerun-if-env-changed=LOCKRUN_TEST_ETCD_35_BIN_DIR");
    println!("cargo:rustc-check-cfg=cfg(no_etcd_35)");
    if std::env::var_os("LOCKRUN_TEST_ETCD_35_BIN_DIR").is_none_or(|d| d.is_empty()) {
        println!("cargo:rustc-cfg=no_etcd_35");
    }
    let version = env!("CARGO_PKG_VERSION");
    // Only our own repository counts: a tarball unpacked inside another
    // checkout must not claim that checkout's commit.
    let ours = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| std::fs::canonicalize(top).ok())
        == std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok();
    let commit = ours
        .then(|| git(&["rev-parse", "--short", "HEAD"]))
        .flatten();
    match commit {
        Some(commit) => {
            println!("cargo:rustc-env=LOCKRUN_VERSION={version} ({commit})");
            // A new commit moves HEAD or the branch it points to; in a
            // worktree HEAD and the refs live in different directories.
            for (flag, files) in [
                ("--git-dir", &["HEAD"][..]),
                ("--git-common-dir", &["refs/heads", "packed-refs"][..]),
            ] {
                if let Some(dir) = git(&["rev-parse", flag]) {
                    for file in files {
                        let path = PathBuf::from(&dir).join(file);
                        if path.exists() {
                            println!("cargo:rerun-if-changed={}", path.display());
                        }
                    }
                }
            }
        }
        None => {
            println!("cargo:rustc-env=LOCKRUN_VERSION={version}");
            println!("cargo:rerun-if-changed=build.rs");
        }
    }
}

/// The trimmed output of a successful git command, or None (no git, no
/// repository).
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_string();
    (output.status.success() && !text.is_empty()).then_some(text)
}

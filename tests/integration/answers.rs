//! Answers that must be true where production differs from the lab: ACLs
//! that hide a holder, keys every backend judges alike, a frozen engine.

use crate::engines::consul::real::{self as real_consul, Agent, Spec};
use crate::engines::consul::support::{Api, TestConsul};
use crate::places::Place;
use crate::support::{bare, describe, run};

const ACLS: &str = r#"acl { enabled = true, default_policy = "deny", tokens { master = "root" } }"#;

/// A holder the token cannot see: `leader`, `leader --wait`, `release` and
/// `leader --json` must fail (125) saying so, never answer "no holder".
fn hidden_holder_is_an_error(addr: &str, root: &Api, token: Option<&str>, what: &str) {
    let key = format!(
        "acl/{:08x}/leader",
        crate::engines::consul::support::random_u64() as u32
    );
    let session = root.session_create("{}");
    assert!(
        root.kv_acquire(&key, &session, "primary"),
        "{what}: acquire"
    );
    let cases: &[&[&str]] = &[
        &["leader"],
        &["leader", "--json"],
        &["leader", "--wait", "--timeout", "20s"],
        &["leader", "--watch"],
        &["release"],
    ];
    for args in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.push(&key);
        let mut cmd = bare(&all);
        cmd.env("CONSUL_HTTP_ADDR", addr);
        if let Some(token) = token {
            cmd.env("CONSUL_HTTP_TOKEN", token);
        }
        let output = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(125),
            "{what}: {args:?}\n{}",
            describe(&cmd, &output, None)
        );
        assert!(
            stderr.contains(&format!("permission denied reading `{key}`"))
                && stderr.contains("the token lacks key:read"),
            "{what}: {args:?}\n{}",
            describe(&cmd, &output, None)
        );
    }
    // The holder still holds: nothing was released by the refused run.
    let entry = root.kv_get(&key).expect("the key is still there");
    assert_eq!(entry.session.as_deref(), Some(session.as_str()), "{what}");
}

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn a_holder_hidden_by_acls_is_an_error_on_real_consul() {
    for version in real_consul::VERSIONS {
        let agent = Agent::dev_with(Spec::dev(version).hcl(ACLS).token("root"));
        let root = agent.api();
        // A token that may use sessions but read no key.
        let policy = r#"{"Name":"no-keys","Rules":"session_prefix \"\" { policy = \"write\" } key_prefix \"other/\" { policy = \"read\" }"}"#;
        let created = root.put("/v1/acl/policy", policy);
        assert_eq!(created.status, 200, "{version}: {}", created.text());
        let token = root.put(
            "/v1/acl/token",
            r#"{"Description":"no keys","Policies":[{"Name":"no-keys"}]}"#,
        );
        assert_eq!(token.status, 200, "{version}: {}", token.text());
        let secret = token.json()["SecretID"].as_str().unwrap().to_string();
        let what = format!("Consul {version}, anonymous");
        hidden_holder_is_an_error(&agent.http_addr(), &root, None, &what);
        let what = format!("Consul {version}, token without key:read");
        hidden_holder_is_an_error(&agent.http_addr(), &root, Some(&secret), &what);
    }
}

#[test]
fn a_holder_hidden_by_acls_is_an_error_on_the_emulator() {
    use consul_emulator::AclPolicy;
    let consul = TestConsul::emulator_only(|b| {
        b.acl_default_deny()
            .acl_token("root", AclPolicy::Full)
            .acl_token("no-acl-keys", AclPolicy::DenyKeysUnder("acl/"))
    });
    let root = consul.api().with_token("root");
    let addr = consul.http_addr();
    hidden_holder_is_an_error(&addr, &root, None, "emulator, anonymous");
    hidden_holder_is_an_error(&addr, &root, Some("no-acl-keys"), "emulator, no key:read");
}

/// One rule for keys on every backend, checked before any write: etcd took
/// a 120 kB key (written, then refused), and etcd and local took a key with
/// a newline that Consul refuses.
fn every_backend_refuses_the_same_keys_before_writing(place: &Place) {
    {
        let base = place.key("k");
        let keys = [
            format!("{base}/a\nb"),
            format!("{base}/{}", "x".repeat(120_000)),
            format!("{base}/tab\there"),
            format!("/{base}"),
            format!("{base}//b"),
            format!("{base}/../b"),
            format!("{base}/b "),
            format!("{base}/\u{FEFF}b"),
        ];
        for key in &keys {
            for args in [
                vec!["elect", key, "--", "true"],
                vec!["semaphore", "--limit", "2", key, "--", "true"],
                vec!["leader", key],
                vec!["release", key],
            ] {
                let mut cmd = place.lockrun(&args);
                let output = run(&mut cmd);
                let stderr = String::from_utf8_lossy(&output.stderr);
                let shown: String = key.chars().take(60).collect();
                let what = format!("{:?} {shown:?}", args[0]);
                place.status(&output, 2, &what);
                assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
                assert!(stderr.contains("key"), "{what}: {stderr}");
            }
        }
        place.assert_nothing_written("a refused key");
    }
}
crate::places::on_every_engine!(every_backend_refuses_the_same_keys_before_writing);

/// local `release --all PREFIX` while a flock(1) holds one slot: the
/// lockrun holders of the other slots are released and named, then the
/// slot it could not free is reported, and the run fails (125) because a
/// slot is still held. It used to stop at the flock(1), after asking some
/// holders or none, naming none.
#[test]
fn local_release_all_frees_what_it_can_and_names_what_it_cannot() {
    use crate::places::{stdout, Place};
    use crate::support::{scratch, FlockHolder};
    let place = Place::local();
    let (work_a, work_b, work_f) = (scratch(), scratch(), scratch());
    let args = |value: &'static str| ["semaphore", "--limit", "3", "--value", value, "jobs"];
    let a = place.hold(work_a.path(), "", &args("a"));
    let b = place.hold(work_b.path(), "", &args("b"));
    // The third slot's file, locked by flock(1): a holder lockrun cannot ask.
    let slot = place.lock_dir().join("jobs/slot-2");
    std::fs::write(&slot, "").unwrap();
    let flock = FlockHolder::start(&slot, work_f.path());
    let output = run(&mut place.lockrun(&["release", "--all", "jobs"]));
    place.status(&output, 125, "release --all with a flock(1) slot");
    let out = stdout(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        out.contains(": a (lockrun pid") && out.contains(": b (lockrun pid"),
        "both lockrun holders named: {out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("slot 2 of `jobs`") && stderr.contains("not lockrun"),
        "{stderr}"
    );
    // The two lockrun holders were released: each stops its child, 124.
    place.status(&a.finish(), 124, "holder a");
    place.status(&b.finish(), 124, "holder b");
    flock.end();
}

/// The example unit the .deb ships runs the lockrun the .deb installs
/// (`/usr/bin/lockrun`, from Cargo.toml's assets), is ready at start (a
/// standby must count as started, or `systemctl enable --now` blocks and
/// boot never reaches multi-user.target), and `systemd-analyze verify`
/// accepts it. The binary's path is the only thing changed for verify,
/// to the one under test: verify checks that ExecStart is executable.
#[test]
fn the_shipped_unit_runs_the_packaged_binary_and_passes_systemd_analyze() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let dest = manifest
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("[\"target/release/lockrun\", \"")?;
            rest.split('"').next().map(str::to_string)
        })
        .expect("the .deb installs target/release/lockrun");
    let installed = format!("/{}lockrun", dest.trim_start_matches('/'));
    let unit = std::fs::read_to_string(root.join("man/db-primary.service.example")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    assert!(
        exec.starts_with(&format!("{installed} ")),
        "ExecStart runs `{exec}`, the .deb installs {installed}"
    );
    assert!(unit.contains("\nType=notify\n"), "{unit}");
    assert!(
        exec.contains(" --notify=start "),
        "Type=notify needs readiness at start, or a standby never starts: {exec}"
    );
    let Ok(probe) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("not checked: systemd-analyze is missing (apt-get install systemd)");
        return;
    };
    assert!(probe.status.success());
    let dir = crate::support::scratch();
    let path = dir.path().join("db-primary.service");
    let ours = crate::support::bin();
    std::fs::write(&path, unit.replace(&installed, ours.to_str().unwrap())).unwrap();
    let mut cmd = std::process::Command::new("systemd-analyze");
    cmd.arg("verify").arg(&path);
    let output = run(&mut cmd);
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{}",
        describe(&cmd, &output, None)
    );
}

/// `lockrun unit` writes a unit that runs the lockrun it was run as, wherever
/// that is installed, and `systemd-analyze verify` accepts it; a command line
/// lockrun would refuse is refused before any unit is printed.
#[test]
fn lockrun_unit_names_this_binary_and_passes_systemd_analyze() {
    let ours = crate::support::bin();
    let mut cmd = std::process::Command::new(&ours);
    cmd.args([
        "unit",
        "--",
        "elect",
        "--value",
        "db-1:5432",
        "service/db/leader",
        "--",
        "/bin/true",
    ]);
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output, None));
    let unit = String::from_utf8(output.stdout.clone()).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let canonical = std::fs::canonicalize(&ours).unwrap();
    assert!(
        exec.starts_with(&format!(
            "{} elect --value db-1:5432 service/db/leader --campaign --notify=start -- ",
            canonical.display()
        )),
        "{exec}"
    );
    let dir = crate::support::scratch();
    let path = dir.path().join("db-primary.service");
    std::fs::write(&path, &unit).unwrap();
    let mut verify = std::process::Command::new("systemd-analyze");
    verify.arg("verify").arg(&path);
    let checked = run(&mut verify);
    assert!(
        checked.status.success() && checked.stderr.is_empty(),
        "{}\n{unit}",
        describe(&verify, &checked, None)
    );

    let mut bad = std::process::Command::new(&ours);
    bad.args([
        "unit",
        "--",
        "elect",
        "--no-such-flag",
        "k",
        "--",
        "/bin/true",
    ]);
    let refused = run(&mut bad);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        describe(&bad, &refused, None)
    );
    assert!(
        refused.stdout.is_empty(),
        "{}",
        describe(&bad, &refused, None)
    );
    assert_eq!(String::from_utf8_lossy(&refused.stderr).lines().count(), 1);

    // The backend chosen for `unit` is the unit's (the attack review found
    // it dropped: the unit ran on Consul); a backend's flag before the
    // `--` would be lost, so it is refused with where it goes.
    let exec_of = |cmd: &mut std::process::Command| -> String {
        let output = run(cmd);
        assert!(output.status.success(), "{}", describe(cmd, &output, None));
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart=").map(str::to_owned))
            .expect("an ExecStart line")
    };
    let inner = ["--", "elect", "svc/x", "--", "/bin/true"];
    let mut flag = std::process::Command::new(&ours);
    flag.args(["--backend", "zookeeper", "unit"]).args(inner);
    assert!(exec_of(&mut flag).contains(" --backend zookeeper elect svc/x "));
    let mut after = std::process::Command::new(&ours);
    after.args(["unit", "--backend", "etcd"]).args(inner);
    assert!(exec_of(&mut after).contains(" --backend etcd elect svc/x "));
    // Where the shell's runs lock is where the unit locks (second review:
    // LOCKRUN_LOCK_DIR was dropped and the unit locked in the default).
    let mut located = std::process::Command::new(&ours);
    located
        .env("LOCKRUN_BACKEND", "local")
        .env("LOCKRUN_LOCK_DIR", "/srv/locks")
        .arg("unit")
        .args(inner);
    let output = run(&mut located);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("\nEnvironment=\"LOCKRUN_LOCK_DIR=/srv/locks\"\nEnvironmentFile="),
        "{text}"
    );
    let mut variable = std::process::Command::new(&ours);
    variable
        .env("LOCKRUN_BACKEND", "local")
        .arg("unit")
        .args(inner);
    assert!(exec_of(&mut variable).contains(" --backend local elect svc/x "));
    let mut own = std::process::Command::new(&ours);
    own.env("LOCKRUN_BACKEND", "local").args([
        "unit",
        "--",
        "--backend",
        "etcd",
        "elect",
        "svc/x",
        "--",
        "/bin/true",
    ]);
    let exec = exec_of(&mut own);
    assert!(
        exec.contains(" --backend etcd elect svc/x ") && !exec.contains("local"),
        "{exec}"
    );
    let mut lost = std::process::Command::new(&ours);
    lost.args(["--backend", "local", "--lock-dir", "/tmp", "unit"])
        .args(inner);
    let refused = run(&mut lost);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        describe(&lost, &refused, None)
    );
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim(),
        "lockrun: --lock-dir before the `--` would not reach the unit; give it after `--`, in the command line the unit runs"
    );
}

/// The README's install lines work on a fresh account: run in an empty
/// HOME with only `~/.cargo/bin`-style PATH (the `sudo` line left out),
/// they write every file, and the MANPATH line makes `man` find lockrun(1).
#[test]
fn the_readme_install_lines_work_on_a_fresh_account() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = |marker: &str| -> String {
        readme
            .split("```")
            .skip(1)
            .step_by(2)
            .find(|b| b.contains(marker))
            .unwrap_or_else(|| panic!("README has no block with {marker}"))
            .trim_start_matches("sh\n")
            .to_string()
    };
    let install: String = block("lockrun completions bash")
        .lines()
        .filter(|l| !l.starts_with("sudo "))
        .map(|l| format!("{l}\n"))
        .collect();
    let manpath = block("export MANPATH");
    let home = crate::support::scratch();
    let bin_dir = crate::support::bin().parent().unwrap().to_path_buf();
    let script = format!(
        "set -eu\n{install}\n{}",
        // `man -w` prints where the page is; a host without man-db skips it.
        manpath.replace(
            "man lockrun",
            "if command -v man >/dev/null; then man -w lockrun; fi"
        )
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()));
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output, None));
    for file in [
        ".local/share/man/man1/lockrun.1",
        ".local/share/bash-completion/completions/lockrun",
        ".zfunc/_lockrun",
        ".config/fish/completions/lockrun.fish",
    ] {
        assert!(home.path().join(file).is_file(), "{file} missing");
    }
    let found = String::from_utf8_lossy(&output.stdout);
    if std::path::Path::new("/usr/bin/man").exists() {
        assert!(
            found.contains(".local/share/man/man1/lockrun.1"),
            "man did not find lockrun(1): {found}"
        );
    }
}

/// The operations guide's leader script tells "no leader" (1) from "cannot tell"
/// (125): run with a lockrun that fails as one does when Consul is down,
/// it must not say there is no primary. It used to (`|| echo ...`).
#[test]
fn the_documented_leader_script_does_not_read_an_error_as_no_leader() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    assert!(
        !readme.contains("|| echo \"no leader\""),
        "the operations guide still reads 125 as no leader"
    );
    let script = readme
        .split("```")
        .skip(1)
        .step_by(2)
        .find(|b| b.contains("lockrun leader service/db/leader") && b.contains("#!/bin/sh"))
        .expect("the operations guide's leader script")
        .trim_start_matches("sh\n")
        .split("\n\n")
        .next()
        .unwrap()
        .to_string();
    let dir = crate::support::scratch();
    for (status, says, exit) in [(125, "cannot tell", 2), (1, "no primary", 1)] {
        let stub = dir.path().join("lockrun");
        std::fs::write(&stub, format!("#!/bin/sh\nexit {status}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()));
        let output = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(exit),
            "{}",
            describe(&cmd, &output, None)
        );
        assert!(stderr.contains(says), "lockrun {status}: {stderr}");
    }
}

/// A frozen engine: the holder's lease runs out, the child is stopped, and
/// lockrun exits soon after (it waited 5 s for a release the frozen engine
/// could not answer, though the lease is gone anyway), saying the renewal
/// got no answer for how long rather than "(last error: none)".
#[test]
fn a_frozen_engine_costs_no_extra_wait_after_the_child_stopped() {
    use crate::link::Link;
    use crate::support::{lockrun, now_ns, scratch, wait_for_file, Running};
    let consul = TestConsul::start_fast();
    let key = consul.prefix("frozen") + "/leader";
    let link = Link::new(&consul.http_addr());
    let dir = scratch();
    let ended = dir.path().join("ended");
    let body = format!(
        "trap 'date +%s%N > {}; exit 0' TERM; touch {}/ready; while :; do sleep 0.05; done",
        ended.display(),
        dir.path().display()
    );
    let ttl = format!("{}ms", consul.ttl_min().as_millis());
    let mut cmd = lockrun(
        &consul,
        [
            "elect",
            "--ttl",
            &ttl,
            "--lock-delay",
            "1s",
            "--kill-timeout",
            "500ms",
            "--shell",
            &key,
            "--",
            &body,
        ],
    );
    cmd.env("CONSUL_HTTP_ADDR", link.http_addr());
    let holder = Running::spawn(&mut cmd);
    wait_for_file(&dir.path().join("ready"));
    link.freeze();
    let output = holder.finish();
    let exited = now_ns();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(124), "{stderr}");
    let child_end: u128 = std::fs::read_to_string(&ended)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let after_ms = (exited - child_end) / 1_000_000;
    eprintln!("frozen engine: lockrun exited {after_ms} ms after its child ended");
    assert!(
        after_ms < 2_500,
        "lockrun exited {after_ms} ms after its child was stopped\n{stderr}"
    );
    // The loss names the silence: the renewal still pending when the
    // window closed ("no answer for ..."), or one that ran out its own
    // deadline before it, whichever the timing gave.
    assert!(!stderr.contains("last error: none"), "{stderr}");
    assert!(
        stderr.contains("no answer for ") || stderr.contains("did not answer within "),
        "{stderr}"
    );
    link.thaw();
}

/// `leader --json` has one schema on every backend: the same top-level
/// fields, and holders with value, fence, since, host and pid, plus the
/// engine's own facts under `details`. `fence` is the holder's
/// LOCKRUN_LOCK_INDEX wherever the engine keeps it (Consul's lock: its
/// ModifyIndex at acquisition, not LockIndex), else null.
#[test]
fn leader_json_has_one_schema_and_the_fence_the_child_got() {
    use crate::places::{stdout, Place};
    use crate::support::scratch;
    use std::collections::BTreeSet;
    let top: BTreeSet<&str> = [
        "key", "backend", "kind", "held", "limit", "holders", "waiters",
    ]
    .into();
    let holder_fields: BTreeSet<&str> = [
        "value",
        "fence",
        "since",
        "since_unix",
        "host",
        "pid",
        "details",
    ]
    .into();
    for (place, backend) in [
        (Place::consul("json"), "consul"),
        (Place::etcd("json"), "etcd"),
        (Place::local(), "local"),
    ] {
        for semaphore in [false, true] {
            let key = place.key(if semaphore { "slots" } else { "lock" });
            let work = scratch();
            let mut args = vec!["elect", "--value", "v1"];
            if semaphore {
                args = vec!["semaphore", "--limit", "2", "--value", "v1"];
            }
            if backend == "consul" {
                args.extend(["--lock-delay", "0s"]);
            }
            args.push(&key);
            let holder = place.hold(
                work.path(),
                "echo \"$LOCKRUN_LOCK_INDEX\" > \"$1/index\";",
                &args,
            );
            let what = format!("{backend} {}", if semaphore { "slot" } else { "lock" });
            let look = || {
                let output = run(&mut place.lockrun(&["leader", "--json", &key]));
                place.status(&output, 0, &what);
                serde_json::from_str::<serde_json::Value>(&stdout(&output)).unwrap()
            };
            let mut shown = look();
            // An etcd lock holder records its fence a round trip after its
            // command starts.
            if backend == "etcd" && !semaphore {
                crate::procs::wait_until(crate::procs::deadline(), || {
                    shown = look();
                    !shown["holders"][0]["fence"].is_null()
                });
            }
            let fields: BTreeSet<&str> = shown
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(fields, top, "{what}: {shown}");
            assert_eq!(shown["backend"], backend, "{what}");
            assert_eq!(shown["held"], true, "{what}");
            let holders = shown["holders"].as_array().unwrap();
            assert_eq!(holders.len(), 1, "{what}: {shown}");
            let h = &holders[0];
            let fields: BTreeSet<&str> =
                h.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(fields, holder_fields, "{what}: {shown}");
            assert!(h["details"].is_object(), "{what}: {shown}");
            assert_eq!(h["value"], "v1", "{what}");
            let index: u64 = std::fs::read_to_string(work.path().join("index"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // Where the engine keeps no fence for the holder, null, never
            // another number.
            let unknown = backend == "consul" && semaphore;
            if unknown {
                assert!(h["fence"].is_null(), "{what}: {shown}");
            } else {
                assert_eq!(h["fence"].as_u64(), Some(index), "{what}: {shown}");
            }
            std::fs::write(work.path().join("go"), "").unwrap();
            place.status(&holder.finish(), 0, &what);
        }
    }
}

/// What lockrun tells "filtered" from "absent" by, on real Consul 1.6.2 and
/// 1.15.10 and the emulator alike: a recursive read whose every entry the
/// token may not see answers 404 (as for nothing there), while a plain
/// read of the key answers 403 whether or not the key exists.
#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn acl_filtering_answers_as_the_real_agents_do() {
    use consul_emulator::AclPolicy;
    let check = |root: &Api, anonymous: &Api, what: &str| {
        let session = root.session_create("{}");
        assert!(root.kv_acquire("facts/held", &session, "v"), "{what}");
        for path in ["/v1/kv/facts/held?recurse", "/v1/kv/facts/none?recurse"] {
            let r = anonymous.get(path);
            assert_eq!(r.status, 404, "{what} {path}: {}", r.text());
        }
        for path in ["/v1/kv/facts/held", "/v1/kv/facts/none"] {
            let r = anonymous.get(path);
            assert_eq!(r.status, 403, "{what} {path}: {}", r.text());
        }
    };
    for version in real_consul::VERSIONS {
        let agent = Agent::dev_with(Spec::dev(version).hcl(ACLS).token("root"));
        let anonymous = Api::at(&agent.http_addr());
        check(&agent.api(), &anonymous, &format!("Consul {version}"));
    }
    let consul =
        TestConsul::emulator_only(|b| b.acl_default_deny().acl_token("root", AclPolicy::Full));
    check(&consul.api().with_token("root"), &consul.api(), "emulator");
}

//! Answers that must be true where production differs from the lab: ACLs
//! that hide a holder, keys every backend judges alike, a frozen engine.

use crate::consul::{Api, TestConsul};
use crate::real_consul::{self, Agent, Spec};
use crate::support::{bare, describe, run};

const ACLS: &str = r#"acl { enabled = true, default_policy = "deny", tokens { master = "root" } }"#;

/// A holder the token cannot see: `leader`, `leader --wait`, `release` and
/// `leader --json` must fail (125) saying so, never answer "no holder".
fn hidden_holder_is_an_error(addr: &str, root: &Api, token: Option<&str>, what: &str) {
    let key = format!("acl/{:08x}/leader", crate::consul::random_u64() as u32);
    let session = root.session_create("{}");
    assert!(
        root.kv_acquire(&key, &session, "primary"),
        "{what}: acquire"
    );
    let cases: &[&[&str]] = &[
        &["leader"],
        &["leader", "--json"],
        &["leader", "--wait", "--timeout", "20s"],
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
#[test]
fn every_backend_refuses_the_same_keys_before_writing() {
    use crate::places::Place;
    for place in [Place::consul("keys"), Place::etcd("keys"), Place::local()] {
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
        match &place {
            Place::Consul(consul, prefix) => {
                assert!(consul.api().kv_list(prefix).is_empty(), "nothing on Consul");
                if let Some(emulator) = consul.emulator() {
                    assert_eq!(emulator.write_count(), 0, "no write reached Consul");
                }
            }
            Place::Etcd { prefix, .. } => {
                let left =
                    crate::etcd_support::etcdctl_ok(&["get", "--prefix", "--keys-only", prefix]);
                assert!(left.trim().is_empty(), "nothing on etcd: {left}");
            }
            Place::Local(dir) => {
                let left: Vec<_> = walk(dir.path());
                assert!(left.is_empty(), "nothing in the lock directory: {left:?}");
            }
        }
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// local `release --all PREFIX` while a flock(1) holds one slot: the
/// lockrun holders of the other slots are released and named, then the
/// slot it could not free is reported, and the run fails (125) because a
/// slot is still held. It used to stop at the flock(1), after asking some
/// holders or none, naming none.
#[test]
fn local_release_all_frees_what_it_can_and_names_what_it_cannot() {
    use crate::places::{stdout, Place};
    use crate::support::{scratch, wait_for_file, Running};
    use std::process::{Command, Stdio};
    let place = Place::local();
    let (work_a, work_b, work_f) = (scratch(), scratch(), scratch());
    let args = |value: &'static str| ["semaphore", "--limit", "3", "--value", value, "jobs"];
    let a = place.hold(work_a.path(), "", &args("a"));
    let b = place.hold(work_b.path(), "", &args("b"));
    // The third slot's file, locked by flock(1): a holder lockrun cannot ask.
    let slot = place.lock_dir().join("jobs/slot-2");
    std::fs::write(&slot, "").unwrap();
    let ready = work_f.path().join("ready");
    let flock = Running::spawn(
        Command::new("flock")
            .arg(&slot)
            .arg("sh")
            .arg("-c")
            .arg(format!(
                "touch {}; while [ ! -e {}/go ]; do sleep 0.05; done",
                ready.display(),
                work_f.path().display()
            ))
            .stdin(Stdio::null()),
    );
    // Lets flock's child end even when an assertion fails, so that the
    // failing test does not wait on its pipes (dropped before `flock`).
    struct Go(std::path::PathBuf);
    impl Drop for Go {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let go = Go(work_f.path().join("go"));
    wait_for_file(&ready);
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
    drop(go);
    let _ = flock.finish();
}

//! Answers under partial visibility: a Consul token that sees part of a
//! semaphore (its `.lock` record, or its contenders' entries, denied on a
//! sub-prefix) cannot say there is no holder, on Consul that says it
//! filtered (1.15) and on Consul that does not (1.6).

use crate::engines::consul::real::{self as real_consul, Agent, Spec};
use crate::engines::consul::support::Api;
use crate::support::{bare, describe, kv_acquire, run};

const ACLS: &str = r#"acl { enabled = true, default_policy = "deny", tokens { master = "root" } }"#;

/// The Go API's `SemaphoreFlagValue`.
const SEMAPHORE_FLAG: u64 = 0xe0f6_9a2b_aa41_4de0;

/// A semaphore at `prefix` with one holder, as `consul lock -n 2` writes
/// it: the holder's contender entry and the `.lock` record naming it.
fn hold_a_slot(root: &Api, prefix: &str) -> String {
    let session = root.session_create(r#"{"TTL":"60s"}"#);
    assert!(kv_acquire(
        root,
        &format!("{prefix}/{session}"),
        &session,
        SEMAPHORE_FLAG
    ));
    let record = format!(r#"{{"Limit":2,"Holders":{{"{session}":true}}}}"#);
    let put = root.put(
        &format!("/v1/kv/{prefix}/.lock?flags={SEMAPHORE_FLAG}"),
        record,
    );
    assert_eq!(put.trimmed(), "true", "{}", put.text());
    session
}

/// `leader`, `leader --json`, `release --all` and `list` with `token`, which
/// cannot see part of `prefix`: each fails (125, one line, permission
/// denied), and the slot is still held.
fn cannot_tell(addr: &str, root: &Api, token: &str, prefix: &str, session: &str, what: &str) {
    for args in [
        &["leader"][..],
        &["leader", "--json"],
        &["release", "--all"],
        &["list"],
    ] {
        let mut all = args.to_vec();
        all.push(prefix);
        let mut cmd = bare(&all);
        cmd.env("CONSUL_HTTP_ADDR", addr)
            .env("CONSUL_HTTP_TOKEN", token);
        let output = run(&mut cmd);
        let shown = describe(&cmd, &output, None);
        assert_eq!(output.status.code(), Some(125), "{what}: {args:?}\n{shown}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{what}: {args:?}\n{shown}");
        assert!(
            stderr.contains("permission denied"),
            "{what}: {args:?}\n{shown}"
        );
        assert!(output.stdout.is_empty(), "{what}: {args:?}\n{shown}");
    }
    let record = root
        .kv_get(&format!("{prefix}/.lock"))
        .expect("the record is still there");
    assert!(
        String::from_utf8_lossy(&record.value).contains(session),
        "{what}: the slot was released"
    );
}

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn a_semaphore_partly_hidden_by_acls_is_cannot_tell_on_real_consul() {
    for version in real_consul::VERSIONS {
        let agent = Agent::dev_with(Spec::dev(version).hcl(ACLS).token("root"));
        let root = agent.api();
        // Everything but a semaphore's record, and another's contenders.
        let rules = r#"session_prefix \"\" { policy = \"write\" } key_prefix \"\" { policy = \"write\" } key \"no-record/sem/.lock\" { policy = \"deny\" } key_prefix \"no-entries/sem/\" { policy = \"deny\" } key \"no-entries/sem/.lock\" { policy = \"read\" }"#;
        let policy = format!(r#"{{"Name":"partial","Rules":"{rules}"}}"#);
        let created = root.put("/v1/acl/policy", policy);
        assert_eq!(created.status, 200, "{version}: {}", created.text());
        let token = root.put(
            "/v1/acl/token",
            r#"{"Description":"partial","Policies":[{"Name":"partial"}]}"#,
        );
        assert_eq!(token.status, 200, "{version}: {}", token.text());
        let secret = token.json()["SecretID"].as_str().unwrap().to_string();
        for prefix in ["no-record/sem", "no-entries/sem"] {
            let session = hold_a_slot(&root, prefix);
            let what = format!("Consul {version}, {prefix}");
            cannot_tell(&agent.http_addr(), &root, &secret, prefix, &session, &what);
        }
        // The same token sees a semaphore it may read whole.
        let session = hold_a_slot(&root, "seen/sem");
        let mut cmd = bare(["leader", "seen/sem"]);
        cmd.env("CONSUL_HTTP_ADDR", agent.http_addr())
            .env("CONSUL_HTTP_TOKEN", &secret);
        let output = run(&mut cmd);
        assert_eq!(
            output.status.code(),
            Some(0),
            "Consul {version}: {}",
            describe(&cmd, &output, None)
        );
        drop(session);
    }
}

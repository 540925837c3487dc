//! Every bad input: one line on stderr naming the problem, the documented
//! exit status, no panic, and nothing written to Consul.

use crate::engines::consul::support::TestConsul;
use crate::support::{bare, describe, lockrun, run, scratch, sessions_named_like};

struct Case {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    status: i32,
    /// A fragment the message must contain.
    says: &'static str,
}

fn case(args: &[&str], status: i32, says: &'static str) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        status,
        says,
    }
}

fn with_env(mut c: Case, name: &'static str, value: &str) -> Case {
    c.env.push((name, value.to_string()));
    c
}

/// An executable file in `dir` holding `text`; its path.
fn executable(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

/// Whether the kernel may run files lockrun does not recognise.
fn binfmt_misc_handlers() -> bool {
    std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name() != "register" && e.file_name() != "status")
    })
}

#[test]
fn bad_inputs_get_one_line_the_right_status_and_write_nothing() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("errors");
    let key = format!("{prefix}/leader");
    let dir = scratch();
    let unreadable = dir.path().join("missing-token");
    let empty_token = dir.path().join("empty-token");
    std::fs::write(&empty_token, "\n").unwrap();
    let bad_ca = dir.path().join("bad-ca.pem");
    std::fs::write(&bad_ca, "not a certificate").unwrap();
    let not_exec = dir.path().join("script.sh");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let two_line_token = dir.path().join("two-line-token");
    std::fs::write(&two_line_token, "abc\ndef\n").unwrap();
    let no_interpreter = executable(&dir, "no-interpreter", "#!/nonexistent/python9\necho hi\n");
    let plain_text = executable(&dir, "plain-text", "echo hi\n");
    let k = key.as_str();
    let line_sep = format!("{prefix}/a\u{2028}b");
    let bom = format!("{prefix}/\u{FEFF}leader");
    let mut cases = vec![
        case(&["elect", "", "--", "true"], 2, "key is empty"),
        // Issue #44: a warning that could never come, or would come at
        // every gap between renewals, or has no threshold.
        case(
            &["elect", "--warn-before", "0", k, "--", "true"],
            2,
            "--warn-before 0 would warn as the stop begins",
        ),
        case(
            &["elect", "--warn-before", "8s", k, "--", "true"],
            2,
            "--warn-before 8s would warn between ordinary renewals",
        ),
        case(
            &["elect", "--warn-signal", "USR1", k, "--", "true"],
            2,
            "--warn-before",
        ),
        case(
            &["--backend", "local", "elect", "--warn-before", "1s", k, "--", "true"],
            2,
            "no lease to run out",
        ),
        case(
            &["elect", "--max-time", "0", k, "--", "true"],
            2,
            "would stop the job as it starts",
        ),
        // A relative lock directory follows the working directory, which a
        // deploy's re-pointed link never moves (second review).
        case(
            &["--backend", "local", "--lock-dir", "locks", "elect", k, "--", "true"],
            2,
            "is relative",
        ),
        case(&["elect", "/abs/key", "--", "true"], 2, "starts with `/`"),
        case(&["elect", "a//b", "--", "true"], 2, "`//`"),
        case(&["elect", "a/../b", "--", "true"], 2, "`..`"),
        case(&["elect", "key/", "--", "true"], 2, "ends with `/`"),
        case(&["elect", " spaced", "--", "true"], 2, "white space"),
        case(
            &["elect", "--ttl", "fast", k, "--", "true"],
            2,
            "not a duration",
        ),
        case(
            &["elect", "--ttl", "5s", k, "--", "true"],
            2,
            "--ttl 5s is outside",
        ),
        case(&["elect", "--ttl", "25h", k, "--", "true"], 2, "outside"),
        case(
            &["elect", "--lock-delay", "61s", k, "--", "true"],
            2,
            "--lock-delay 1m 1s",
        ),
        case(
            &[
                "elect",
                "--lock-delay",
                "0s",
                "--kill-timeout",
                "30s",
                k,
                "--",
                "true",
            ],
            2,
            // A suggestion that pastes: one word, within the budget.
            "--kill-timeout 30s is too long for --ttl 15s and --lock-delay 0s: a rival could take the lock before the child is killed; use --kill-timeout 2300ms or less",
        ),
        // A clock-rate bound that leaves no stop window names one that does.
        case(
            &[
                "elect",
                "--lock-delay",
                "0s",
                "--clock-rate-error",
                "40%",
                k,
                "--",
                "true",
            ],
            2,
            "--clock-rate-error 40.0% leaves no time to run the command with --ttl 15s: the margin for clocks that far apart takes the whole lease; use --clock-rate-error 32.3% or less",
        ),
        case(
            &["elect", "--clock-rate-error", "16.7", k, "--", "true"],
            2,
            "`16.7` is not a clock-rate error; give ppm or a percentage",
        ),
        case(
            &["elect", "--clock-rate-error", "100%", k, "--", "true"],
            2,
            "100% or more",
        ),
        case(
            &[
                "semaphore",
                "--limit",
                "1",
                "--node-checks",
                "serfHealth",
                k,
                "--",
                "true",
            ],
            2,
            "--node-checks cannot be used with a semaphore",
        ),
        case(
            &[
                "elect",
                "--node-checks",
                "serfHealth",
                "--lock-delay",
                "1s",
                k,
                "--",
                "true",
            ],
            2,
            "--lock-delay 1s is too short for --ttl 15s with health checks",
        ),
        case(
            &[
                "semaphore",
                "--limit",
                "1",
                "--kill-timeout",
                "10s",
                k,
                "--",
                "true",
            ],
            2,
            "semaphore slot",
        ),
        case(
            &["semaphore", "--limit", "0", k, "--", "true"],
            2,
            "--limit",
        ),
        case(&["semaphore", k, "--", "true"], 2, "--limit"),
        case(&["elect", k], 2, "COMMAND"),
        case(&["elect", k, "--"], 2, "COMMAND"),
        case(&["elect", "--bogus", k, "--", "true"], 2, "--bogus"),
        case(&["frobnicate"], 2, "frobnicate"),
        case(&["elect", "-c", "--", "true"], 2, "a key starting with `-`"),
        case(&["leader", "-x/y"], 2, "a key starting with `-`"),
        case(
            &["elect", "--no-wait", "--timeout", "1s", k, "--", "true"],
            2,
            "--timeout",
        ),
        case(
            &["elect", "--kill-signal", "NOPE", k, "--", "true"],
            2,
            "NOPE",
        ),
        case(
            &["elect", "--behavior", "bogus", k, "--", "true"],
            2,
            "bogus",
        ),
        case(
            &["elect", "--conflict-exit-code", "256", k, "--", "true"],
            2,
            "256",
        ),
        case(
            &["elect", k, "--", "lockrun-no-such-program"],
            127,
            "not found",
        ),
        case(
            &["elect", k, "--", not_exec.to_str().unwrap()],
            126,
            "not an executable",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 127, "command not found"),
            "PATH",
            "",
        ),
        case(
            &["semaphore", "-l", "1", k, "--", &no_interpreter],
            127,
            "interpreter `/nonexistent/python9` is missing",
        ),
        case(
            &[
                "elect",
                "--token-file",
                unreadable.to_str().unwrap(),
                k,
                "--",
                "true",
            ],
            125,
            "token file",
        ),
        case(
            &[
                "elect",
                "--token-file",
                empty_token.to_str().unwrap(),
                k,
                "--",
                "true",
            ],
            125,
            "is empty",
        ),
        case(
            &[
                "elect",
                "--ca-file",
                bad_ca.to_str().unwrap(),
                k,
                "--",
                "true",
            ],
            125,
            "bad-ca.pem",
        ),
        case(
            &[
                "elect",
                "--client-cert",
                bad_ca.to_str().unwrap(),
                k,
                "--",
                "true",
            ],
            125,
            "client",
        ),
        case(
            &["elect", "--ttl", "-5s", k, "--", "true"],
            2,
            "`-5s` is negative",
        ),
        case(
            &[
                "elect",
                "--kill-timeout",
                "18446744073709551615s",
                k,
                "--",
                "true",
            ],
            2,
            "from 0s to 365d",
        ),
        case(
            &[
                "elect",
                "--timeout",
                "18446744073709551615s",
                k,
                "--",
                "true",
            ],
            2,
            "from 0s to 365d",
        ),
        case(
            &["elect", "--timeout", "500000000000y", k, "--", "true"],
            2,
            "from 0s to 365d",
        ),
        case(
            &["semaphore", "-l", "1", "--timeout", "366d", k, "--", "true"],
            2,
            "from 0s to 365d",
        ),
        case(
            &["leader", "--wait", "--timeout", "500000000000y", k],
            2,
            "from 0s to 365d",
        ),
        case(&["release", "--session", "nope", k], 2, "not a session ID"),
        case(&["elect", &line_sep, "--", "true"], 2, "U+2028"),
        case(&["semaphore", "-l", "2", &bom, "--", "true"], 2, "U+FEFF"),
        case(&["leader", &line_sep], 2, "U+2028"),
        case(&["release", &bom], 2, "U+FEFF"),
        with_env(
            case(
                &["elect", k, "--", "true"],
                125,
                "from CONSUL_HTTP_TOKEN contains",
            ),
            "CONSUL_HTTP_TOKEN",
            "abc\u{1}def",
        ),
        with_env(
            case(&["release", k], 125, "from CONSUL_HTTP_TOKEN contains"),
            "CONSUL_HTTP_TOKEN",
            "abcdéf",
        ),
        case(
            &[
                "leader",
                "--token-file",
                two_line_token.to_str().unwrap(),
                k,
            ],
            125,
            "from --token-file",
        ),
        with_env(
            case(
                &["elect", k, "--", "true"],
                125,
                "from CONSUL_HTTP_TOKEN_FILE",
            ),
            "CONSUL_HTTP_TOKEN_FILE",
            two_line_token.to_str().unwrap(),
        ),
        with_env(
            case(
                &["elect", k, "--", "true"],
                125,
                "namespaces need Consul Enterprise",
            ),
            "CONSUL_NAMESPACE",
            "team-a",
        ),
        case(
            &["release", "--namespace", "team-a", k],
            125,
            "namespaces need Consul Enterprise",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 125, "use `127.0.0.1:8500`"),
            "CONSUL_HTTP_ADDR",
            "127.0.0.1:8500/v1",
        ),
        // Settings Consul refuses with a 500: a one-off run, with no
        // --timeout, says so at once instead of retrying for ever.
        case(
            &["elect", "--datacenter", "no-such-dc", k, "--", "true"],
            125,
            "No path to datacenter); check --datacenter",
        ),
        case(
            &["semaphore", "-l", "2", "--datacenter", "no-such-dc", k, "--", "true"],
            125,
            "check --datacenter",
        ),
        case(&["leader", "--timeout", "1s", k], 2, "--wait"),
        case(&["leader", "a//b"], 2, "`//`"),
        with_env(
            case(&["elect", k, "--", "true"], 125, "carries a user name or password;"),
            "CONSUL_HTTP_ADDR",
            "http://ops:pw@127.0.0.1:8500",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 125, "unix sockets"),
            "CONSUL_HTTP_ADDR",
            "unix:///tmp/consul.sock",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 125, "unknown scheme"),
            "CONSUL_HTTP_ADDR",
            "ftp://127.0.0.1:8500",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 125, "CONSUL_HTTP_SSL"),
            "CONSUL_HTTP_SSL",
            "maybe",
        ),
        with_env(
            case(&["elect", k, "--", "true"], 125, "LOCKRUN_SESSION_TTL_MIN"),
            "LOCKRUN_SESSION_TTL_MIN",
            "soon",
        ),
        // A value `leader` prints one holder a line: a newline would fake
        // another holder, an escape would reach the terminal.
        case(
            &["elect", "--value", "db-1\ndb-2", k, "--", "true"],
            2,
            "--value `db-1\\ndb-2` contains U+000A, a control character",
        ),
        case(
            &["elect", "--value", "db-1\tx", k, "--", "true"],
            2,
            "contains U+0009",
        ),
        case(
            &["semaphore", "--limit", "2", "--value", "\u{1b}[2J", k, "--", "true"],
            2,
            "contains U+001B",
        ),
        case(
            &["elect", "--campaign", "--no-wait", k, "--", "true"],
            2,
            "drop --no-wait for a daemon, or --campaign for a one-off run",
        ),
    ];
    if binfmt_misc_handlers() {
        eprintln!("not checked: a file in no executable format (binfmt_misc handlers may run it)");
    } else {
        cases.push(case(
            &["elect", k, "--", &plain_text],
            126,
            "not in an executable format",
        ));
    }
    assert!(cases.len() >= 25);
    let writes = consul.emulator().map(|e| e.write_count());
    for c in &cases {
        let mut cmd = lockrun(&consul, &c.args);
        for (name, value) in &c.env {
            cmd.env(name, value);
        }
        let output = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let what = describe(&cmd, &output, None);
        assert_eq!(output.status.code(), Some(c.status), "wrong status\n{what}");
        assert_eq!(stderr.lines().count(), 1, "not one line\n{what}");
        assert!(
            stderr.starts_with("lockrun: "),
            "no `lockrun:` prefix\n{what}"
        );
        assert!(stderr.contains(c.says), "does not say `{}`\n{what}", c.says);
        assert!(!stderr.contains("panicked"), "{what}");
        assert!(output.stdout.is_empty(), "{what}");
    }
    if let Some(emulator) = consul.emulator() {
        assert_eq!(
            Some(emulator.write_count()),
            writes,
            "nothing was written to Consul"
        );
    }
    assert!(
        consul.api().kv_list(&prefix).is_empty(),
        "nothing under the prefix"
    );
}

/// A check the agent's node does not have: Consul refuses the session
/// (a 500, after its state machine looked), and a one-off run says so at
/// once, with what to fix, instead of retrying for ever.
#[test]
fn a_check_the_node_lacks_is_one_clear_line() {
    let consul = TestConsul::start();
    let key = format!("{}/leader", consul.prefix("checks"));
    let mut cmd = lockrun(
        &consul,
        [
            "elect",
            "--node-checks",
            "no-such-check",
            &key,
            "--",
            "true",
        ],
    );
    let output = run(&mut cmd);
    let what = describe(&cmd, &output, Some(&consul));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{what}");
    assert_eq!(stderr.lines().count(), 1, "{what}");
    assert!(stderr.contains("must name checks registered"), "{what}");
    assert_eq!(sessions_named_like(&consul.api(), &key), 0, "{what}");
}

#[test]
fn an_unreachable_consul_is_one_clear_line() {
    let output = run(bare(["elect", "k", "--", "true"]).env("CONSUL_HTTP_ADDR", "127.0.0.1:1"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "lockrun: cannot reach Consul at http://127.0.0.1:1 (connection refused); is an agent running? set CONSUL_HTTP_ADDR"
    );
}

#[test]
fn the_token_never_appears_in_any_output() {
    // An agent with ACLs on and a default-deny policy; the suite's real
    // agent may have ACLs off, so this one is always the emulator.
    let consul = TestConsul::emulator_only(|b| b.acl_default_deny());
    let secret = "5ecr3t-t0ken-that-is-denied";
    let key = consul.prefix("errors-token") + "/leader";
    for flags in [&["-vv"][..], &["-vv", "--log-format", "json"][..], &[][..]] {
        for sub in [
            vec!["elect", &key, "--", "true"],
            vec!["leader", &key],
            vec!["release", &key],
        ] {
            let mut args: Vec<&str> = flags.to_vec();
            args.extend(sub.iter().copied());
            let mut cmd = lockrun(&consul, &args);
            cmd.env("CONSUL_HTTP_TOKEN", secret);
            let output = run(&mut cmd);
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(
                output.status.code(),
                Some(125),
                "{}",
                describe(&cmd, &output, None)
            );
            assert!(!all.contains(secret), "the token leaked:\n{all}");
            assert!(all.contains("ACL not found"), "says why:\n{all}");
        }
    }
}

/// A closed stdout ends the output quietly (as ripgrep does), never in a
/// panic: the status is what the work earned.
#[test]
fn a_closed_stdout_never_panics() {
    let consul = TestConsul::start();
    let key = consul.prefix("errors-stdout") + "/leader";
    let api = consul.api();
    let hold = |value: &str| {
        let session = api.session_create(r#"{"TTL": "60s", "Checks": []}"#);
        assert!(api.kv_acquire(&key, &session, value));
        session
    };
    let closed = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = lockrun(&consul, args);
        cmd.stdout(writer);
        let output = cmd.output().unwrap();
        let what = describe(&cmd, &output, Some(&consul));
        assert!(
            !String::from_utf8_lossy(&output.stderr).contains("panicked"),
            "{what}"
        );
        (output.status.code(), what)
    };
    let holder = hold("first-holder");
    for args in [
        &["leader", key.as_str()][..],
        &["leader", "--json", &key][..],
        &["leader", "--wait", &key][..],
        &["leader", "--watch", &key][..],
        &["--help"][..],
        &["--version"][..],
        &["elect", "--help"][..],
        &["explain", "elect", &key][..],
    ] {
        let (code, what) = closed(args);
        assert_eq!(code, Some(0), "{what}");
    }
    let (code, what) = closed(&["release", &key]);
    assert_eq!(code, Some(0), "{what}");
    assert_eq!(
        api.kv_get(&key).and_then(|e| e.session),
        None,
        "released although nobody read the line\n{what}"
    );
    api.session_destroy(&holder);
    let holder = hold("second-holder");
    let (code, what) = closed(&["release", "--destroy-session", &key]);
    assert_eq!(code, Some(0), "{what}");
    assert!(api.session_info(&holder).is_none(), "{what}");
    let fresh = format!("{key}-elect");
    let (code, what) = closed(&["elect", "--no-wait", &fresh, "--", "true"]);
    assert_eq!(code, Some(0), "{what}");
    let (code, what) = closed(&["semaphore", "-l", "1", "--no-wait", &fresh, "--", "true"]);
    assert_eq!(code, Some(0), "{what}");
}

/// Usage errors keep clap's suggestion, point at the subcommand's own help,
/// name a missing `--` with the corrected line and translate `consul lock`
/// habits; each is the exact line a user sees, with status 2.
#[test]
fn usage_errors_say_what_to_type_instead() {
    let cases: [(&str, &str); 15] = [
        (
            // clap printed Consul's help for it, status 0 (#40).
            "--backend xyz elect -h",
            "--backend `xyz` is no backend; use one of consul, etcd, local, postgres, zookeeper",
        ),
        (
            "--backend=nfs semaphore --help",
            "--backend `nfs` is no backend; use one of consul, etcd, local, postgres, zookeeper",
        ),
        (
            "elect --limit 2 demo/leader -- true",
            "a leader lock has one holder, so `elect` takes no `--limit`; for 2 slots \
             use `lockrun semaphore --limit 2 PREFIX -- COMMAND`; see `lockrun semaphore --help`",
        ),
        (
            "semaphore --limt 2 jobs/x -- true",
            "unknown flag `--limt` (did you mean `--limit`?); see `lockrun semaphore --help`",
        ),
        (
            "ellect demo/leader -- true",
            "unknown subcommand `ellect` (did you mean `elect`?); see `lockrun --help`",
        ),
        (
            "elect demo/leader echo hi",
            "COMMAND must follow `--`, so that its flags are not taken for lockrun's: \
             `lockrun elect demo/leader -- echo hi`; see `lockrun elect --help`",
        ),
        (
            "semaphore -n 2 jobs/x -- true",
            "`-n` is `--no-wait` here; for 2 slots, as `consul lock -n 2` means, \
             use `--limit 2`; see `lockrun semaphore --help`",
        ),
        (
            "elect -n 2 demo/leader -- true",
            "`-n` is `--no-wait` here; for 2 slots, as `consul lock -n 2` means, \
             use `lockrun semaphore --limit 2 PREFIX -- COMMAND`; see `lockrun semaphore --help`",
        ),
        (
            "elect -timeout 5s demo/leader -- true",
            "`-timeout` is `--timeout 5s` in lockrun; see `lockrun elect --help`",
        ),
        (
            "elect -child-exit-code demo/leader -- true",
            "lockrun always exits with the child's status, so `-child-exit-code` is not \
             needed; drop it; see `lockrun elect --help`",
        ),
        (
            "elect -verbose demo/leader -- true",
            "`-verbose` is `-v` (or `--verbose`) in lockrun; see `lockrun elect --help`",
        ),
        (
            "elect --token s3cret demo/leader -- true",
            "lockrun has no `--token`: a token on the command line is visible to every \
             user through ps; put it in a file and pass `--token-file FILE`, or set \
             CONSUL_HTTP_TOKEN_FILE (or CONSUL_HTTP_TOKEN); see `lockrun elect --help`",
        ),
        (
            "elect -token=s3cret demo/leader -- true",
            "lockrun has no `-token`: a token on the command line is visible to every \
             user through ps; put it in a file and pass `--token-file FILE`, or set \
             CONSUL_HTTP_TOKEN_FILE (or CONSUL_HTTP_TOKEN); see `lockrun elect --help`",
        ),
        (
            // clap alone would read `-h` here and print the help with status 0.
            "-http-addr 127.0.0.1:1 elect demo/leader -- true",
            "long flags take two dashes: `--http-addr`, not `-http-addr`; \
             see `lockrun elect --help`",
        ),
        (
            "semaphore jobs/x -- true",
            "the following required arguments were not provided: --limit <N>; \
             see `lockrun semaphore --help`",
        ),
    ];
    for (args, line) in cases {
        let mut cmd = bare(args.split_whitespace());
        let output = run(&mut cmd);
        let what = describe(&cmd, &output, None);
        assert_eq!(output.status.code(), Some(2), "wrong status\n{what}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!("lockrun: {line}\n"),
            "{what}"
        );
        assert!(output.stdout.is_empty(), "{what}");
    }
}

/// An empty setting is never "the default": `--http-addr ""` once took and
/// released a lock on 127.0.0.1:8500, an agent nobody meant. Every flag,
/// and every variable that says where the locks are, refuses an empty
/// value with one line and status 2, before any request; the credential and
/// TLS variables the consul CLI and etcdctl treat as unset when empty are
/// unset here too (docs/guide.md, "Settings").
#[test]
fn empty_settings_are_usage_errors_or_unset_as_documented() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("empty");
    let key = format!("{prefix}/leader");
    let k = key.as_str();
    let addr = consul.http_addr();
    // Each case runs with CONSUL_HTTP_ADDR naming the Consul under test, so
    // a run that falls back to a default shows as a wrong status.
    let flags: &[&[&str]] = &[
        &["--http-addr", ""],
        &["--http-addr="],
        &["--token-file", ""],
        &["--ca-file", ""],
        &["--ca-path", ""],
        &["--client-cert", ""],
        &["--client-key", ""],
        &["--tls-server-name", ""],
        &["--datacenter", ""],
        &["--namespace", ""],
        &["--backend", ""],
        &["--backend", "local", "--lock-dir", ""],
        &["--backend", "etcd", "--endpoints", ""],
        &["--backend", "etcd", "--cacert", ""],
        &["--backend", "etcd", "--cert", ""],
        &["--backend", "etcd", "--cert-key", ""],
    ];
    let mut cases: Vec<Case> = Vec::new();
    for flag in flags {
        for sub in [&["leader"][..], &["release"][..], &["elect"][..]] {
            let mut args: Vec<&str> = sub.to_vec();
            args.extend_from_slice(flag);
            args.push(k);
            if sub[0] == "elect" {
                args.extend_from_slice(&["--", "true"]);
            }
            cases.push(case(&args, 2, "lockrun"));
        }
    }
    cases.push(case(
        &["elect", "--value", "", k, "--", "true"],
        2,
        "--value",
    ));
    cases.push(case(
        &["elect", "--session-name", "", k, "--", "true"],
        2,
        "--session-name",
    ));
    cases.push(case(&["release", "--session", "", k], 2, "--session"));
    cases.push(case(
        &["elect", "--clock-rate-error", "", k, "--", "true"],
        2,
        "clock-rate error is empty",
    ));
    for (name, backend) in [
        ("CONSUL_HTTP_ADDR", "consul"),
        ("CONSUL_NAMESPACE", "consul"),
        ("CONSUL_PARTITION", "consul"),
        ("LOCKRUN_BACKEND", "consul"),
        ("LOCKRUN_LOCK_DIR", "local"),
        ("ETCDCTL_ENDPOINTS", "etcd"),
    ] {
        let c = case(
            &["--backend", backend, "leader", k],
            2,
            "is set but empty; set it to",
        );
        cases.push(with_env(c, name, ""));
    }
    let writes = consul.emulator().map(|e| e.write_count());
    for c in &cases {
        let mut cmd = bare(&c.args);
        cmd.env("CONSUL_HTTP_ADDR", &addr);
        for (name, value) in &c.env {
            cmd.env(name, value);
        }
        let output = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let what = describe(&cmd, &output, None);
        assert_eq!(output.status.code(), Some(c.status), "wrong status\n{what}");
        assert_eq!(stderr.lines().count(), 1, "not one line\n{what}");
        assert!(stderr.starts_with("lockrun: "), "{what}");
        assert!(stderr.contains(c.says), "does not say `{}`\n{what}", c.says);
        assert!(output.stdout.is_empty(), "{what}");
    }
    if let Some(emulator) = consul.emulator() {
        assert_eq!(Some(emulator.write_count()), writes, "nothing written");
    }
    // Empty credential and TLS variables are unset: the run works as
    // without them (no holder: 1).
    for name in [
        "CONSUL_HTTP_TOKEN",
        "CONSUL_HTTP_TOKEN_FILE",
        "CONSUL_CACERT",
        "CONSUL_CAPATH",
        "CONSUL_CLIENT_CERT",
        "CONSUL_CLIENT_KEY",
        "CONSUL_TLS_SERVER_NAME",
        "CONSUL_HTTP_SSL",
        "CONSUL_HTTP_SSL_VERIFY",
    ] {
        let mut cmd = lockrun(&consul, ["leader", k]);
        cmd.env(name, "");
        let output = run(&mut cmd);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{name}= is unset\n{}",
            describe(&cmd, &output, None)
        );
    }
    // The help still answers under an empty variable: it is where a user
    // finds out what the variable takes.
    for args in [&["--help"][..], &["elect", "--help"], &["--version"]] {
        let mut cmd = bare(args);
        cmd.env("CONSUL_HTTP_ADDR", "");
        let output = run(&mut cmd);
        let what = describe(&cmd, &output, None);
        assert_eq!(output.status.code(), Some(0), "{what}");
        assert!(!output.stdout.is_empty(), "{what}");
    }
}

/// `--campaign --no-wait` with the engine down: a usage error at once (2),
/// where the campaigner retried the unreachable engine for ever.
#[test]
fn campaign_no_wait_ends_with_the_engine_down() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut cmd = bare([
        "--backend",
        "etcd",
        "elect",
        "--endpoints",
        &endpoint,
        "--campaign",
        "--no-wait",
        "campaign-no-wait",
        "--",
        "true",
    ]);
    let mut running = crate::support::Running::spawn(&mut cmd);
    let ended = crate::procs::wait_until(
        std::time::Instant::now() + std::time::Duration::from_secs(20),
        || running.exited(),
    );
    if !ended {
        running.signal(nix::sys::signal::Signal::SIGKILL);
    }
    let output = running.finish();
    assert!(
        ended,
        "still retrying after 20 s\n{}",
        describe(&cmd, &output, None)
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        describe(&cmd, &output, None)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// A finished run that must fail with `status` and one `lockrun:` line
/// containing each of `says`; the line, for the caller to look further.
fn one_line(cmd: &mut std::process::Command, status: i32, says: &[&str]) -> String {
    let output = run(cmd);
    let what = describe(cmd, &output, None);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(status), "wrong status\n{what}");
    assert_eq!(stderr.lines().count(), 1, "not one line\n{what}");
    assert!(stderr.starts_with("lockrun: "), "{what}");
    for s in says {
        assert!(stderr.contains(s), "does not say `{s}`\n{what}");
    }
    assert!(output.stdout.is_empty(), "{what}");
    stderr
}

/// What the lock directory holds, every path under it.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p.display().to_string());
        }
    }
    out.sort();
    out
}

/// `elect` on a semaphore's prefix and `semaphore` on a leader lock's key
/// (#40): where the two share one name in the engine (a local directory
/// against a file, etcd's one queue under `KEY/`), the run is a usage
/// error that names what KEY is and the subcommand to use, and leaves
/// nothing behind. Before: "`DIR/s` is a directory, not a file lockrun
/// made; remove it" (125), "... not a directory (is a parent of the key
/// already a lock?)" (125); on etcd, 75 ("taken") for as long as a slot
/// was held, and "... is not a lockrun contender" (125).
#[test]
fn a_lock_on_a_semaphores_name_and_back_say_which_subcommand() {
    use crate::places::Place;
    // Local: the names persist after the runs.
    let place = Place::local();
    for args in [
        &["semaphore", "--limit", "2", "jobs/s", "--", "true"][..],
        &["elect", "jobs/l", "--", "true"],
        &["elect", "nest/k", "--", "true"],
    ] {
        place.status(&run(&mut place.lockrun(args)), 0, "setup");
    }
    let before = tree(place.lock_dir());
    one_line(
        &mut place.lockrun(&["elect", "jobs/s", "--", "true"]),
        2,
        &[
            "`jobs/s` is a semaphore's prefix",
            "use `lockrun semaphore --limit 2 jobs/s`",
        ],
    );
    // A directory of other keys: refused as before (125: anyone who may
    // write in the lock directory could have made it), saying what to do.
    // Before: "`DIR/nest` is a directory, not a file lockrun made; remove it".
    one_line(
        &mut place.lockrun(&["elect", "-n", "nest", "--", "true"]),
        125,
        &[
            "is a directory, not a lock file",
            "other keys live under it (`nest/...`)",
            "choose another KEY",
        ],
    );
    one_line(
        &mut place.lockrun(&["semaphore", "-l", "2", "jobs/l", "--", "true"]),
        2,
        &["`jobs/l` is a leader lock", "use `lockrun elect jobs/l`"],
    );
    assert_eq!(tree(place.lock_dir()), before, "nothing made or removed");

    // etcd: both names are one queue under `KEY/`, alive while held.
    let place = Place::etcd("kinds");
    let (sem, lock) = (place.key("s"), place.key("l"));
    let work = scratch();
    let (w1, w2) = (work.path().join("1"), work.path().join("2"));
    std::fs::create_dir_all(&w1).unwrap();
    std::fs::create_dir_all(&w2).unwrap();
    let slot = place.hold(&w1, "", &["semaphore", "--limit", "2", &sem]);
    let held = place.hold(&w2, "", &["elect", &lock]);
    let entries = || {
        crate::engines::etcd::support::etcdctl_ok(&[
            "get",
            "--prefix",
            "--keys-only",
            &place.key(""),
        ])
    };
    let before = entries();
    one_line(
        &mut place.lockrun(&["elect", &sem, "--", "true"]),
        2,
        &[
            &format!("`{sem}` is a semaphore's prefix"),
            &format!("use `lockrun semaphore --limit 2 {sem}`"),
        ],
    );
    one_line(
        &mut place.lockrun(&["semaphore", "-l", "2", &lock, "--", "true"]),
        2,
        &[
            &format!("`{lock}` is a leader lock"),
            &format!("use `lockrun elect {lock}`"),
        ],
    );
    assert_eq!(entries(), before, "our entries went again");
    for (w, holder) in [(&w1, slot), (&w2, held)] {
        std::fs::write(w.join("go"), "").unwrap();
        place.status(&holder.finish(), 0, "holder");
    }

    // Consul: a lock `P` and a semaphore `P` are different entries (`P`,
    // and `P/.lock` with the contenders), as for `consul lock`, so `elect
    // P` runs; `elect P/.lock`, the semaphore's record, is refused as the
    // semaphore's. Before: "key `P/.lock` holds a semaphore entry; lockrun
    // will not take it over: ..." (125).
    let place = Place::consul("kinds");
    let sem = place.key("s");
    let work = scratch();
    let slot = place.hold(work.path(), "", &["semaphore", "--limit", "2", &sem]);
    let record = format!("{sem}/.lock");
    one_line(
        &mut place.lockrun(&["elect", "-n", &record, "--", "true"]),
        2,
        &[
            &format!("`{record}` is an entry of semaphore `{sem}`"),
            &format!("use `lockrun semaphore --limit 2 {sem}`"),
        ],
    );
    place.status(
        &run(&mut place.lockrun(&["elect", "-n", &sem, "--", "true"])),
        0,
        "a lock beside the semaphore of that name",
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&slot.finish(), 0, "holder");
    // And back: a semaphore whose record key holds a leader lock (`consul
    // lock P`, `lockrun elect P/.lock`). Before: "`P/.lock` is a leader lock
    // (...); use another prefix" (125).
    let lock = place.key("l");
    let work = scratch();
    let held = place.hold(work.path(), "", &["elect", &format!("{lock}/.lock")]);
    one_line(
        &mut place.lockrun(&["semaphore", "-n", "-l", "2", &lock, "--", "true"]),
        2,
        &[
            &format!("`{lock}/.lock` is a leader lock"),
            &format!("use `lockrun elect {lock}/.lock`"),
        ],
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&held.finish(), 0, "holder");
}

/// The other weak messages of #40, each now one line with the fix.
#[test]
fn weak_messages_name_the_fix() {
    use crate::places::Place;
    let etcd = crate::engines::etcd::support::etcd();
    // Before: "Consul answered 404 creating a session (404 page not found)";
    // `leader` printed nothing and exited 1, as for a free lock.
    for args in [&["elect", "k", "--", "true"][..], &["leader", "k"]] {
        one_line(
            bare(args).env("CONSUL_HTTP_ADDR", &etcd.endpoint),
            125,
            &[
                &format!("{} answered \"404 page not found\"", etcd.endpoint),
                "is this Consul?",
            ],
        );
    }
    // Before: port 80, "cannot reach etcd at http://127.0.0.1 (Connection refused...)".
    one_line(
        &mut bare([
            "--backend",
            "etcd",
            "--endpoints",
            "127.0.0.1",
            "leader",
            "k",
        ]),
        125,
        &[
            "`127.0.0.1` in --endpoints has no port",
            "use `127.0.0.1:2379`",
        ],
    );
    one_line(
        bare(["--backend", "etcd", "leader", "k"]).env("ETCDCTL_ENDPOINTS", "http://[::1]"),
        125,
        &["in ETCDCTL_ENDPOINTS has no port"],
    );
    // Before: "cannot run `echo hi && echo there`: command not found; check
    // the name and PATH".
    let place = Place::local();
    one_line(
        &mut place.lockrun(&["elect", "k", "--", "echo hi && echo there"]),
        127,
        &["cannot run `echo hi && echo there`", "add --shell"],
    );
    assert!(tree(place.lock_dir()).is_empty(), "nothing locked");
    // A missing program keeps the plain line.
    one_line(
        &mut place.lockrun(&["elect", "k", "--", "no-such-program-40"]),
        127,
        &["command not found; check the name and PATH"],
    );
    // psql names the socket it tried; so do we.
    one_line(
        &mut bare([
            "--backend",
            "postgres",
            "--dsn",
            "host=/nonexistent-40 user=postgres",
            "leader",
            "k",
        ]),
        125,
        &["/nonexistent-40/.s.PGSQL.5432", "No such file or directory"],
    );
}

//! `--backend zookeeper` over TLS: a real server's secureClientPort
//! (Netty, PEM key and trust stores, client certificates required), with
//! certificates from a CA made at test time. The server certificate names
//! 127.0.0.1 only; the plain client port beside it is the tests' own view.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::ExtendedKeyUsagePurpose;

use crate::engines::consul::tls::{authority, leaf};
use crate::engines::zookeeper::support::{self as zk_support, TestZk};
use crate::procs::free_port;
use crate::support::{bare, run, scratch};

/// A ZooKeeper with a TLS client port that requires a client certificate,
/// and the files an operator would have.
struct Secure {
    server: TestZk,
    /// `127.0.0.1:PORT` of the TLS port.
    secure: String,
    dir: tempfile::TempDir,
}

impl Secure {
    fn start() -> Secure {
        let dir = scratch();
        let (ca, ca_key) = authority("lockrun test ZooKeeper CA");
        let (stranger, _) = authority("a stranger CA");
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server = leaf(
            &["127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &server_key,
            &ca,
            &ca_key,
        );
        let client_key = rcgen::KeyPair::generate().unwrap();
        let client = leaf(
            &["lockrun-client"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &client_key,
            &ca,
            &ca_key,
        );
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", ca.pem());
        write("stranger.pem", stranger.pem());
        write(
            "server.pem",
            format!("{}{}", server_key.serialize_pem(), server.pem()),
        );
        write("client.pem", client.pem());
        write("client.key", client_key.serialize_pem());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("client.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let port = free_port();
        let d = dir.path().display();
        let server = zk_support::standalone_with(&format!(
            "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={d}/server.pem\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={d}/ca.pem\nssl.trustStore.type=PEM\n\
             ssl.clientAuth=need\n"
        ));
        Secure {
            server,
            secure: format!("127.0.0.1:{port}"),
            dir,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lockrun --backend zookeeper` at the TLS port with `tls` flags.
    fn lockrun(&self, tls: &[&Path], args: &[&str]) -> Command {
        let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &self.secure]);
        for (flag, path) in ["--zk-ca-file", "--zk-client-cert", "--zk-client-key"]
            .iter()
            .zip(tls)
        {
            cmd.arg(flag).arg(path);
        }
        let mut told = false;
        for arg in args {
            cmd.arg(arg);
            if !told && matches!(*arg, "elect" | "semaphore") {
                cmd.args(["--zk-tick-time", zk_support::TICK]);
                told = true;
            }
        }
        cmd
    }
}

#[test]
fn zookeeper_over_tls_with_a_client_certificate() {
    let s = Secure::start();
    let key = zk_support::unique("tls");
    let (ca, cert, client_key) = (s.file("ca.pem"), s.file("client.pem"), s.file("client.key"));
    let full: [&Path; 3] = [&ca, &cert, &client_key];
    let out = run(&mut s.lockrun(
        &full,
        &["elect", &key, "--", "sh", "-c", "echo $LOCKRUN_LOCK_INDEX"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "over TLS: {stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "COMMAND had no fence over TLS: {stderr}"
    );
    let out = run(&mut s.lockrun(&full, &["leader", &key]));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Refused: one line, 125, within the connection's deadline, nothing
    // written (the plain port shows the tree).
    let stranger = s.file("stranger.pem");
    for (what, tls, says) in [
        (
            "no client certificate (the server needs one)",
            vec![ca.as_path()],
            "requires a client certificate",
        ),
        (
            "another CA",
            vec![stranger.as_path(), cert.as_path(), client_key.as_path()],
            "not signed by the CA in --zk-ca-file",
        ),
        (
            "plain ZooKeeper protocol to the TLS port",
            vec![],
            "--zk-ca-file where they serve TLS",
        ),
    ] {
        let started = Instant::now();
        let refused_key = zk_support::unique("tls-refused");
        let out = run(&mut s.lockrun(&tls, &["elect", &refused_key, "--", "true"]));
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{what}: {stderr}");
        eprintln!("{what}: {took:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{what}: not one line: {stderr}");
        assert!(
            stderr.contains(&s.secure),
            "{what}: the server is not named: {stderr}"
        );
        assert!(
            stderr.contains(says),
            "{what}: does not say `{says}`: {stderr}"
        );
        assert!(took < Duration::from_secs(30), "{what}: took {took:?}");
        assert!(
            zk_support::tree(&s.server.addr, &refused_key).is_empty(),
            "{what}: something was written"
        );
    }
}

/// TLS spoken to a server's plain client port: one line saying so, 125.
#[test]
fn zookeeper_tls_to_a_plain_port_says_so() {
    let s = Secure::start();
    let key = zk_support::unique("tls-plain");
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &s.server.addr]);
    cmd.arg("--zk-ca-file").arg(s.file("ca.pem"));
    cmd.args([
        "elect",
        "--zk-tick-time",
        zk_support::TICK,
        &key,
        "--",
        "true",
    ]);
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(
        stderr.contains("over TLS") && stderr.contains("secureClientPort"),
        "does not say the port is not TLS: {stderr}"
    );
    assert!(
        zk_support::tree(&s.server.addr, &key).is_empty(),
        "something was written"
    );
}

/// A server that takes the connection and never answers the handshake:
/// one line saying so, 125, bounded.
#[test]
fn zookeeper_a_silent_tls_server_is_one_line() {
    let dir = scratch();
    let (ca, _) = authority("lockrun silent CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &addr]);
    cmd.arg("--zk-ca-file").arg(&ca_file);
    cmd.args([
        "elect",
        "--zk-tick-time",
        zk_support::TICK,
        "k",
        "--",
        "true",
    ]);
    let started = Instant::now();
    let out = run(&mut cmd);
    let took = started.elapsed();
    drop(silent);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(
        stderr.contains("did not finish a TLS handshake"),
        "does not say the handshake stalled: {stderr}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

/// Bad TLS flags: one line naming the flag or file, 125, before any
/// connection (the server is not even asked: there is none at the port).
#[test]
fn zookeeper_bad_tls_flags_are_refused_before_any_connection() {
    let dir = scratch();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let fifo = dir.path().join("fifo.pem");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    // A PEM block that holds no certificate a root store takes.
    let junk = dir.path().join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    // A certificate, a key of another, and a key others can read.
    let (ca, ca_key) = authority("lockrun bad-flags CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let own_key = rcgen::KeyPair::generate().unwrap();
    let cert = leaf(
        &["c"],
        ExtendedKeyUsagePurpose::ClientAuth,
        &own_key,
        &ca,
        &ca_key,
    );
    let cert_file = dir.path().join("c.pem");
    std::fs::write(&cert_file, cert.pem()).unwrap();
    let other_key = dir.path().join("other.key");
    std::fs::write(
        &other_key,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let open_key = dir.path().join("open.key");
    std::fs::write(&open_key, own_key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (file, mode) in [(&other_key, 0o600), (&open_key, 0o644)] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let hosts = format!("127.0.0.1:{}", free_port());
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let (ca_s, cert_s) = (s(&ca_file), s(&cert_file));
    for (flags, says) in [
        (
            vec!["--zk-ca-file".into(), s(&fifo)],
            "not a regular file".to_owned(),
        ),
        (
            vec!["--zk-ca-file".into(), "/dev/zero".into()],
            "not a regular file".into(),
        ),
        (vec!["--zk-ca-file".into(), s(&junk)], "junk.pem".into()),
        (
            vec![
                "--zk-ca-file".into(),
                ca_s.clone(),
                "--zk-client-cert".into(),
                cert_s.clone(),
                "--zk-client-key".into(),
                s(&other_key),
            ],
            "is not the key of --zk-client-cert".into(),
        ),
        (
            vec![
                "--zk-ca-file".into(),
                ca_s.clone(),
                "--zk-client-cert".into(),
                cert_s.clone(),
                "--zk-client-key".into(),
                s(&open_key),
            ],
            "can be read by others".into(),
        ),
    ] {
        let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
        cmd.args(&flags).args(["elect", "k", "--", "true"]);
        let started = Instant::now();
        let out = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{flags:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{flags:?}: not one line: {stderr}"
        );
        assert!(
            stderr.contains(&says),
            "{flags:?}: does not say `{says}`: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{flags:?}: took {:?}",
            started.elapsed()
        );
    }
    let mut cmd = bare([
        "--backend",
        "zookeeper",
        "--zk-hosts",
        "tcp+tls://127.0.0.1:2182",
    ]);
    let out = run(cmd.args(["elect", "k", "--", "true"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("names a protocol") && stderr.contains("--zk-ca-file"),
        "tcp+tls://: {stderr}"
    );
    for (flags, says) in [
        (
            vec!["--zk-client-cert", "x.pem", "--zk-client-key", "x.key"],
            "need --zk-ca-file",
        ),
        (
            vec!["--zk-ca-file", missing.to_str().unwrap()],
            "missing.pem",
        ),
        (
            vec!["--zk-ca-file", garbage.to_str().unwrap()],
            "garbage.pem",
        ),
        (
            vec![
                "--zk-ca-file",
                garbage.to_str().unwrap(),
                "--zk-client-cert",
                "x.pem",
            ],
            "go together",
        ),
        (vec!["--zk-ca-file", ""], "a value is required"),
    ] {
        let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
        cmd.args(&flags).args(["elect", "k", "--", "true"]);
        let started = Instant::now();
        let out = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(2 | 125)),
            "{flags:?}: {:?} {stderr}",
            out.status
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "{flags:?}: not one line: {stderr}"
        );
        assert!(
            stderr.contains(says),
            "{flags:?}: does not say `{says}`: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{flags:?}: tried to connect first"
        );
    }
}

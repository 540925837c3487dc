//! `--backend postgres` over TLS against a real server with `ssl=on` and
//! a CA and certificates made by the test. The server certificate names
//! only `localhost`, so connecting to `127.0.0.1` tells verify-full (the
//! name checked) from verify-ca (only the CA).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

use crate::engines::postgres::support::{self as pg_support, TestPostgres};
use crate::places::stdout;
use crate::support::{bare, run};

fn authority(name: &str) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params.self_signed(&key).unwrap(), key)
}

/// A server with TLS on, and the files a client needs.
struct TlsServer {
    pg: TestPostgres,
    dir: TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        TlsServer::start_with(false)
    }

    /// With `client_auth`, TCP connections must show a client certificate
    /// our CA signed, for the user its common name names.
    fn start_with(client_auth: bool) -> TlsServer {
        let dir = tempfile::Builder::new()
            .prefix("lockrun-pg-tls-")
            .tempdir()
            .unwrap();
        let (ca, ca_key) = authority("lockrun test CA");
        let (stranger, _) = authority("some other CA");
        let server_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = params.signed_by(&server_key, &ca, &ca_key).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("ca.pem", &ca.pem(), 0o644);
        write("stranger.pem", &stranger.pem(), 0o644);
        write("server.crt", &server.pem(), 0o644);
        // The server runs as nobody and refuses a key others can read.
        write("server.key", &server_key.serialize_pem(), 0o600);
        let client_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "postgres");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = params.signed_by(&client_key, &ca, &ca_key).unwrap();
        write("client.crt", &client.pem(), 0o644);
        write("client.key", &client_key.serialize_pem(), 0o600);
        write("client-open.key", &client_key.serialize_pem(), 0o644);
        write(
            "pg_hba.conf",
            "local all all trust\nhostssl all all 127.0.0.1/32 cert\n",
            0o644,
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let chown = Command::new("chown")
            .arg("nobody:nogroup")
            .arg(dir.path().join("server.key"))
            .status()
            .unwrap();
        assert!(chown.success());
        let file = |name: &str| dir.path().join(name).display().to_string();
        let mut settings = vec![
            "ssl=on".to_string(),
            format!("ssl_cert_file={}", file("server.crt")),
            format!("ssl_key_file={}", file("server.key")),
        ];
        if client_auth {
            settings.push(format!("ssl_ca_file={}", file("ca.pem")));
            settings.push(format!("hba_file={}", file("pg_hba.conf")));
        }
        let pg = pg_support::private_with(&settings);
        TlsServer { pg, dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lockrun elect -n KEY -- CHILD` with `dsn`, and `HOME` where no
    /// `~/.postgresql` holds anything.
    fn elect(&self, dsn: &str, child: &[&str]) -> std::process::Output {
        let mut cmd = bare(["--backend", "postgres", "--dsn", dsn, "elect", "-n"]);
        cmd.arg(pg_support::unique("tls"))
            .arg("--")
            .args(child)
            .env("HOME", self.dir.path());
        run(&mut cmd)
    }

    fn dsn(&self, host: &str, extra: &str) -> String {
        format!(
            "host={host} port={} user=postgres dbname=postgres {extra}",
            self.pg.port
        )
    }
}

fn ca_param(path: &Path) -> String {
    format!("sslrootcert={}", path.display())
}

/// Whether the holder's own session is encrypted, asked by its child
/// over the server's unix socket (which never speaks TLS).
fn ssl_of_lockrun_session(pg: &TestPostgres) -> Vec<String> {
    let psql = pg_support::bin_dir().join("psql");
    vec![
        psql.display().to_string(),
        "-X".into(),
        "-A".into(),
        "-t".into(),
        "-h".into(),
        pg.socket_dir.display().to_string(),
        "-p".into(),
        pg.port.to_string(),
        "-U".into(),
        "postgres".into(),
        "-c".into(),
        "select s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid) \
         where a.application_name = 'lockrun'"
            .into(),
    ]
}

#[test]
fn verify_full_checks_the_ca_and_the_name() {
    let tls = TlsServer::start();
    let ca = ca_param(&tls.path("ca.pem"));
    let child = ssl_of_lockrun_session(&tls.pg);
    let child: Vec<&str> = child.iter().map(String::as_str).collect();

    // The right CA and the name in the certificate: over TLS.
    let output = tls.elect(
        &tls.dsn("localhost", &format!("sslmode=verify-full {ca}")),
        &child,
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output).trim(), "t", "{output:?}");

    // verify-ca forgives the name, verify-full does not.
    let output = tls.elect(
        &tls.dsn("127.0.0.1", &format!("sslmode=verify-ca {ca}")),
        &["true"],
    );
    assert!(output.status.success(), "{output:?}");
    let output = tls.elect(
        &tls.dsn("127.0.0.1", &format!("sslmode=verify-full {ca}")),
        &["true"],
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(err.contains("does not name the host"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // A CA that did not sign the server's certificate.
    let stranger = ca_param(&tls.path("stranger.pem"));
    let output = tls.elect(
        &tls.dsn("localhost", &format!("sslmode=verify-full {stranger}")),
        &["true"],
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(err.contains("not signed by a CA in sslrootcert"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // The variables work as the DSN's words do.
    let mut cmd = bare([
        "--backend",
        "postgres",
        "--dsn",
        &tls.dsn("localhost", ""),
        "elect",
        "-n",
    ]);
    cmd.arg(pg_support::unique("tls-env"))
        .args(["--", "true"])
        .env("HOME", tls.dir.path())
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", tls.path("stranger.pem"));
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(125), "{output:?}");
}

#[test]
fn require_encrypts_without_checking_and_prefer_falls_back_to_plain() {
    let tls = TlsServer::start();
    let child = ssl_of_lockrun_session(&tls.pg);
    let child: Vec<&str> = child.iter().map(String::as_str).collect();
    // require checks nothing without roots, as libpq: any certificate.
    let output = tls.elect(&tls.dsn("127.0.0.1", "sslmode=require"), &child);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output).trim(), "t", "{output:?}");
    // prefer, the default, takes TLS when offered.
    let output = tls.elect(&tls.dsn("127.0.0.1", ""), &child);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output).trim(), "t", "{output:?}");

    // The shared cluster has no TLS: prefer goes plain, require refuses.
    let plain = pg_support::postgres();
    let dsn = |mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}",
            plain.port
        )
    };
    let output = tls.elect(&dsn("prefer"), &["true"]);
    assert!(output.status.success(), "{output:?}");
    let output = tls.elect(&dsn("require"), &["true"]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(err.contains("does not accept TLS"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn bad_tls_files_are_usage_errors_before_any_connection() {
    let tls = TlsServer::start();
    let cases = [
        (
            "sslmode=verify-full sslrootcert=/nonexistent/ca.pem".to_string(),
            "does not exist",
        ),
        ("sslmode=verify-ca".to_string(), "root.crt"),
        (
            format!(
                "sslmode=require sslrootcert={}",
                tls.path("server.key").display()
            ),
            "holds no PEM certificate",
        ),
        (
            format!("sslcert={}", tls.path("server.crt").display()),
            "no key",
        ),
    ];
    for (extra, expected) in cases {
        let output = tls.elect(&tls.dsn("localhost", &extra), &["true"]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra}: {err}");
        assert!(err.contains(expected), "{extra}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn a_client_certificate_is_shown_when_the_server_asks() {
    let tls = TlsServer::start_with(true);
    let ca = ca_param(&tls.path("ca.pem"));
    let identity = format!(
        "sslcert={} sslkey={}",
        tls.path("client.crt").display(),
        tls.path("client.key").display()
    );
    let output = tls.elect(
        &tls.dsn("localhost", &format!("sslmode=verify-full {ca} {identity}")),
        &["true"],
    );
    assert!(output.status.success(), "{output:?}");
    // From libpq's default place, ~/.postgresql.
    let home = tls.path("home");
    std::fs::create_dir_all(home.join(".postgresql")).unwrap();
    for (from, to) in [
        ("client.crt", "postgresql.crt"),
        ("client.key", "postgresql.key"),
        ("ca.pem", "root.crt"),
    ] {
        std::fs::copy(tls.path(from), home.join(".postgresql").join(to)).unwrap();
    }
    let mut cmd = bare([
        "--backend",
        "postgres",
        "--dsn",
        &tls.dsn("localhost", "sslmode=verify-full"),
        "elect",
        "-n",
    ]);
    cmd.arg(pg_support::unique("tls-home"))
        .args(["--", "true"])
        .env("HOME", &home);
    let output = run(&mut cmd);
    assert!(output.status.success(), "{output:?}");

    // Without one, the server refuses us: one line, 125.
    let output = tls.elect(
        &tls.dsn("localhost", &format!("sslmode=verify-full {ca}")),
        &["true"],
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // A key others can read is refused before any connection, as libpq.
    let open = format!(
        "sslcert={} sslkey={}",
        tls.path("client.crt").display(),
        tls.path("client-open.key").display()
    );
    let output = tls.elect(
        &tls.dsn("localhost", &format!("sslmode=require {open}")),
        &["true"],
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
}

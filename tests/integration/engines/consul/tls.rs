//! lockrun over TLS, end to end. A relay terminates TLS with certificates
//! from a CA made at test time and forwards plaintext to the Consul under
//! test, so these tests run against the emulator and a real agent alike.
//!
//! The server certificate names only `consul.test`, never `127.0.0.1`: a
//! run that succeeds without `CONSUL_TLS_SERVER_NAME` (or without
//! verification turned off) would mean the name was not checked. Client
//! keys are written in the forms operators have: PKCS#8, SEC1 as
//! `consul tls cert create` writes it, OpenSSL's `ecparam` output, a
//! cert-and-key bundle, and PKCS#1 RSA.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use base64::Engine;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

use crate::engines::consul::support::TestConsul;
use crate::support::{bare, bin, describe, lockrun, run, scratch, sessions_named_like, Running};

/// The only name in the server certificate.
const SERVER_NAME: &str = "consul.test";

/// A CA that signs the server and client certificates, a stranger CA that
/// signs nothing the relay trusts, and the files an operator would have.
struct Pki {
    dir: TempDir,
    ca: Certificate,
    ca_key: KeyPair,
    server: Certificate,
    server_key: KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let dir = scratch();
        let (ca, ca_key) = authority("lockrun test CA");
        let (stranger, stranger_key) = authority("some other CA");
        let server_key = KeyPair::generate().unwrap();
        let server = leaf(
            &[SERVER_NAME],
            ExtendedKeyUsagePurpose::ServerAuth,
            &server_key,
            &ca,
            &ca_key,
        );
        let pki = Pki {
            dir,
            ca,
            ca_key,
            server,
            server_key,
        };
        pki.write("ca.pem", &pki.ca.pem());
        pki.write("stranger-ca.pem", &stranger.pem());
        // A CA directory as operators keep one: more than our CA, and a
        // hashed name that is a symlink, as `c_rehash` leaves them.
        std::fs::create_dir(pki.path("ca.d")).unwrap();
        pki.write("ca.d/other.crt", &stranger.pem());
        pki.write("ca.d/lockrun.crt", &pki.ca.pem());
        std::os::unix::fs::symlink("lockrun.crt", pki.path("ca.d/8a1b2c3d.0")).unwrap();

        let client_key = KeyPair::generate().unwrap();
        let client = pki.client_cert(&client_key);
        let pkcs8 = client_key.serialize_der();
        pki.write("client.pem", &client.pem());
        pki.write("client.key", &client_key.serialize_pem());
        pki.write("client-sec1.key", &pem("EC PRIVATE KEY", &sec1(&pkcs8)));
        pki.write(
            "client-ecparam.key",
            &(pem("EC PARAMETERS", &PRIME256V1) + &pem("EC PRIVATE KEY", &sec1(&pkcs8))),
        );
        pki.write(
            "client-bundle.pem",
            &(client.pem() + &client_key.serialize_pem()),
        );
        // A client certificate from a CA the relay does not trust.
        let rogue_key = KeyPair::generate().unwrap();
        let rogue = leaf(
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            &rogue_key,
            &stranger,
            &stranger_key,
        );
        pki.write("rogue.pem", &rogue.pem());
        pki.write("rogue.key", &rogue_key.serialize_pem());
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// `name` as a string, for an environment variable or a flag.
    fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }

    fn client_cert(&self, key: &KeyPair) -> Certificate {
        leaf(
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            key,
            &self.ca,
            &self.ca_key,
        )
    }

    /// A PKCS#1 RSA client key and its certificate, from `openssl`
    /// (ring cannot make RSA keys); `None` without `openssl`.
    fn rsa_client(&self) -> Option<(String, String)> {
        let made = Command::new("openssl")
            .args(["genpkey", "-algorithm", "RSA", "-pkeyopt"])
            .arg("rsa_keygen_bits:2048")
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let key = KeyPair::from_pem(std::str::from_utf8(&made.stdout).unwrap()).unwrap();
        let cert = self.client_cert(&key);
        self.write("client-rsa.pem", &cert.pem());
        self.write(
            "client-rsa.key",
            &pem("RSA PRIVATE KEY", &pkcs8_private_key(&key.serialize_der())),
        );
        Some((self.arg("client-rsa.pem"), self.arg("client-rsa.key")))
    }

    fn server_config(&self, clients: Clients) -> ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match clients {
            Clients::Anyone => builder.with_no_client_auth(),
            Clients::CertifiedOnly => {
                let mut roots = RootCertStore::empty();
                roots.add(self.ca.der().clone()).unwrap();
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.serialize_der()));
        builder
            .with_single_cert(vec![self.server.der().clone()], key)
            .unwrap()
    }
}

pub fn authority(name: &str) -> (Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params.self_signed(&key).unwrap(), key)
}

pub fn leaf(
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    key: &KeyPair,
    issuer: &Certificate,
    issuer_key: &KeyPair,
) -> Certificate {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "lockrun test");
    params.extended_key_usages = vec![usage];
    params.signed_by(key, issuer, issuer_key).unwrap()
}

/// The DER of the named curve P-256 (`prime256v1`).
const PRIME256V1: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

fn pem(label: &str, der: &[u8]) -> String {
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = text
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// One DER element of `input`: its tag, its contents and what follows.
fn der_element(input: &[u8]) -> (u8, &[u8], &[u8]) {
    let (len, header) = match input[1] {
        n if n < 0x80 => (n as usize, 2),
        0x81 => (input[2] as usize, 3),
        0x82 => (u16::from_be_bytes([input[2], input[3]]) as usize, 4),
        n => panic!("unexpected DER length byte {n:#x}"),
    };
    (
        input[0],
        &input[header..header + len],
        &input[header + len..],
    )
}

fn der_encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut out = vec![tag];
    match len {
        0..0x80 => out.push(len as u8),
        0x80..0x100 => out.extend([0x81, len as u8]),
        _ => out.extend([0x82, (len >> 8) as u8, len as u8]),
    }
    out.extend_from_slice(contents);
    out
}

/// The key inside a PKCS#8 `PrivateKeyInfo`: the PKCS#1 `RSAPrivateKey`
/// for RSA, the SEC1 `ECPrivateKey` for EC.
fn pkcs8_private_key(pkcs8: &[u8]) -> Vec<u8> {
    let (_, info, _) = der_element(pkcs8);
    let (_, _version, rest) = der_element(info);
    let (_, _algorithm, rest) = der_element(rest);
    let (tag, key, _) = der_element(rest);
    assert_eq!(tag, 0x04, "PKCS#8 privateKey is an OCTET STRING");
    key.to_vec()
}

/// A P-256 key as SEC1 the way Go's `x509.MarshalECPrivateKey` (and so
/// `consul tls cert create`) and OpenSSL write it: with the curve named,
/// which the PKCS#8-embedded form ring makes leaves out.
fn sec1(pkcs8: &[u8]) -> Vec<u8> {
    let inner = pkcs8_private_key(pkcs8);
    let (_, fields, _) = der_element(&inner);
    let (_, version, rest) = der_element(fields);
    let (_, private, mut rest) = der_element(rest);
    let mut public = None;
    while !rest.is_empty() {
        let (tag, contents, next) = der_element(rest);
        if tag == 0xa1 {
            public = Some(contents);
        }
        rest = next;
    }
    let body = [
        der_encode(0x02, version),
        der_encode(0x04, private),
        der_encode(0xa0, &PRIME256V1),
        der_encode(0xa1, public.expect("ring includes the public key")),
    ]
    .concat();
    der_encode(0x30, &body)
}

#[derive(Clone, Copy)]
enum Clients {
    Anyone,
    /// Only clients with a certificate from the test CA (Consul's
    /// `verify_incoming`).
    CertifiedOnly,
}

#[derive(Default)]
struct Stats {
    connections: AtomicUsize,
    handshakes: AtomicUsize,
    client_certificates: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

/// Terminates TLS and forwards plaintext to Consul, on its own thread and
/// tokio runtime; stopped when dropped.
struct Relay {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(consul: &TestConsul, pki: &Pki, clients: Clients) -> Relay {
        Relay::start_on("127.0.0.1:0", consul, pki, clients).expect("bind the TLS relay")
    }

    /// `None` when `bind` is not available (IPv6 off, say).
    fn start_on(bind: &str, consul: &TestConsul, pki: &Pki, clients: Clients) -> Option<Relay> {
        let listener = TcpListener::bind(bind).ok()?;
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config(clients)));
        let upstream = consul.http_addr();
        let stats = Arc::new(Stats::default());
        let shared = stats.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((tcp, _)) = accepted else { continue };
                            shared.connections.fetch_add(1, Ordering::SeqCst);
                            tokio::spawn(serve(
                                acceptor.clone(),
                                tcp,
                                upstream.clone(),
                                shared.clone(),
                            ));
                        }
                    }
                }
            });
        });
        Some(Relay {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `https://host:port`, for `CONSUL_HTTP_ADDR`.
    fn https(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// `host:port` without a scheme.
    fn host_port(&self) -> String {
        self.addr.to_string()
    }

    fn connections(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    fn handshakes(&self) -> usize {
        self.stats.handshakes.load(Ordering::SeqCst)
    }

    fn client_certificates(&self) -> usize {
        self.stats.client_certificates.load(Ordering::SeqCst)
    }

    fn failed_handshakes(&self) -> usize {
        self.stats.failures.lock().unwrap().len()
    }

    /// Why handshakes failed, for failure messages.
    fn failures(&self) -> String {
        self.stats.failures.lock().unwrap().join("; ")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    upstream: String,
    stats: Arc<Stats>,
) {
    let mut tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => {
            stats.failures.lock().unwrap().push(e.to_string());
            return;
        }
    };
    stats.handshakes.fetch_add(1, Ordering::SeqCst);
    if tls.get_ref().1.peer_certificates().is_some() {
        stats.client_certificates.fetch_add(1, Ordering::SeqCst);
    }
    let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
}

/// One TLS setup under test: a Consul, the PKI and a relay in front.
struct Setup {
    consul: TestConsul,
    pki: Pki,
    relay: Relay,
    key: String,
}

impl Setup {
    fn new(name: &str, clients: Clients) -> Setup {
        let consul = TestConsul::start();
        let pki = Pki::new();
        let relay = Relay::start(&consul, &pki, clients);
        let key = consul.prefix(name) + "/leader";
        Setup {
            consul,
            pki,
            relay,
            key,
        }
    }

    /// lockrun with `args` and `env`, pointed at the relay unless `env`
    /// says otherwise.
    fn lockrun(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = lockrun(&self.consul, args);
        cmd.env("CONSUL_HTTP_ADDR", self.relay.https());
        cmd.envs(env.iter().copied());
        cmd
    }

    /// The CA file and the server name: what a verified connection needs.
    fn trusted(&self) -> [(&'static str, String); 2] {
        [
            ("CONSUL_CACERT", self.pki.arg("ca.pem")),
            ("CONSUL_TLS_SERVER_NAME", SERVER_NAME.to_string()),
        ]
    }

    fn expect(&self, cmd: &mut Command, code: i32, what: &str) -> Output {
        let output = run(cmd);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{what}: unexpected exit status\n{}\n--- relay ---\nconnections {}, handshakes {}, failed: {}",
            describe(cmd, &output, Some(&self.consul)),
            self.relay.connections(),
            self.relay.handshakes(),
            self.relay.failures(),
        );
        output
    }

    /// `elect KEY -- true` exits 0 over TLS, and `leader KEY` then finds
    /// no holder: two round trips that only work if TLS does.
    fn works(&self, env: &[(&str, &str)], flags: &[&str], what: &str) {
        let handshakes = self.relay.handshakes();
        let mut args = vec!["elect"];
        args.extend_from_slice(flags);
        args.extend([self.key.as_str(), "--", "true"]);
        self.expect(&mut self.lockrun(&args, env), 0, what);
        let mut args = vec!["leader"];
        args.extend_from_slice(flags);
        args.push(&self.key);
        self.expect(&mut self.lockrun(&args, env), 1, what);
        assert!(
            self.relay.handshakes() > handshakes,
            "{what}: lockrun did not come through the TLS relay"
        );
    }

    /// `elect KEY -- true` fails with `code`, one line on stderr that
    /// contains every one of `says`, and nothing reaches Consul.
    fn refused(&self, env: &[(&str, &str)], flags: &[&str], code: i32, says: &[&str], what: &str) {
        let writes = self.consul.emulator().map(|e| e.write_count());
        let mut args = vec!["elect"];
        args.extend_from_slice(flags);
        args.extend([self.key.as_str(), "--", "true"]);
        let mut cmd = self.lockrun(&args, env);
        let output = self.expect(&mut cmd, code, what);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let shown = describe(&cmd, &output, Some(&self.consul));
        assert_eq!(stderr.lines().count(), 1, "{what}: not one line\n{shown}");
        assert!(
            stderr.starts_with("lockrun: "),
            "{what}: no `lockrun:` prefix\n{shown}"
        );
        // `a|b`: either will do.
        for fragment in says {
            assert!(
                fragment
                    .split('|')
                    .any(|f| stderr.to_lowercase().contains(&f.to_lowercase())),
                "{what}: does not say `{fragment}`\n{shown}"
            );
        }
        for noise in ["panicked", "builder error", "Error {", "Custom {"] {
            assert!(!stderr.contains(noise), "{what}: says `{noise}`\n{shown}");
        }
        assert!(output.stdout.is_empty(), "{what}: wrote to stdout\n{shown}");
        if let Some(emulator) = self.consul.emulator() {
            assert_eq!(
                Some(emulator.write_count()),
                writes,
                "{what}: something was written to Consul\n{shown}"
            );
        }
        let api = self.consul.api();
        assert!(
            api.kv_get(&self.key).is_none() && sessions_named_like(&api, &self.key) == 0,
            "{what}: the key or a session exists\n{shown}"
        );
    }
}

fn pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn a_ca_file_and_the_server_name_verify_the_agent() {
    let s = Setup::new("tls-ca-file", Clients::Anyone);
    let trusted = s.trusted();
    s.works(
        &pairs(&trusted),
        &[],
        "CONSUL_CACERT + CONSUL_TLS_SERVER_NAME",
    );
    // The flags, and a server name with a port (stripped, as consul does).
    let ca = s.pki.arg("ca.pem");
    s.works(
        &[],
        &["--ca-file", &ca, "--tls-server-name", "consul.test:8501"],
        "--ca-file + --tls-server-name",
    );
    // A lockrun child of `elect` sees the lock held, over the same TLS
    // settings it inherits.
    let holder = bin();
    let mut cmd = s.lockrun(
        &[
            "elect",
            &s.key,
            "--",
            holder.to_str().unwrap(),
            "leader",
            &s.key,
        ],
        &pairs(&trusted),
    );
    let output = s.expect(&mut cmd, 0, "the child sees the lock held");
    assert!(
        !output.stdout.is_empty(),
        "`leader` prints the holder\n{}",
        describe(&cmd, &output, Some(&s.consul))
    );
    // The name is checked: not `127.0.0.1` (the certificate does not name
    // it), and not some other name.
    s.refused(
        &[("CONSUL_CACERT", &ca)],
        &[],
        125,
        &["not issued for `127.0.0.1`", "CONSUL_TLS_SERVER_NAME"],
        "no server name: the address is not in the certificate",
    );
    s.refused(
        &[
            ("CONSUL_CACERT", &ca),
            ("CONSUL_TLS_SERVER_NAME", "other.test"),
        ],
        &[],
        125,
        &["not issued for `other.test`"],
        "a server name the certificate does not have",
    );
}

#[test]
fn an_untrusted_certificate_is_one_line_and_writes_nothing() {
    let s = Setup::new("tls-untrusted", Clients::Anyone);
    for (what, ca) in [
        ("no CA at all (the system roots)", None),
        ("another CA", Some(s.pki.arg("stranger-ca.pem"))),
    ] {
        let mut env = vec![("CONSUL_TLS_SERVER_NAME", SERVER_NAME)];
        if let Some(ca) = &ca {
            env.push(("CONSUL_CACERT", ca));
        }
        s.refused(
            &env,
            &[],
            125,
            &["not signed by a trusted CA", "CONSUL_CACERT"],
            what,
        );
        let mut leader = s.lockrun(&["leader", &s.key], &env);
        s.expect(&mut leader, 125, what);
    }
    assert_eq!(s.relay.handshakes(), 0, "no handshake completed");
}

#[test]
fn ssl_verify_false_accepts_any_certificate() {
    let s = Setup::new("tls-no-verify", Clients::Anyone);
    // No CA and no server name: neither the issuer nor the name (the
    // certificate does not name 127.0.0.1) would pass verification.
    s.works(
        &[("CONSUL_HTTP_SSL_VERIFY", "false")],
        &[],
        "CONSUL_HTTP_SSL_VERIFY=false",
    );
    s.works(
        &[("CONSUL_HTTP_SSL_VERIFY", "0")],
        &[],
        "CONSUL_HTTP_SSL_VERIFY=0",
    );
    s.refused(
        &[("CONSUL_HTTP_SSL_VERIFY", "true")],
        &[],
        125,
        &["certificate"],
        "CONSUL_HTTP_SSL_VERIFY=true still verifies",
    );
}

#[test]
fn a_ca_directory_is_searched() {
    let s = Setup::new("tls-ca-path", Clients::Anyone);
    let dir = s.pki.arg("ca.d");
    s.works(
        &[
            ("CONSUL_CAPATH", &dir),
            ("CONSUL_TLS_SERVER_NAME", SERVER_NAME),
        ],
        &[],
        "CONSUL_CAPATH",
    );
    s.works(
        &[],
        &["--ca-path", &dir, "--tls-server-name", SERVER_NAME],
        "--ca-path",
    );
    // A directory without our CA proves the one above was read.
    let strangers = s.pki.path("other.d");
    std::fs::create_dir(&strangers).unwrap();
    std::fs::copy(s.pki.path("stranger-ca.pem"), strangers.join("other.crt")).unwrap();
    s.refused(
        &[
            ("CONSUL_CAPATH", strangers.to_str().unwrap()),
            ("CONSUL_TLS_SERVER_NAME", SERVER_NAME),
        ],
        &[],
        125,
        &["not signed by a trusted CA"],
        "a CA directory without the agent's CA",
    );
}

#[test]
fn client_certificates_in_every_key_format() {
    let s = Setup::new("tls-client-cert", Clients::CertifiedOnly);
    let trusted = s.trusted();
    let mut identities = vec![
        (
            "PKCS#8 key",
            s.pki.arg("client.pem"),
            s.pki.arg("client.key"),
        ),
        (
            "SEC1 key, as consul tls cert create writes it",
            s.pki.arg("client.pem"),
            s.pki.arg("client-sec1.key"),
        ),
        (
            "openssl ecparam key (EC PARAMETERS first)",
            s.pki.arg("client.pem"),
            s.pki.arg("client-ecparam.key"),
        ),
        (
            "one file with certificate and key",
            s.pki.arg("client-bundle.pem"),
            s.pki.arg("client-bundle.pem"),
        ),
    ];
    match s.pki.rsa_client() {
        Some((cert, key)) => identities.push(("PKCS#1 RSA key", cert, key)),
        None => eprintln!("skipped the PKCS#1 RSA key: no openssl to make one"),
    }
    for (what, cert, key) in &identities {
        let mut env = pairs(&trusted);
        env.extend([("CONSUL_CLIENT_CERT", cert.as_str())]);
        env.extend([("CONSUL_CLIENT_KEY", key.as_str())]);
        let presented = s.relay.client_certificates();
        s.works(&env, &[], what);
        assert!(
            s.relay.client_certificates() > presented,
            "{what}: no client certificate reached the relay"
        );
    }
    let (cert, key) = (s.pki.arg("client.pem"), s.pki.arg("client-sec1.key"));
    s.works(
        &pairs(&trusted),
        &["--client-cert", &cert, "--client-key", &key],
        "--client-cert and --client-key",
    );
    // Consul's verify_incoming turns away a client without a certificate,
    // or with one from a CA it does not trust.
    let failed = s.relay.failed_handshakes();
    s.refused(
        &pairs(&trusted),
        &[],
        125,
        &["requires a client certificate", "CONSUL_CLIENT_CERT"],
        "no client certificate",
    );
    let (rogue, rogue_key) = (s.pki.arg("rogue.pem"), s.pki.arg("rogue.key"));
    let mut env = pairs(&trusted);
    env.extend([
        ("CONSUL_CLIENT_CERT", rogue.as_str()),
        ("CONSUL_CLIENT_KEY", rogue_key.as_str()),
    ]);
    s.refused(
        &env,
        &[],
        125,
        &["refused lockrun's client certificate"],
        "a client certificate from another CA",
    );
    assert!(
        s.relay.failed_handshakes() > failed,
        "the relay turned the clients away"
    );
}

#[test]
fn consul_http_ssl_turns_a_plain_address_into_https() {
    let s = Setup::new("tls-http-ssl", Clients::Anyone);
    let trusted = s.trusted();
    let plain = s.relay.host_port();
    let http = format!("http://{plain}");
    for (what, addr) in [("host:port", &plain), ("http://host:port", &http)] {
        let mut env = pairs(&trusted);
        env.push(("CONSUL_HTTP_ADDR", addr));
        env.push(("CONSUL_HTTP_SSL", "true"));
        s.works(&env, &[], what);
    }
    // Without it the same address is plain HTTP, which the relay refuses:
    // so the runs above did speak TLS.
    let connections = s.relay.connections();
    let mut env = pairs(&trusted);
    env.push(("CONSUL_HTTP_ADDR", &plain));
    s.refused(
        &env,
        &[],
        125,
        &["may expect TLS", "CONSUL_HTTP_SSL"],
        "plain HTTP to a TLS port",
    );
    assert!(s.relay.connections() > connections, "it reached the relay");
    // The other way round: TLS to an agent that serves plain HTTP, as with
    // a CONSUL_HTTP_SSL=true left over in a shell.
    let direct = s.consul.http_addr();
    let mut env = pairs(&trusted);
    env.push(("CONSUL_HTTP_ADDR", &direct));
    env.push(("CONSUL_HTTP_SSL", "true"));
    s.refused(
        &env,
        &[],
        125,
        &["does not speak TLS"],
        "TLS to a plain HTTP agent",
    );
}

#[test]
fn a_client_certificate_without_its_key_is_refused_before_any_request() {
    let s = Setup::new("tls-half-identity", Clients::CertifiedOnly);
    let trusted = s.trusted();
    let (cert, key) = (s.pki.arg("client.pem"), s.pki.arg("client.key"));
    let mut only_cert = pairs(&trusted);
    only_cert.push(("CONSUL_CLIENT_CERT", &cert));
    let mut only_key = pairs(&trusted);
    only_key.push(("CONSUL_CLIENT_KEY", &key));
    for (what, env, flags) in [
        ("CONSUL_CLIENT_CERT alone", &only_cert, &[][..]),
        ("CONSUL_CLIENT_KEY alone", &only_key, &[][..]),
        (
            "--client-cert alone",
            &pairs(&trusted),
            &["--client-cert", &cert][..],
        ),
        (
            "--client-key alone",
            &pairs(&trusted),
            &["--client-key", &key][..],
        ),
    ] {
        s.refused(env, flags, 125, &["client key", "client certificate"], what);
    }
    assert_eq!(s.relay.connections(), 0, "nothing was sent");
}

#[test]
fn bad_client_key_material_names_the_file_and_the_reason() {
    let s = Setup::new("tls-bad-identity", Clients::CertifiedOnly);
    let trusted = s.trusted();
    let cert = s.pki.arg("client.pem");
    let key = s.pki.arg("client.key");
    let other_key = s.pki.arg("rogue.key");
    let garbage = s.pki.write("garbage.key", "this is not a key\n");
    let encrypted = s.pki.write(
        "encrypted.key",
        &pem("ENCRYPTED PRIVATE KEY", b"\x30\x03\x02\x01\x00"),
    );
    // OpenSSL's traditional encryption keeps the label, adds headers.
    let legacy = s.pki.write(
        "legacy.key",
        "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00112233445566778899AABBCCDDEEFF\n\nAAAA\n-----END EC PRIVATE KEY-----\n",
    );
    let two_keys = s.pki.write(
        "two.key",
        &(std::fs::read_to_string(&key).unwrap() + &std::fs::read_to_string(&other_key).unwrap()),
    );
    let cases: [(&str, &str, &str, &[&str]); 6] = [
        (
            "the key of another certificate",
            &cert,
            &other_key,
            &["rogue.key", "does not belong", "client.pem"],
        ),
        (
            "a key file that is not PEM",
            &cert,
            garbage.to_str().unwrap(),
            &["garbage.key", "no PEM private key"],
        ),
        (
            "a PKCS#8 key with a passphrase",
            &cert,
            encrypted.to_str().unwrap(),
            &["encrypted.key", "is encrypted", "passphrase"],
        ),
        (
            "a traditionally encrypted key",
            &cert,
            legacy.to_str().unwrap(),
            &["legacy.key", "is encrypted"],
        ),
        (
            "two keys in the key file",
            &cert,
            two_keys.to_str().unwrap(),
            &["two.key", "2 private keys"],
        ),
        (
            "certificate and key swapped",
            &key,
            &cert,
            &["client.key", "no PEM certificate"],
        ),
    ];
    for (what, cert, key, says) in cases {
        let mut env = pairs(&trusted);
        env.push(("CONSUL_CLIENT_CERT", cert));
        env.push(("CONSUL_CLIENT_KEY", key));
        s.refused(&env, &[], 125, says, what);
    }
    assert_eq!(s.relay.connections(), 0, "nothing was sent");
}

#[test]
fn an_ipv6_address_with_a_server_name() {
    let consul = TestConsul::start();
    let pki = Pki::new();
    let Some(relay) = Relay::start_on("[::1]:0", &consul, &pki, Clients::Anyone) else {
        eprintln!("skipped: no IPv6 loopback");
        return;
    };
    let s = Setup {
        key: consul.prefix("tls-ipv6") + "/leader",
        consul,
        pki,
        relay,
    };
    let trusted = s.trusted();
    s.works(&pairs(&trusted), &[], "https://[::1]:PORT");
}

/// `--register-service` reaches an agent on https as the Consul backend
/// does, from the consul CLI's variables: with `CONSUL_CACERT` and
/// `CONSUL_TLS_SERVER_NAME`, a holder of a local lock is in the agent's
/// services while it holds and gone once it ends; without the CA, one line
/// naming `CONSUL_CACERT`, 125, and neither a lock file nor a service.
#[test]
fn register_service_verifies_an_agent_on_https() {
    let s = Setup::new("tls-catalog", Clients::Anyone);
    let service = format!("tlscat{}", std::process::id());
    // The service's TTL check on the agent's node: what the emulator and
    // a real agent both show.
    let api = s.consul.api();
    let node = api.node_name();
    let registered = || {
        let resp = api.get(&format!("/v1/health/node/{node}"));
        assert_eq!(resp.status, 200, "{}", resp.text());
        let prefix = format!("lockrun-{service}-");
        resp.json().as_array().is_some_and(|checks| {
            checks.iter().any(|c| {
                c["CheckID"]
                    .as_str()
                    .is_some_and(|id| id.starts_with(&prefix))
            })
        })
    };
    let dir = scratch();
    let work = scratch();
    let held = work.path().join("held");
    let go_on = work.path().join("go-on");
    nix::unistd::mkfifo(&go_on, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let elect = |env: &[(&str, &str)]| {
        let mut cmd = bare(["--backend", "local", "--lock-dir"]);
        cmd.arg(dir.path());
        cmd.args(["elect", "--register-service", &service, "--service-agent"]);
        cmd.arg(s.relay.https());
        cmd.args(["k", "--", "sh", "-c", r#"touch "$0" && read line < "$1""#]);
        cmd.arg(&held).arg(&go_on);
        cmd.envs(env.iter().copied());
        cmd
    };

    let refused = run(&mut elect(&[("CONSUL_TLS_SERVER_NAME", SERVER_NAME)]));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "no CA: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "no CA: not one line: {stderr}");
    assert!(
        stderr.contains("--register-service") && stderr.contains("CONSUL_CACERT"),
        "no CA: the line names neither the flag nor CONSUL_CACERT: {stderr}"
    );
    assert!(!held.exists(), "no CA: COMMAND ran");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no CA: something was written to the lock directory"
    );
    assert!(!registered(), "no CA: the service is registered");

    let trusted = s.trusted();
    let holder = Running::spawn(&mut elect(&pairs(&trusted)));
    crate::support::wait_for_file(&held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    assert!(
        crate::procs::wait_until(deadline, registered),
        "the holder never showed in the agent's services over TLS"
    );
    std::fs::write(&go_on, "go\n").expect("let the command end");
    let output = holder.finish();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Deregistered before the lock was given up; a real agent's catalog
    // follows its own at once, but through a sync of its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    assert!(
        crate::procs::wait_until(deadline, || !registered()),
        "still registered after the hold ended"
    );
    assert!(
        s.relay.handshakes() > 0,
        "lockrun did not come through the TLS relay"
    );
}

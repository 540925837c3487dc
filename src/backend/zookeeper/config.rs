//! Where ZooKeeper is and who we are to it, from the flags and ZooKeeper
//! clients' usual variables, checked before any connection.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::host::io_reason;

/// The connect string used when neither `--zk-hosts` nor ZOOKEEPER_HOSTS
/// says otherwise: the port every ZooKeeper client defaults to.
pub const DEFAULT_HOSTS: &str = "127.0.0.1:2181";

/// The settings from the flags.
#[derive(Debug, Default, Clone)]
pub struct ZkFlags {
    pub hosts: Option<String>,
    pub auth_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// TLS to every server: the CA's certificates, and a client certificate
/// and key, each as the PEM text of its file, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkTls {
    pub ca: String,
    pub identity: Option<(String, String)>,
}

impl std::fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let identity = if self.identity.is_some() { "a client certificate" } else { "none" };
        write!(f, "ZkTls(CA, identity: {identity})")
    }
}

/// Digest credentials, `user:password`; the password never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Digest(pub String);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.0.split(':').next().unwrap_or("");
        write!(f, "Digest({user}:***)")
    }
}

/// A checked connect string and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkConfig {
    /// As the client takes it: `host:port,...[/chroot]`.
    pub connect: String,
    /// The servers, `host:port` each, for messages.
    pub servers: Vec<String>,
    /// The chroot, if any (`/apps`), without a trailing slash.
    pub chroot: Option<String>,
    pub digest: Option<Digest>,
    pub tls: Option<ZkTls>,
}

impl ZkConfig {
    pub fn resolve(
        flags: &ZkFlags,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ZkConfig, String> {
        let (hosts, source) = match (&flags.hosts, env("ZOOKEEPER_HOSTS")) {
            (Some(h), _) => (h.clone(), "--zk-hosts"),
            (None, Some(h)) => (h, "ZOOKEEPER_HOSTS"),
            (None, None) => (DEFAULT_HOSTS.to_owned(), "the default"),
        };
        let (servers, chroot) = parse_connect(&hosts, source)?;
        let digest = match &flags.auth_file {
            Some(path) => Some(parse_digest(&read_secret(path)?, &format!("--zk-auth-file {}", path.display()))?),
            None => match env("ZOOKEEPER_AUTH") {
                Some(v) => Some(parse_digest(&v, "ZOOKEEPER_AUTH")?),
                None => None,
            },
        };
        let tls = read_tls(flags)?;
        let mut connect = servers.join(",");
        if let Some(root) = &chroot {
            connect.push_str(root);
        }
        Ok(ZkConfig {
            connect,
            servers,
            chroot,
            digest,
            tls,
        })
    }

    /// The servers as a message names them.
    pub fn hosts(&self) -> String {
        self.servers.join(",")
    }
}

/// `host:port[,host:port...][/chroot]` into its servers and chroot.
pub fn parse_connect(text: &str, source: &str) -> Result<(Vec<String>, Option<String>), String> {
    let fix = "give host:port[,host:port...][/chroot], e.g. 127.0.0.1:2181,127.0.0.2:2181/apps";
    if text.contains("://") {
        return Err(format!(
            "{source} `{text}` names a protocol; {fix} (TLS to every server is --zk-ca-file)"
        ));
    }
    let (list, chroot) = match text.find('/') {
        Some(at) => (&text[..at], Some(&text[at..])),
        None => (text, None),
    };
    let chroot = match chroot {
        None | Some("/") => None,
        Some(root) => {
            let inner = &root[1..];
            if inner.ends_with('/')
                || inner.split('/').any(|s| s.is_empty() || s == "." || s == "..")
                || root.chars().any(char::is_control)
            {
                return Err(format!(
                    "{source} has chroot `{root}`, not a ZooKeeper path; {fix}"
                ));
            }
            Some(root.to_owned())
        }
    };
    let mut servers = Vec::new();
    for entry in list.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(format!("{source} `{text}` has an empty server; {fix}"));
        }
        let (host, port) = match entry.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') || h.starts_with('[') => (h, p),
            _ => return Err(format!("{source} names `{entry}` without a port; {fix}")),
        };
        let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
        if host.is_empty() || !port_ok || host.contains(char::is_whitespace) {
            return Err(format!("{source} has `{entry}`, not host:port; {fix}"));
        }
        servers.push(format!("{host}:{port}"));
    }
    Ok((servers, chroot))
}

fn parse_digest(text: &str, source: &str) -> Result<Digest, String> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    match text.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() && !text.contains('\n') => {
            Ok(Digest(text.to_owned()))
        }
        _ => Err(format!(
            "{source} does not hold user:password on one line; write the digest user and password as user:password"
        )),
    }
}

/// `--zk-ca-file`, `--zk-client-cert` and `--zk-client-key`, read and
/// checked (each complaint names the file) before any connection.
fn read_tls(flags: &ZkFlags) -> Result<Option<ZkTls>, String> {
    let ca = match (&flags.ca_file, &flags.client_cert, &flags.client_key) {
        (None, None, None) => return Ok(None),
        (None, _, _) => {
            return Err(
                "--zk-client-cert and --zk-client-key need --zk-ca-file: TLS to ZooKeeper is verified against the CA that signed its servers' certificates"
                    .into(),
            )
        }
        (Some(ca), _, _) => ca,
    };
    for (flag, path) in [
        ("--zk-ca-file", Some(ca)),
        ("--zk-client-cert", flags.client_cert.as_ref()),
        ("--zk-client-key", flags.client_key.as_ref()),
    ] {
        if path.is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(format!("{flag} is empty; give a PEM file, or leave the flag out"));
        }
    }
    if flags.client_cert.is_some() != flags.client_key.is_some() {
        return Err("--zk-client-cert and --zk-client-key go together; give both, or neither".into());
    }
    let ca_pem = crate::host::read_small(ca, crate::host::SMALL_FILE_MAX)
        .map_err(|e| format!("--zk-ca-file: cannot read `{}` ({})", ca.display(), io_reason(&e)))?;
    crate::backend::tls::roots_from_pem(&ca_pem, ca).map_err(|e| format!("--zk-ca-file: {e:#}"))?;
    let identity = match (&flags.client_cert, &flags.client_key) {
        (Some(cert), Some(key)) => {
            let (cert_pem, key_pem) = crate::backend::tls::read_identity_files(cert, key)
                .map_err(|e| format!("{e:#}"))?;
            let (certificates, private_key) =
                crate::backend::tls::identity_from_pem(&cert_pem, &key_pem, cert, key)
                    .map_err(|e| format!("{e:#}"))?;
            check_key_is_private(key)?;
            // The pair is checked now, so that a key of another
            // certificate is not reported as an unreachable server.
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_client_auth_cert(certificates, private_key)
                .map_err(|e| {
                    format!(
                        "--zk-client-key `{}` is not the key of --zk-client-cert `{}` ({e})",
                        key.display(),
                        cert.display()
                    )
                })?;
            Some((text(cert_pem), text(key_pem)))
        }
        _ => None,
    };
    Ok(Some(ZkTls {
        ca: text(ca_pem),
        identity,
    }))
}

/// PEM text as the client takes it: what is not UTF-8 lies outside the
/// PEM blocks (base64 is ASCII), so it is replaced, not refused.
fn text(pem: Vec<u8>) -> String {
    String::from_utf8(pem).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// As libpq does for its key: a private key others may read is refused
/// when it is ours (root's may be 0640 for a group that shares it).
fn check_key_is_private(key: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(key) else {
        return Ok(()); // Read above: a race that reading again would show.
    };
    let too_open = if meta.uid() == 0 {
        meta.mode() & 0o037 != 0
    } else {
        meta.mode() & 0o077 != 0
    };
    if meta.uid() == nix::unistd::geteuid().as_raw() && too_open {
        return Err(format!(
            "--zk-client-key `{}` can be read by others (mode {:o}); chmod 600 it",
            key.display(),
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// A small file read without following a link at its last component.
fn read_secret(path: &Path) -> Result<String, String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read --zk-auth-file {}: {e}", path.display()))?;
    // A password file others may read or write is not a secret, nor ours
    // (as libpq refuses a ~/.pgpass others can read); a FIFO or device
    // would block or lie.
    use std::os::unix::fs::MetadataExt;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read --zk-auth-file {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "--zk-auth-file {} is not a regular file; give a file holding user:password",
            path.display()
        ));
    }
    let euid = nix::unistd::geteuid().as_raw();
    // As libpq: group read is allowed (a root-owned 0640 file a service's
    // group reads), group write and any access by others are not.
    if meta.mode() & 0o027 != 0 || (meta.uid() != euid && meta.uid() != 0) {
        return Err(format!(
            "--zk-auth-file {} is readable or writable by others, or another user's; make it yours with chmod 600",
            path.display()
        ));
    }
    let mut text = String::new();
    (&mut file)
        .take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read --zk-auth-file {}: {e}", path.display()))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        let (s, c) = parse_connect("127.0.0.1:2181,127.0.0.2:2182/apps/x", "t").unwrap();
        assert_eq!(s, ["127.0.0.1:2181", "127.0.0.2:2182"]);
        assert_eq!(c.as_deref(), Some("/apps/x"));
        assert!(parse_connect("127.0.0.1", "t").is_err());
        assert!(parse_connect("127.0.0.1:0", "t").is_err());
        assert!(parse_connect("127.0.0.1:2181,", "t").is_err());
        assert!(parse_connect("127.0.0.1:2181/a/", "t").is_err());
        assert!(parse_connect("127.0.0.1:2181/a//b", "t").is_err());
        assert_eq!(parse_connect("h:1/", "t").unwrap().1, None);
    }

    #[test]
    fn digests() {
        assert!(parse_digest("u:p\n", "t").is_ok());
        assert!(parse_digest("u:", "t").is_err());
        assert!(parse_digest(":p", "t").is_err());
        assert!(parse_digest("up", "t").is_err());
        assert!(format!("{:?}", parse_digest("u:secret", "t").unwrap()).find("secret").is_none());
    }
}

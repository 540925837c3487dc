//! Turns connection settings (flags and the consul CLI's `CONSUL_*`
//! variables, already merged by `config`) into a reqwest client: rustls,
//! extra CA certificates, a client certificate, and a TLS server name.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reqwest::Url;

use crate::backend::tls::{client_builder, identity, innermost, read_certificates};

/// An ACL token. It prints as `***` everywhere, so it cannot leak into logs
/// or error messages by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(secret: String) -> Token {
        Token(secret)
    }

    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where Consul is and how to talk to it.
#[derive(Debug, Clone)]
pub struct ConsulConfig {
    /// `http://host:port/` or `https://host:port/prefix/`.
    pub base: Url,
    /// Further agents, tried in turn after `base` when one hangs or dies.
    pub more: Vec<Url>,
    pub token: Option<Token>,
    pub ca_file: Option<PathBuf>,
    pub ca_path: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub tls_server_name: Option<String>,
    pub verify_tls: bool,
    pub datacenter: Option<String>,
    pub namespace: Option<String>,
    pub partition: Option<String>,
}

/// Parses `CONSUL_HTTP_ADDR` the way the consul CLI does: `host:port`,
/// `http://host:port` or `https://host:port`, with an optional path prefix
/// kept for reverse proxies. `https` is also chosen by `use_tls`.
pub fn parse_addr(addr: &str, use_tls: bool) -> Result<Url> {
    let addr = addr.trim();
    if addr.is_empty() {
        bail!("the Consul address is empty; set CONSUL_HTTP_ADDR to host:port");
    }
    if addr.starts_with("unix://") {
        bail!(
            "Consul address `{addr}`: unix sockets are not supported; use the agent's HTTP address (host:port)"
        );
    }
    let with_scheme = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let mut url = Url::parse(&with_scheme)
        .map_err(|e| anyhow!("Consul address `{addr}` is not valid ({e}); use host:port"))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            bail!("Consul address `{addr}` has unknown scheme `{other}`; use http:// or https://")
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Never echoed: the address holds a password.
        bail!("the Consul address carries a user name or password; give only host:port, and the token as CONSUL_HTTP_TOKEN or --token-file");
    }
    if url.host_str().is_none_or(str::is_empty) {
        bail!("Consul address `{addr}` has no host; use host:port");
    }
    if url.query().is_some() || url.fragment().is_some() {
        bail!("Consul address `{addr}` must not carry a query or fragment");
    }
    // A path is kept as a reverse proxy's prefix, but `/v1` is ours to add:
    // with it there, every request would go to `/v1/v1/...` and answer 404.
    if url
        .path_segments()
        .is_some_and(|mut s| s.any(|s| s == "v1"))
    {
        let mut fixed = url.clone();
        fixed.set_path("");
        let fixed = fixed.as_str().trim_end_matches('/').to_string();
        let fixed = if addr.contains("://") {
            fixed
        } else {
            fixed.trim_start_matches("http://").to_string()
        };
        bail!("Consul address `{addr}` must not contain the API path `/v1` (lockrun adds it); use `{fixed}`");
    }
    if use_tls && url.scheme() == "http" {
        url.set_scheme("https")
            .map_err(|()| anyhow!("cannot switch `{addr}` to https"))?;
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// Builds the HTTP client. File problems are reported here, before any
/// request, with the path that is wrong.
pub fn http_client(config: &ConsulConfig) -> Result<reqwest::Client> {
    // The consul CLI honours proxies from the environment; we do not (see
    // `client_builder`).
    let mut builder = client_builder(Duration::from_secs(5), config.base.scheme() != "http");
    let mut certificates = Vec::new();
    if let Some(file) = &config.ca_file {
        certificates.extend(read_certificates(file)?);
    }
    if let Some(dir) = &config.ca_path {
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read CA directory `{}`", dir.display()))?;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.is_file()) {
            certificates.extend(read_certificates(&path)?);
        }
    }
    for certificate in certificates {
        builder = builder.add_root_certificate(certificate);
    }
    match (&config.client_cert, &config.client_key) {
        (Some(cert), Some(key)) => builder = builder.identity(identity(cert, key)?),
        (None, None) => {}
        _ => bail!(
            "both a client certificate and a client key must be given (--client-cert and --client-key, or CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY)"
        ),
    }
    if !config.verify_tls {
        builder = builder.danger_accept_invalid_certs(true);
    }
    if let Some(name) = &config.tls_server_name {
        // reqwest verifies the certificate against the URL's host, so we put
        // the server name in the URL (see `effective_base`) and pin DNS for it
        // to the address the user gave.
        // `Url::socket_addrs` takes an IPv6 host without its brackets, which
        // resolving `host_str()` (`[::1]`) would not.
        let addrs = config.base.socket_addrs(|| None).with_context(|| {
            format!(
                "cannot resolve Consul host `{}`",
                config.base.host_str().unwrap_or_default()
            )
        })?;
        builder = builder.resolve_to_addrs(name, &addrs);
    }
    builder
        .build()
        .map_err(|e| anyhow!("cannot set up the HTTP client ({})", innermost(&e)))
}

/// The base URL requests go to: with a TLS server name, its host is that
/// name (DNS for it is pinned to the real address in [`http_client`]).
pub fn effective_base(config: &ConsulConfig) -> Result<Url> {
    let mut base = config.base.clone();
    if let Some(name) = &config.tls_server_name {
        if base.scheme() == "https" {
            base.set_host(Some(name))
                .map_err(|e| anyhow!("TLS server name `{name}` is not a valid host name ({e})"))?;
        }
    }
    Ok(base)
}

/// Strips a trailing `:port` from a TLS server name, as the consul CLI does.
pub fn server_name(name: &str) -> String {
    match name.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.contains(':') => {
            host.to_string()
        }
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_in_every_form_the_cli_accepts() {
        assert_eq!(
            parse_addr("127.0.0.1:8500", false).unwrap().as_str(),
            "http://127.0.0.1:8500/"
        );
        assert_eq!(
            parse_addr("https://consul:8501", false).unwrap().as_str(),
            "https://consul:8501/"
        );
        assert_eq!(
            parse_addr("127.0.0.1:8500", true).unwrap().as_str(),
            "https://127.0.0.1:8500/"
        );
        assert_eq!(
            parse_addr("http://proxy/consul", false).unwrap().as_str(),
            "http://proxy/consul/"
        );
        assert!(parse_addr("unix:///run/consul.sock", false).is_err());
        assert!(parse_addr("ftp://x", false).is_err());
        assert!(parse_addr("", false).is_err());
    }

    #[test]
    fn an_address_with_a_password_is_refused_without_it() {
        for addr in ["http://ops:s3cret@consul:8500", "ops:s3cret@consul:8500"] {
            let e = parse_addr(addr, false).unwrap_err().to_string();
            assert!(e.contains("user name or password"), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn token_never_prints() {
        let t = Token::new("s3cret".into());
        assert_eq!(format!("{t} {t:?}"), "*** ***");
    }

    #[test]
    fn server_name_drops_a_port() {
        assert_eq!(server_name("consul.example:8501"), "consul.example");
        assert_eq!(server_name("consul.example"), "consul.example");
    }
}

//! TLS for the server backends, built when a backend's Cargo feature turns
//! on `tls`: the certificate files the user names, read with the path that
//! is wrong in every complaint, and a TLS failure recognised in an error
//! chain; with `https` (the backends that speak HTTP), the HTTP client's
//! common settings too. Each backend words its own hint (which flags and
//! variables to set); this module only finds the facts.

use std::error::Error;
use std::path::Path;
#[cfg(feature = "https")]
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
#[cfg(feature = "https")]
use base64::Engine;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A client builder with what every backend wants: rustls, no delay on
/// small writes, idle connections kept for a minute, our user agent, and no
/// proxy from the environment (one would surprise an operator; an engine is
/// almost always near). Without TLS (`verifies_tls` false) the system's CA
/// store is not loaded: that would cost each run milliseconds before its
/// first request.
#[cfg(feature = "https")]
pub fn client_builder(connect_timeout: Duration, verifies_tls: bool) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("lockrun/", env!("CARGO_PKG_VERSION")))
        .no_proxy();
    if verifies_tls {
        builder
    } else {
        builder.tls_built_in_root_certs(false)
    }
}

/// The CA certificates of one PEM file; a bundle may hold several.
#[cfg(feature = "https")]
pub fn read_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>> {
    let pem = crate::host::read_small(path, crate::host::SMALL_FILE_MAX)
        .with_context(|| format!("cannot read CA certificate `{}`", path.display()))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        anyhow!(
            "CA certificate `{}` is not valid PEM ({})",
            path.display(),
            innermost(&e)
        )
    })?;
    if certificates.is_empty() {
        bail!(
            "CA certificate `{}` holds no PEM certificate",
            path.display()
        );
    }
    Ok(certificates)
}

/// The client certificate chain and key of two PEM files, checked, with
/// the file that is wrong in each complaint. We take only the
/// certificates from one file and the key from the other, so a bundle
/// holding both can be given as either.
pub fn read_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (cert_pem, key_pem) = read_identity_files(cert, key)?;
    identity_from_pem(&cert_pem, &key_pem, cert, key)
}

/// The two files of a client certificate, read once each (see
/// [`crate::host::read_small`]).
pub fn read_identity_files(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let cert_pem = crate::host::read_small(cert, crate::host::SMALL_FILE_MAX)
        .with_context(|| format!("cannot read client certificate `{}`", cert.display()))?;
    let key_pem = crate::host::read_small(key, crate::host::SMALL_FILE_MAX)
        .with_context(|| format!("cannot read client key `{}`", key.display()))?;
    Ok((cert_pem, key_pem))
}

/// [`read_identity`] of files already read, named `cert` and `key` in
/// every complaint.
pub fn identity_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certificates = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow!(
                "the client certificate `{}` is not valid PEM ({e})",
                cert.display()
            )
        })?;
    if certificates.is_empty() {
        bail!(
            "the client certificate `{}` holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            cert.display()
        );
    }
    // PKCS#8 encrypts as its own label; OpenSSL's older PKCS#1 and SEC1
    // encryption keeps the label and adds a `Proc-Type` header. The PEM
    // parser knows neither, so we look for them first.
    let key_text = String::from_utf8_lossy(key_pem);
    if key_text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || key_text.contains("Proc-Type: 4,ENCRYPTED")
    {
        bail!(
            "the client key `{}` is encrypted, and lockrun cannot ask for its passphrase; decrypt it (openssl pkey -in KEY -out PLAIN) and give the plain key",
            key.display()
        );
    }
    let keys = PrivateKeyDer::pem_slice_iter(key_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("the client key `{}` is not valid PEM ({e})", key.display()))?;
    let private_key = match &keys[..] {
        [one] => one.clone_key(),
        [] => bail!(
            "the client key `{}` holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)",
            key.display()
        ),
        _ => bail!(
            "the client key `{}` holds {} private keys; give a file with only the key of `{}`",
            key.display(),
            keys.len(),
            cert.display()
        ),
    };
    Ok((certificates, private_key))
}

/// The certificates of one PEM file, for a rustls root store.
pub fn read_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = crate::host::read_small(path, crate::host::SMALL_FILE_MAX)
        .with_context(|| format!("cannot read CA certificate `{}`", path.display()))?;
    roots_from_pem(&pem, path)
}

/// [`read_roots`] of a file already read, named `path` in every
/// complaint; each certificate must be one a root store takes.
pub fn roots_from_pem(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("CA certificate `{}` is not valid PEM ({e})", path.display()))?;
    if certificates.is_empty() {
        bail!(
            "CA certificate `{}` holds no PEM certificate",
            path.display()
        );
    }
    let mut store = rustls::RootCertStore::empty();
    for (n, certificate) in certificates.iter().enumerate() {
        store.add(certificate.clone()).map_err(|e| {
            anyhow!(
                "CA certificate `{}`: certificate {} of the file is not one TLS can trust ({e})",
                path.display(),
                n + 1
            )
        })?;
    }
    let mut store = rustls::RootCertStore::empty();
    for (n, certificate) in certificates.iter().enumerate() {
        store.add(certificate.clone()).map_err(|e| {
            anyhow!(
                "CA certificate `{}`: certificate {} of the file is not one TLS can trust ({e})",
                path.display(),
                n + 1
            )
        })?;
    }
    Ok(certificates)
}

/// The client certificate and its key as reqwest wants them: one PEM
/// buffer. We say which file is wrong before reqwest can only say
/// "builder error".
#[cfg(feature = "https")]
pub fn identity(cert: &Path, key: &Path) -> Result<reqwest::Identity> {
    let (certificates, private_key) = read_identity(cert, key)?;
    let private_key = &private_key;
    // reqwest takes the identity as one PEM buffer only.
    let label = match private_key {
        PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
        PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
        _ => "PRIVATE KEY",
    };
    let mut pem: String = certificates
        .iter()
        .map(|c| pem_block("CERTIFICATE", c))
        .collect();
    pem.push_str(&pem_block(label, private_key.secret_der()));
    let identity = reqwest::Identity::from_pem(pem.as_bytes()).map_err(|e| {
        anyhow!(
            "the client certificate `{}` or key `{}` is not valid PEM ({})",
            cert.display(),
            key.display(),
            innermost(&e)
        )
    })?;
    // reqwest parses the key, and rustls checks that it belongs to the
    // certificate, only when a client is built: build a throwaway one (it
    // never connects, so it needs no roots) to blame the right files.
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .identity(identity.clone())
        .build()
        .map_err(|e| {
            let cause = innermost(&e);
            if cause.contains("KeyMismatch") {
                anyhow!(
                    "the client key `{}` does not belong to the client certificate `{}`; give the key the certificate was issued for",
                    key.display(),
                    cert.display()
                )
            } else {
                anyhow!(
                    "cannot use the client key `{}` with the certificate `{}` ({cause})",
                    key.display(),
                    cert.display()
                )
            }
        })?;
    Ok(identity)
}

/// One PEM block: `der` in base64, 64 columns, between the `label` lines.
#[cfg(feature = "https")]
fn pem_block(label: &str, der: &[u8]) -> String {
    let base64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut block = format!("-----BEGIN {label}-----\n");
    for line in base64.as_bytes().chunks(64) {
        block.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        block.push('\n');
    }
    block.push_str(&format!("-----END {label}-----\n"));
    block
}

/// The innermost cause of `error`: reqwest's own text is often only
/// "builder error" or "error sending request".
pub fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut source = error;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}

/// Every error in `error`'s chain, outermost first. An `io::Error` that
/// wraps another (as hyper wraps rustls's) skips it in `source()`, so we
/// step into it by hand.
pub fn chain<'a>(error: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut links = Vec::new();
    let mut next = Some(error);
    while let Some(link) = next {
        links.push(link);
        if let Some(inner) = link
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            let inner: &(dyn Error + 'static) = inner;
            links.extend(chain(inner));
        }
        next = link.source();
    }
    links
}

/// The rustls error behind a failed request, if TLS is what failed: a
/// certificate refused by either side, an alert, or TLS spoken to a port
/// that answers in something else.
pub fn rustls_error(error: &(dyn Error + 'static)) -> Option<rustls::Error> {
    chain(error)
        .into_iter()
        .find_map(|link| link.downcast_ref::<rustls::Error>())
        .cloned()
}

/// Whether the server hung up in the middle of the TLS handshake, as
/// etcd's plain port does with a ClientHello (it serves HTTP and gRPC on
/// one port and drops what is neither). tokio-rustls says so only with an
/// `UnexpectedEof` io error of its own wording, no rustls error, so the
/// text is all there is to go on.
pub fn handshake_cut_short(error: &(dyn Error + 'static)) -> bool {
    chain(error).into_iter().any(|link| {
        link.downcast_ref::<std::io::Error>().is_some_and(|io| {
            io.kind() == std::io::ErrorKind::UnexpectedEof && io.to_string() == "tls handshake eof"
        })
    })
}

/// Whether the peer reset the connection. While connecting over TLS, that
/// too is the handshake cut short: a server that closes with our
/// ClientHello still unread resets rather than ends the connection, so
/// etcd's plain port answers one way or the other, by timing.
pub fn reset_by_peer(error: &(dyn Error + 'static)) -> bool {
    chain(error).into_iter().any(|link| {
        link.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionReset)
    })
}

#[cfg(all(test, feature = "https"))]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_round_trip_through_the_parser() {
        let der: Vec<u8> = (0..=200).collect();
        let block = pem_block("CERTIFICATE", &der);
        assert!(block.lines().all(|line| line.len() <= 64));
        let parsed = CertificateDer::from_pem_slice(block.as_bytes()).unwrap();
        assert_eq!(parsed.as_ref(), der.as_slice());
    }

    #[test]
    fn a_rustls_error_is_found_inside_an_io_error() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        let outer = anyhow::Error::new(io).context("error sending request");
        let outer: &(dyn Error + 'static) = outer.as_ref();
        assert_eq!(rustls_error(outer), Some(tls));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(rustls_error(&plain), None);
        assert!(!handshake_cut_short(&plain));
    }

    #[test]
    fn a_handshake_cut_short_is_told_from_other_eofs() {
        let cut = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        let outer = anyhow::Error::new(cut).context("client error (Connect)");
        assert!(handshake_cut_short(outer.as_ref()));
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert!(!handshake_cut_short(&eof));
        assert!(!reset_by_peer(&eof));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let outer = anyhow::Error::new(reset).context("client error (Connect)");
        assert!(reset_by_peer(outer.as_ref()));
    }
}

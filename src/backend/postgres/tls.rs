//! TLS to PostgreSQL with rustls, with libpq's `sslmode`s: a small
//! `MakeTlsConnect` of ours rather than a crate, because libpq's modes
//! need two verifiers no crate offers (`require`: encrypted, the
//! certificate unchecked; `verify-ca`: the chain checked, the name not),
//! and the rest is thirty lines over tokio-rustls, which reqwest already
//! builds.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use super::config::{Roots, SslMode, TlsSettings};
use super::socket::Stream;

/// Makes a TLS connector per host; `None` when TLS is off.
#[derive(Clone)]
pub struct MakeRustls {
    config: Option<Arc<ClientConfig>>,
}

impl MakeRustls {
    /// The connector for `settings`, its files read and checked now, so
    /// that a wrong file is a usage error before any connection.
    pub fn new(settings: &TlsSettings) -> Result<MakeRustls, String> {
        if settings.mode == SslMode::Disable {
            return Ok(MakeRustls { config: None });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match &settings.roots {
            Roots::None => Arc::new(Unchecked(provider.clone())),
            roots => {
                let mut store = RootCertStore::empty();
                let certificates = match roots {
                    Roots::File(path) => {
                        crate::backend::tls::read_roots(path).map_err(|e| format!("{e:#}"))?
                    }
                    _ => {
                        let found = rustls_native_certs::load_native_certs();
                        if found.certs.is_empty() {
                            return Err("sslrootcert=system, but the system's CA store holds no certificate; install ca-certificates or give a file".into());
                        }
                        found.certs
                    }
                };
                let (_, ignored) = store.add_parsable_certificates(certificates);
                if store.is_empty() {
                    return Err(format!(
                        "the root certificates ({}) hold no CA rustls can use ({ignored} refused)",
                        describe(roots)
                    ));
                }
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                        .build()
                        .map_err(|e| format!("cannot use the root certificates ({e})"))?;
                Arc::new(Checked {
                    inner: webpki,
                    names: settings.mode == SslMode::VerifyFull,
                })
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS ({e})"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &settings.identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, private_key) =
                    crate::backend::tls::read_identity(cert, key).map_err(|e| format!("{e:#}"))?;
                builder
                    .with_client_auth_cert(chain, private_key)
                    .map_err(|e| {
                        format!(
                            "cannot use the client key `{}` with the certificate `{}` ({e}); give the key the certificate was issued for",
                            key.display(),
                            cert.display()
                        )
                    })?
            }
        };
        Ok(MakeRustls {
            config: Some(Arc::new(config)),
        })
    }
}

fn describe(roots: &Roots) -> String {
    match roots {
        Roots::File(path) => format!("`{}`", path.display()),
        Roots::System => "the system's".into(),
        Roots::None => "none".into(),
    }
}

impl MakeTlsConnect<Stream> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // A unix socket has no name; the server never offers TLS there.
        let name = ServerName::try_from(domain.to_string()).ok();
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

pub struct RustlsConnect {
    config: Option<Arc<ClientConfig>>,
    name: Option<ServerName<'static>>,
}

impl TlsConnect<Stream> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Stream) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS is off (sslmode=disable)"))?;
            let name = self
                .name
                .ok_or_else(|| io::Error::other("no host name to check the certificate by"))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// A TLS connection to the server.
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Stream>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl tokio_postgres::tls::TlsStream for RustlsStream {
    /// No channel binding: SCRAM still proves the password, and a server
    /// that demands binding says so.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// `prefer` and `require` without roots: encrypted, the certificate taken
/// as it comes (libpq's meaning), the handshake's signatures still checked.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca` (`names` false) and `verify-full`: the chain checked by
/// webpki; for `verify-ca` a name mismatch is forgiven, which webpki
/// reports only once the chain is good.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    names: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

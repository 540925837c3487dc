//! A Consul agent's HTTP API for a feature that talks to an agent whatever
//! the backend (`--register-service`): reached from the consul CLI's own
//! variables, read by the same code as the backend's (`CONSUL_HTTP_SSL`,
//! `CONSUL_CACERT`, `CONSUL_CAPATH`, `CONSUL_CLIENT_CERT`,
//! `CONSUL_CLIENT_KEY`, `CONSUL_TLS_SERVER_NAME`, `CONSUL_HTTP_SSL_VERIFY`,
//! `CONSUL_HTTP_TOKEN_FILE`, `CONSUL_HTTP_TOKEN`), so that an agent on
//! https with a private CA is reached as `consul services register`
//! reaches it, and no proxy from the environment is used.

use reqwest::header::HeaderValue;
use reqwest::{Method, Url};

use super::args::ConsulArgs;
use super::connect::{effective_base, http_client};
use crate::backend::Env;
use crate::error::Failure;

/// One agent, its client and its token.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The base URL requests go to (with a TLS server name, its host).
    base: Url,
    /// The address as the user gave it, for messages.
    shown: String,
    client: reqwest::Client,
    token: Option<HeaderValue>,
}

impl Agent {
    /// The agent at `addr` (`host:port` or `http(s)://host:port`), with the
    /// TLS settings and token of the consul CLI's variables. Files are read
    /// and checked here, before any request.
    pub fn from_env(addr: &str, env: &dyn Env) -> Result<Agent, Failure> {
        let path = |name: &str| env.var(name).map(std::path::PathBuf::from);
        // Named as this feature takes them: the backend's own message names
        // its flags, which another backend does not have.
        if env.var("CONSUL_CLIENT_CERT").is_some() != env.var("CONSUL_CLIENT_KEY").is_some() {
            return Err(Failure::Config(
                "CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY go together; set both, or neither"
                    .into(),
            ));
        }
        let args = ConsulArgs {
            http_addr: Some(addr.to_string()),
            token_file: None,
            ca_file: path("CONSUL_CACERT"),
            ca_path: path("CONSUL_CAPATH"),
            client_cert: path("CONSUL_CLIENT_CERT"),
            client_key: path("CONSUL_CLIENT_KEY"),
            tls_server_name: env.var("CONSUL_TLS_SERVER_NAME"),
            datacenter: None,
            namespace: None,
        };
        let config = super::config::connection(&args, env)?;
        if !config.more.is_empty() {
            return Err(Failure::Usage(format!(
                "the Consul agent `{addr}` is a list; --register-service registers with one agent, give one HOST:PORT"
            )));
        }
        let client = http_client(&config).map_err(|e| Failure::Config(format!("{e:#}")))?;
        let base = effective_base(&config).map_err(|e| Failure::Config(format!("{e:#}")))?;
        let token = match &config.token {
            Some(token) => {
                let mut value = HeaderValue::from_str(token.secret()).map_err(|_| {
                    Failure::Config(
                        "the Consul token cannot travel in an HTTP header; write it on one line"
                            .into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Agent {
            shown: super::client::shown(&config.base),
            base,
            client,
            token,
        })
    }

    /// The agent as the user named it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// A request to `/v1/` and `segments`, each segment percent-encoded as
    /// one, with the token.
    pub fn request(&self, method: Method, segments: &[&str]) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        let request = self.client.request(method, url);
        match &self.token {
            Some(token) => request.header("X-Consul-Token", token.clone()),
            None => request,
        }
    }

    /// Why a request did not get an answer, in the operator's terms (a TLS
    /// problem names the variable to set).
    pub fn failure(&self, error: &reqwest::Error) -> String {
        match super::client::tls_problem(error, &self.base, false) {
            Some(problem) => format!("cannot be reached over TLS: {problem}"),
            None => format!("cannot be reached ({})", super::client::root_cause(error)),
        }
    }
}

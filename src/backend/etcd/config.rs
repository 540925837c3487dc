//! Where etcd is and how to talk to it, from flags and the names etcdctl
//! reads (`ETCDCTL_ENDPOINTS`, `ETCDCTL_CACERT`, `ETCDCTL_CERT`,
//! `ETCDCTL_KEY`, `ETCDCTL_USER`, and `ETCDCTL_PASSWORD` for a user given
//! without one). Everything is checked here, before the
//! first request.

use std::fmt;
use std::path::PathBuf;

use url::Url;

/// etcdctl's default endpoint.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:2379";

/// A password. It prints as `***` everywhere, so it cannot leak into logs
/// or error messages by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(secret: String) -> Password {
        Password(secret)
    }

    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// An etcd user for `/v3/auth/authenticate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub password: Password,
}

/// The connection settings as the command line gives them; `None` means
/// the flag was not given, so the environment decides.
#[derive(Debug, Clone, Default)]
pub struct EtcdFlags {
    /// `--endpoints`: comma-separated, as etcdctl takes them.
    pub endpoints: Option<String>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// `name:password`, as etcdctl's `--user`; lockrun has no such flag (a
    /// password on a command line shows in `ps`), so only tests set it.
    pub user: Option<String>,
}

/// Where etcd is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Tried in order; the next when one cannot be reached.
    pub endpoints: Vec<Url>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user: Option<User>,
}

impl EtcdConfig {
    /// Plain HTTP endpoints, no TLS, no auth.
    pub fn plain(endpoints: &[&str]) -> Result<EtcdConfig, String> {
        EtcdConfig::resolve(
            &EtcdFlags {
                endpoints: Some(endpoints.join(",")),
                ..EtcdFlags::default()
            },
            |_| None,
        )
    }

    /// Merges `flags` over the environment `env` looks up (etcdctl's names),
    /// checking everything; the error is one line saying what to fix.
    pub fn resolve(
        flags: &EtcdFlags,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<EtcdConfig, String> {
        let pick = |flag: &Option<PathBuf>, name: &str| -> Result<Option<PathBuf>, String> {
            match flag {
                Some(path) => Ok(Some(path.clone())),
                None => match env(name) {
                    Some(v) if v.is_empty() => {
                        Err(format!("{name} is set but empty; unset it or give a file"))
                    }
                    Some(v) => Ok(Some(PathBuf::from(v))),
                    None => Ok(None),
                },
            }
        };
        let cacert = pick(&flags.cacert, "ETCDCTL_CACERT")?;
        let cert = pick(&flags.cert, "ETCDCTL_CERT")?;
        let key = pick(&flags.key, "ETCDCTL_KEY")?;
        match (&cert, &key) {
            (Some(_), None) | (None, Some(_)) => {
                return Err("a client certificate needs its key: give both --cert and --cert-key (or ETCDCTL_CERT and ETCDCTL_KEY)".into())
            }
            _ => {}
        }
        let tls = cacert.is_some() || cert.is_some();
        let (endpoints, source) = match (&flags.endpoints, env("ETCDCTL_ENDPOINTS")) {
            (Some(e), _) => (e.clone(), "--endpoints"),
            (None, Some(e)) => (e, "ETCDCTL_ENDPOINTS"),
            (None, None) => (DEFAULT_ENDPOINT.to_owned(), "the default endpoint"),
        };
        let endpoints = parse_endpoints(&endpoints, tls, source)?;
        let user = match flags.user.clone().or_else(|| env("ETCDCTL_USER")) {
            None => None,
            // etcdctl 3.5 takes the password apart, as ETCDCTL_PASSWORD.
            Some(user) if !user.contains(':') && env("ETCDCTL_PASSWORD").is_some() => {
                let password = env("ETCDCTL_PASSWORD").unwrap_or_default();
                Some(parse_user(&format!("{user}:{password}"))?)
            }
            Some(user) => Some(parse_user(&user)?),
        };
        Ok(EtcdConfig {
            endpoints,
            cacert,
            cert,
            key,
            user,
        })
    }
}

/// `host:port` or `scheme://host:port`, comma-separated. Without a scheme
/// we use https when TLS files are given, as etcdctl does.
fn parse_endpoints(list: &str, tls: bool, source: &str) -> Result<Vec<Url>, String> {
    let mut out = Vec::new();
    for endpoint in list.split(',').map(str::trim) {
        if endpoint.is_empty() {
            return Err(format!(
                "{source} `{list}` holds an empty endpoint; give host:port[,host:port...]"
            ));
        }
        let with_scheme = if endpoint.contains("://") {
            endpoint.to_owned()
        } else if tls {
            format!("https://{endpoint}")
        } else {
            format!("http://{endpoint}")
        };
        let url = Url::parse(&with_scheme).map_err(|e| {
            format!("etcd endpoint `{endpoint}` in {source} is not valid ({e}); use host:port")
        })?;
        match url.scheme() {
            "http" | "https" => {}
            "unix" | "unixs" => {
                return Err(format!(
                    "etcd endpoint `{endpoint}`: unix sockets are not supported; use the client URL (host:port)"
                ))
            }
            other => {
                return Err(format!(
                    "etcd endpoint `{endpoint}` has unknown scheme `{other}`; use http:// or https://"
                ))
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Never echoed: the endpoint holds a password.
            return Err(format!(
                "an etcd endpoint in {source} carries a user name or password; give only host:port, and the user as ETCDCTL_USER=name:password"
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!(
                "etcd endpoint `{endpoint}` has no host; use host:port"
            ));
        }
        if !has_port(&with_scheme) {
            // etcdctl dials such an endpoint on no port at all and times
            // out; we would have used the scheme's, 80 or 443.
            return Err(format!(
                "etcd endpoint `{endpoint}` in {source} has no port; etcd's client port is 2379 unless it was set otherwise: use `{endpoint}:2379`"
            ));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "etcd endpoint `{endpoint}` must be only scheme://host:port (no path or query)"
            ));
        }
        out.push(url);
    }
    Ok(out)
}

/// Whether `url`'s authority ends in `:PORT` (`[::1]` alone has none).
fn has_port(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_user(user: &str) -> Result<User, String> {
    match user.split_once(':') {
        Some((name, password)) if !name.is_empty() => Ok(User {
            name: name.to_owned(),
            password: Password::new(password.to_owned()),
        }),
        Some(_) => Err("the etcd user name is empty; set ETCDCTL_USER to name:password".into()),
        None => Err(format!(
            "the etcd user `{user}` has no password, and lockrun cannot ask for one; set ETCDCTL_USER to name:password, or set ETCDCTL_PASSWORD"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn flags_override_the_environment() {
        let flags = EtcdFlags {
            endpoints: Some("a:1,http://b:2".into()),
            ..EtcdFlags::default()
        };
        let c = EtcdConfig::resolve(&flags, env(&[("ETCDCTL_ENDPOINTS", "c:3")])).unwrap();
        let urls: Vec<_> = c.endpoints.iter().map(Url::as_str).collect();
        assert_eq!(urls, ["http://a:1/", "http://b:2/"]);
        let c = EtcdConfig::resolve(&EtcdFlags::default(), env(&[("ETCDCTL_ENDPOINTS", "c:3")]))
            .unwrap();
        assert_eq!(c.endpoints[0].as_str(), "http://c:3/");
        let c = EtcdConfig::resolve(&EtcdFlags::default(), env(&[])).unwrap();
        assert_eq!(c.endpoints[0].as_str(), "http://127.0.0.1:2379/");
    }

    #[test]
    fn tls_files_make_bare_endpoints_https() {
        let c = EtcdConfig::resolve(
            &EtcdFlags::default(),
            env(&[
                ("ETCDCTL_ENDPOINTS", "e:2379"),
                ("ETCDCTL_CACERT", "/ca.pem"),
            ]),
        )
        .unwrap();
        assert_eq!(c.endpoints[0].as_str(), "https://e:2379/");
    }

    #[test]
    fn bad_settings_are_one_line_each() {
        let bad = |flags: EtcdFlags, pairs: &[(&str, &str)]| {
            let e = EtcdConfig::resolve(&flags, env(pairs)).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        assert!(
            bad(EtcdFlags::default(), &[("ETCDCTL_ENDPOINTS", "a:1,,b:2")])
                .contains("empty endpoint")
        );
        assert!(
            bad(EtcdFlags::default(), &[("ETCDCTL_ENDPOINTS", "ftp://a:1")]).contains("scheme")
        );
        let e = bad(
            EtcdFlags::default(),
            &[("ETCDCTL_ENDPOINTS", "a:1,http://ops:s3cret@b:2")],
        );
        assert!(e.contains("ETCDCTL_USER"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        assert!(bad(
            EtcdFlags::default(),
            &[("ETCDCTL_ENDPOINTS", "http://a:1/v3")]
        )
        .contains("no path"));
        for no_port in ["127.0.0.1", "http://e", "https://[::1]", "e:"] {
            let e = bad(EtcdFlags::default(), &[("ETCDCTL_ENDPOINTS", no_port)]);
            assert!(e.contains("has no port"), "{e}");
        }
        assert!(bad(EtcdFlags::default(), &[("ETCDCTL_CERT", "/c.pem")]).contains("--cert-key"));
        assert!(bad(EtcdFlags::default(), &[("ETCDCTL_USER", "root")]).contains("name:password"));
        let e = bad(
            EtcdFlags {
                user: Some(":s3cret".into()),
                ..EtcdFlags::default()
            },
            &[],
        );
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn the_password_never_prints() {
        let c = EtcdConfig::resolve(
            &EtcdFlags::default(),
            env(&[("ETCDCTL_USER", "root:s3cret")]),
        )
        .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(c.user.unwrap().password.secret(), "s3cret");
        let c = EtcdConfig::resolve(
            &EtcdFlags::default(),
            env(&[("ETCDCTL_USER", "root"), ("ETCDCTL_PASSWORD", "a:b")]),
        )
        .unwrap();
        let user = c.user.unwrap();
        assert_eq!(
            (user.name.as_str(), user.password.secret()),
            ("root", "a:b")
        );
    }
}

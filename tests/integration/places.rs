//! Where a CLI test's locks live: Consul, etcd, PostgreSQL, ZooKeeper or a local lock directory,
//! and the few things every CLI suite does there (run `lockrun`, check a
//! status with the engine's log, keep a holder running). The
//! backend-independent suite (`backends`) runs one scenario on each; the
//! per-backend suites (`local_cli`, `etcd_cli`) use the one they test.

use std::path::Path;
use std::process::{Command, Output};

use crate::engines::consul::support::TestConsul;
use crate::engines::etcd::support as etcd_support;
use crate::engines::postgres::support as pg_support;
use crate::engines::zookeeper::support as zk_support;
use crate::support::{self, script_with, wait_for_file, Contender, Running, CONTENDER_BODY};

/// The engines every shared scenario runs on, one line each: the test's
/// name and the [`Place`] it runs in, made from the scenario's name. A new
/// backend gets every scenario of [`on_every_engine!`] by its line here
/// (and its `Place` constructor).
macro_rules! engines {
    ($then:ident ! $args:tt) => {
        $crate::places::$then! { $args
            on_local => |_| Place::local(),
            on_consul => Place::consul,
            on_etcd => Place::etcd,
            on_postgres => Place::postgres,
            on_zookeeper => Place::zookeeper,
        }
    };
}
pub(crate) use engines;

/// One scenario as a test per engine: `SCENARIO::on_ENGINE` calls
/// `SCENARIO(&place)`. With modes (`SCENARIO, NAME = VALUE, ...`), one
/// module per mode: `SCENARIO::NAME::on_ENGINE` calls
/// `SCENARIO(&place, VALUE)`. Test names end in the engine's, so
/// `cargo test --test integration ENGINE` runs that engine's part.
macro_rules! on_every_engine {
    ($scenario:ident) => {
        mod $scenario {
            use super::*;
            $crate::places::engines!(engine_tests!($scenario));
        }
    };
    ($scenario:ident, $($mode:ident = $value:expr),+ $(,)?) => {
        mod $scenario {
            use super::*;
            $(
                mod $mode {
                    use super::*;
                    $crate::places::engines!(engine_tests!($scenario, $value));
                }
            )+
        }
    };
}
pub(crate) use on_every_engine;

/// The tests of [`on_every_engine!`], given [`engines!`]' list.
macro_rules! engine_tests {
    (($scenario:ident) $($test:ident => $place:expr),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                let place: Place = ($place)(stringify!($scenario));
                $scenario(&place);
            }
        )+
    };
    (($scenario:ident, $mode:expr) $($test:ident => $place:expr),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                let place: Place = ($place)(stringify!($scenario));
                $scenario(&place, $mode);
            }
        )+
    };
}
pub(crate) use engine_tests;

/// Where the locks live for one test.
pub enum Place {
    Consul(TestConsul, String),
    Etcd { prefix: String, endpoint: String },
    Local(tempfile::TempDir),
    Postgres { prefix: String, url: String },
    Zookeeper { prefix: String, hosts: String },
}

impl Place {
    /// Fails unless nothing of this test's is on its engine: what a
    /// refused input must leave.
    pub fn assert_nothing_written(&self, what: &str) {
        match self {
            Place::Consul(consul, prefix) => {
                assert!(
                    consul.api().kv_list(prefix).is_empty(),
                    "{what}: something on Consul"
                );
                if let Some(emulator) = consul.emulator() {
                    assert_eq!(emulator.write_count(), 0, "{what}: a write reached Consul");
                }
            }
            Place::Etcd { prefix, .. } => {
                let left = crate::engines::etcd::support::etcdctl_ok(&[
                    "get",
                    "--prefix",
                    "--keys-only",
                    prefix,
                ]);
                assert!(left.trim().is_empty(), "{what}: left on etcd: {left}");
            }
            // Nothing can be left: a lock lives only while the connection
            // that took it does, and lockrun has exited.
            Place::Postgres { .. } => {}
            Place::Zookeeper { prefix, hosts } => {
                let left = crate::engines::zookeeper::support::tree(hosts, prefix);
                assert!(left.is_empty(), "{what}: left on ZooKeeper: {left:?}");
            }
            Place::Local(dir) => {
                let left = crate::support::files_under(dir.path());
                assert!(
                    left.is_empty(),
                    "{what}: left in the lock directory: {left:?}"
                );
            }
        }
    }

    pub fn consul(test: &str) -> Place {
        let consul = TestConsul::start_fast();
        let prefix = consul.prefix(test);
        Place::Consul(consul, prefix)
    }

    pub fn local() -> Place {
        Place::Local(support::scratch())
    }

    /// The shared etcd, under a prefix of this test's own.
    pub fn etcd(test: &str) -> Place {
        Place::etcd_at(test, &etcd_support::etcd().endpoint)
    }

    /// As [`Place::etcd`], reached through `endpoint` (a relay, say, or a
    /// closed port).
    pub fn etcd_at(test: &str, endpoint: &str) -> Place {
        Place::Etcd {
            prefix: etcd_support::unique(test),
            endpoint: endpoint.to_owned(),
        }
    }

    /// The shared PostgreSQL, under keys of this test's own.
    pub fn postgres(test: &str) -> Place {
        Place::Postgres {
            prefix: pg_support::unique(test),
            url: pg_support::postgres().url(),
        }
    }

    /// The shared ZooKeeper, under a prefix of this test's own.
    pub fn zookeeper(test: &str) -> Place {
        Place::zookeeper_at(test, &zk_support::zk().addr)
    }

    /// As [`Place::zookeeper`], at the connect string `hosts` (an
    /// ensemble's, say).
    pub fn zookeeper_at(test: &str, hosts: &str) -> Place {
        Place::Zookeeper {
            prefix: zk_support::unique(test),
            hosts: hosts.to_owned(),
        }
    }

    /// The lock directory of a local place.
    pub fn lock_dir(&self) -> &Path {
        match self {
            Place::Local(dir) => dir.path(),
            _ => panic!("only a local place has a lock directory"),
        }
    }

    /// Whether an operator's release leaves the child its grace period.
    /// On etcd a release revokes the holder's lease, after which a rival
    /// may hold the lock at once: the child is killed outright.
    pub fn release_keeps_the_grace(&self) -> bool {
        !matches!(
            self,
            Place::Etcd { .. } | Place::Postgres { .. } | Place::Zookeeper { .. }
        )
    }

    /// A key unique to this test.
    pub fn key(&self, name: &str) -> String {
        match self {
            Place::Consul(_, prefix)
            | Place::Etcd { prefix, .. }
            | Place::Postgres { prefix, .. }
            | Place::Zookeeper { prefix, .. } => {
                format!("{prefix}/{name}")
            }
            Place::Local(_) => format!("t/{name}"),
        }
    }

    /// `lockrun ARGS...` pointed at this place, nothing else from the
    /// developer's shell.
    pub fn lockrun(&self, args: &[&str]) -> Command {
        match self {
            Place::Consul(consul, _) => support::lockrun(consul, args),
            Place::Etcd { endpoint, .. } => {
                let mut cmd = support::bare(["--backend", "etcd", "--endpoints", endpoint]);
                cmd.args(args);
                cmd
            }
            Place::Postgres { url, .. } => {
                let mut cmd = support::bare(["--backend", "postgres", "--dsn", url]);
                cmd.args(args);
                cmd
            }
            Place::Zookeeper { hosts, .. } => zk_support::lockrun(hosts, args),
            Place::Local(dir) => {
                let mut cmd = support::bare(["--backend", "local", "--lock-dir"]);
                cmd.arg(dir.path()).args(args);
                cmd
            }
        }
    }

    /// Asserts a finished run's status, showing its output and the
    /// engine's log.
    pub fn status(&self, output: &Output, code: i32, what: &str) {
        support::assert_exit(output, code, what, || match self {
            Place::Consul(consul, _) => format!("\n--- Consul ---\n{}", consul.request_log_dump()),
            Place::Etcd { .. } => format!("\n--- etcd ---\n{}", etcd_support::etcd().log_tail()),
            Place::Postgres { .. } => format!(
                "\n--- PostgreSQL ---\n{}",
                pg_support::postgres().log_tail()
            ),
            Place::Zookeeper { .. } => {
                format!("\n--- ZooKeeper ---\n{}", zk_support::zk().log_tail())
            }
            Place::Local(_) => String::new(),
        });
    }

    /// Takes `key`'s lock from its holder from outside, by the engine's own
    /// act: Consul destroys the holder's session, etcd revokes its lease
    /// (`etcdctl lease revoke`), PostgreSQL terminates the holder's
    /// session (`pg_terminate_backend` through psql, of the server process
    /// `leader --json` names), ZooKeeper's own client deletes the holder's
    /// node. A flock cannot be taken from its holder: on local, `release`
    /// asks the holder to let go.
    pub fn revoke(&self, key: &str) {
        match self {
            Place::Consul(consul, _) => {
                let api = consul.api();
                let session = [format!("{key}/.lock"), key.to_owned()]
                    .iter()
                    .find_map(|k| api.kv_get(k).and_then(|e| e.session))
                    .unwrap_or_else(|| panic!("no session holds `{key}`"));
                api.session_destroy(&session);
            }
            Place::Etcd { endpoint, .. } => {
                let out = etcd_support::etcdctl_at(endpoint)
                    .args(["get", key, "--prefix", "-w", "json"])
                    .output()
                    .expect("etcdctl get");
                let json: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("etcdctl get {key}: {e}: {out:?}"));
                let lease = json["kvs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find_map(|kv| kv["lease"].as_i64().filter(|&l| l != 0))
                    .unwrap_or_else(|| panic!("no lease holds `{key}`: {json}"));
                let out = etcd_support::etcdctl_at(endpoint)
                    .args(["lease", "revoke", &format!("{lease:x}")])
                    .output()
                    .expect("etcdctl lease revoke");
                assert!(out.status.success(), "etcdctl lease revoke: {out:?}");
            }
            Place::Postgres { .. } => {
                let shown = support::run(&mut self.lockrun(&["leader", "--json", key]));
                let json: serde_json::Value = serde_json::from_slice(&shown.stdout)
                    .unwrap_or_else(|e| panic!("leader --json {key}: {e}: {shown:?}"));
                let pid = json["holders"][0]["details"]["backend_pid"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("no server process holds `{key}`: {json}"));
                let ended = pg_support::psql_ok(&format!("select pg_terminate_backend({pid})"));
                assert_eq!(ended.trim(), "t", "pg_terminate_backend({pid})");
            }
            Place::Zookeeper { hosts, .. } => zk_support::with_client(hosts, async |c| {
                let dir = format!("/{key}");
                let children = c
                    .list_children(&dir)
                    .await
                    .unwrap_or_else(|e| panic!("no node holds `{key}`: {e}"));
                assert!(!children.is_empty(), "no node holds `{key}`");
                for child in children {
                    c.delete(&format!("{dir}/{child}"), None)
                        .await
                        .unwrap_or_else(|e| panic!("delete {dir}/{child}: {e}"));
                }
            }),
            Place::Local(_) => {
                let output = support::run(&mut self.lockrun(&["release", key]));
                self.status(&output, 0, "release");
            }
        }
    }

    /// The value the engine keeps at `key`, read with its own client;
    /// `None` where the engine keeps no data beside its locks (local,
    /// PostgreSQL: a fenced `put` has nowhere to write there).
    pub fn read(&self, key: &str) -> Option<Option<String>> {
        match self {
            Place::Consul(consul, _) => Some(
                consul
                    .api()
                    .kv_get(key)
                    .map(|e| String::from_utf8_lossy(&e.value).into_owned()),
            ),
            Place::Etcd { endpoint, .. } => {
                let out = etcd_support::etcdctl_at(endpoint)
                    .args(["get", "--print-value-only", key])
                    .output()
                    .expect("etcdctl get");
                assert!(out.status.success(), "etcdctl get: {out:?}");
                let value = String::from_utf8_lossy(&out.stdout);
                let value = value.trim_end_matches('\n');
                Some((!value.is_empty()).then(|| value.to_string()))
            }
            Place::Zookeeper { hosts, .. } => Some(zk_support::with_client(hosts, async |c| {
                c.get_data(&format!("/{key}"))
                    .await
                    .ok()
                    .map(|(v, _)| String::from_utf8_lossy(&v).into_owned())
            })),
            Place::Local(_) | Place::Postgres { .. } => None,
        }
    }

    /// The key of `name` that lockrun and [`Place::peer_hold`] both take:
    /// on Consul `consul lock P` holds `P/.lock`, which is the key lockrun
    /// shares with it (`lockrun elect P` refuses to run beside it, 125,
    /// naming `P/.lock`); elsewhere the key itself.
    pub fn peer_key(&self, name: &str) -> String {
        match self {
            Place::Consul(..) => format!("{}/.lock", self.key(name)),
            _ => self.key(name),
        }
    }

    /// The engine's own tool holding `key` ([`Place::peer_key`]) as
    /// lockrun's rivals do, its
    /// child [`CONTENDER_BODY`]: flock(1) on the key's file, `consul lock`
    /// (the real binary), `etcdctl lock`, a psql session in
    /// `pg_advisory_lock` on the key's documented id, kazoo's `Lock` (with
    /// the `-lock-` pattern its users pass). `None` where the tool is not
    /// here (`consul lock` without the real binaries).
    pub fn peer_hold(&self, key: &str) -> Option<Contender> {
        let body = |dir: &Path| {
            let file = dir.join("body.sh");
            std::fs::write(&file, CONTENDER_BODY).unwrap();
            file
        };
        let contender = match self {
            Place::Local(lock_dir) => {
                let file = lock_dir.path().join(key);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                Contender::other(|dir| {
                    let mut cmd = Command::new("flock");
                    cmd.arg(&file).arg("sh").arg(body(dir)).arg(dir);
                    cmd
                })
            }
            Place::Consul(consul, _) => {
                crate::engines::consul::real::binaries_dir()?;
                let versions = crate::engines::consul::real::VERSIONS;
                let consul_bin = crate::engines::consul::real::binary(versions[versions.len() - 1]);
                let addr = consul.http_addr();
                Contender::other(|dir| {
                    let mut cmd = Command::new(&consul_bin);
                    cmd.arg("lock")
                        .arg(format!("-http-addr=http://{addr}"))
                        .arg(key.strip_suffix("/.lock").expect("a Place::peer_key"))
                        .arg(format!("sh {} {}", body(dir).display(), dir.display()));
                    cmd
                })
            }
            Place::Etcd { endpoint, .. } => Contender::other(|dir| {
                let mut cmd = etcd_support::etcdctl_at(endpoint);
                cmd.args(["lock", key, "--", "sh"]).arg(body(dir)).arg(dir);
                cmd
            }),
            Place::Postgres { .. } => {
                let id = pg_support::psql_ok(&format!(
                    "select ('x' || substr(md5('{key}'), 1, 16))::bit(64)::bigint"
                ));
                Contender::other(|dir| {
                    let mut cmd = pg_support::psql();
                    cmd.args(["-c", &format!("select pg_advisory_lock({id})")])
                        .arg("-c")
                        .arg(format!("\\! sh {} {}", body(dir).display(), dir.display()));
                    cmd
                })
            }
            Place::Zookeeper { hosts, .. } => {
                crate::engines::zookeeper::cli::kazoo_rival(hosts, &format!("/{key}"), "extra")
            }
        };
        Some(contender)
    }

    /// A holder whose `--shell` child touches `ready` and waits for `go`
    /// (`setup` runs first, traps say).
    pub fn hold(&self, work: &Path, setup: &str, args: &[&str]) -> Running {
        let body = script_with(setup, "while [ ! -e \"$1/go\" ]; do sleep 0.05; done");
        self.spawn_shell(work, &body, args)
    }

    /// A holder whose child writes a timestamp every 10 ms to `beat` until
    /// `go` appears (`setup` runs first); it returns once the first beat is
    /// written. [`last_beat`] reads the last one.
    pub fn heartbeat(&self, work: &Path, setup: &str, args: &[&str]) -> Running {
        let body = script_with(
            setup,
            "while [ ! -e \"$1/go\" ]; do date +%s%N >> \"$1/beat\"; sleep 0.01; done; \
             date +%s%N >> \"$1/beat\"",
        );
        let running = self.spawn_shell(work, &body, args);
        wait_for_a_beat(work);
        running
    }

    /// `lockrun ARGS... --shell -- BODY WORK`, once its child is `ready`.
    fn spawn_shell(&self, work: &Path, body: &str, args: &[&str]) -> Running {
        let mut cmd = self.lockrun(args);
        cmd.args(["--shell", "--", body]).arg(work);
        let running = Running::spawn(&mut cmd);
        wait_for_file(&work.join("ready"));
        running
    }
}

/// Waits for a whole first beat in `work/beat`, not just the file the
/// shell opened for it: a holder stopped in between would leave a test
/// nothing to compare with.
pub fn wait_for_a_beat(work: &Path) {
    let beat = work.join("beat");
    let beating = crate::procs::wait_until(crate::procs::deadline(), || {
        std::fs::read_to_string(&beat).is_ok_and(|t| t.contains('\n'))
    });
    assert!(beating, "no heartbeat in {}", beat.display());
}

/// The last timestamp a [`Place::heartbeat`] child wrote, in ns.
pub fn last_beat(work: &Path) -> u128 {
    std::fs::read_to_string(work.join("beat"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .expect("a heartbeat")
}

/// A run's stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

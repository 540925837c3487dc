//! Every shell example in the README and docs/ runs as written, on the
//! engine it names, and prints what the doc says it prints: no doc can
//! drift from the binary, or be cut by an edit, without a test failing.
//!
//! Each fenced `sh`, `console` or `cron` block is preceded by a directive
//! that says how it is checked, an HTML comment a reader of the rendered
//! page does not see:
//!
//! - `<!-- example: on ENGINE -->` runs the block with bash in a scratch
//!   directory, against a real engine of this suite (`consul`, `etcd`,
//!   `postgres`) or a lock directory of its own (`local`), with the
//!   engine's own variables set as an operator's shell would have them.
//!   Clauses after `;` add to it: `holder KEY VALUE` (a lockrun holds KEY
//!   with that value meanwhile), `inside KEY` (the block is the COMMAND of
//!   a `lockrun elect KEY` with a status endpoint), `for DURATION` (the
//!   block runs until it is stopped: it gets SIGINT, as from Ctrl-C, once
//!   it has printed what `prints` names, else after DURATION), `prints
//!   TEXT` (its stdout has TEXT), `netns` (the block runs in a network
//!   namespace of its own, with an `eth0`, for hooks that change addresses). The commands it names (`./db-primary`, `/opt/bin/backup`, ...)
//!   are scripts that say they ran and exit 0; every `lockrun` in it goes
//!   through a shim that records its status, and none may be a usage error
//!   (2) or a failure (125).
//! - `<!-- example: not run: REASON -->` says, in the doc, why not (it
//!   installs into the system, it is the suite itself, ...).
//!
//! A `console` block's `$ ` lines are run and the lines under them compared
//! with what they print; a line `...` there stands for any lines.
//!
//! `DOC_EXAMPLE=guide.md:147 cargo test doc_examples` runs one example (its
//! file and the line of its fence, as a failure names it).
//!
//! The examples of every `--help` run the same way (`help_examples_run`):
//! each on the engine its line names, or as its directive in [`HELP`] says,
//! since help text cannot carry the docs' comments.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::engines::consul::support::TestConsul;
use crate::engines::etcd::support as etcd_support;
use crate::engines::postgres::support as pg_support;
use crate::support::{self, Running};

/// The documents whose examples are checked.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Consul,
    Etcd,
    Local,
    Postgres,
    Zookeeper,
}

#[derive(Debug)]
enum How {
    Run {
        engine: Engine,
        holder: Option<(String, String)>,
        inside: Option<String>,
        stop_after: Option<Duration>,
        prints: Vec<String>,
        /// Run in a network namespace of its own (`netns`).
        netns: bool,
    },
    NotRun,
}

#[derive(Debug)]
struct Example {
    place: String,
    lang: String,
    body: String,
    how: Result<How, String>,
}

/// Every example block of every document, with its directive read.
fn examples() -> Vec<Example> {
    let mut found = Vec::new();
    for path in documents() {
        let text = fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let Some(lang) = lines[i].strip_prefix("```") else {
                i += 1;
                continue;
            };
            let start = i;
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or_else(|| panic!("{name}:{}: a fence that never closes", i + 1));
            i = end + 1;
            if !matches!(lang, "sh" | "console" | "cron") {
                continue;
            }
            let directive = lines[..start]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix("<!-- example:"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(str::trim);
            found.push(Example {
                place: format!("{name}:{}", start + 1),
                lang: lang.to_string(),
                body: lines[start + 1..end].join("\n"),
                how: match directive {
                    None => Err("no `<!-- example: ... -->` line before it".into()),
                    Some(d) => parse_how(d),
                },
            });
        }
    }
    found
}

fn parse_how(directive: &str) -> Result<How, String> {
    if let Some(reason) = directive.strip_prefix("not run:") {
        return if reason.trim().len() < 10 {
            Err("`not run:` needs its reason".into())
        } else {
            Ok(How::NotRun)
        };
    }
    let mut clauses = directive.split(';').map(str::trim);
    let engine = match clauses.next().and_then(|c| c.strip_prefix("on ")) {
        Some("consul") => Engine::Consul,
        Some("etcd") => Engine::Etcd,
        Some("local") => Engine::Local,
        Some("postgres") => Engine::Postgres,
        Some("zookeeper") => Engine::Zookeeper,
        _ => {
            return Err(format!(
                "`{directive}`: say `on ENGINE` or `not run: REASON`"
            ))
        }
    };
    let (mut holder, mut inside, mut stop_after, mut prints) = (None, None, None, Vec::new());
    let mut netns = false;
    for clause in clauses {
        if let Some(rest) = clause.strip_prefix("holder ") {
            let (key, value) = rest.split_once(' ').ok_or("`holder KEY VALUE`")?;
            holder = Some((key.to_string(), value.to_string()));
        } else if let Some(rest) = clause.strip_prefix("inside ") {
            inside = Some(rest.to_string());
        } else if let Some(rest) = clause.strip_prefix("for ") {
            stop_after = Some(humantime::parse_duration(rest).map_err(|e| e.to_string())?);
        } else if let Some(rest) = clause.strip_prefix("prints ") {
            prints.push(rest.to_string());
        } else if clause == "netns" {
            netns = true;
        } else {
            return Err(format!("`{clause}`: not a clause of the directive"));
        }
    }
    Ok(How::Run {
        engine,
        holder,
        inside,
        stop_after,
        prints,
        netns,
    })
}

#[test]
fn every_example_says_how_it_is_checked() {
    let examples = examples();
    assert!(examples.len() > 15, "{examples:#?}");
    let bad: Vec<String> = examples
        .iter()
        .filter_map(|e| {
            e.how
                .as_ref()
                .err()
                .map(|why| format!("{}: {why}", e.place))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "examples without a valid directive:\n{}",
        bad.join("\n")
    );
}

/// Where the block runs: a scratch directory with the commands docs name,
/// and `lockrun` as a shim that logs each run's status.
struct Sandbox {
    dir: tempfile::TempDir,
}

/// The commands the docs run under lockrun, each a script that says it ran.
const COMMANDS: &[&str] = &[
    "db-primary",
    "reindex.sh",
    "backup.sh",
    "apply-migration",
    "migrate.sh",
    "notify.sh",
    "job",
];

/// The directories of a user's home that `--help` examples write into.
const HOME_DIRS: &[&str] = &[
    ".local/share/bash-completion/completions",
    ".zfunc",
    ".config/fish/completions",
];

/// Absolute paths in the docs, and the scratch command each stands for.
const PATHS: &[(&str, &str)] = &[
    ("/usr/local/bin/db-primary", "./db-primary"),
    ("/opt/bin/reindex", "./reindex.sh"),
    ("/opt/bin/backup", "./backup.sh"),
    ("cargo run --", "lockrun"),
];

impl Sandbox {
    fn new() -> Sandbox {
        let dir = support::scratch();
        for sub in ["bin", "work", "home", "locks", "run"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        // Where `--help` examples write completions and pages, as a user's
        // home has them.
        for sub in HOME_DIRS {
            fs::create_dir_all(dir.path().join("home").join(sub)).unwrap();
        }
        let exe = |path: PathBuf, text: String| {
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe(
            dir.path().join("bin/lockrun"),
            format!(
                "#!/bin/sh\n\"{}\" \"$@\"\nstatus=$?\nprintf '%s\\t%s\\n' \"$status\" \"$*\" >> \"{}\"\nexit $status\n",
                support::bin().display(),
                dir.path().join("statuses").display()
            ),
        );
        for name in COMMANDS {
            exe(
                dir.path().join("work").join(name),
                format!("#!/bin/sh\necho \"{name} ran\"\n"),
            );
        }
        // One the help runs from PATH, as a program installed would be.
        exe(
            dir.path().join("bin/apply-write"),
            "#!/bin/sh\necho \"apply-write ran\"\n".to_string(),
        );
        fs::write(dir.path().join("work/config.json"), "{\"replicas\": 2}\n").unwrap();
        Sandbox { dir }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// bash running `script` here, with nothing of the developer's
    /// settings and the engine's own variables.
    fn bash(&self, script: &str, engine: &Engines) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        cmd.env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    self.path("bin").display()
                ),
            )
            .env("HOME", self.path("home"))
            .env("LANG", "C.UTF-8")
            .env("LOCKRUN_LOCK_DIR", self.path("locks"))
            // What systemd gives a unit with RuntimeDirectory=.
            .env("RUNTIME_DIRECTORY", self.path("run"))
            .current_dir(self.path("work"))
            .stdin(Stdio::null())
            .process_group(0);
        for (name, value) in engine.variables() {
            cmd.env(name, value);
        }
        cmd
    }

    /// Each lockrun run's status and arguments, in order.
    fn statuses(&self) -> Vec<(i32, String)> {
        fs::read_to_string(self.path("statuses"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (status, args) = l.split_once('\t').unwrap();
                (status.parse().unwrap(), args.to_string())
            })
            .collect()
    }
}

/// The engine a block runs against.
enum Engines {
    Consul(TestConsul),
    Etcd(String),
    Local,
    Postgres(String),
    Zookeeper(String),
}

impl Engines {
    fn start(engine: Engine) -> Engines {
        match engine {
            Engine::Consul => Engines::Consul(TestConsul::start_fast()),
            Engine::Etcd => Engines::Etcd(etcd_support::etcd().endpoint.clone()),
            Engine::Local => Engines::Local,
            Engine::Postgres => Engines::Postgres(pg_support::postgres().url()),
            Engine::Zookeeper => {
                Engines::Zookeeper(crate::engines::zookeeper::support::zk().addr.clone())
            }
        }
    }

    /// What an operator's shell has set for the engine: the engine tool's
    /// own variables, and `LOCKRUN_BACKEND` where the example leaves
    /// `--backend` out.
    fn variables(&self) -> Vec<(String, String)> {
        match self {
            Engines::Consul(consul) => vec![("CONSUL_HTTP_ADDR".into(), consul.http_addr())],
            Engines::Etcd(endpoint) => vec![
                ("ETCDCTL_ENDPOINTS".into(), endpoint.clone()),
                ("ETCDCTL_API".into(), "3".into()),
            ],
            Engines::Local => vec![("LOCKRUN_BACKEND".into(), "local".into())],
            Engines::Zookeeper(hosts) => vec![("ZOOKEEPER_HOSTS".into(), hosts.clone())],
            Engines::Postgres(url) => {
                // postgres://USER@HOST:PORT/DB
                let rest = url.strip_prefix("postgres://").unwrap();
                let (user, rest) = rest.split_once('@').unwrap();
                let (host_port, db) = rest.split_once('/').unwrap();
                let (host, port) = host_port.split_once(':').unwrap();
                vec![
                    ("PGHOST".into(), host.into()),
                    ("PGPORT".into(), port.into()),
                    ("PGUSER".into(), user.into()),
                    ("PGDATABASE".into(), db.into()),
                ]
            }
        }
    }

    fn backend(&self) -> &'static str {
        match self {
            Engines::Consul(_) => "consul",
            Engines::Etcd(_) => "etcd",
            Engines::Local => "local",
            Engines::Postgres(_) => "postgres",
            Engines::Zookeeper(_) => "zookeeper",
        }
    }
}

/// The shell lines a block runs: a `cron` block's commands without their
/// schedules, the docs' absolute paths as the scratch commands.
fn script_of(example: &Example) -> String {
    let mut body = example.body.clone();
    if example.lang == "cron" {
        body = body
            .lines()
            .filter(|l| !l.contains('='))
            .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n");
    }
    for (from, to) in PATHS {
        body = body.replace(from, to);
    }
    body
}

/// Runs every `on ENGINE` example of `engine`, one after another.
fn run_examples_on(engine: Engine) {
    let examples = examples();
    let mine: Vec<&Example> = examples
        .iter()
        .filter(|e| matches!(&e.how, Ok(How::Run { engine: on, .. }) if *on == engine))
        .filter(|e| std::env::var("DOC_EXAMPLE").map_or(true, |only| e.place == only))
        .collect();
    let mut failures = Vec::new();
    for example in &mine {
        let start = Instant::now();
        let result = run_one(example);
        eprintln!("{}: {:.1?}", example.place, start.elapsed());
        if let Err(why) = result {
            failures.push(format!("{}:\n{}\n{why}", example.place, example.body));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples on {engine:?} failed:\n\n{}",
        failures.len(),
        mine.len(),
        failures.join("\n\n")
    );
}

fn run_one(example: &Example) -> Result<(), String> {
    let Ok(How::Run {
        engine,
        holder,
        inside,
        stop_after,
        prints,
        netns,
    }) = &example.how
    else {
        unreachable!()
    };
    let sandbox = Sandbox::new();
    let engines = Engines::start(*engine);
    let _holder = holder.as_ref().map(|(key, value)| {
        let ready = sandbox.path("held");
        let mut cmd = sandbox.bash(
            &format!(
                // The binary itself, not the shim: dropped, the holder is
                // killed, and its guard ends what it holds.
                "exec \"{}\" --backend {} elect --value '{value}' '{key}' --shell -- 'touch \"{}\"; exec sleep 600'",
                support::bin().display(),
                engines.backend(),
                ready.display()
            ),
            &engines,
        );
        let running = Running::spawn(&mut cmd);
        support::wait_for_file(&ready);
        running
    });
    if example.lang == "console" {
        return run_console(example, &sandbox, &engines);
    }
    let mut script = script_of(example);
    if let Some(key) = inside {
        fs::write(sandbox.path("work/inside.sh"), &script).unwrap();
        script = format!(
            "lockrun elect --status-addr \"{}\" '{key}' -- bash ./inside.sh",
            sandbox.path("status.sock").display()
        );
    }
    if *netns {
        // A block that changes this host's addresses changes a network
        // namespace's of its own instead, whose `eth0` is one end of a veth
        // pair (which needs no module, as a dummy device would).
        fs::write(
            sandbox.path("work/netns.sh"),
            format!(
                "ip link set lo up && ip link add eth0 type veth peer name eth1 && \
                 ip link set eth0 up || exit 99\n{script}"
            ),
        )
        .unwrap();
        script = "exec unshare --net bash ./netns.sh".to_string();
    }
    let mut cmd = sandbox.bash(&script, &engines);
    // Files, not pipes: what the block leaves running must not hold the
    // test up, only fail it.
    let (out, err) = (sandbox.path("stdout"), sandbox.path("stderr"));
    cmd.stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let limit = stop_after.unwrap_or(Duration::from_secs(120));
    let ends_within = |child: &mut std::process::Child, limit: Duration| {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // A block that runs until stopped is stopped once it has printed what
    // the directive names (the event), else after its DURATION.
    let printed = || {
        let have = fs::read_to_string(&out).unwrap_or_default();
        prints.iter().all(|p| have.contains(p.as_str()))
    };
    let limit = match stop_after {
        Some(_) if !prints.is_empty() => {
            let start = Instant::now();
            while !printed() && start.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Duration::ZERO
        }
        _ => limit,
    };
    let mut status = ends_within(&mut child, limit);
    let ended = status.is_some();
    let mut stopped = true;
    if !ended {
        // The whole block's group, as Ctrl-C at a terminal would.
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT);
        status = ends_within(&mut child, Duration::from_secs(10));
        stopped = status.is_some();
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
    }
    let stdout = fs::read_to_string(&out).unwrap_or_default();
    let stderr = fs::read_to_string(&err).unwrap_or_default();
    let said = || {
        let left = std::process::Command::new("ps")
            .args(["-o", "pid,stat,args", "-g", &group.to_string()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        format!("--- stdout ---\n{stdout}--- stderr ---\n{stderr}--- its group now ---\n{left}")
    };
    if !ended && stop_after.is_none() {
        return Err(format!("did not end within {limit:?}\n{}", said()));
    }
    if !stopped {
        return Err(format!("did not end within 10 s of SIGINT\n{}", said()));
    }
    if ended && stop_after.is_some() {
        return Err(format!(
            "ended before it was stopped ({status:?})\n{}",
            said()
        ));
    }
    if let Some(line) = stderr.lines().find(|l| {
        l.contains("command not found")
            || l.contains("no program has that name")
            || l.contains("No such file")
    }) {
        return Err(format!("`{line}`\n{}", said()));
    }
    let statuses = sandbox.statuses();
    if statuses.is_empty() && stop_after.is_none() && script.contains("lockrun") {
        return Err(format!("no lockrun ran\n{}", said()));
    }
    if let Some((status, args)) = statuses.iter().find(|(s, _)| matches!(s, 2 | 125)) {
        return Err(format!("`lockrun {args}` exited {status}\n{}", said()));
    }
    for text in prints {
        if !stdout.contains(text.as_str()) {
            return Err(format!("stdout lacks `{text}`\n{}", said()));
        }
    }
    Ok(())
}

/// A `console` block: each `$ ` line run, what it prints compared with the
/// lines under it (`...` for any lines).
fn run_console(example: &Example, sandbox: &Sandbox, engines: &Engines) -> Result<(), String> {
    let mut blocks: Vec<(String, Vec<String>)> = Vec::new();
    for line in example.body.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => blocks.push((command.to_string(), Vec::new())),
            None => blocks
                .last_mut()
                .ok_or("a console block starts with `$ `")?
                .1
                .push(line.to_string()),
        }
    }
    for (command, want) in blocks {
        let output = sandbox
            .bash(&command, engines)
            .output()
            .map_err(|e| e.to_string())?;
        let have: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        if !output.status.success() || !matches_lines(&want, &have) {
            return Err(format!(
                "`{command}` ({:?}) printed:\n{}\n--- stderr ---\n{}",
                output.status,
                have.join("\n"),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    Ok(())
}

/// Whether `have` is what `want` shows, `...` standing for any lines.
fn matches_lines(want: &[String], have: &[String]) -> bool {
    match want.split_first() {
        None => have.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=have.len()).any(|skip| matches_lines(rest, &have[skip..]))
        }
        Some((first, rest)) => have
            .split_first()
            .is_some_and(|(line, more)| line == first && matches_lines(rest, more)),
    }
}

#[test]
fn console_lines_match_with_gaps() {
    let s = |v: &[&str]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(matches_lines(
        &s(&["a", "...", "d"]),
        &s(&["a", "b", "c", "d"])
    ));
    assert!(matches_lines(&s(&["a", "..."]), &s(&["a"])));
    assert!(!matches_lines(&s(&["a", "c"]), &s(&["a", "b", "c"])));
    assert!(!matches_lines(&s(&["a"]), &s(&["a", "b"])));
}

#[test]
fn doc_examples_run_on_local() {
    run_examples_on(Engine::Local);
}

#[test]
fn doc_examples_run_on_consul() {
    run_examples_on(Engine::Consul);
}

#[test]
fn doc_examples_run_on_etcd() {
    run_examples_on(Engine::Etcd);
}

#[test]
fn doc_examples_run_on_postgres() {
    run_examples_on(Engine::Postgres);
}

#[test]
fn doc_examples_run_on_zookeeper() {
    run_examples_on(Engine::Zookeeper);
}

/// How each `--help` example that is not simply run on the engine its line
/// names (`--backend X`, else Consul) is checked: a directive as in the
/// docs, keyed by the example's text. `--help` cannot carry the docs' HTML
/// comments, so the directives live here, and one for an example that is
/// gone fails the test as a missing one does.
const HELP: &[(&str, &str)] = &[
    (
        "lockrun leader --json service/db/leader",
        "on consul; holder service/db/leader db-1",
    ),
    (
        "lockrun leader --wait --timeout 1m service/db/leader",
        "on consul; holder service/db/leader db-1; prints db-1",
    ),
    (
        "lockrun leader --watch service/db/leader",
        "on consul; holder service/db/leader db-1; for 60s; prints db-1",
    ),
    (
        "lockrun list",
        "on consul; holder service/db/leader db-1; prints db-1",
    ),
    (
        "lockrun list jobs",
        "on consul; holder jobs/nightly db-1; prints jobs/nightly",
    ),
    (
        "lockrun list --json jobs | jq -r 'select(.held) | .key'",
        "on consul; holder jobs/nightly db-1; prints jobs/nightly",
    ),
    (
        "lockrun release --session 3f2a... --destroy-session service/db/leader",
        "not run: `3f2a...` stands for the session of a live holder, which `leader --json` shows; release::* run --session with one",
    ),
    (
        "lockrun check \"$LOCKRUN_SEQUENCER\" && apply-write",
        "on consul; inside service/db/leader; prints apply-write ran",
    ),
    (
        "CONSUL_HTTP_ADDR=10.0.0.5:8500 lockrun check \"$seq\"",
        "not run: 10.0.0.5 stands for another host's agent; the line above runs `check` on the suite's",
    ),
    (
        "sudo lockrun man --dir /usr/local/share/man/man1",
        "not run: it writes into the system's /usr/local; the line above writes the same pages into a home",
    ),
    (
        "lockrun unit -- elect --value \"$(hostname):5432\" service/db/leader -- /usr/local/bin/db-primary \\\n    | sudo tee /etc/systemd/system/db-primary.service",
        "not run: it installs a unit into /etc/systemd; answers::lockrun_unit_names_this_binary_and_passes_systemd_analyze checks such a unit",
    ),
    (
        "lockrun put --sequencer \"$LOCKRUN_SEQUENCER\" service/db/config \"$(cat config.json)\"",
        "on consul; inside service/db/leader",
    ),
    (
        "lockrun status && ./apply-migration      # inside COMMAND",
        "on consul; inside service/db/leader; prints apply-migration ran",
    ),
    (
        "lockrun status --for 10s || exit 0       # at least 10 s of lease left",
        "on consul; inside service/db/leader",
    ),
    (
        "lockrun status --status-addr 127.0.0.1:8300",
        "not run: it asks a lockrun serving on the fixed port 8300, which parallel tests cannot share; the two lines above ask one on its own socket",
    ),
];

/// Every example of `lockrun --help` and each subcommand's `--help` (all
/// backends' lines included), once each, with how it is checked: its
/// [`HELP`] directive, else a run on the engine its line names.
fn help_examples() -> Vec<Example> {
    let cli = lockrun::cli::command();
    let mut texts = vec![(
        "lockrun".to_string(),
        cli.get_after_help().map(|h| h.to_string()),
    )];
    for sub in cli.get_subcommands() {
        texts.push((
            format!("lockrun {}", sub.get_name()),
            sub.get_after_help().map(|h| h.to_string()),
        ));
    }
    let mut found: Vec<Example> = Vec::new();
    for (whose, text) in texts {
        let Some(text) = text else { continue };
        let mut lines = text
            .lines()
            .skip_while(|l| *l != "Examples:")
            .skip(1)
            .take_while(|l| !l.trim().is_empty());
        while let Some(line) = lines.next() {
            let mut example = line.trim_start().to_string();
            while example.ends_with('\\') {
                let Some(more) = lines.next() else { break };
                example.push('\n');
                example.push_str(more);
            }
            if found.iter().any(|e| e.body == example) {
                continue;
            }
            let how = match HELP.iter().find(|(line, _)| *line == example) {
                Some((_, directive)) => parse_how(directive),
                None => {
                    let engine = shell_backend(&example).unwrap_or("consul");
                    parse_how(&format!("on {engine}"))
                }
            };
            found.push(Example {
                place: format!("`{whose} --help`: {}", example.lines().next().unwrap_or("")),
                lang: "sh".into(),
                body: example,
                how,
            });
        }
    }
    found
}

/// The backend a line names with `--backend X`.
fn shell_backend(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "--backend" {
            return words.next();
        }
    }
    None
}

/// Every `--help` example runs on a real engine, as the docs' examples do,
/// or says in [`HELP`] why not; the counts are printed for the record.
#[test]
fn help_examples_run() {
    let examples = help_examples();
    for (line, _) in HELP {
        assert!(
            examples.iter().any(|e| e.body == *line),
            "HELP has a directive for an example no --help shows:\n{line}"
        );
    }
    let bad: Vec<String> = examples
        .iter()
        .filter_map(|e| {
            e.how
                .as_ref()
                .err()
                .map(|why| format!("{}: {why}", e.place))
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let not_run = examples
        .iter()
        .filter(|e| matches!(e.how, Ok(How::NotRun)))
        .count();
    let mut failures = Vec::new();
    let mut ran = 0;
    for example in examples
        .iter()
        .filter(|e| matches!(e.how, Ok(How::Run { .. })))
    {
        if std::env::var("DOC_EXAMPLE").is_ok_and(|only| !example.place.contains(&only)) {
            continue;
        }
        let start = Instant::now();
        let result = run_one(example);
        eprintln!("{}: {:.1?}", example.place, start.elapsed());
        ran += 1;
        if let Err(why) = result {
            failures.push(format!("{}:\n{}\n{why}", example.place, example.body));
        }
    }
    eprintln!(
        "--help examples: {} in all, {ran} run, {not_run} not run (each with its reason)",
        examples.len()
    );
    assert!(examples.len() >= 30, "too few examples found");
    assert!(
        failures.is_empty(),
        "{} of {ran} --help examples failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

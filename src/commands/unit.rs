//! `unit`: a systemd service unit that runs this very binary, so that the
//! unit an operator installs names the lockrun they installed
//! (`~/.cargo/bin/lockrun` after `cargo install`, `/usr/bin/lockrun` from
//! the .deb) and `systemd-analyze verify` accepts it wherever that is.

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, Command, UnitArgs};
use crate::error::Failure;
use crate::exit::Exit;

/// What systemd is given beyond lockrun's own stop: lockrun forwards
/// SIGTERM, waits the kill timeout, releases, and only then ends.
const STOP_SLACK: Duration = Duration::from_secs(25);

/// `backend`: `--backend X` as the unit's own command line chose it, put
/// in front of the unit's words unless they choose one themselves.
pub fn run(args: &UnitArgs, backend: &[String]) -> Result<Exit, Failure> {
    let names_one = args
        .command
        .iter()
        .take_while(|w| *w != "--")
        .any(|w| w == "--backend" || w.to_string_lossy().starts_with("--backend="));
    let mut args = UnitArgs {
        description: args.description.clone(),
        command: args.command.clone(),
    };
    if !names_one {
        args.command
            .splice(0..0, backend.iter().map(OsString::from));
    }
    let text = render(&args, &exe()?)?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::Internal(format!("cannot write the unit ({e})")))?;
    Ok(Exit::Success)
}

fn exe() -> Result<String, Failure> {
    let path = std::env::current_exe()
        .map_err(|e| Failure::Internal(format!("cannot tell where this lockrun is ({e})")))?;
    path.into_os_string().into_string().map_err(|p| {
        Failure::Config(format!(
            "this lockrun's path `{}` is not UTF-8, which a unit cannot name; install it elsewhere",
            p.to_string_lossy()
        ))
    })
}

/// The unit for `args`, with `exe` in its ExecStart.
pub fn render(args: &UnitArgs, exe: &str) -> Result<String, Failure> {
    let words: Vec<String> = args
        .command
        .iter()
        .map(|w| {
            w.clone().into_string().map_err(|w| {
                Failure::Usage(format!(
                    "`{}` is not UTF-8, which a unit cannot hold",
                    w.to_string_lossy()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(bad) = words.iter().find(|w| w.chars().any(char::is_control)) {
        return Err(Failure::Usage(format!(
            "{bad:?} holds a control character (a newline?), which a unit line cannot; pass it through EnvironmentFile= instead"
        )));
    }
    // The command line must be one lockrun would run: parsed as lockrun
    // parses it, so that a unit never fails at its first start.
    let parsed = Cli::try_parse_from(
        std::iter::once(OsString::from("lockrun")).chain(args.command.iter().cloned()),
    )
    .map_err(|e| {
        // clap's message without its usage block, on one line.
        let text = e.to_string();
        let said: Vec<&str> = text
            .lines()
            .map(str::trim)
            .take_while(|l| !l.starts_with("Usage:"))
            .filter(|l| !l.is_empty())
            .collect();
        let said = said.join(" ");
        let said = said.trim_start_matches("error: ");
        Failure::Usage(format!(
            "the unit's command line is not one lockrun runs: {said}; give `elect` or `semaphore` with its flags, KEY, `--` and COMMAND"
        ))
    })?;
    let (subcommand, key, campaign, notify, kill_timeout) = match &parsed.command {
        Command::Elect(a) if a.wait.no_wait && !a.campaign => {
            return Err(Failure::Usage(
                "a unit's elect campaigns, which --no-wait would refuse; drop --no-wait".into(),
            ))
        }
        Command::Elect(a) => ("elect", &a.key, a.campaign, a.service.notify.is_some(), a.child.kill_timeout),
        Command::Semaphore(a) => ("semaphore", &a.prefix, true, a.service.notify.is_some(), a.child.kill_timeout),
        _ => {
            return Err(Failure::Usage(
                "a unit runs `elect` or `semaphore`; give one, e.g. `lockrun unit -- elect service/db/leader -- /usr/local/bin/db-primary`".into(),
            ))
        }
    };
    // A standby is a unit doing its job, so readiness comes at start: with
    // plain --notify (ready once held) `systemctl enable --now` blocks on a
    // standby and boot never reaches multi-user.target. A unit's elect
    // campaigns again after a loss rather than exit into Restart=.
    // Before the `--` that ends lockrun's own words: options may follow
    // KEY, and no flag's value can be taken for the subcommand there.
    let at = words
        .iter()
        .position(|w| w == "--")
        .expect("COMMAND is required after `--`");
    let mut line = words.clone();
    let mut added = Vec::new();
    if !campaign {
        added.push("--campaign".to_string());
    }
    if !notify {
        added.push("--notify=start".to_string());
    }
    line.splice(at..at, added);
    // What we added must parse too, or the unit would fail at its start.
    Cli::try_parse_from(std::iter::once("lockrun".to_string()).chain(line.iter().cloned()))
        .map_err(|e| {
            Failure::Usage(format!(
                "with --campaign and --notify=start added, the command line is not one lockrun runs: {}",
                e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ")
            ))
        })?;
    let exec: Vec<String> = std::iter::once(exe.to_string())
        .chain(line)
        .map(|w| quote(&w))
        .collect();
    let description =
        match &args.description {
            Some(d) if d.trim().is_empty() => return Err(Failure::Usage(
                "--description is empty; give the unit's description, or leave --description out"
                    .into(),
            )),
            Some(d) => d.clone(),
            // COMMAND's program, as `ps` would name it, not its last word.
            None => format!(
                "{} under lockrun {subcommand} `{key}`",
                words
                    .get(at + 1)
                    .and_then(|w| w.split_whitespace().next())
                    .map(|w| w.rsplit('/').next().unwrap_or(w))
                    .unwrap_or(key)
            ),
        };
    if description.chars().any(char::is_control) || description.ends_with('\\') {
        return Err(Failure::Usage(
            "--description holds a control character (a newline?) or ends with `\\`, which continues a unit line; leave it out".into(),
        ));
    }
    let description = description.replace('%', "%%");
    let stop = kill_timeout.unwrap_or(Duration::from_secs(5)) + STOP_SLACK;
    Ok(format!(
        "\
# Written by `lockrun unit`. Install it as /etc/systemd/system/NAME.service,
# then `systemctl daemon-reload` and `systemctl enable --now NAME`.
[Unit]
Description={description}
Wants=network-online.target
After=network-online.target

[Service]
# READY=1 once lockrun runs, leader or standby; STATUS= tells them apart
# (`systemctl status`). WATCHDOG=1 comes while lockrun is alive and, when
# it holds, only while the lease is confirmed. At boot lockrun retries
# until the engine answers.
Type=notify
WatchdogSec=30s
# The engine's settings (CONSUL_HTTP_ADDR=..., ETCDCTL_ENDPOINTS=...,
# PGHOST=...); secrets as credentials or files, never on a command line.
{carried}EnvironmentFile=-/etc/default/lockrun
ExecStart={exec}
# HUP reaches COMMAND's whole process group; the lock stays held.
ExecReload=/bin/kill -HUP $MAINPID
# lockrun forwards SIGTERM to the job, waits the kill timeout, releases,
# and ends by SIGTERM itself: a clean stop. \"mixed\" keeps systemd from
# signalling the job a second time.
KillMode=mixed
TimeoutStopSec={stop}
Restart=on-failure
RestartSec=5s

[Install]
WantedBy=multi-user.target
",
        exec = exec.join(" "),
        stop = humantime::format_duration(stop),
        carried = carried(parsed.backend.backend, &|name| std::env::var(name).ok())?,
    ))
}

/// One word of ExecStart= as systemd reads it back: quoted where it holds
/// white space, a quote or a backslash, with `$` and `%` doubled so that
/// systemd passes it to lockrun as typed (a `--shell` command expands `$`
/// itself; `date +%s` stays `date +%s`, not systemd's `%s`, the shell).
fn quote(word: &str) -> String {
    let word = word.replace('$', "$$").replace('%', "%%");
    if !word.is_empty()
        && !word.contains(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'))
    {
        return word;
    }
    let mut out = String::from("\"");
    for c in word.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The variables of this shell that say where the backend's locks are
/// (its [`crate::backend::Registration::empty_is_an_error`]: addresses, a
/// lock directory, never a credential), as `Environment=` lines: a unit
/// made from a shell that set them locks where that shell's runs do, and
/// /etc/default/lockrun, read after them, still overrides.
fn carried(
    backend: crate::backend::BackendName,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Failure> {
    let Some(registration) = crate::backend::BACKENDS.iter().find(|r| r.name == backend) else {
        return Ok(String::new());
    };
    let mut lines = String::new();
    for (name, _) in registration.empty_is_an_error {
        let Some(value) = var(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        if value
            .chars()
            .any(|c| c.is_control() || c == '"' || c == '\\')
        {
            return Err(Failure::Usage(format!(
                "{name} holds a quote, a backslash or a control character, which the unit cannot carry; set it in /etc/default/lockrun instead"
            )));
        }
        lines.push_str(&format!(
            "Environment=\"{name}={}\"\n",
            value.replace('%', "%%")
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(words: &[&str]) -> Result<String, Failure> {
        let args = UnitArgs {
            description: None,
            command: words.iter().map(OsString::from).collect(),
        };
        render(&args, "/opt/my tools/lockrun")
    }

    fn exec(text: &str) -> &str {
        text.lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap()
    }

    #[test]
    fn adds_readiness_at_start_and_campaign_to_elect() {
        let text = unit(&[
            "elect",
            "--value",
            "db-1:5432",
            "service/db/leader",
            "--",
            "/usr/local/bin/db-primary",
        ])
        .unwrap();
        assert_eq!(
            exec(&text),
            "\"/opt/my tools/lockrun\" elect --value db-1:5432 service/db/leader --campaign --notify=start -- /usr/local/bin/db-primary"
        );
        assert!(text.contains("\nTimeoutStopSec=30s\n"), "{text}");
    }

    #[test]
    fn keeps_what_was_given_and_quotes_for_systemd() {
        let text = unit(&[
            "--backend",
            "etcd",
            "semaphore",
            "--notify",
            "--limit",
            "2",
            "--kill-timeout",
            "20s",
            "jobs/x",
            "--shell",
            "--",
            "echo \"$HOME\" && ./x",
        ])
        .unwrap();
        assert_eq!(
            exec(&text),
            "\"/opt/my tools/lockrun\" --backend etcd semaphore --notify --limit 2 --kill-timeout 20s jobs/x --shell -- \"echo \\\"$$HOME\\\" && ./x\""
        );
        assert!(text.contains("\nTimeoutStopSec=45s\n"), "{text}");
    }

    /// `%` reaches lockrun as typed, never as a systemd specifier; a word
    /// `elect` that is a flag's value does not take the added flags.
    #[test]
    fn percent_and_odd_words_reach_lockrun_as_typed() {
        let text = unit(&[
            "--backend",
            "local",
            "--lock-dir",
            "elect",
            "elect",
            "k",
            "--",
            "date",
            "+%s",
        ])
        .unwrap();
        assert_eq!(
            exec(&text),
            "\"/opt/my tools/lockrun\" --backend local --lock-dir elect elect k --campaign --notify=start -- date +%%s"
        );
        assert!(
            text.contains("\nDescription=date under lockrun elect `k`\n"),
            "{text}"
        );
    }

    #[test]
    fn refuses_what_no_unit_can_run() {
        for words in [
            &["leader", "k"][..],
            &["elect", "k"][..],
            &["elect", "--bogus", "k", "--", "true"][..],
            &["elect", "k", "--", "printf", "a\nb"][..],
            &["elect", "--no-wait", "k", "--", "true"][..],
        ] {
            match unit(words) {
                Err(Failure::Usage(m)) => assert!(!m.contains('\n'), "{m}"),
                other => panic!("{words:?}: {other:?}"),
            }
        }
        for description in ["", " ", "ends in \\", "two\nlines"] {
            let args = UnitArgs {
                description: Some(description.into()),
                command: ["elect", "k", "--", "true"].map(OsString::from).to_vec(),
            };
            assert!(
                matches!(render(&args, "/x/lockrun"), Err(Failure::Usage(_))),
                "{description:?}"
            );
        }
    }
}

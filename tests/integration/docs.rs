//! The committed man pages and completions are what the clap definition
//! renders today, the examples we show users actually parse, and the
//! documented surface (`--version`, `--help`, `--log-format json`) behaves as
//! documented. None of this needs Consul, man or groff.
//!
//! After changing a flag or a help text, `LOCKRUN_BLESS=1 cargo test docs`
//! rewrites `man/` and `completions/`; commit the result.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use clap::CommandFactory;
use lockrun::cli::Cli;
use lockrun::docs;
use lockrun::exit::Exit;

const BLESS: &str = "LOCKRUN_BLESS";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every generated file, relative to the repository root, as the binary's
/// own `man --dir` and `completions SHELL` write them: what we commit is what
/// a user installs.
fn rendered() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = lockrun(["man", "--dir"]);
    cmd.arg(dir.path());
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output));
    let mut files: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_owned();
            (
                Path::new(docs::MAN_DIR).join(name),
                fs::read(&path).unwrap(),
            )
        })
        .collect();
    files.sort();
    for shell in docs::SHELLS {
        let mut cmd = lockrun(["completions", &shell.to_string()]);
        let output = run(&mut cmd);
        assert!(output.status.success(), "{}", describe(&cmd, &output));
        assert!(output.stderr.is_empty(), "{}", describe(&cmd, &output));
        let path = Path::new(docs::COMPLETIONS_DIR).join(docs::completion_file(shell));
        files.push((path, output.stdout));
    }
    files
}

#[test]
fn committed_files_match_the_clap_definition() {
    let files = rendered();
    let expected: BTreeSet<PathBuf> = files.iter().map(|(path, _)| path.clone()).collect();
    // Files we no longer render (a renamed subcommand's page) are stale too.
    let extra: Vec<PathBuf> = [docs::MAN_DIR, docs::COMPLETIONS_DIR]
        .iter()
        .flat_map(|dir| fs::read_dir(root().join(dir)).into_iter().flatten())
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path().strip_prefix(root()).unwrap().to_path_buf())
        .filter(|path| !expected.contains(path))
        // Hand-written examples the Debian package installs live beside
        // the pages; `packaged_files_exist` checks them.
        .filter(|path| !path.to_string_lossy().ends_with(".example"))
        .collect();

    if std::env::var_os(BLESS).is_some_and(|v| v == "1") {
        for (path, contents) in &files {
            fs::create_dir_all(root().join(path).parent().unwrap()).unwrap();
            fs::write(root().join(path), contents).expect("writing man/ and completions/");
        }
        for path in extra {
            fs::remove_file(root().join(&path)).expect("removing a stale file");
        }
        return;
    }

    let mut stale = Vec::new();
    for (path, want) in &files {
        match fs::read(root().join(path)) {
            Ok(have) if have == *want => {}
            Ok(have) => stale.push(format!(
                "{} is stale: {}",
                path.display(),
                first_difference(&have, want)
            )),
            Err(e) => stale.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    for path in extra {
        stale.push(format!(
            "{} is no longer rendered; delete it",
            path.display()
        ));
    }
    assert!(
        stale.is_empty(),
        "generated files differ from what src/cli.rs and src/docs.rs render:\n  {}\n\
         run `{BLESS}=1 cargo test docs` to rewrite them, then review and commit the result",
        stale.join("\n  ")
    );
}

fn first_difference(have: &[u8], want: &[u8]) -> String {
    let have = String::from_utf8_lossy(have);
    let want = String::from_utf8_lossy(want);
    let mut have_lines = have.lines();
    let mut want_lines = want.lines();
    for number in 1.. {
        match (have_lines.next(), want_lines.next()) {
            (Some(h), Some(w)) if h == w => continue,
            (None, None) => break,
            (h, w) => {
                return format!(
                    "line {number} is {:?}, should be {:?}",
                    h.unwrap_or("<end of file>"),
                    w.unwrap_or("<end of file>")
                )
            }
        }
    }
    "line endings differ".into()
}

fn main_page() -> String {
    let (_, page) = docs::man_pages()
        .into_iter()
        .find(|(name, _)| name == "lockrun.1")
        .expect("lockrun.1 is rendered");
    String::from_utf8(page).unwrap()
}

#[test]
fn every_page_and_script_is_rendered() {
    let names: Vec<String> = rendered()
        .into_iter()
        .map(|(path, _)| path.to_string_lossy().into_owned())
        .collect();
    for want in [
        "man/lockrun.1",
        "man/lockrun-elect.1",
        "man/lockrun-semaphore.1",
        "man/lockrun-leader.1",
        "man/lockrun-release.1",
        "completions/lockrun.bash",
        "completions/_lockrun",
        "completions/lockrun.fish",
        "completions/lockrun.elv",
        "completions/_lockrun.ps1",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
}

#[test]
fn main_page_has_the_hand_written_sections() {
    let page = main_page();
    assert!(page.contains("\n.TH lockrun 1 "), "no .TH line:\n{page}");
    for section in [
        "EXIT STATUS",
        "ENVIRONMENT",
        "SIGNALS",
        "SAFETY",
        "EXAMPLES",
        "SEE ALSO",
    ] {
        let heading = format!("\n.SH \"{section}\"\n");
        let heading_plain = format!("\n.SH {section}\n");
        assert!(
            page.contains(&heading) || page.contains(&heading_plain),
            "lockrun.1 has no {section} section:\n{page}"
        );
    }
    // The global flags reach the subcommand pages only if they are rendered
    // from the built parent.
    for (name, page) in docs::man_pages() {
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains(r"\-\-http\-addr"), "{name} lacks --http-addr");
        assert!(
            page.contains(r"\-\-log\-format"),
            "{name} lacks --log-format"
        );
        assert!(
            !page.contains(".SH NAME\n.ie"),
            "{name} repeats the roff preamble"
        );
    }
}

#[test]
fn man_page_exit_table_matches_exit_rs() {
    let page = main_page();
    let section: Vec<&str> = page
        .lines()
        .skip_while(|line| *line != ".SH \"EXIT STATUS\"")
        .skip(1)
        .take_while(|line| !line.starts_with(".SH"))
        .collect();
    let mut rows = Vec::new();
    let mut lines = section.iter();
    while let Some(line) = lines.next() {
        if *line == ".TP" {
            let status = plain(lines.next().expect("a status after .TP"));
            let meaning = plain(lines.next().expect("a meaning after the status"));
            rows.push((status, meaning));
        }
    }
    let want: Vec<(String, String)> = Exit::TABLE
        .iter()
        .map(|(status, meaning)| (status.to_string(), meaning.replace('`', "")))
        .collect();
    assert_eq!(
        rows, want,
        "EXIT STATUS in lockrun.1 differs from Exit::TABLE"
    );
}

/// README's "Exit status" table is Exit::TABLE, row for row.
#[test]
fn readme_exit_table_matches_exit_rs() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let rows: Vec<(String, String)> = readme
        .lines()
        .skip_while(|line| *line != "## Exit status")
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| ") && !line.starts_with("| status |"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 2, "a row of two cells: {line}");
            (cells[0].trim().to_string(), cells[1].trim().to_string())
        })
        .collect();
    let want: Vec<(String, String)> = Exit::TABLE
        .iter()
        .map(|(status, meaning)| (status.to_string(), meaning.to_string()))
        .collect();
    assert_eq!(rows, want, "README's exit table differs from Exit::TABLE");
}

/// `lockrun --help` names every status of Exit::TABLE in its summary.
#[test]
fn help_names_every_exit_status() {
    let help = Cli::command().get_after_help().unwrap().to_string();
    let summary: String = help
        .split("Exit status:")
        .nth(1)
        .expect("--help has an exit status summary")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (status, _) in Exit::TABLE {
        let named = if status.starts_with(|c: char| c.is_ascii_digit()) {
            summary.split([' ', ';', '/']).any(|word| word == *status)
        } else {
            summary.contains("the child's own")
        };
        assert!(
            named,
            "`lockrun --help` does not name exit status {status}: {summary}"
        );
    }
}

/// The text a roff line shows, for the few escapes our pages use.
fn plain(roff: &str) -> String {
    roff.replace(r"\fB", "")
        .replace(r"\fI", "")
        .replace(r"\fR", "")
        .replace(r"\*(Aq", "'")
        .replace(r"\&", "")
        .replace(r"\-", "-")
        .replace(r"\\", r"\")
}

/// The example command lines of every `after_help` in cli.rs.
fn help_examples() -> Vec<(String, String)> {
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
    let mut examples = Vec::new();
    for (whose, text) in texts {
        let Some(text) = text else { continue };
        let before = examples.len();
        for line in text.lines() {
            if line.starts_with("  lockrun ") || line.contains("$(lockrun ") {
                examples.push((whose.clone(), line.trim().to_string()));
            }
        }
        assert!(
            examples.len() > before,
            "`{whose} --help` shows no examples"
        );
    }
    examples
}

#[test]
fn help_examples_parse() {
    let examples = help_examples();
    assert!(examples.len() >= 10, "too few examples found: {examples:?}");
    for (whose, line) in examples {
        let words = shell_words(command_of(&line));
        assert_eq!(words.first().map(String::as_str), Some("lockrun"), "{line}");
        if let Err(e) = lockrun::cli::command().try_get_matches_from(&words) {
            panic!(
                "the example in `{whose} --help` does not parse:\n  {line}\nwords: {words:?}\n{e}"
            );
        }
    }
}

/// The lockrun command in an example line: `leader=$(lockrun ...) || ...`
/// becomes `lockrun ...`.
fn command_of(line: &str) -> &str {
    let Some(start) = line.find("$(lockrun ") else {
        return line;
    };
    let inner = &line[start + 2..];
    let mut depth = 1;
    for (i, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &inner[..i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced `$(` in {line:?}")
}

/// Splits a command line as sh would, as far as our examples need: quotes,
/// backslashes, and an end at `#`, `|`, `;`, `&` or `>` outside quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some(e @ ('"' | '\\' | '$' | '`')) => w.push(e),
                            Some(e) => {
                                w.push('\\');
                                w.push(e);
                            }
                            None => w.push('\\'),
                        },
                        _ => w.push(c),
                    }
                }
            }
            '\\' => {
                if let Some(e) = chars.next() {
                    word.get_or_insert_with(String::new).push(e);
                }
            }
            '#' if word.is_none() => break,
            '|' | ';' | '&' | '>' => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

#[test]
fn shell_words_splits_like_sh() {
    assert_eq!(
        shell_words(r#"lockrun elect --value "$(hostname):5432" k -- 'a && b' c\ d # note"#),
        [
            "lockrun",
            "elect",
            "--value",
            "$(hostname):5432",
            "k",
            "--",
            "a && b",
            "c d"
        ]
    );
    assert_eq!(
        shell_words(command_of(
            r#"leader=$(lockrun leader k) || echo "no leader""#
        )),
        ["lockrun", "leader", "k"]
    );
}

/// The binary with none of the developer's Consul or lockrun settings.
fn lockrun<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockrun"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CONSUL_") || name.starts_with("LOCKRUN_") || name == "RUST_LOG" {
            cmd.env_remove(&*name);
        }
    }
    cmd.args(args).stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn describe(cmd: &Command, output: &Output) -> String {
    format!(
        "command: {cmd:?}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn version_is_printed() {
    let mut cmd = lockrun(["--version"]);
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output));
    // Built from a checkout, the version names the commit.
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = match commit {
        Some(commit) => format!("lockrun {} ({commit})\n", env!("CARGO_PKG_VERSION")),
        None => format!("lockrun {}\n", env!("CARGO_PKG_VERSION")),
    };
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        want,
        "{}",
        describe(&cmd, &output)
    );
    assert_eq!(env!("CARGO_PKG_VERSION"), "0.1.0");
}

#[test]
fn every_help_shows_examples() {
    let mut invocations = vec![vec!["--help".to_string()]];
    for sub in Cli::command().get_subcommands() {
        invocations.push(vec![sub.get_name().to_string(), "--help".to_string()]);
    }
    assert!(invocations.len() >= 5, "{invocations:?}");
    for args in invocations {
        let mut cmd = lockrun(&args);
        let output = run(&mut cmd);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{}", describe(&cmd, &output));
        assert!(
            stdout.contains("\nExamples:\n  lockrun ")
                || stdout.contains("\nExamples:\n  leader=$(lockrun "),
            "no Examples section\n{}",
            describe(&cmd, &output)
        );
    }
}

#[test]
fn json_logs_are_json_and_never_show_the_token() {
    const TOKEN: &str = "s3cret-token-xyz";
    for verbosity in ["-v", "-vv"] {
        let mut cmd = lockrun([
            "--log-format",
            "json",
            verbosity,
            "leader",
            "k",
            "--http-addr",
            "127.0.0.1:1",
        ]);
        cmd.env("CONSUL_HTTP_TOKEN", TOKEN);
        let output = run(&mut cmd);
        let context = describe(&cmd, &output);
        assert_eq!(output.status.code(), Some(125), "{context}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "the token leaked\n{context}"
        );
        assert!(!stderr.trim().is_empty(), "no error reported\n{context}");
        for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{context}"));
            assert!(value.is_object(), "not a JSON object: {line:?}\n{context}");
        }
    }
}

/// `lockrun man --dir` writes pages that man renders without a warning, one
/// for every `lockrun-SUB(1)` the main page refers to.
#[test]
fn man_dir_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = lockrun(["man", "--dir"]);
    cmd.arg(dir.path().join("man1"));
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output));
    let main = fs::read_to_string(dir.path().join("man1/lockrun.1")).unwrap();
    for sub in Cli::command().get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let page = format!("lockrun-{}", sub.get_name());
        assert!(
            main.contains(&format!("{}(1)", page.replace('-', r"\-"))),
            "lockrun.1 does not refer to {page}(1)"
        );
        assert!(
            dir.path().join("man1").join(format!("{page}.1")).is_file(),
            "{page}.1 was not written"
        );
    }
    let renderer = if Command::new("man").arg("--version").output().is_ok() {
        ["man", "-l", "-P", "cat"]
    } else if Command::new("groff").arg("--version").output().is_ok() {
        ["groff", "-man", "-Tutf8", "-ww"]
    } else {
        eprintln!("neither man nor groff is installed: the pages were written but not rendered");
        return;
    };
    for entry in fs::read_dir(dir.path().join("man1")).unwrap() {
        let path = entry.unwrap().path();
        let mut render = Command::new(renderer[0]);
        render.args(&renderer[1..]).arg(&path).env("MANWIDTH", "80");
        let output = run(&mut render);
        // Without a terminal, man still makes bold by overstriking: `N\bN`.
        let mut stdout = String::new();
        for c in String::from_utf8_lossy(&output.stdout).chars() {
            if c == '\u{8}' {
                stdout.pop();
            } else {
                stdout.push(c);
            }
        }
        let what = format!("{}: {}", path.display(), describe(&render, &output));
        assert!(output.status.success(), "{what}");
        assert!(output.stderr.is_empty(), "warnings\n{what}");
        assert!(
            stdout.contains("NAME") && stdout.contains("lockrun"),
            "{what}"
        );
    }
}

/// Every file the Debian package (`[package.metadata.deb]` in Cargo.toml)
/// installs exists, and its example unit is the operations guide's, word for word.
#[test]
fn packaged_files_exist() {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let deb = manifest
        .split("[package.metadata.deb]")
        .nth(1)
        .expect("Cargo.toml has [package.metadata.deb]");
    let sources: Vec<&str> = deb
        .lines()
        .filter_map(|line| line.trim().strip_prefix("[\""))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(sources.len() >= 6, "too few assets: {sources:?}");
    for source in sources {
        if source.starts_with("target/") {
            continue;
        }
        match source.split_once("*") {
            Some((dir_and_stem, suffix)) => {
                let (dir, stem) = dir_and_stem.rsplit_once('/').unwrap();
                let matches = fs::read_dir(root().join(dir))
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.starts_with(stem) && name.ends_with(suffix)
                    })
                    .count();
                assert!(matches >= 5, "{source} matches {matches} files");
            }
            None => assert!(root().join(source).is_file(), "{source} is missing"),
        }
    }
    let guide = fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let unit = guide
        .split("```ini\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/operations.md shows a unit in an ini block");
    assert_eq!(
        fs::read_to_string(root().join("man/db-primary.service.example")).unwrap(),
        unit,
        "man/db-primary.service.example differs from docs/operations.md's unit"
    );
}

/// What bash offers for the line `words` (the last word being completed),
/// with the committed script and without bash-completion loaded.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = root().join("completions/lockrun.bash");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let program = format!(
        "source '{}'\n\
         COMP_WORDS=({})\n\
         COMP_CWORD={cword}\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"\n\
         COMP_POINT=${{#COMP_LINE}}\n\
         _lockrun lockrun '{}' '{}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
        words[cword - 1],
    );
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "-c", &program]);
    let output = run(&mut cmd);
    assert!(output.status.success(), "{}", describe(&cmd, &output));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn bash_completes_the_wrapped_command_and_signal_names() {
    if Command::new("bash").arg("--version").output().is_err() {
        eprintln!("bash is not installed: its completion script was not tried");
        return;
    }
    // Before `--`: lockrun's flags.
    let flags = bash_completes(&["lockrun", "elect", "--ti"]);
    assert!(flags.iter().any(|w| w == "--timeout"), "{flags:?}");
    // After `--`: commands, then the command's arguments, never our flags.
    let commands = bash_completes(&["lockrun", "elect", "k", "--", "ech"]);
    assert!(commands.iter().any(|w| w == "echo"), "{commands:?}");
    let arguments = bash_completes(&["lockrun", "elect", "k", "--", "ls", "--ti"]);
    assert!(
        !arguments.iter().any(|w| w.starts_with("--")),
        "{arguments:?}"
    );
    // --kill-signal: signal names, not file names.
    let signals = bash_completes(&["lockrun", "semaphore", "--kill-signal", ""]);
    for name in ["TERM", "INT", "HUP", "KILL"] {
        assert!(signals.iter().any(|w| w == name), "{signals:?}");
    }
    assert!(
        signals.iter().all(|w| w
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())),
        "{signals:?}"
    );
}

/// CI runs the README's test command, word for word, as the last line of
/// `.ci/run`: what a newcomer types is what CI proves on a fresh machine.
#[test]
fn ci_runs_the_readme_test_command() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let ci = fs::read_to_string(root().join(".ci/run")).unwrap();
    let last = ci
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    let blocks: Vec<&str> = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert!(
        blocks.iter().any(|b| b.trim() == last),
        ".ci/run ends with `{last}`, which is no code block of the README's: the README's test command and CI's must be one"
    );
}

/// `-h` fits a screen: the flags of the backend in use (`--backend X -h`,
/// or LOCKRUN_BACKEND), the common ones, and a line naming the rest, which
/// `--help` keeps in full.
#[test]
fn short_help_fits_a_screen_and_shows_the_backend_in_use() {
    let owned = [
        ("consul", "--http-addr"),
        ("etcd", "--endpoints"),
        ("local", "--lock-dir"),
        ("postgres", "--dsn"),
        ("zookeeper", "--zk-hosts"),
    ];
    for (backend, flag) in owned {
        for sub in ["elect", "semaphore", "leader", "release"] {
            let mut cmd = lockrun(["--backend", backend, sub, "-h"]);
            cmd.env("COLUMNS", "100");
            let output = run(&mut cmd);
            assert!(output.status.success(), "{}", describe(&cmd, &output));
            let text = String::from_utf8(output.stdout.clone()).unwrap();
            assert!(
                text.lines().count() <= 60,
                "{} lines:\n{}",
                text.lines().count(),
                describe(&cmd, &output)
            );
            assert!(text.contains(flag), "{}", describe(&cmd, &output));
            for (other, theirs) in owned.iter().filter(|(b, _)| *b != backend) {
                assert!(
                    !text.contains(theirs),
                    "{other}'s {theirs}: {}",
                    describe(&cmd, &output)
                );
            }
            assert!(
                text.contains(&format!("Flags of --backend {backend};")),
                "{}",
                describe(&cmd, &output)
            );
            let mut long = lockrun(["--backend", backend, sub, "--help"]);
            let all = String::from_utf8(run(&mut long).stdout).unwrap();
            for (_, every) in owned {
                assert!(all.contains(every), "--help lost {every}: {all}");
            }
        }
    }
    // Each backend's own examples: only its own in `-h`, all in `--help`
    // (#40: `--backend local elect -h` showed Consul's `P/.lock`).
    let example = |backend: &str, text: &str| {
        [
            ("consul", "P/.lock"),
            ("etcd", "excludes `etcdctl lock"),
            ("local", "excludes `flock DIR/"),
            ("postgres", "--backend postgres elect"),
        ]
        .iter()
        .filter(|(_, line)| text.contains(line))
        .all(|(b, _)| *b == backend)
    };
    for (backend, _) in owned {
        let text =
            String::from_utf8(run(&mut lockrun(["--backend", backend, "elect", "-h"])).stdout)
                .unwrap();
        assert!(
            example(backend, &text),
            "another backend's example:\n{text}"
        );
        let all =
            String::from_utf8(run(&mut lockrun(["--backend", backend, "elect", "--help"])).stdout)
                .unwrap();
        for line in [
            "P/.lock",
            "etcdctl lock",
            "flock DIR/",
            "--backend postgres elect",
        ] {
            assert!(all.contains(line), "--help lost `{line}`:\n{all}");
        }
    }
    // A misspelt backend is refused, not shown as the default's help.
    let mut cmd = lockrun(["elect", "-h"]);
    cmd.env("LOCKRUN_BACKEND", "etdc");
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&cmd, &output));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.starts_with("lockrun: LOCKRUN_BACKEND `etdc` is no backend; use one of consul, etcd, local, postgres")
            && said.lines().count() == 1,
        "{said}"
    );
    assert!(output.stdout.is_empty());
    // The variable picks the backend too, as it does for the run.
    let mut cmd = lockrun(["elect", "-h"]);
    cmd.env("LOCKRUN_BACKEND", "etcd");
    let text = String::from_utf8(run(&mut cmd).stdout).unwrap();
    assert!(
        text.contains("--endpoints") && !text.contains("--http-addr"),
        "{text}"
    );
}

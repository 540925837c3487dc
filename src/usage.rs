//! Usage errors as one line that says what is wrong and what to type instead.
//!
//! clap knows what failed; we add what a user of an engine's own tool or a
//! hurried typist needs: clap's own suggestion, the missing `--` before
//! COMMAND with the corrected line, the tool's flags translated (by its
//! backend's registration), and the help of the subcommand at hand rather
//! than the top-level one.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The subcommands that run COMMAND after `--`.
const RUNNERS: [&str; 2] = ["elect", "semaphore"];

/// The one line (without the `lockrun: ` prefix) for a failed parse of `args`.
pub fn explain(args: &[OsString], error: &clap::Error) -> String {
    let words = words(args);
    let ours = ours(&words);
    let sub = subcommand(ours).map(|(_, name)| name);
    if let Some((what, help)) = habit(ours, sub) {
        return format!("{what}; {}", help_of(help.or(sub)));
    }
    let what =
        missing_separator(&words, subcommand(ours), error).unwrap_or_else(|| clap_message(error));
    format!("{what}; {}", help_of(sub))
}

/// clap reads `-http-addr` as `-h` followed by more short flags and prints
/// the help: when no help or version was asked for by name, but a habit of
/// an engine's tool is on the line, the user gets that answered instead.
pub fn mistaken_help(args: &[OsString]) -> Option<String> {
    let words = words(args);
    let ours = ours(&words);
    let asked = ["-h", "--help", "-V", "--version", "help"];
    if ours.iter().any(|w| asked.contains(&w.as_str())) {
        return None;
    }
    let sub = subcommand(ours).map(|(_, name)| name);
    let (what, help) = habit(ours, sub)?;
    Some(format!("{what}; {}", help_of(help.or(sub))))
}

fn words(args: &[OsString]) -> Vec<String> {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Only what precedes `--` is lockrun's; the rest belongs to the child.
fn ours(words: &[String]) -> &[String] {
    match words.iter().position(|w| w == "--") {
        Some(end) => &words[..end],
        None => words,
    }
}

/// The subcommand on the line, and where it is.
fn subcommand(ours: &[String]) -> Option<(usize, &str)> {
    let names: Vec<String> = crate::cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    ours.iter()
        .position(|w| names.contains(w))
        .map(|i| (i, ours[i].as_str()))
}

fn help_of(sub: Option<&str>) -> String {
    match sub {
        Some(name) => format!("see `lockrun {name} --help`"),
        None => "see `lockrun --help`".to_string(),
    }
}

/// A flag of an engine's own tool (each backend's
/// [`crate::backend::Registration::habits`]) or a lockrun flag with one
/// dash, answered with lockrun's equivalent, and the subcommand whose help
/// to point at when it is not the one on the line.
fn habit(ours: &[String], sub: Option<&str>) -> Option<(String, Option<&'static str>)> {
    let long_flags = long_flags();
    for (i, word) in ours.iter().enumerate() {
        let Some(flag) = word.strip_prefix('-') else {
            continue;
        };
        let double = flag.starts_with('-');
        let name = flag.trim_start_matches('-');
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        let inline_value = flag.split_once('=').map(|(_, v)| v);
        let next = inline_value.or(ours.get(i + 1).map(String::as_str));
        let typed = word.split_once('=').map_or(word.as_str(), |(f, _)| f);
        if sub == Some("elect") && (name == "limit" || word == "-l") {
            let n = next.filter(|n| n.parse::<u64>().is_ok()).unwrap_or("N");
            let what = format!(
                "a leader lock has one holder, so `elect` takes no `{typed}`; for {n} slots \
                 use `lockrun semaphore --limit {n} PREFIX -- COMMAND`"
            );
            return Some((what, Some("semaphore")));
        }
        let seen = crate::backend::Habit {
            name,
            flag: typed,
            double,
            next,
            sub,
        };
        let answer = crate::backend::BACKENDS
            .iter()
            .filter_map(|b| b.habits)
            .find_map(|habits| habits(&seen));
        if let Some(answer) = answer {
            return Some((answer.what, answer.help));
        }
        if !double && name.len() > 1 && long_flags.iter().any(|f| f == name) {
            return Some((
                format!("long flags take two dashes: `--{name}`, not `-{name}`"),
                None,
            ));
        }
    }
    None
}

/// Every long flag lockrun knows, of every subcommand.
fn long_flags() -> Vec<String> {
    let mut cli = crate::cli::command();
    cli.build();
    let mut flags: Vec<String> = Vec::new();
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        flags.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_long().map(String::from)),
        );
    }
    flags
}

/// `lockrun elect KEY echo hi`: COMMAND without the `--` that must precede
/// it, answered with the corrected line.
fn missing_separator(
    words: &[String],
    sub: Option<(usize, &str)>,
    error: &clap::Error,
) -> Option<String> {
    let (at, name) = sub?;
    if error.kind() != ErrorKind::UnknownArgument
        || !RUNNERS.contains(&name)
        || words.iter().any(|w| w == "--")
    {
        return None;
    }
    let Some(ContextValue::String(stray)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    if stray.starts_with('-') {
        return None;
    }
    let cut = at + 1 + words[at + 1..].iter().position(|w| w == stray)?;
    let mut line = vec!["lockrun".to_string()];
    line.extend(words[..cut].iter().map(|w| quote(w)));
    line.push("--".to_string());
    line.extend(words[cut..].iter().map(|w| quote(w)));
    Some(format!(
        "COMMAND must follow `--`, so that its flags are not taken for lockrun's: `{}`",
        line.join(" ")
    ))
}

/// clap's own account, with its suggestion kept and user input in backticks.
fn clap_message(error: &clap::Error) -> String {
    let invalid = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let suggestion = [ContextKind::SuggestedArg, ContextKind::SuggestedSubcommand]
        .into_iter()
        .find_map(|kind| match error.get(kind) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            Some(ContextValue::Strings(s)) => s.first().cloned(),
            _ => None,
        })
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    let head = match (
        error.kind(),
        error.get(ContextKind::InvalidSubcommand),
        invalid,
    ) {
        (ErrorKind::InvalidSubcommand, Some(ContextValue::String(s)), _) => {
            format!("unknown subcommand `{s}`")
        }
        (ErrorKind::UnknownArgument, _, Some(arg)) if arg.starts_with('-') => {
            format!("unknown flag `{arg}`")
        }
        (ErrorKind::UnknownArgument, _, Some(arg)) => format!("unexpected argument `{arg}`"),
        _ => first_paragraph(error),
    };
    format!("{head}{suggestion}")
}

/// clap's first paragraph says what is wrong (a list of missing arguments
/// spans several lines); usage and tips follow it.
fn first_paragraph(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let lines: Vec<&str> = rendered
        .trim_start()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = lines.join(" ");
    message
        .trim_start_matches("error: ")
        .replace('\'', "`")
        .to_string()
}

/// A word as sh would need it to read it back.
pub(crate) fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn line(args: &str) -> String {
        let args: Vec<OsString> = std::iter::once("lockrun")
            .chain(args.split_whitespace())
            .map(OsString::from)
            .collect();
        let error = crate::cli::Cli::try_parse_from(&args).expect_err("must not parse");
        explain(&args, &error)
    }

    #[test]
    fn quoting_round_trips_through_sh() {
        assert_eq!(quote("demo/leader"), "demo/leader");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn suggestions_point_at_the_subcommand_help() {
        assert_eq!(
            line("semaphore --limt 2 p -- true"),
            "unknown flag `--limt` (did you mean `--limit`?); see `lockrun semaphore --help`"
        );
    }
}

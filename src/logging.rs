//! Everything lockrun itself writes to stderr goes through here: `tracing`
//! events for -v/-vv, and the one `lockrun: ...` line for a fatal error.
//! stdout belongs to the child (and to `leader`'s answers).

use std::io::Write;

use tracing::level_filters::LevelFilter;

use crate::cli::LogFormat;

#[derive(Debug, Clone, Copy)]
pub struct Logging {
    pub format: LogFormat,
    pub quiet: bool,
}

/// The target of the events that change who runs (acquired, lost,
/// campaigning again, the engine unreachable): what an operator wants in the
/// journal of a daemon at the default verbosity.
pub const EVENT: &str = "lockrun::event";

/// Installs the subscriber: quiet by default (errors only), `-v` lifecycle
/// events, `-vv` HTTP detail, `-q` nothing but the fatal line. A daemon
/// (`daemon`: `--campaign` or `--notify`) also shows warnings and the
/// [`EVENT`]s by default; a one-off run stays quiet, since cron mails every
/// line a job writes.
pub fn init(verbose: u8, quiet: bool, format: LogFormat, daemon: bool) -> Logging {
    let (level, events) = match (quiet, verbose, daemon) {
        (true, _, _) => (LevelFilter::OFF, LevelFilter::OFF),
        (false, 0, false) => (LevelFilter::ERROR, LevelFilter::ERROR),
        (false, 0, true) => (LevelFilter::WARN, LevelFilter::INFO),
        (false, 1, _) => (LevelFilter::INFO, LevelFilter::INFO),
        (false, _, _) => (LevelFilter::DEBUG, LevelFilter::DEBUG),
    };
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("lockrun", level)
        .with_target(EVENT, events)
        .with_default(LevelFilter::OFF);
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let result = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .event_format(Line {
                        journal: stderr_is_journal(),
                    }),
            )
            .with(targets)
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr)
                    .with_target(false),
            )
            .with(targets)
            .try_init(),
    };
    // A second init (only in tests) keeps the first subscriber.
    let _ = result;
    Logging { format, quiet }
}

/// Whether stderr is connected to the journal: systemd sets `JOURNAL_STREAM`
/// to the stream's `device:inode`, which must match stderr itself (a child
/// of the service may have redirected it).
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(stat) = nix::sys::stat::fstat(std::io::stderr()) else {
        return false;
    };
    dev.parse() == Ok(stat.st_dev) && ino.parse() == Ok(stat.st_ino)
}

/// The syslog priority journald reads from a `<N>` prefix.
fn priority(level: tracing::Level, event: bool) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        // An event that changes who runs is a notice, above routine info.
        tracing::Level::INFO if event => 5,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Prints the one line a fatal error gets.
pub fn fatal(logging: Option<Logging>, message: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = match logging.map(|l| l.format) {
        Some(LogFormat::Json) => writeln!(
            stderr,
            "{}",
            serde_json::json!({
                "timestamp": now(),
                "level": "ERROR",
                "message": message,
                "fatal": true
            })
        ),
        _ if stderr_is_journal() => writeln!(stderr, "<3>lockrun: {message}"),
        _ => writeln!(stderr, "lockrun: {message}"),
    };
}

/// How long the engine must have been failing before a daemon's log says
/// so, and how often it says so again: a blip costs no line, an outage one a
/// minute.
const TROUBLE_QUIET: std::time::Duration = std::time::Duration::from_secs(5);
const TROUBLE_REPEAT: std::time::Duration = std::time::Duration::from_secs(60);

struct Trouble {
    since: std::time::Instant,
    reported: Option<std::time::Instant>,
}

static TROUBLE: std::sync::Mutex<Option<Trouble>> = std::sync::Mutex::new(None);

/// A request to `engine` failed in a way that may pass (unreachable, no
/// leader, a timeout).
pub fn engine_trouble(engine: &str, error: &dyn std::fmt::Display) {
    let now = std::time::Instant::now();
    let mut trouble = TROUBLE.lock().unwrap_or_else(|e| e.into_inner());
    let trouble = trouble.get_or_insert(Trouble {
        since: now,
        reported: None,
    });
    let due = match trouble.reported {
        None => now - trouble.since >= TROUBLE_QUIET,
        Some(at) => now - at >= TROUBLE_REPEAT,
    };
    if due {
        trouble.reported = Some(now);
        tracing::warn!(
            target: EVENT,
            "{engine} unreachable for {}, retrying: {error}",
            crate::lease::fmt_duration(now - trouble.since)
        );
    }
}

/// `engine` answered: if we had said it was unreachable, say it is back.
pub fn engine_answered(engine: &str) {
    let mut trouble = TROUBLE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(Trouble {
        since,
        reported: Some(_),
    }) = trouble.take()
    {
        tracing::info!(
            target: EVENT,
            "{engine} answers again after {}",
            crate::lease::fmt_duration(since.elapsed())
        );
    }
}

/// The text form of an event: `TIME lockrun: message key=value ...`, the
/// same prefix as the fatal line, with the level only where it is not an
/// error. Into the journal, a `<priority>` replaces the time, which journald
/// records itself.
struct Line {
    journal: bool,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Line
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = *event.metadata().level();
        let tag = if level == tracing::Level::ERROR {
            ""
        } else if level == tracing::Level::WARN {
            "warning: "
        } else if level == tracing::Level::INFO {
            ""
        } else {
            "debug: "
        };
        if self.journal {
            let event = event.metadata().target() == EVENT;
            write!(writer, "<{}>", priority(level, event))?;
        } else {
            write!(writer, "{} ", now())?;
        }
        write!(writer, "lockrun: {tag}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

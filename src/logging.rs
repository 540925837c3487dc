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

/// Installs the subscriber: quiet by default (errors only), `-v` lifecycle
/// events, `-vv` HTTP detail, `-q` nothing but the fatal line.
pub fn init(verbose: u8, quiet: bool, format: LogFormat) -> Logging {
    let level = match (quiet, verbose) {
        (true, _) => LevelFilter::OFF,
        (false, 0) => LevelFilter::ERROR,
        (false, 1) => LevelFilter::INFO,
        (false, _) => LevelFilter::DEBUG,
    };
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("lockrun", level)
        .with_default(LevelFilter::OFF);
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let result = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .event_format(Line),
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

/// Prints the one line a fatal error gets.
pub fn fatal(logging: Option<Logging>, message: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = match logging.map(|l| l.format) {
        Some(LogFormat::Json) => writeln!(
            stderr,
            "{}",
            serde_json::json!({ "level": "ERROR", "message": message, "fatal": true })
        ),
        _ => writeln!(stderr, "lockrun: {message}"),
    };
}

/// The text form of an event: `lockrun: message key=value ...`, the same
/// prefix as the fatal line, with the level only where it is not an error.
struct Line;

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
        write!(writer, "lockrun: {tag}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

//! Everything lockrun itself writes to stderr goes through here: `tracing`
//! events for -v/-vv, and the one `lockrun: ...` line for a fatal error.
//! stdout belongs to the child (and to `leader`'s answers).
//!
//! No thread that keeps a lease ever writes to stderr itself: a reader that
//! stalls (stderr into a pipe nobody reads) would block it in `write(2)`, and
//! renewals would stop while the child runs on. Lines go into a bounded queue
//! that one writer thread drains; when the queue is full a line is dropped and
//! counted, and the writer says how many once it catches up. The fatal line is
//! queued past the bound and waited for, but only for `FLUSH_PATIENCE`.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::level_filters::LevelFilter;

/// The format of lockrun's own messages on stderr (`--log-format`). It
/// lives here, not in `cli`, so that the engines, which report through this
/// module, do not depend on the command line, which names their settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy)]
pub struct Logging {
    pub format: LogFormat,
    pub quiet: bool,
}

/// The target of the events that change who runs (acquired, lost,
/// campaigning again, the engine unreachable): what an operator wants in the
/// journal of a daemon at the default verbosity.
pub const EVENT: &str = "lockrun::event";

/// The target of warnings a run shows even at the default verbosity, one-off
/// runs included (only `-q` hides them): facts that bear on the safety
/// promise and that only lockrun can see, such as a rival client on the
/// same lock that other clients do not count. Each says so once per run.
pub const SAFETY: &str = "lockrun::safety";

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
    let safety = if quiet {
        LevelFilter::OFF
    } else {
        level.max(LevelFilter::WARN)
    };
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("lockrun", level)
        .with_target(EVENT, events)
        .with_target(SAFETY, safety)
        .with_default(LevelFilter::OFF);
    let queue = Queue::start(format);
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let result = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(queue.clone())
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
                    .with_writer(queue.clone())
                    .with_target(false),
            )
            .with(targets)
            .try_init(),
    };
    // A second init (only in tests) keeps the first subscriber and its queue.
    if result.is_ok() {
        let _ = QUEUE.set(queue);
    }
    let notes = !quiet
        && verbose == 0
        && matches!(format, LogFormat::Text)
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    TERMINAL_NOTES.store(notes, std::sync::atomic::Ordering::Relaxed);
    SAYS.store(!quiet, std::sync::atomic::Ordering::Relaxed);
    Logging { format, quiet }
}

/// Whether [`note`] writes: stderr is a terminal, and neither `-q` nor `-v`
/// nor JSON logs were asked for.
static TERMINAL_NOTES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`say`] writes: unless `-q`.
static SAYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A line every run shows on stderr unless `-q`, whatever the verbosity:
/// what lockrun did to someone else (`--replace` ended a holder).
pub fn say(message: &str) {
    if !SAYS.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let line = format!("lockrun: {message}\n").into_bytes();
    match QUEUE.get() {
        Some(queue) => {
            queue.push(line, true);
            queue.flush(FLUSH_PATIENCE);
        }
        None => {
            let _ = std::io::stderr().lock().write_all(&line);
        }
    }
}

/// A one-line result for a person at a terminal, where a run that ends
/// with no word (`leader` finding no holder, `-n` on a held lock) leaves
/// them guessing: written only when stderr is a terminal, so scripts, cron
/// and the journal see exactly what they saw before.
pub fn note(message: &str) {
    if !TERMINAL_NOTES.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let line = format!("lockrun: {message}\n").into_bytes();
    match QUEUE.get() {
        Some(queue) => {
            queue.push(line, true);
            queue.flush(FLUSH_PATIENCE);
        }
        None => {
            let _ = std::io::stderr().lock().write_all(&line);
        }
    }
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

/// Prints the one line a fatal error gets: after every queued line, and
/// waited for at most `FLUSH_PATIENCE`, so a stalled reader cannot keep
/// lockrun from exiting.
pub fn fatal(logging: Option<Logging>, message: &str) {
    let line = match logging.map(|l| l.format) {
        Some(LogFormat::Json) => format!(
            "{}\n",
            serde_json::json!({
                "timestamp": now(),
                "level": "ERROR",
                "message": message,
                "fatal": true
            })
        ),
        _ if stderr_is_journal() => format!("<3>lockrun: {message}\n"),
        _ => format!("lockrun: {message}\n"),
    };
    match QUEUE.get() {
        Some(queue) => {
            queue.push(line.into_bytes(), true);
            queue.flush(FLUSH_PATIENCE);
        }
        // Before `init` (a usage error) no thread keeps a lease.
        None => {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }
}

/// Waits, at most `FLUSH_PATIENCE`, until every queued line and the count
/// of dropped ones are written; lockrun calls it before it exits.
pub fn finish() {
    if let Some(queue) = QUEUE.get() {
        queue.flush(FLUSH_PATIENCE);
    }
}

/// Lines the queue holds before it drops new ones: far more than a burst of
/// `-vv` events, far less than memory worth worrying about.
const CAPACITY: usize = 1024;

/// How long lockrun waits at exit for a stalled stderr.
const FLUSH_PATIENCE: Duration = Duration::from_secs(1);

static QUEUE: OnceLock<Queue> = OnceLock::new();

/// The bounded queue between every thread that logs and the writer thread.
#[derive(Clone)]
struct Queue(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer: a line or a drop to report.
    work: Condvar,
    /// Wakes whoever waits in `flush`: the writer finished a batch.
    written: Condvar,
    /// The format the writer thread writes the dropped-lines note in, for
    /// a queue that starts its own writer.
    writer: Option<LogFormat>,
    /// The writer thread is started with the first line, not before: a run
    /// that logs nothing (the default, for a one-off job) never pays for a
    /// thread, and stays single-threaded until its runtime starts, so that
    /// its guard can be forked rather than exec'd (see `child::Forked`).
    started: std::sync::Once,
}

#[derive(Default)]
struct State {
    lines: VecDeque<Vec<u8>>,
    /// Lines dropped since the writer last reported.
    dropped: u64,
    /// Lines queued so far, and how many of those the writer has written.
    queued: u64,
    done: u64,
}

impl Queue {
    /// A queue that drains into stderr, on a thread started with the first
    /// line. Without a thread (the system refused one) lines pile up to the
    /// bound and are dropped; the lease matters more than the log.
    fn start(format: LogFormat) -> Queue {
        Queue::new(Some(format))
    }

    fn new(writer: Option<LogFormat>) -> Queue {
        Queue(Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            written: Condvar::new(),
            writer,
            started: std::sync::Once::new(),
        }))
    }

    fn start_writer(&self) {
        let Some(format) = self.0.writer else {
            return;
        };
        self.0.started.call_once(|| {
            let writer = self.clone();
            let _ = std::thread::Builder::new()
                .name("lockrun-log".into())
                .spawn(move || writer.drain(std::io::stderr(), format));
        });
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind.
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one line, or counts it as dropped when the queue is full and
    /// the line may be dropped. Never blocks on stderr.
    fn push(&self, line: Vec<u8>, always: bool) {
        let mut state = self.state();
        if always || state.lines.len() < CAPACITY {
            state.lines.push_back(line);
            state.queued += 1;
        } else {
            state.dropped += 1;
        }
        drop(state);
        self.0.work.notify_one();
        self.start_writer();
    }

    /// Waits until everything queued before the call is written and no drop
    /// is left unreported, or `patience` has passed.
    fn flush(&self, patience: Duration) {
        let until = Instant::now() + patience;
        let mut state = self.state();
        let target = state.queued;
        while state.done < target || state.dropped > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = match self.0.written.wait_timeout(state, left) {
                Ok((state, _)) => state,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// The writer thread: takes everything queued at once, writes it, then
    /// says how many lines were dropped while it was stuck.
    fn drain(&self, mut out: impl Write, format: LogFormat) {
        loop {
            let (batch, dropped) = {
                let mut state = self.state();
                while state.lines.is_empty() && state.dropped == 0 {
                    state = match self.0.work.wait(state) {
                        Ok(state) => state,
                        Err(e) => e.into_inner(),
                    };
                }
                (
                    std::mem::take(&mut state.lines),
                    std::mem::take(&mut state.dropped),
                )
            };
            let count = batch.len() as u64;
            // A closed or failing stderr costs the line, nothing else.
            for line in batch {
                let _ = out.write_all(&line);
            }
            // Every dropped line came after the batch: a line is dropped
            // only while the queue is full, and we take it whole.
            if dropped > 0 {
                let _ = out.write_all(dropped_note(dropped, format).as_bytes());
            }
            let _ = out.flush();
            self.state().done += count;
            self.0.written.notify_all();
        }
    }
}

/// The line that owns up to dropped lines.
fn dropped_note(dropped: u64, format: LogFormat) -> String {
    let message = format!("{dropped} log lines dropped: stderr was not being read");
    match format {
        LogFormat::Json => format!(
            "{}\n",
            serde_json::json!({ "level": "WARN", "message": message })
        ),
        LogFormat::Text => format!("lockrun: warning: {message}\n"),
    }
}

/// Each event arrives as one `write_all` of the whole formatted line.
impl Write for Queue {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf.to_vec(), false);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Queue {
    type Writer = Queue;

    fn make_writer(&'a self) -> Queue {
        self.clone()
    }
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
            crate::duration::fmt_duration(now - trouble.since)
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
            crate::duration::fmt_duration(since.elapsed())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// stderr as a pipe nobody reads, until the test says so.
    struct Stalled {
        entered: mpsc::Sender<()>,
        open: mpsc::Receiver<()>,
        out: mpsc::Sender<Vec<u8>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.entered.send(());
            let _ = self.open.recv();
            let _ = self.out.send(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A queue whose writer the test runs itself.
    fn queue() -> Queue {
        Queue::new(None)
    }

    /// A queue whose writer is stuck in its first write.
    fn stalled() -> (
        Queue,
        mpsc::Sender<()>,
        mpsc::Receiver<()>,
        mpsc::Receiver<Vec<u8>>,
    ) {
        let queue = queue();
        let (entered, writing) = mpsc::channel();
        let (open, gate) = mpsc::channel();
        let (out, written) = mpsc::channel();
        let writer = queue.clone();
        let stalled = Stalled {
            entered,
            open: gate,
            out,
        };
        std::thread::spawn(move || writer.drain(stalled, LogFormat::Text));
        (queue, open, writing, written)
    }

    #[test]
    fn a_stalled_reader_costs_lines_not_the_caller() {
        let (queue, open, writing, written) = stalled();
        queue.clone().write_all(b"line 0\n").unwrap();
        writing.recv().unwrap();

        // The writer is blocked in write: everything else must return at
        // once, filling the queue and then dropping.
        let extra = 10;
        let lines = 1 + CAPACITY + extra;
        let started = Instant::now();
        for n in 1..lines {
            let mut writer = queue.clone();
            writer.write_all(format!("line {n}\n").as_bytes()).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(queue.state().dropped, extra as u64);

        // The reader wakes up: every kept line, in order, then the count.
        for _ in 0..lines * 2 {
            open.send(()).unwrap();
        }
        queue.flush(Duration::from_secs(60));
        drop(open);
        let text: Vec<String> = written
            .try_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect();
        let kept = lines - extra;
        for (n, line) in text[..kept].iter().enumerate() {
            assert_eq!(line, &format!("line {n}\n"));
        }
        assert_eq!(
            text[kept],
            format!("lockrun: warning: {extra} log lines dropped: stderr was not being read\n")
        );
        assert_eq!(text.len(), kept + 1);
    }

    #[test]
    fn flush_gives_up_after_its_patience() {
        let (queue, _open, writing, _written) = stalled();
        queue.push(b"lockrun: fatal\n".to_vec(), true);
        writing.recv().unwrap();
        let started = Instant::now();
        queue.flush(Duration::from_millis(200));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }

    #[test]
    fn the_fatal_line_passes_a_full_queue() {
        let queue = queue();
        for _ in 0..CAPACITY + 3 {
            queue.push(b"x\n".to_vec(), false);
        }
        queue.push(b"fatal\n".to_vec(), true);
        let state = queue.state();
        assert_eq!(state.lines.back().unwrap(), b"fatal\n");
        assert_eq!(state.dropped, 3);
    }
}

//! Signals as values, and the stream of the ones lockrun forwards.
//!
//! Raw signal numbers stay in this module and in `child/`: everything else
//! talks about [`Signal`], parses `--kill-signal` with its `FromStr`, and reads
//! delivered signals from [`Signals`].
//!
//! Registering a handler through tokio removes the default action for good
//! (tokio's `signal::unix` docs, "Caveats"): once [`Signals::new`] has run,
//! lockrun never dies *of* SIGINT or SIGTERM, so every path must end in an
//! explicit exit. tokio also coalesces deliveries, so a burst of USR1s may
//! arrive as one; forwarding does not promise to count them.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::str::FromStr;
use std::task::Poll;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

mod sys;

pub use sys::{die_by, die_by_number};

/// A signal lockrun can send, forward or be told to use by `--kill-signal`.
///
/// We list the signals that make sense to *stop* a process with, plus the ones
/// we forward; job-control signals (STOP, TSTP, CONT) are left out on purpose,
/// since a stopped child would keep running outside the lock once resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Hup,
    Int,
    Quit,
    Abrt,
    Kill,
    Usr1,
    Usr2,
    Alrm,
    Term,
}

impl Signal {
    /// Every signal this type can name, in numeric order.
    pub const ALL: [Signal; 9] = [
        Signal::Hup,
        Signal::Int,
        Signal::Quit,
        Signal::Abrt,
        Signal::Kill,
        Signal::Usr1,
        Signal::Usr2,
        Signal::Alrm,
        Signal::Term,
    ];

    /// The signals lockrun forwards to its child while the child runs (SPEC §4).
    pub const FORWARDED: [Signal; 6] = [
        Signal::Int,
        Signal::Term,
        Signal::Hup,
        Signal::Quit,
        Signal::Usr1,
        Signal::Usr2,
    ];

    /// The signal's number on this platform.
    pub fn number(&self) -> i32 {
        match self {
            Signal::Hup => libc::SIGHUP,
            Signal::Int => libc::SIGINT,
            Signal::Quit => libc::SIGQUIT,
            Signal::Abrt => libc::SIGABRT,
            Signal::Kill => libc::SIGKILL,
            Signal::Usr1 => libc::SIGUSR1,
            Signal::Usr2 => libc::SIGUSR2,
            Signal::Alrm => libc::SIGALRM,
            Signal::Term => libc::SIGTERM,
        }
    }

    /// The name without the `SIG` prefix, as `kill -l` prints it: `TERM`.
    pub fn name(&self) -> &'static str {
        match self {
            Signal::Hup => "HUP",
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Abrt => "ABRT",
            Signal::Kill => "KILL",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
            Signal::Alrm => "ALRM",
            Signal::Term => "TERM",
        }
    }

    /// The signal with this number, if it is one we name.
    pub fn from_number(number: i32) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.number() == number)
    }

    fn kind(&self) -> SignalKind {
        SignalKind::from_raw(self.number())
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.name())
    }
}

/// Why a `--kill-signal` value was refused; displays as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseSignalError {
    input: String,
    numeric: bool,
}

impl fmt::Display for ParseSignalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.numeric {
            let names: Vec<&str> = Signal::ALL.iter().map(Signal::name).collect();
            write!(
                f,
                "unsupported signal number `{}`; use one of {} or its number",
                self.input,
                names.join(", ")
            )
        } else {
            let names: Vec<&str> = Signal::ALL.iter().map(Signal::name).collect();
            let bare = self.input.trim().trim_start_matches("SIG");
            if [
                "STOP", "TSTP", "TTIN", "TTOU", "CONT", "CHLD", "PIPE", "ALRM", "WINCH",
            ]
            .contains(&bare)
            {
                // A real signal, but not one that asks a job anything
                // lockrun can stand behind.
                write!(
                    f,
                    "signal `{}` is not one lockrun sends; use one of {}",
                    self.input,
                    names.join(", ")
                )
            } else {
                write!(
                    f,
                    "unknown signal `{}`; use a name like TERM or a number",
                    self.input
                )
            }
        }
    }
}

impl std::error::Error for ParseSignalError {}

impl FromStr for Signal {
    type Err = ParseSignalError;

    /// Accepts `TERM`, `SIGTERM`, `term`, `sigterm` and `15`, as kill(1) does.
    fn from_str(s: &str) -> Result<Signal, ParseSignalError> {
        let trimmed = s.trim();
        if let Ok(number) = trimmed.parse::<i32>() {
            return Signal::from_number(number).ok_or_else(|| ParseSignalError {
                input: s.to_owned(),
                numeric: true,
            });
        }
        let upper = trimmed.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        Signal::ALL
            .into_iter()
            .find(|sig| sig.name() == bare)
            .ok_or_else(|| ParseSignalError {
                input: s.to_owned(),
                numeric: false,
            })
    }
}

/// `--kill-signal`'s parser: [`Signal`]'s `FromStr` (names and numbers, with
/// its messages), which also tells clap the names, so that the completions
/// offer signals rather than file names.
#[derive(Debug, Clone, Copy)]
pub struct SignalParser;

impl clap::builder::TypedValueParser for SignalParser {
    type Value = Signal;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Signal, clap::Error> {
        let parse = |text: &str| text.parse::<Signal>();
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            Signal::ALL
                .iter()
                .map(|sig| clap::builder::PossibleValue::new(sig.name())),
        ))
    }
}

/// The forwarded signals as they arrive at lockrun.
///
/// Besides the real thing ([`Signals::new`]) there is a source fed by hand
/// ([`Signals::channel`]), so a loop can be tested with synthetic events.
pub struct Signals {
    source: Source,
}

enum Source {
    Os {
        streams: Vec<(Signal, tokio::signal::unix::Signal)>,
        // Where the next poll starts, so a steady stream of one signal
        // cannot starve the others.
        next: usize,
    },
    Channel(mpsc::UnboundedReceiver<Signal>),
}

/// The sending half of [`Signals::channel`].
#[derive(Clone)]
pub struct SignalSender(mpsc::UnboundedSender<Signal>);

impl SignalSender {
    /// Delivers `sig` as if the OS had; ignored once the [`Signals`] is gone.
    pub fn send(&self, sig: Signal) {
        let _ = self.0.send(sig);
    }
}

/// The forwarded signals as a set for `sigprocmask`.
fn forwarded_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for sig in Signal::FORWARDED {
        if let Ok(sig) = nix::sys::signal::Signal::try_from(sig.number()) {
            set.add(sig);
        }
    }
    set
}

/// Holds the forwarded signals back, pending, from the first instruction
/// of `main` until [`Signals::new`] has handlers for them (or
/// [`release_held`] gives them their default action): a HUP in lockrun's
/// first millisecond is then answered like any later one (129), instead of
/// killing lockrun by the default action before the handlers exist.
pub fn hold_until_handled() {
    let _ = forwarded_set().thread_block();
}

/// Whether a forwarded signal is pending, held back by
/// [`hold_until_handled`] before its handler exists: a wait that runs
/// before the hold's (`--replace`'s) looks for one to end early.
pub fn forwarded_pending() -> bool {
    let pending = sys::pending();
    Signal::FORWARDED
        .into_iter()
        .any(|sig| pending.contains(&sig.number()))
}

/// Lets the signals [`hold_until_handled`] held back through, pending ones
/// first.
pub fn release_held() {
    let _ = forwarded_set().thread_unblock();
}

impl Signals {
    /// Registers handlers for INT, TERM, HUP, QUIT, USR1 and USR2, then
    /// lets through those start-up held back, which now reach the handlers.
    ///
    /// Call it once, early, from within the tokio runtime: from then on these
    /// signals no longer terminate lockrun (see the module docs).
    pub fn new() -> io::Result<Signals> {
        let streams = Signal::FORWARDED
            .into_iter()
            .map(|sig| Ok((sig, signal(sig.kind())?)))
            .collect::<io::Result<Vec<_>>>()?;
        release_held();
        Ok(Signals {
            source: Source::Os { streams, next: 0 },
        })
    }

    /// A source fed by the returned sender, for tests.
    pub fn channel() -> (SignalSender, Signals) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            SignalSender(tx),
            Signals {
                source: Source::Channel(rx),
            },
        )
    }

    /// The next forwarded signal. Cancel-safe: a signal is consumed only when
    /// this future returns it.
    pub async fn recv(&mut self) -> Signal {
        match &mut self.source {
            Source::Os { streams, next } => {
                poll_fn(|cx| {
                    let count = streams.len();
                    for offset in 0..count {
                        let index = (*next + offset) % count;
                        let (sig, stream) = &mut streams[index];
                        // `None` means the runtime's signal driver is gone,
                        // in which case nothing will be delivered again:
                        // treat it like a stream that stays quiet.
                        if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                            *next = (index + 1) % count;
                            return Poll::Ready(*sig);
                        }
                    }
                    Poll::Pending
                })
                .await
            }
            Source::Channel(rx) => match rx.recv().await {
                Some(sig) => sig,
                None => std::future::pending().await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_prefixes_case_and_numbers() {
        for text in [
            "TERM", "SIGTERM", "term", "sigterm", "SigTerm", "15", " 15 ",
        ] {
            assert_eq!(text.parse::<Signal>(), Ok(Signal::Term), "{text}");
        }
        assert_eq!("kill".parse::<Signal>(), Ok(Signal::Kill));
        assert_eq!("9".parse::<Signal>(), Ok(Signal::Kill));
        assert_eq!("SIGUSR2".parse::<Signal>(), Ok(Signal::Usr2));
    }

    #[test]
    fn refuses_unknown_signals_in_one_line() {
        let err = "FOO".parse::<Signal>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown signal `FOO`; use a name like TERM or a number"
        );
        let err = "SIG".parse::<Signal>().unwrap_err().to_string();
        assert!(err.starts_with("unknown signal `SIG`"), "{err}");
        let err = "19".parse::<Signal>().unwrap_err().to_string();
        assert!(err.starts_with("unsupported signal number `19`;"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn displays_and_round_trips() {
        for sig in Signal::ALL {
            assert_eq!(sig.to_string(), format!("SIG{}", sig.name()));
            assert_eq!(sig.to_string().parse::<Signal>(), Ok(sig));
            assert_eq!(sig.number().to_string().parse::<Signal>(), Ok(sig));
            assert_eq!(Signal::from_number(sig.number()), Some(sig));
        }
        assert_eq!(Signal::Term.to_string(), "SIGTERM");
        assert_eq!(Signal::Term.number(), 15);
    }

    #[test]
    fn os_source_delivers_a_raised_signal() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut signals = Signals::new().unwrap();
            nix::sys::signal::raise(nix::sys::signal::Signal::SIGUSR2).unwrap();
            let received = tokio::time::timeout(std::time::Duration::from_secs(30), signals.recv());
            assert_eq!(received.await, Ok(Signal::Usr2));
        });
    }

    #[test]
    fn channel_source_delivers_in_order() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (tx, mut signals) = Signals::channel();
            tx.send(Signal::Usr1);
            tx.send(Signal::Term);
            assert_eq!(signals.recv().await, Signal::Usr1);
            assert_eq!(signals.recv().await, Signal::Term);
        });
    }
}

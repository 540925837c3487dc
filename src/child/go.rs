//! The go message: what a parked guard waits for before it runs COMMAND.
//!
//! lockrun starts the guard while it still waits for the lock
//! ([`super::Child::prepare`]), so that exec'ing and initialising the guard
//! is not on the handover's critical path. The parked guard blocks reading a
//! pipe whose only writer is lockrun. Once the lock is held, lockrun writes
//! one message and closes its end:
//!
//! ```text
//! u32 LE   length of the body in bytes, at most MAX_BODY
//! u32 LE   flags: 1 if lockrun will say whether the guard may let go of
//!          the descriptor lent with the message (see `deadline::Verdict`),
//!          2 if the message arms the guard rather than lets it go (below)
//! body     zero or more entries: u32 LE key length, key, u32 LE value length, value
//! ```
//!
//! An *armed* guard (flag 2) is lent a lock's descriptor that is not yet
//! granted: it waits for the grant itself, in `flock(2)`, and starts COMMAND
//! the moment it has it, as `flock(1)` does, with nobody to wake between
//! the grant and the start. Its body's entries are followed by a u32 LE
//! length and that many bytes of JSON ([`Arming`]): what the engine's step
//! in the guard needs once the lock is granted (see [`super::set_grant_step`]),
//! which returns the fencing number, and the variables set from it. The guard
//! answers on the same socket with one [`Report`]: granted (COMMAND started,
//! or failed to, as after a go), declined (granted, but the engine's step
//! refused it: the lock is let go, nothing ran) or disarmed (lockrun took the
//! wait back with the disarm signal). Declined or disarmed, it is parked
//! again, and waits for the next message.
//!
//! The entries are environment variables COMMAND gets on top of the guard's
//! own, the ones known only once the lock is held (`LOCKRUN_SESSION`...). A
//! descriptor lent to the guard (the local engine's `flock`ed file) travels
//! beside the message's first bytes, on a Unix socket instead of a pipe.
//! Anything but a whole, well-formed message means "no": EOF because lockrun
//! gave up or died, a message cut short, garbage. The guard then exits
//! without running COMMAND. It reads no further than the length announced,
//! so it never waits on lockrun once the message is complete.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

/// The largest body we send or accept. A message must fit in the pipe at
/// once (lockrun writes it without blocking, see [`send`]), and a pipe holds
/// 64 KiB unless the user is over their pipe quota. Ours are a few hundred
/// bytes.
const MAX_BODY: usize = 32 * 1024;

/// The size of the message's header: the body's length, the verdict flag.
const HEADER: usize = 8;

/// The flag that says a verdict follows.
const VERDICT: u32 = 1;
/// The flag that says the message arms the guard.
const ARM: u32 = 2;

/// What an armed guard needs besides COMMAND's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Arming {
    /// For the engine's step in the guard, once the lock is granted.
    pub grant: String,
    /// Variables whose value is the fencing number that step returns.
    pub fence_vars: Vec<String>,
    /// The sequencer variable, if COMMAND gets one: its name, and the
    /// sequencer's backend, key and holder (the fence is the step's).
    pub sequencer: Option<(String, String, String, Option<String>)>,
}

/// The go message for `env`, saying whether a verdict on the lent
/// descriptor follows. Fails if it is too large, or if a variable is one no
/// environment can hold (an empty name, `=` in a name, a NUL byte).
pub(super) fn encode(env: &[(OsString, OsString)], verdict: bool) -> io::Result<Vec<u8>> {
    encode_with(env, if verdict { VERDICT } else { 0 }, None)
}

/// The message that arms the guard (see the module's docs).
pub(super) fn encode_arm(
    env: &[(OsString, OsString)],
    verdict: bool,
    arming: &Arming,
) -> io::Result<Vec<u8>> {
    let json = serde_json::to_vec(arming).map_err(io::Error::other)?;
    encode_with(env, ARM | if verdict { VERDICT } else { 0 }, Some(&json))
}

fn encode_with(
    env: &[(OsString, OsString)],
    flags: u32,
    arming: Option<&[u8]>,
) -> io::Result<Vec<u8>> {
    let mut message = vec![0; HEADER];
    if arming.is_some() {
        // The entries' length, filled in below.
        message.extend_from_slice(&[0; 4]);
    }
    for (key, value) in env {
        if !valid(key, value) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` cannot be an environment variable",
                    key.to_string_lossy()
                ),
            ));
        }
        for part in [key, value] {
            let bytes = part.as_bytes();
            message.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            message.extend_from_slice(bytes);
        }
    }
    if let Some(json) = arming {
        let entries = (message.len() - HEADER - 4) as u32;
        message[HEADER..HEADER + 4].copy_from_slice(&entries.to_le_bytes());
        message.extend_from_slice(&(json.len() as u32).to_le_bytes());
        message.extend_from_slice(json);
    }
    let body = message.len() - HEADER;
    if body > MAX_BODY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the command's environment is too large ({body} bytes; at most {MAX_BODY})"),
        ));
    }
    message[..4].copy_from_slice(&(body as u32).to_le_bytes());
    message[4..HEADER].copy_from_slice(&flags.to_le_bytes());
    Ok(message)
}

/// Writes `message` whole into `pipe`, with the descriptor `lent` beside
/// it if given (the guard keeps it; see [`super::Command::lends`]). The
/// pipe is non-blocking and empty, so this never waits: a message the pipe
/// cannot take at once is an error, as is a guard that is gone (EPIPE).
pub(super) fn send(pipe: &File, message: &[u8], lent: Option<&OwnedFd>) -> io::Result<()> {
    match super::sys::send_go(pipe, message, lent) {
        Ok(n) if n == message.len() => Ok(()),
        Ok(n) => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("the pipe took {n} of {} bytes", message.len()),
        )),
        Err(err) => Err(err),
    }
}

/// Environment variables to add, in order.
pub(super) type Env = Vec<(OsString, OsString)>;

/// The go message, as the guard reads it.
pub(super) struct Go {
    /// Environment variables for COMMAND.
    pub env: Env,
    /// The descriptor lent with it, if any.
    pub lent: Option<OwnedFd>,
    /// Whether lockrun will say if we may let go of it (see
    /// `deadline::Verdict`), which we then wait for at our end.
    pub verdict: bool,
}

/// A message the parked guard reads.
pub(super) enum Message {
    Go(Go),
    /// Wait for the lent descriptor's lock, then start.
    Arm(Go, Arming),
}

/// The message as the guard reads it from `pipe`, or `None` if what came
/// is not a whole, well-formed message. An armed one comes with a lent
/// descriptor, or is none.
pub(super) fn receive(pipe: &File) -> Option<Message> {
    let mut header = [0; HEADER];
    // The descriptor comes with the message's first bytes.
    let (got, lent) = super::sys::receive_go(pipe, &mut header).ok()?;
    if got == 0 {
        return None;
    }
    let (env, verdict, arming) = read_rest(pipe, header, got)?;
    let go = Go { env, lent, verdict };
    match arming {
        Some(arming) if go.lent.is_some() => Some(Message::Arm(go, arming)),
        Some(_) => None,
        None => Some(Message::Go(go)),
    }
}

/// The environment and the verdict flag from a whole go message in `input`.
#[cfg(test)]
fn read(input: impl Read) -> Option<(Env, bool)> {
    match read_rest(input, [0; HEADER], 0)? {
        (env, verdict, None) => Some((env, verdict)),
        _ => None,
    }
}

/// The rest of a message whose first `got` bytes are in `header`.
fn read_rest(
    mut pipe: impl Read,
    mut header: [u8; HEADER],
    got: usize,
) -> Option<(Env, bool, Option<Arming>)> {
    pipe.read_exact(&mut header[got..]).ok()?;
    let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    let (length, flags) = (word(0) as usize, word(4));
    if length > MAX_BODY || flags > (VERDICT | ARM) {
        return None;
    }
    let mut body = vec![0; length];
    pipe.read_exact(&mut body).ok()?;
    let verdict = flags & VERDICT != 0;
    if flags & ARM == 0 {
        return Some((decode(&body)?, verdict, None));
    }
    let mut rest = body.as_slice();
    let entries = field(&mut rest)?;
    let json = field(&mut rest)?;
    if !rest.is_empty() {
        return None;
    }
    let arming = serde_json::from_slice(json.as_bytes()).ok()?;
    Some((decode(entries.as_bytes())?, verdict, Some(arming)))
}

/// What an armed guard answers (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Granted and started: what the engine's step returned for lockrun.
    Granted(String),
    /// Granted, and refused by the engine's step: let go, nothing ran.
    Declined,
    /// Taken back before the grant.
    Disarmed,
}

impl Report {
    /// One record: a kind byte, a u32 LE length, the text.
    pub(super) fn encode(&self) -> Vec<u8> {
        let (kind, text) = match self {
            Report::Granted(text) => (1u8, text.as_bytes()),
            Report::Declined => (2, &[][..]),
            Report::Disarmed => (3, &[][..]),
        };
        let mut record = vec![kind];
        record.extend_from_slice(&(text.len() as u32).to_le_bytes());
        record.extend_from_slice(text);
        record
    }

    /// The report at the front of `bytes`, once it is whole: `Ok(None)`
    /// until then, `Err` for what no guard sends.
    pub(super) fn decode(bytes: &[u8]) -> Result<Option<Report>, ()> {
        let Some((&kind, rest)) = bytes.split_first() else {
            return Ok(None);
        };
        let Some((length, text)) = rest.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let length = u32::from_le_bytes(*length) as usize;
        if length > MAX_BODY {
            return Err(());
        }
        if text.len() < length {
            return Ok(None);
        }
        let text = &text[..length];
        match kind {
            1 => String::from_utf8(text.to_vec())
                .map(|t| Some(Report::Granted(t)))
                .map_err(|_| ()),
            2 if text.is_empty() => Ok(Some(Report::Declined)),
            3 if text.is_empty() => Ok(Some(Report::Disarmed)),
            _ => Err(()),
        }
    }
}

fn decode(mut body: &[u8]) -> Option<Vec<(OsString, OsString)>> {
    let mut env = Vec::new();
    while !body.is_empty() {
        let key = field(&mut body)?;
        let value = field(&mut body)?;
        if !valid(key, value) {
            return None;
        }
        env.push((key.to_owned(), value.to_owned()));
    }
    Some(env)
}

/// Takes one length-prefixed field off the front of `body`.
fn field<'a>(body: &mut &'a [u8]) -> Option<&'a OsStr> {
    let (length, rest) = body.split_first_chunk::<4>()?;
    let length = u32::from_le_bytes(*length) as usize;
    if rest.len() < length {
        return None;
    }
    let (field, rest) = rest.split_at(length);
    *body = rest;
    Some(OsStr::from_bytes(field))
}

fn valid(key: &OsStr, value: &OsStr) -> bool {
    let (key, value) = (key.as_bytes(), value.as_bytes());
    !key.is_empty() && !key.contains(&b'=') && !key.contains(&0) && !value.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn round_trips() {
        for pairs in [
            env(&[]),
            env(&[("LOCKRUN_KEY", "a/b c"), ("EMPTY", ""), ("X", "=")]),
        ] {
            for verdict in [false, true] {
                let message = encode(&pairs, verdict).unwrap();
                assert_eq!(read(&message[..]), Some((pairs.clone(), verdict)));
            }
        }
        let odd = vec![(
            OsString::from("K"),
            OsString::from_vec(vec![0xff, 0xfe, b'\n']),
        )];
        assert_eq!(read(&encode(&odd, false).unwrap()[..]), Some((odd, false)));
    }

    #[test]
    fn anything_short_of_a_whole_message_is_no() {
        let message = encode(&env(&[("A", "1"), ("B", "2")]), true).unwrap();
        for cut in 0..message.len() {
            assert_eq!(read(&message[..cut]), None, "cut at {cut}");
        }
        // A length that overruns the body it announces.
        let mut garbled = message.clone();
        garbled[HEADER] = 200;
        assert_eq!(read(&garbled[..]), None);
        // A flag we never send.
        let mut flagged = message.clone();
        flagged[4] = 4;
        assert_eq!(read(&flagged[..]), None);
        // A huge announced length is refused before anything is allocated.
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0][..]), None);
        // Bytes after the message are not read.
        let mut longer = message.clone();
        longer.extend_from_slice(b"trailing");
        assert!(read(&longer[..]).is_some());
    }

    #[test]
    fn an_arming_round_trips_and_reports_parse_only_whole() {
        let arming = Arming {
            grant: "{\"k\":1}".into(),
            fence_vars: vec!["LOCKRUN_LOCK_INDEX".into()],
            sequencer: Some(("S".into(), "local".into(), "k".into(), Some("7".into()))),
        };
        let pairs = env(&[("LOCKRUN_KEY", "k"), ("E", "")]);
        let message = encode_arm(&pairs, true, &arming).unwrap();
        let (got, verdict, armed) = read_rest(&message[..], [0; HEADER], 0).unwrap();
        assert_eq!((got, verdict, armed), (pairs, true, Some(arming)));
        for cut in 0..message.len() {
            assert!(
                read_rest(&message[..cut], [0; HEADER], 0).is_none(),
                "cut at {cut}"
            );
        }
        for report in [
            Report::Granted("x".into()),
            Report::Declined,
            Report::Disarmed,
        ] {
            let bytes = report.encode();
            assert_eq!(Report::decode(&bytes), Ok(Some(report.clone())));
            for cut in 0..bytes.len() {
                assert_eq!(Report::decode(&bytes[..cut]), Ok(None), "cut at {cut}");
            }
        }
        assert_eq!(Report::decode(&[9, 0, 0, 0, 0]), Err(()));
    }

    #[test]
    fn refuses_what_no_environment_can_hold() {
        for (key, value) in [("", "v"), ("A=B", "v"), ("A\0", "v"), ("A", "v\0")] {
            let pairs = env(&[(key, value)]);
            let err = encode(&pairs, false).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{key:?}");
            // And a guard refuses it too, should it ever come.
            let mut message = encode(&env(&[("KEY", "v")]), false).unwrap();
            message.truncate(HEADER);
            for part in [key, value] {
                message.extend_from_slice(&(part.len() as u32).to_le_bytes());
                message.extend_from_slice(part.as_bytes());
            }
            let body = (message.len() - HEADER) as u32;
            message[..4].copy_from_slice(&body.to_le_bytes());
            assert_eq!(read(&message[..]), None, "{key:?}");
        }
        let huge = env(&[("BIG", &"x".repeat(MAX_BODY))]);
        assert_eq!(
            encode(&huge, false).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}

//! Go's `time.ParseDuration` and `Duration.String`, byte for byte.
//!
//! Consul parses `wait`, `TTL` and `LockDelay` with Go's parser and prints
//! durations into error messages with Go's formatter (`[10s=24h0m0s]`), so a
//! client that passes `1.5s` or reads an error text sees exactly what a real
//! agent would give it only if we copy both.

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000;
const MILLISECOND: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// Go's `strconv.Quote`, enough for the error texts we copy: printable
/// characters stay, the rest become escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        push_quoted_char(&mut out, c, '"');
    }
    out.push('"');
    out
}

/// One character as `strconv.Quote` writes it between `quote` marks.
pub fn push_quoted_char(out: &mut String, c: char, quote: char) {
    match c {
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        '\\' => out.push_str("\\\\"),
        c if c == quote => {
            out.push('\\');
            out.push(c);
        }
        c if (c as u32) < 0x20 || c as u32 == 0x7f => {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
        c if c.is_control() => {
            if (c as u32) < 0x10000 {
                out.push_str(&format!("\\u{:04x}", c as u32));
            } else {
                out.push_str(&format!("\\U{:08x}", c as u32));
            }
        }
        c => out.push(c),
    }
}

fn invalid(orig: &str) -> String {
    format!("time: invalid duration {}", go_quote(orig))
}

/// `time.ParseDuration`: the nanoseconds, or Go's error text.
pub fn parse(orig: &str) -> Result<i64, String> {
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first() {
        if c == b'-' || c == b'+' {
            neg = c == b'-';
            s = &s[1..];
        }
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid(orig));
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid(orig));
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(|| invalid(orig))?;
        s = rest;
        let pre = before != s.len();

        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut post = false;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            let (f, sc, rest) = leading_fraction(s);
            frac = f;
            scale = sc;
            s = rest;
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid(orig));
        }

        let unit_len = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", go_quote(orig)));
        }
        let unit_text = &s[..unit_len];
        s = &s[unit_len..];
        let unit = match unit_text {
            b"ns" => NANOSECOND,
            // `us`, then U+00B5 and U+03BC before `s`.
            b"us" | [0xc2, 0xb5, b's'] | [0xce, 0xbc, b's'] => MICROSECOND,
            b"ms" => MILLISECOND,
            b"s" => SECOND,
            b"m" => MINUTE,
            b"h" => HOUR,
            _ => {
                let u = String::from_utf8_lossy(unit_text);
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(&u),
                    go_quote(orig)
                ));
            }
        };
        if v > (1u64 << 63) / unit {
            return Err(invalid(orig));
        }
        v *= unit;
        if frac > 0 {
            // Go does this in float64 and truncates; so do we, to land on the
            // same nanosecond for inputs like `1.1s`.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > 1u64 << 63 {
                return Err(invalid(orig));
            }
        }
        total += v;
        if total > 1u64 << 63 {
            return Err(invalid(orig));
        }
    }
    if neg {
        return Ok((total as i64).wrapping_neg());
    }
    if total > (1u64 << 63) - 1 {
        return Err(invalid(orig));
    }
    Ok(total as i64)
}

fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > (1u64 << 63) / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > 1u64 << 63 {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let mut x: u64 = 0;
    let mut scale = 1.0;
    let mut overflow = false;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > ((1u64 << 63) - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > 1u64 << 63 {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

/// `Duration.String`: `1.5s`, `10s`, `24h0m0s`, `250ms`, `0s`.
pub fn format(d: i64) -> String {
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let mut out = String::new();
    if u < SECOND {
        let (prec, unit) = match u {
            0 => return "0s".to_string(),
            u if u < MICROSECOND => (0, "ns"),
            u if u < MILLISECOND => (3, "µs"),
            _ => (6, "ms"),
        };
        let (frac, int) = fraction(u, prec);
        out.push_str(&int.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (frac, secs) = fraction(u, 9);
        u = secs;
        let s = u % 60;
        u /= 60;
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Splits `v` into `v / 10^prec` and Go's `.123` fraction text (trailing
/// zeros and a bare point dropped).
fn fraction(v: u64, prec: u32) -> (String, u64) {
    let divisor = 10u64.pow(prec);
    let frac = v % divisor;
    if frac == 0 {
        return (String::new(), v / divisor);
    }
    let digits = format!("{:0width$}", frac, width = prec as usize);
    (format!(".{}", digits.trim_end_matches('0')), v / divisor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_clients_send() {
        assert_eq!(parse("10s"), Ok(10 * SECOND as i64));
        assert_eq!(parse("1500ms"), Ok(1500 * MILLISECOND as i64));
        assert_eq!(parse("15000ms"), Ok(15 * SECOND as i64));
        assert_eq!(parse("1m30s"), Ok(90 * SECOND as i64));
        assert_eq!(parse("2.5s"), Ok(2_500_000_000));
        assert_eq!(parse("1.1s"), Ok(1_100_000_000));
        assert_eq!(parse(".5s"), Ok(500_000_000));
        assert_eq!(
            parse("5."),
            Err("time: missing unit in duration \"5.\"".into())
        );
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("-0"), Ok(0));
        assert_eq!(parse("+3s"), Ok(3 * SECOND as i64));
        assert_eq!(parse("-1h"), Ok(-(HOUR as i64)));
        assert_eq!(parse("24h"), Ok(24 * HOUR as i64));
        assert_eq!(parse("1us"), Ok(1000));
        assert_eq!(parse("1µs"), Ok(1000));
        assert_eq!(parse("1h2m3s4ms5us6ns"), Ok(3_723_004_005_006));
    }

    #[test]
    fn rejects_like_go() {
        assert_eq!(
            parse("bogus"),
            Err("time: invalid duration \"bogus\"".into())
        );
        assert_eq!(parse(""), Err("time: invalid duration \"\"".into()));
        assert_eq!(
            parse("5"),
            Err("time: missing unit in duration \"5\"".into())
        );
        assert_eq!(
            parse("5x"),
            Err("time: unknown unit \"x\" in duration \"5x\"".into())
        );
        assert_eq!(parse("."), Err("time: invalid duration \".\"".into()));
        assert_eq!(
            parse("1s "),
            Err("time: unknown unit \"s \" in duration \"1s \"".into())
        );
        assert!(parse("9999999999h").is_err());
        assert_eq!(parse("-"), Err("time: invalid duration \"-\"".into()));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(0), "0s");
        assert_eq!(format(SECOND as i64), "1s");
        assert_eq!(format(10 * SECOND as i64), "10s");
        assert_eq!(format(24 * HOUR as i64), "24h0m0s");
        assert_eq!(format(90 * SECOND as i64), "1m30s");
        assert_eq!(format(1_500_000_000), "1.5s");
        assert_eq!(format(250 * MILLISECOND as i64), "250ms");
        assert_eq!(format(1_500), "1.5µs");
        assert_eq!(format(7), "7ns");
        assert_eq!(format(-(2 * SECOND as i64)), "-2s");
        assert_eq!(format(3_723_004_005_006), "1h2m3.004005006s");
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_quote("\u{1}"), "\"\\x01\"");
    }
}

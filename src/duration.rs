//! Durations as flags and variables take them.

use std::time::Duration;

/// The longest duration any flag takes. Far beyond any useful timeout, and
/// far enough from the clock's limits that adding it to "now" or to a
/// budget can never overflow.
pub const DURATION_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Durations in humantime form: `500ms`, `15s`, `2m`, `1h 30m`; a bare `0`
/// means zero. Bounded to [`DURATION_MAX`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.starts_with('-') {
        return Err(format!(
            "`{text}` is negative; durations run from 0s to 365d, e.g. 15s"
        ));
    }
    let parsed = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            format!("`{text}` is too long; use a duration from 0s to 365d")
        }
        e => format!("`{text}` is not a duration ({e}); use a form like 500ms, 15s or 2m"),
    })?;
    if parsed > DURATION_MAX {
        return Err(format!(
            "`{text}` is too long; use a duration from 0s to 365d"
        ));
    }
    Ok(parsed)
}

/// A duration as the user would type it after a flag: one word that
/// `--kill-timeout` and friends accept (`2500ms`, never `2s 500ms`).
pub fn flag_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

pub fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".to_string()
    } else {
        humantime::format_duration(round_ms(d)).to_string()
    }
}

/// `d` to whole milliseconds, as durations are shown.
pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_durations_are_one_word() {
        assert_eq!(flag_duration(Duration::from_millis(16500)), "16500ms");
        assert_eq!(flag_duration(Duration::from_secs(16)), "16s");
        assert_eq!(flag_duration(Duration::ZERO), "0s");
    }
}

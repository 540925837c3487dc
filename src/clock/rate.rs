//! How fast this host's clock runs: the bound we assume on the combined
//! clock-rate error between lockrun and the engine, and what the kernel
//! tells us (adjtimex(2)) about how it is steering our own clock now.
//!
//! Our deadlines run on CLOCK_MONOTONIC and CLOCK_BOOTTIME, which the
//! kernel speeds up or slows down as NTP (chrony, ntpd, systemd-timesyncd)
//! asks: through the frequency offset, the tick length, the PLL's
//! remaining phase offset, and adjtime(3)'s one-shot slew. A clock slowed
//! by 8 % makes every deadline of ours come 8 % late in real time, while
//! the engine counts its TTL on its own clock. Nothing here changes the
//! clock; reading it needs no privilege.

use std::fmt;

/// A rate error in parts per million.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ppm(pub u32);

impl Ppm {
    /// Two hosts slewing opposite ways at chrony's default `maxslewrate`
    /// (83,333 ppm each, 1/12): the combined error lockrun assumes unless
    /// told otherwise.
    pub const DEFAULT: Ppm = Ppm(166_666);

    /// The rate as a fraction (166,666 ppm is 0.166666).
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / 1e6
    }

    /// As the flag takes it: `166666ppm`.
    pub fn flag(self) -> String {
        format!("{}ppm", self.0)
    }

    /// As a percentage with one decimal: `16.7%`.
    pub fn percent(self) -> String {
        format!("{:.1}%", self.fraction() * 100.0)
    }

    /// A fraction, rounded to the nearest ppm (negatives and NaN as zero).
    pub fn from_fraction(fraction: f64) -> Ppm {
        let ppm = (fraction * 1e6).round();
        if ppm.is_nan() || ppm <= 0.0 {
            Ppm(0)
        } else {
            Ppm(ppm.min(f64::from(u32::MAX)) as u32)
        }
    }
}

impl fmt::Display for Ppm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.flag(), self.percent())
    }
}

/// `--clock-rate-error`: `166666ppm`, `16.7%`, `0.5%`, `0ppm`; below 100 %.
pub fn parse_bound(text: &str) -> Result<Ppm, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the clock-rate error is empty; give a rate like 166666ppm or 16.7%".into());
    }
    let (number, scale) = if let Some(n) = text.strip_suffix("ppm") {
        (n.trim(), 1.0)
    } else if let Some(n) = text.strip_suffix('%') {
        (n.trim(), 10_000.0)
    } else {
        return Err(format!(
            "`{text}` is not a clock-rate error; give ppm or a percentage, e.g. 166666ppm or 16.7%"
        ));
    };
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && !number.starts_with('+'))
        .ok_or_else(|| {
            format!("`{text}` is not a clock-rate error; give ppm or a percentage, e.g. 166666ppm or 16.7%")
        })?;
    if value < 0.0 {
        return Err(format!(
            "`{text}` is negative; a clock-rate error runs from 0ppm to just below 100%"
        ));
    }
    let ppm = (value * scale).round();
    if ppm >= 1e6 {
        return Err(format!(
            "`{text}` is 100% or more: a clock that far off stops or runs double; give less, e.g. 16.7%"
        ));
    }
    Ok(Ppm(ppm as u32))
}

/// The fields of `struct timex` we read, as the kernel returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timex {
    /// Frequency offset, ppm scaled by 2^16.
    pub freq: i64,
    /// Microseconds per tick (nominal 1,000,000 / USER_HZ).
    pub tick: i64,
    /// The PLL's remaining phase offset: ns with STA_NANO, else µs.
    pub offset: i64,
    /// The PLL's time constant, as the kernel applies it.
    pub constant: i64,
    /// STA_* flags.
    pub status: i32,
}

const STA_PPSTIME: i32 = 0x0004;
const STA_UNSYNC: i32 = 0x0040;
const STA_FREQHOLD: i32 = 0x0080;
const STA_PPSSIGNAL: i32 = 0x0100;
const STA_NANO: i32 = 0x2000;

/// The kernel's `SHIFT_PLL`: each second the PLL applies
/// `offset / 2^(SHIFT_PLL + constant)` of its remaining offset.
const SHIFT_PLL: i64 = 2;

/// adjtime(3)'s one-shot slew runs at the kernel's `MAX_TICKADJ`, 500 µs
/// per second.
const ADJTIME_PPM: f64 = 500.0;

/// How the kernel is steering this host's clock, as rates in ppm
/// (positive: our clock runs faster than its oscillator).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockState {
    /// `freq`: the frequency correction NTP set.
    pub freq_ppm: f64,
    /// The tick length's departure from nominal (Linux allows ±10 %).
    pub tick_ppm: f64,
    /// The PLL's slew of its remaining phase offset this second.
    pub pll_ppm: f64,
    /// adjtime(3)'s one-shot slew, when one is under way.
    pub adjtime_ppm: f64,
    /// The kernel says the clock is not synchronised (STA_UNSYNC).
    pub unsync: bool,
    /// NTP holds the frequency (STA_FREQHOLD).
    pub freq_hold: bool,
}

impl ClockState {
    /// The state from adjtimex(2)'s answer, the host's USER_HZ and, when
    /// known, adjtime(3)'s remaining one-shot offset in µs.
    pub fn from_timex(t: &Timex, user_hz: i64, adjtime_us: Option<i64>) -> ClockState {
        let freq_ppm = t.freq as f64 / 65_536.0;
        // A tick of `tick` µs, USER_HZ times per second: the clock gains
        // (tick * USER_HZ - 1e6) µs each second, i.e. that many ppm.
        let tick_ppm = if user_hz > 0 {
            (t.tick * user_hz - 1_000_000) as f64
        } else {
            0.0
        };
        let offset_ns = if t.status & STA_NANO != 0 {
            t.offset
        } else {
            t.offset.saturating_mul(1_000)
        };
        let pps = t.status & STA_PPSTIME != 0 && t.status & STA_PPSSIGNAL != 0;
        // With a PPS signal the kernel applies the whole offset at once: a
        // step within one second, which we count as that second's slew.
        let shift = if pps {
            0
        } else {
            (SHIFT_PLL + t.constant).clamp(0, 62)
        };
        // ns per second divided by 2^shift, in ppm (1 ppm = 1,000 ns/s).
        let pll_ppm = (offset_ns as f64) / (1u64 << shift) as f64 / 1_000.0;
        let adjtime_ppm = match adjtime_us {
            Some(us) if us > 0 => ADJTIME_PPM,
            Some(us) if us < 0 => -ADJTIME_PPM,
            _ => 0.0,
        };
        ClockState {
            freq_ppm,
            tick_ppm,
            pll_ppm,
            adjtime_ppm,
            unsync: t.status & STA_UNSYNC != 0,
            freq_hold: t.status & STA_FREQHOLD != 0,
        }
    }

    /// The rate the kernel steers CLOCK_MONOTONIC (and CLOCK_BOOTTIME) by,
    /// in ppm: positive runs faster.
    pub fn steering_ppm(&self) -> f64 {
        self.freq_ppm + self.tick_ppm + self.pll_ppm + self.adjtime_ppm
    }

    /// How much slower than its oscillator our clock runs; zero when it
    /// runs faster, which only brings our deadlines earlier. An
    /// oscillator itself is off by tens of ppm at most, which the steering
    /// usually corrects: the large values here are deliberate slews.
    pub fn slowing(&self) -> Ppm {
        Ppm::from_fraction(-self.steering_ppm() / 1e6)
    }

    /// One line for logs and `explain`.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("frequency {:+.1} ppm", self.freq_ppm)];
        if self.tick_ppm != 0.0 {
            parts.push(format!("tick {:+.0} ppm", self.tick_ppm));
        }
        if self.pll_ppm.abs() >= 0.05 {
            parts.push(format!("PLL slew {:+.1} ppm", self.pll_ppm));
        }
        if self.adjtime_ppm != 0.0 {
            parts.push(format!("adjtime slew {:+.0} ppm", self.adjtime_ppm));
        }
        if self.freq_hold {
            parts.push("frequency held".into());
        }
        format!(
            "steered by {:+.1} ppm ({}), {}",
            self.steering_ppm(),
            parts.join(", "),
            if self.unsync {
                "not synchronised"
            } else {
                "synchronised"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STA_PLL: i32 = 0x0001;

    #[test]
    fn bounds_in_ppm_and_percent() {
        assert_eq!(parse_bound("166666ppm"), Ok(Ppm(166_666)));
        assert_eq!(parse_bound("16.7%"), Ok(Ppm(167_000)));
        assert_eq!(parse_bound(" 0.5% "), Ok(Ppm(5_000)));
        assert_eq!(parse_bound("0ppm"), Ok(Ppm(0)));
        assert_eq!(parse_bound("99.9999%"), Ok(Ppm(999_999)));
        for bad in [
            "",
            " ",
            "16.7",
            "ppm",
            "%",
            "-1%",
            "100%",
            "1000000ppm",
            "fast",
            "1e400%",
            "nan%",
            "+5%",
        ] {
            assert!(parse_bound(bad).is_err(), "{bad:?}");
        }
        assert!(parse_bound("").unwrap_err().contains("empty"));
        assert_eq!(Ppm(166_666).percent(), "16.7%");
        assert_eq!(Ppm(166_666).flag(), "166666ppm");
    }

    fn state(t: Timex) -> ClockState {
        ClockState::from_timex(&t, 100, Some(0))
    }

    #[test]
    fn an_idle_clock_is_not_steered() {
        let s = state(Timex {
            tick: 10_000,
            status: STA_UNSYNC,
            ..Timex::default()
        });
        assert_eq!(s.steering_ppm(), 0.0);
        assert_eq!(s.slowing(), Ppm(0));
        assert!(s.unsync);
        assert!(
            s.describe().contains("not synchronised"),
            "{}",
            s.describe()
        );
    }

    #[test]
    fn frequency_is_ppm_scaled_by_two_to_the_sixteenth() {
        let s = state(Timex {
            tick: 10_000,
            freq: -12 * 65_536 - 32_768,
            status: STA_PLL,
            ..Timex::default()
        });
        assert_eq!(s.freq_ppm, -12.5);
        assert_eq!(s.slowing(), Ppm(13)); // 12.5 rounds to the nearest ppm
    }

    #[test]
    fn chronys_maximum_slew_is_tick_and_frequency() {
        // chrony slows the clock by 1/12 with tick 9167 and the rest in freq.
        let s = state(Timex {
            tick: 9_167,
            freq: -333 * 65_536,
            status: STA_PLL,
            ..Timex::default()
        });
        assert_eq!(s.tick_ppm, -83_300.0);
        assert_eq!(s.slowing(), Ppm(83_633));
        // The same the other way only brings our deadlines earlier.
        let fast = state(Timex {
            tick: 10_833,
            status: STA_PLL,
            ..Timex::default()
        });
        assert_eq!(fast.slowing(), Ppm(0));
        assert!(fast.steering_ppm() > 0.0);
    }

    #[test]
    fn tick_is_judged_by_user_hz() {
        let t = Timex {
            tick: 4_000,
            ..Timex::default()
        };
        // USER_HZ 250: a nominal 4,000 µs tick.
        assert_eq!(ClockState::from_timex(&t, 250, None).steering_ppm(), 0.0);
    }

    #[test]
    fn the_pll_slews_a_fraction_of_its_offset_each_second() {
        // ntpd's PLL: -0.4 s left, constant 6 (kernel value, µs mode):
        // 400,000 µs / 2^8 per second = 1,562.5 µs/s.
        let s = state(Timex {
            tick: 10_000,
            offset: -400_000,
            constant: 6,
            status: STA_PLL,
            ..Timex::default()
        });
        assert_eq!(s.pll_ppm, -1_562.5);
        // The same in nanoseconds.
        let ns = state(Timex {
            tick: 10_000,
            offset: -400_000_000,
            constant: 6,
            status: STA_PLL | STA_NANO,
            ..Timex::default()
        });
        assert_eq!(ns.pll_ppm, -1_562.5);
        assert!(
            ns.describe().contains("PLL slew -1562.5 ppm"),
            "{}",
            ns.describe()
        );
    }

    #[test]
    fn an_adjtime_slew_runs_at_500_ppm() {
        let t = Timex {
            tick: 10_000,
            ..Timex::default()
        };
        let s = ClockState::from_timex(&t, 100, Some(-2_000_000));
        assert_eq!(s.steering_ppm(), -500.0);
        assert_eq!(s.slowing(), Ppm(500));
    }
}

//! UTC timestamps and durations: just enough calendar arithmetic for
//! RFC 3339 stamps and `90m`-style durations, without a date crate.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Whole seconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn now() -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        Self(secs)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; a space may stand for `T`.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let t = text.trim().as_bytes();
        if t.len() < 20 {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<i64> {
            let s = std::str::from_utf8(t.get(range)?).ok()?;
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let sep_ok = t[4] == b'-' && t[7] == b'-' && matches!(t[10], b'T' | b't' | b' ');
        if !sep_ok || t[13] != b':' || t[16] != b':' {
            return None;
        }
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return None;
        }
        let mut i = 19;
        if t.get(i) == Some(&b'.') {
            i += 1;
            let digits = t[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            i += digits;
        }
        let offset = match t.get(i)? {
            b'Z' | b'z' if i + 1 == t.len() => 0,
            sign @ (b'+' | b'-') if i + 6 == t.len() && t[i + 3] == b':' => {
                let minutes = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
                if *sign == b'+' {
                    minutes * 60
                } else {
                    -minutes * 60
                }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        Some(Self(
            days * 86_400 + hour * 3600 + minute * 60 + second - offset,
        ))
    }

    /// Whole seconds from `earlier` to `self`; 0 when `earlier` is later (a
    /// clock that went backwards never yields a negative or wrapped step).
    pub fn secs_since(self, earlier: Timestamp) -> u64 {
        let diff = i128::from(self.0) - i128::from(earlier.0);
        u64::try_from(diff.max(0)).unwrap_or(u64::MAX)
    }

    /// A compact form for file names: `20261130T012756Z`.
    pub fn compact(self) -> String {
        let (y, mo, d, h, mi, s) = self.parts();
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
    }

    fn parts(self) -> (i64, i64, i64, i64, i64, i64) {
        let days = self.0.div_euclid(86_400);
        let secs = self.0.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        (y, m, d, secs / 3600, secs % 3600 / 60, secs % 60)
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC: `2026-11-30T01:27:56Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, mo, d, h, mi, s) = self.parts();
        write!(f, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The longest duration ralph accepts anywhere: ten years, in seconds. A
/// time budget past it is a typo, and every sum of durations and
/// timestamps stays far inside `i64`/`u64`.
pub(crate) const MAX_DURATION_SECS: u64 = 10 * 365 * 86_400;

/// Parses a duration such as `90m`, `2h`, `1h30m`, `45s`, `1d` or a bare
/// number of seconds. Returns whole seconds; `None` for anything else,
/// including a duration longer than [`MAX_DURATION_SECS`].
pub fn parse_duration(text: &str) -> Option<u64> {
    parse_duration_unbounded(text).filter(|&secs| secs <= MAX_DURATION_SECS)
}

fn parse_duration_unbounded(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for ch in text.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !digits.is_empty() {
        return None;
    }
    Some(total)
}

/// Formats seconds the way people read them: `45s`, `12m`, `1h05m`.
pub fn format_duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_rfc3339() {
        let t = Timestamp::parse_rfc3339("2026-11-30T01:27:56Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-30T01:27:56Z");
        assert_eq!(t.compact(), "20261130T012756Z");
        assert_eq!(
            Timestamp::parse_rfc3339("1970-01-01T00:00:00Z"),
            Some(Timestamp(0))
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2000-03-01T00:00:00Z"),
            Some(Timestamp(951_868_800))
        );
    }

    #[test]
    fn accepts_fractions_and_offsets() {
        let a = Timestamp::parse_rfc3339("2026-11-30T01:09:57.935Z").unwrap();
        let b = Timestamp::parse_rfc3339("2026-11-30T02:09:57+01:00").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-11-30T01:27:56",
            "2026-11-30T01:27:56Zjunk",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90m"), Some(5400));
        assert_eq!(parse_duration("2h"), Some(7200));
        assert_eq!(parse_duration("1h30m"), Some(5400));
        assert_eq!(parse_duration("45"), Some(45));
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("m"), None);
        assert_eq!(parse_duration("10m5"), None);
        assert_eq!(format_duration(3900), "1h05m");
    }

    #[test]
    fn extreme_durations_are_refused_not_wrapped() {
        assert_eq!(parse_duration("3650d"), Some(MAX_DURATION_SECS));
        assert_eq!(parse_duration("3651d"), None);
        assert_eq!(parse_duration("18446744073709551615"), None);
        assert_eq!(parse_duration("18446744073709551616s"), None);
        assert_eq!(parse_duration("99999999999999999999h"), None);
        assert_eq!(parse_duration("213503982334601d"), None);
        assert!(!format_duration(u64::MAX).is_empty());
    }

    #[test]
    fn elapsed_between_extreme_stamps_does_not_overflow() {
        assert_eq!(
            Timestamp(i64::MAX).secs_since(Timestamp(i64::MIN)),
            u64::MAX
        );
        assert_eq!(Timestamp(i64::MIN).secs_since(Timestamp(i64::MAX)), 0);
        assert_eq!(Timestamp(10).secs_since(Timestamp(4)), 6);
    }
}

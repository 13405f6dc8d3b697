//! Checked numbers from outside: durations, ages, sizes and counts that a person or an agent
//! passes in. Each is parsed into a documented range and refused with a typed
//! `invalid_argument` naming the limit, or saturates where saturating is the plain meaning
//! ("older than 1000 years" is simply "older than the epoch"). Nothing here wraps.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest `--timeout` a command may have: a year. Longer is almost certainly a typo,
/// and an `Instant` a century ahead overflows on some platforms.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The largest regular file: 8 TiB, below what ext4 and xfs hold, so every export fits.
/// Past it a write or size change fails with `file_too_large` (EFBIG in the mount).
pub const MAX_FILE_SIZE: u64 = 1 << 43;

/// The largest file diffed, merged or searched line by line; larger ones are compared as
/// binary (and not searched), so no text operation loads a huge file into memory.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// The most of one file read into memory at once (`cat`, an MCP read): bigger files are
/// exported, which streams them.
pub const MAX_READ_BYTES: u64 = 1 << 30;

/// The most output a command may keep per stream: what a proxy holds in memory.
pub const MAX_OUTPUT_CAP: usize = 1 << 30;

/// The largest size quota in MiB: a limit in bytes must fit an `i64`.
pub const MAX_QUOTA_MIB: u64 = (i64::MAX as u64) / (1024 * 1024);

/// The largest count quota (files).
pub const MAX_QUOTA_COUNT: u64 = i64::MAX as u64;

/// A typed out-of-range error for `option`.
pub fn out_of_range(option: &str, value: &str, limit: String) -> Error {
    Error::OutOfRange {
        option: option.to_string(),
        value: value.to_string(),
        limit,
    }
}

/// A duration like `30s`, `5m`, `7d` or `1000y` (humantime's syntax), with any magnitude.
pub fn parse_duration(option: &str, s: &str) -> Result<Duration> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        Error::invalid(format!(
            "{option} takes a duration like 30s, 5m or 7d, not `{s}` ({e})"
        ))
    })
}

/// A command timeout: more than zero and at most `MAX_TIMEOUT`.
pub fn parse_timeout(option: &str, s: &str) -> Result<Duration> {
    let d = parse_duration(option, s)?;
    check_timeout(option, s, d)
}

/// Check a timeout given as a `Duration` (library callers skip the parsing).
pub fn check_timeout(option: &str, shown: &str, d: Duration) -> Result<Duration> {
    if d.is_zero() || d > MAX_TIMEOUT {
        return Err(out_of_range(
            option,
            shown,
            format!(
                "more than 0 and at most {}d",
                MAX_TIMEOUT.as_secs() / 86_400
            ),
        ));
    }
    Ok(d)
}

/// `now - age` in nanoseconds since the epoch, saturating at `i64::MIN`: an age older than
/// the epoch means "since the beginning", never a wrapped time in the future.
pub fn before_now(now_ns: i64, age: Duration) -> i64 {
    match i64::try_from(age.as_nanos()) {
        Ok(ns) => now_ns.saturating_sub(ns),
        Err(_) => i64::MIN,
    }
}

/// An age (`10m`, `7d`) or an RFC 3339 time, as ns since the epoch (saturating).
pub fn parse_time_or_age(option: &str, s: &str, now_ns: i64) -> Result<i64> {
    if let Ok(d) = humantime::parse_duration(s.trim()) {
        return Ok(before_now(now_ns, d));
    }
    let bad = || {
        Error::invalid(format!(
            "{option} takes a duration like 10m or 7d, or a time like 2026-01-31T12:00:00Z, not `{s}`"
        ))
    };
    let (text, cycles) = shift_before_epoch(s.trim());
    let t = humantime::parse_rfc3339_weak(&text).map_err(|_| bad())?;
    let ns: i128 = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    // Nanoseconds since the epoch in an i64 reach from 1677 to 2262: past that, saturate.
    let ns = ns - i128::from(cycles) * GREGORIAN_CYCLE_NS;
    Ok(i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX }))
}

/// 400 Gregorian years: the calendar repeats exactly after them (146,097 days).
const GREGORIAN_CYCLE_NS: i128 = 146_097 * 86_400 * 1_000_000_000;

/// A time before 1970 (which humantime refuses) moved forward by whole 400-year cycles
/// until it is not, with the number of cycles to take back off; any other text as is.
fn shift_before_epoch(s: &str) -> (String, i64) {
    let Some(year) = s.get(..4).and_then(|y| y.parse::<i64>().ok()) else {
        return (s.to_string(), 0);
    };
    if year >= 1970 || !s[..4].bytes().all(|b| b.is_ascii_digit()) {
        return (s.to_string(), 0);
    }
    let cycles = (1970 - year + 399) / 400;
    (format!("{:04}{}", year + cycles * 400, &s[4..]), cycles)
}

/// A whole number in `0..=max`, or `none` (no limit) when `allow_none`.
pub fn parse_limit(option: &str, s: &str, max: u64) -> Result<Option<u64>> {
    let t = s.trim();
    if t == "none" {
        return Ok(None);
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(v) if v <= max => Ok(Some(v)),
            _ => Err(out_of_range(option, s, format!("0 to {max}, or `none`"))),
        };
    }
    Err(Error::invalid(format!(
        "{option} takes a whole number from 0 to {max} or `none`, not `{s}`"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_1970_are_read_as_such() {
        let t = |s: &str| parse_time_or_age("--since", s, 0).unwrap();
        assert_eq!(t("1969-12-31T23:59:59Z"), -1_000_000_000);
        assert_eq!(t("1970-01-01T00:00:00Z"), 0);
        // 1900 was not a leap year; 1600 was.
        assert_eq!(t("1900-03-01T00:00:00Z"), -2_203_891_200 * 1_000_000_000);
        assert_eq!(t("1677-09-21T00:12:44Z"), -9_223_372_036 * 1_000_000_000);
        assert_eq!(t("0001-01-01T00:00:00Z"), i64::MIN);
        assert!(parse_time_or_age("--since", "19x9-01-01T00:00:00Z", 0).is_err());
    }

    #[test]
    fn ages_past_the_epoch_saturate_instead_of_wrapping() {
        let now = 1_800_000_000_000_000_000;
        assert_eq!(
            before_now(now, Duration::from_secs(10)),
            now - 10_000_000_000
        );
        let thousand_years = parse_duration("--older-than", "1000y").unwrap();
        assert!(before_now(now, thousand_years) < 0);
        assert_eq!(before_now(now, Duration::MAX), i64::MIN);
        assert_eq!(
            parse_time_or_age("--since", "18446744073709551615s", now).unwrap(),
            i64::MIN
        );
        assert_eq!(
            parse_time_or_age("--since", "1000000000d", now).unwrap(),
            i64::MIN
        );
    }

    #[test]
    fn timeouts_have_a_range() {
        assert!(parse_timeout("--timeout", "30s").is_ok());
        for bad in ["0s", "18446744073709551615s", "1000y", "366d"] {
            let e = parse_timeout("--timeout", bad).unwrap_err();
            assert_eq!(e.kind(), "invalid_argument", "{bad}");
        }
        for bad in ["-1s", "1e30s", "", "soon"] {
            assert_eq!(
                parse_timeout("--timeout", bad).unwrap_err().kind(),
                "invalid_argument"
            );
        }
    }

    #[test]
    fn limits_are_checked_not_wrapped() {
        assert_eq!(parse_limit("--max-files", "none", 10).unwrap(), None);
        assert_eq!(parse_limit("--max-files", "10", 10).unwrap(), Some(10));
        assert_eq!(parse_limit("--max-files", "0", 10).unwrap(), Some(0));
        for bad in ["11", "-1", "1e30", "18446744073709551616", " ", "ten"] {
            let e = parse_limit("--max-files", bad, 10).unwrap_err();
            assert_eq!(e.kind(), "invalid_argument", "{bad}");
        }
        let e = parse_limit("--max-size-mb", "17592186044416", MAX_QUOTA_MIB).unwrap_err();
        assert!(e.to_string().contains(&MAX_QUOTA_MIB.to_string()), "{e}");
    }
}

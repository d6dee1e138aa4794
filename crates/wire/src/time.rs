//! Calendar arithmetic for the timestamps the wire carries: seconds since
//! the Unix epoch as a UTC civil date and time of day, without a time zone
//! database. Each format (`fs::meta::iso8601`, `code::protocol::timestamp`,
//! envd's protobuf timestamps) writes these parts its own way; [`parse_iso`]
//! reads the ISO 8601 timestamps callers send (a vault credential's expiry).

/// `(year, month, day, hour, minute, second)` in UTC of a time in seconds since the epoch.
pub fn utc_parts(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = u32::try_from(secs.rem_euclid(86_400)).unwrap_or(0);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(1), u32::try_from(day).unwrap_or(1))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Seconds since the epoch of an ISO 8601 timestamp as Python's
/// `datetime.fromisoformat` reads one: `YYYY-MM-DD`, then optionally `T` (or
/// a space) and `HH`, `HH:MM` or `HH:MM:SS` with a fraction, then optionally
/// `Z` or an offset `±HH:MM`; without an offset the time is UTC. `None` for
/// anything else (fractions of a second are dropped).
pub fn parse_iso(text: &str) -> Option<i64> {
    if !text.is_ascii() {
        return None;
    }
    let digits = |s: &str, n: usize| -> Option<i64> {
        (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let date = text.get(..10)?;
    let (year, month, day) = (digits(&date[..4], 4)?, digits(date.get(5..7)?, 2)?, digits(date.get(8..10)?, 2)?);
    if &date[4..5] != "-" || &date[7..8] != "-" {
        return None;
    }
    let (month, day) = (u32::try_from(month).ok()?, u32::try_from(day).ok()?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let mut secs = days_from_civil(year, month, day) * 86_400;
    let rest = &text[10..];
    if rest.is_empty() {
        return Some(secs);
    }
    let rest = rest.strip_prefix(['T', ' '])?;
    let (clock, offset) = match rest.find(['Z', '+', '-']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (clock, fraction) = clock.split_once('.').map_or((clock, None), |(c, f)| (c, Some(f)));
    if fraction.is_some_and(|f| f.is_empty() || f.len() > 6 || !f.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let parts: Vec<&str> = clock.split(':').collect();
    let limits = [23, 59, 59];
    if parts.is_empty() || parts.len() > 3 || (fraction.is_some() && parts.len() < 3) {
        return None;
    }
    for (part, (limit, unit)) in parts.iter().zip(limits.iter().zip([3600, 60, 1])) {
        let value = digits(part, 2).filter(|v| v <= limit)?;
        secs += value * unit;
    }
    match offset {
        "" => {}
        "Z" => {}
        _ => {
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let (hours, minutes) = offset[1..].split_once(':')?;
            let (hours, minutes) = (digits(hours, 2).filter(|h| *h <= 23)?, digits(minutes, 2).filter(|m| *m <= 59)?);
            secs -= sign * (hours * 3600 + minutes * 60);
        }
    }
    Some(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_utc_dates_and_times() {
        assert_eq!(utc_parts(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_parts(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(utc_parts(1_709_210_096), (2024, 2, 29, 12, 34, 56));
        assert_eq!(utc_parts(1_796_039_786), (2026, 11, 30, 11, 56, 26));
        assert_eq!(utc_parts(-1), (1969, 12, 31, 23, 59, 59));
        assert_eq!(utc_parts(4_102_444_800), (2100, 1, 1, 0, 0, 0));
    }

    #[test]
    fn iso_timestamps_are_read_as_python_reads_them() {
        assert_eq!(parse_iso("2024-02-29T12:34:56Z"), Some(1_709_210_096));
        assert_eq!(parse_iso("2024-02-29T12:34:56.123+00:00"), Some(1_709_210_096));
        assert_eq!(parse_iso("2024-02-29T14:34:56+02:00"), Some(1_709_210_096));
        assert_eq!(parse_iso("2024-02-29 12:34"), Some(1_709_210_040));
        assert_eq!(parse_iso("2000-02-29"), Some(951_782_400));
        assert_eq!(parse_iso("1969-12-31T23:59:59"), Some(-1));
        for bad in [
            "",
            "2023-02-29",
            "2024-13-01",
            "2024-01-01T25:00",
            "2024-01-01T",
            "tomorrow",
            "2024-01-01T10:00+5",
            "2é24-01-01",
        ] {
            assert_eq!(parse_iso(bad), None, "{bad}");
        }
    }
}

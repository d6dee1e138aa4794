//! Calendar arithmetic for the timestamps the wire carries: seconds since
//! the Unix epoch as a UTC civil date and time of day, without a time zone
//! database. Each format (`fs::meta::iso8601`, `code::protocol::timestamp`,
//! envd's protobuf timestamps) writes these parts its own way.

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
}

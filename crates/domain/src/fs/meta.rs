//! File metadata as the wire shows it: kinds, ISO 8601 times in the
//! reference's format, octal permission strings and ETags.

use std::os::unix::fs::MetadataExt;

use nix::sys::stat::{FileStat, SFlag};

pub use abx_wire::time::utc_parts;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (or anything that is not a directory or symlink).
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Symlink,
}

impl Kind {
    /// The wire name: `file`, `directory`, `symlink`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Directory => "directory",
            Kind::Symlink => "symlink",
        }
    }

    fn from_mode(mode: u32) -> Kind {
        match SFlag::from_bits_truncate(mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Kind::Directory,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::File,
        }
    }
}

/// A point in time: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: i64,
}

/// The metadata of one file-system object (not following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// File, directory or symlink.
    pub kind: Kind,
    /// Size in bytes.
    pub size: u64,
    /// Mode bits, type included.
    pub mode: u32,
    /// Last modification.
    pub modified: Time,
    /// Last access.
    pub accessed: Time,
    /// Creation (birth) time where the file system records it, else the last status change.
    pub created: Time,
    /// Inode number.
    pub ino: u64,
    /// Device number.
    pub dev: u64,
}

impl Stat {
    /// From `fstatat` (no birth time: `created` is the status change time).
    pub fn from_filestat(st: &FileStat) -> Stat {
        Stat {
            kind: Kind::from_mode(st.st_mode),
            size: u64::try_from(st.st_size).unwrap_or(0),
            mode: st.st_mode,
            modified: Time { secs: st.st_mtime, nanos: st.st_mtime_nsec },
            accessed: Time { secs: st.st_atime, nanos: st.st_atime_nsec },
            created: Time { secs: st.st_ctime, nanos: st.st_ctime_nsec },
            ino: st.st_ino,
            dev: st.st_dev,
        }
    }

    /// From std metadata (birth time through `statx` when available).
    pub fn from_metadata(meta: &std::fs::Metadata) -> Stat {
        let created = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| Some(Time { secs: i64::try_from(d.as_secs()).ok()?, nanos: i64::from(d.subsec_nanos()) }))
            .unwrap_or(Time { secs: meta.ctime(), nanos: meta.ctime_nsec() });
        Stat {
            kind: Kind::from_mode(meta.mode()),
            size: meta.size(),
            mode: meta.mode(),
            modified: Time { secs: meta.mtime(), nanos: meta.mtime_nsec() },
            accessed: Time { secs: meta.atime(), nanos: meta.atime_nsec() },
            created,
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Directory
    }

    /// The permission bits as three octal digits (`644`), as the reference shows them.
    pub fn permissions(&self) -> String {
        let digit = |shift: u32| b'0' + ((self.mode >> shift) & 7) as u8;
        String::from_utf8(vec![digit(6), digit(3), digit(0)]).unwrap_or_default()
    }

    /// A strong validator of the content: changes whenever the file is replaced or written.
    pub fn etag(&self) -> String {
        let mtime = self.modified.secs.wrapping_mul(1_000_000_000).wrapping_add(self.modified.nanos);
        format!("\"{:x}-{:x}-{:x}\"", self.ino, self.size, mtime)
    }
}

/// `2026-11-30T11:56:26.950975+00:00`: Python's `datetime.isoformat()` of a
/// UTC timestamp (microseconds, omitted when zero).
pub fn iso8601(time: Time) -> String {
    let mut secs = time.secs;
    let mut micros = round_half_even(time.nanos, 1000);
    if micros >= 1_000_000 {
        secs += 1;
        micros -= 1_000_000;
    }
    let (year, month, day, h, m, s) = utc_parts(secs);
    let Ok(year @ 0..=9999) = u32::try_from(year) else {
        let fraction = if micros == 0 { String::new() } else { format!(".{micros:06}") };
        return format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}{fraction}+00:00");
    };
    // Digits written in place: a stat answers three of these, and the
    // formatting machinery was a few per cent of its CPU.
    let mut text = *b"0000-00-00T00:00:00.000000+00:00";
    for (value, at) in [(year, 0..4), (month, 5..7), (day, 8..10), (h, 11..13), (m, 14..16), (s, 17..19)] {
        put_digits(&mut text[at], value);
    }
    let text = if micros == 0 {
        text.copy_within(26.., 19);
        &text[..25]
    } else {
        put_digits(&mut text[20..26], u32::try_from(micros).unwrap_or(0));
        &text[..]
    };
    String::from_utf8(text.to_vec()).unwrap_or_default()
}

/// Writes `value`'s last `digits.len()` decimal digits into `digits`, zero-padded.
fn put_digits(digits: &mut [u8], mut value: u32) {
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn round_half_even(value: i64, unit: i64) -> i64 {
    let (q, r) = (value / unit, value % unit);
    match (2 * r).cmp(&unit) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_matches_python_isoformat() {
        assert_eq!(iso8601(Time { secs: 0, nanos: 0 }), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso8601(Time { secs: 1_796_039_786, nanos: 950_975_123 }), "2026-11-30T11:56:26.950975+00:00");
        assert_eq!(iso8601(Time { secs: 951_782_400, nanos: 500 }), "2000-02-29T00:00:00+00:00");
        assert_eq!(iso8601(Time { secs: 951_782_400, nanos: 1_500 }), "2000-02-29T00:00:00.000002+00:00");
        assert_eq!(iso8601(Time { secs: 253_402_300_799, nanos: 999_999_000 }), "9999-12-31T23:59:59.999999+00:00");
        assert_eq!(iso8601(Time { secs: 59, nanos: 999_999_600 }), "1970-01-01T00:01:00+00:00");
        assert_eq!(iso8601(Time { secs: -1, nanos: 0 }), "1969-12-31T23:59:59+00:00");
        assert_eq!(iso8601(Time { secs: 253_402_300_800, nanos: 1_000 }), "10000-01-01T00:00:00.000001+00:00");
    }

    #[test]
    fn permissions_are_three_octal_digits() {
        let mut st = Stat::from_metadata(&std::fs::metadata("/").expect("stat /"));
        st.mode = 0o100_644;
        assert_eq!(st.permissions(), "644");
        st.mode = 0o104_004;
        assert_eq!(st.permissions(), "004");
    }
}

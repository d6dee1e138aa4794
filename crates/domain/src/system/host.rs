//! The host as `/proc`, `/etc/os-release` and `statvfs` describe it.
//!
//! Each reader takes the file's text so the parsers are tested on fixed
//! inputs; the `read_*` functions do the (blocking, but memory-backed)
//! reads and turn a missing or unreadable file into `None`.

use std::collections::HashMap;
use std::path::Path;

/// Host memory from `/proc/meminfo`, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// `MemTotal`.
    pub total: u64,
    /// `MemAvailable` (older kernels: free + buffers + page cache).
    pub available: u64,
}

/// Parses `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let fields: HashMap<&str, u64> = text
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((key.trim(), kib.saturating_mul(1024)))
        })
        .collect();
    let total = *fields.get("MemTotal")?;
    let available = fields
        .get("MemAvailable")
        .copied()
        .unwrap_or_else(|| ["MemFree", "Buffers", "Cached"].iter().filter_map(|k| fields.get(k)).sum());
    Some(Memory { total, available: available.min(total) })
}

/// Aggregate CPU time of the host from `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// All time (user, nice, system, idle, iowait, irq, softirq, steal).
    pub total: u64,
    /// Idle and I/O wait time.
    pub idle: u64,
}

impl CpuTimes {
    /// Busy share of all CPUs between `earlier` and `self`, percent.
    pub fn busy_percent_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let idle = self.idle.checked_sub(earlier.idle)?;
        if total == 0 {
            return None;
        }
        let busy = total.saturating_sub(idle) as f64;
        Some((busy / total as f64 * 100.0).clamp(0.0, 100.0))
    }
}

/// Parses `/proc/stat`: the aggregate `cpu` line and the number of `cpuN` lines (online CPUs).
pub fn parse_stat(text: &str) -> (Option<CpuTimes>, u32) {
    let mut times = None;
    let mut count = 0;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                // user nice system idle iowait irq softirq steal (guest time is already in user).
                let values: Vec<u64> = fields.take(8).map_while(|v| v.parse().ok()).collect();
                if values.len() >= 4 {
                    let idle = values[3] + values.get(4).copied().unwrap_or(0);
                    times = Some(CpuTimes { total: values.iter().sum(), idle });
                }
            }
            Some(name) if name.starts_with("cpu") && name[3..].bytes().all(|b| b.is_ascii_digit()) => count += 1,
            _ => {}
        }
    }
    (times, count)
}

/// Parses `/proc/loadavg` into the 1, 5 and 15 minute averages.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// Parses `/proc/uptime` into seconds since boot.
pub fn parse_uptime(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// `PRETTY_NAME` (or `NAME`) from an `os-release` file.
pub fn parse_os_release(text: &str) -> Option<String> {
    let value = |key: &str| {
        text.lines().find_map(|line| {
            let raw = line.strip_prefix(key)?.strip_prefix('=')?.trim();
            let unquoted = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw);
            let unquoted = unquoted.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')).unwrap_or(unquoted);
            Some(unquoted.replace("\\\"", "\"")).filter(|v| !v.is_empty())
        })
    };
    value("PRETTY_NAME").or_else(|| value("NAME"))
}

/// Size and use of a file system, bytes (as Python's `shutil.disk_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disk {
    /// Size.
    pub total: u64,
    /// Used (size minus all free blocks).
    pub used: u64,
    /// Available to unprivileged users.
    pub free: u64,
}

/// `statvfs` of `path`.
pub fn read_disk(path: &Path) -> Option<Disk> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let unit = stat.fragment_size() as u64;
    // `fsblkcnt_t` is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let blocks = |n| u64::try_from(n).unwrap_or(0).saturating_mul(unit);
    let total = blocks(stat.blocks());
    Some(Disk { total, used: total.saturating_sub(blocks(stat.blocks_free())), free: blocks(stat.blocks_available()) })
}

/// Reads a small text file; `None` when it is missing or unreadable.
pub fn read_text(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Reads a one-line file such as `/proc/sys/kernel/hostname`, trimmed.
pub fn read_line(path: impl AsRef<Path>) -> Option<String> {
    read_text(path).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The distribution's name, from `/etc/os-release` or `/usr/lib/os-release`.
pub fn read_distro() -> Option<String> {
    read_text("/etc/os-release").or_else(|| read_text("/usr/lib/os-release")).as_deref().and_then(parse_os_release)
}

/// Bytes to whole MiB (rounded down, as the reference).
pub fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

/// Bytes to GiB with two decimals.
pub fn gib(bytes: u64) -> f64 {
    round(bytes as f64 / (1024.0 * 1024.0 * 1024.0), 2)
}

/// `part / whole` as a percentage with one decimal; 0 when `whole` is 0.
pub fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        round(part / whole * 100.0, 1)
    } else {
        0.0
    }
}

/// `value` rounded to `decimals` places.
pub fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_reads_total_and_available_in_bytes() {
        let text = "MemTotal:       24684096 kB\nMemFree:         1000 kB\nMemAvailable:   24209424 kB\nHugePages_Total:       0\n";
        assert_eq!(parse_meminfo(text), Some(Memory { total: 24684096 * 1024, available: 24209424 * 1024 }));
        let old_kernel = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n";
        assert_eq!(parse_meminfo(old_kernel).map(|m| m.available), Some(420 * 1024));
        assert_eq!(parse_meminfo("garbage"), None);
    }

    #[test]
    fn stat_sums_cpu_times_and_counts_online_cpus() {
        let text = "cpu  100 5 50 800 20 1 2 3 40 0\ncpu0 50 2 25 400 10 1 1 1 20 0\ncpu1 50 3 25 400 10 0 1 2 20 0\nintr 1 2\nctxt 5\n";
        let (times, count) = parse_stat(text);
        assert_eq!(times, Some(CpuTimes { total: 981, idle: 820 }));
        assert_eq!(count, 2);
    }

    #[test]
    fn busy_percent_is_the_share_of_non_idle_ticks() {
        let before = CpuTimes { total: 1000, idle: 800 };
        let after = CpuTimes { total: 1200, idle: 950 };
        assert_eq!(after.busy_percent_since(&before), Some(25.0));
        assert_eq!(before.busy_percent_since(&before), None, "no ticks elapsed");
        assert_eq!(before.busy_percent_since(&after), None, "counters never go back");
    }

    #[test]
    fn loadavg_uptime_and_os_release() {
        assert_eq!(parse_loadavg("0.27 0.80 0.55 1/234 5678\n"), Some([0.27, 0.8, 0.55]));
        assert_eq!(parse_loadavg("0.27"), None);
        assert_eq!(parse_uptime("12345.67 23456.78\n"), Some(12345.67));
        let os = "NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nPRETTY_NAME=\"Ubuntu 22.04.3 LTS\"\n";
        assert_eq!(parse_os_release(os).as_deref(), Some("Ubuntu 22.04.3 LTS"));
        assert_eq!(parse_os_release("NAME=Alpine Linux\n").as_deref(), Some("Alpine Linux"));
        assert_eq!(parse_os_release("ID=x\n"), None);
    }

    #[test]
    fn units_follow_the_reference() {
        assert_eq!(mib(3 * 1024 * 1024 + 5), 3);
        assert_eq!(gib(270_546_001_920), 251.97);
        assert_eq!(percent(463.0, 24105.0), 1.9);
        assert_eq!(percent(1.0, 0.0), 0.0);
    }

    #[test]
    fn the_root_file_system_has_a_size() {
        let disk = read_disk(Path::new("/")).expect("statvfs /");
        assert!(disk.total > 0 && disk.used <= disk.total && disk.free <= disk.total);
    }
}

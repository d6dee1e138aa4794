//! The cgroup this server runs in, and the limits that really bound it.
//!
//! A container sees the host's CPUs and memory in `/proc`; its real budget
//! is its cgroup's. [`locate`] finds the server's own cgroup from
//! `/proc/self/cgroup` and `/proc/self/mountinfo` (cgroup v2 when its
//! controllers are there, else the v1 `memory`, `cpu`, `cpuacct` and `pids`
//! hierarchies), and [`read`] reads its limits and use. A limit may be set
//! on any ancestor, so limits are the smallest found walking up to the
//! mounted root.

use std::path::{Path, PathBuf};

use abx_wire::api::CgroupStats;

/// v1 memory limits at or above this are "no limit" (the kernel's page-rounded `i64::MAX`).
const V1_UNLIMITED: u64 = 1 << 62;

/// Where the server's cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The unified hierarchy.
    V2 {
        /// The cgroup's path in the hierarchy.
        path: String,
        /// Its directory, and the mounted root above it.
        dir: Walk,
    },
    /// Per-controller v1 hierarchies (each may be absent).
    V1 {
        /// Path of the memory (or cpu) cgroup, for display.
        path: String,
        /// `memory` controller.
        memory: Option<Walk>,
        /// `cpu` controller (quota).
        cpu: Option<Walk>,
        /// `cpuacct` controller (usage).
        cpuacct: Option<Walk>,
        /// `pids` controller.
        pids: Option<Walk>,
    },
}

/// A cgroup directory and the mount point it sits under (where walks stop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// The cgroup's own directory.
    pub leaf: PathBuf,
    /// The hierarchy's mount point.
    pub top: PathBuf,
}

impl Walk {
    /// The leaf, then each parent up to and including the mount point.
    fn dirs(&self) -> impl Iterator<Item = &Path> {
        let top = self.top.as_path();
        self.leaf.ancestors().take_while(move |d| d.starts_with(top))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.leaf.join(name)
    }
}

struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split_whitespace().collect();
            let mut right = right.split_whitespace();
            let fstype = right.next()?.to_string();
            let options = right.nth(1).unwrap_or_default().split(',').map(str::to_string).collect();
            Some(Mount { root: unescape(left.get(3)?), point: PathBuf::from(unescape(left.get(4)?)), fstype, options })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |acc, b| acc.wrapping_mul(8).wrapping_add(b - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of cgroup `path` under `mount`, whose root may be a prefix of it.
fn walk(mount: &Mount, path: &str) -> Walk {
    let relative = if mount.root == "/" {
        path.trim_start_matches('/')
    } else {
        path.strip_prefix(mount.root.as_str()).map(|r| r.trim_start_matches('/')).unwrap_or("")
    };
    let leaf = if relative.is_empty() { mount.point.clone() } else { mount.point.join(relative) };
    Walk { leaf, top: mount.point.clone() }
}

/// Finds the cgroup described by `proc_cgroup` (`/proc/self/cgroup`) in `mountinfo`.
///
/// `exists` says whether a file exists (the file system in production).
pub fn locate(proc_cgroup: &str, mountinfo: &str, exists: &dyn Fn(&Path) -> bool) -> Option<Location> {
    let mounts = parse_mountinfo(mountinfo);
    let memberships: Vec<(&str, &str)> = proc_cgroup
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    if let Some((_, path)) = memberships.iter().find(|(controllers, _)| controllers.is_empty()) {
        if let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup2") {
            let dir = walk(mount, path);
            let controlled = ["memory.current", "cpu.max", "pids.current"].iter().any(|f| exists(&dir.file(f)));
            if controlled {
                return Some(Location::V2 { path: path.to_string(), dir });
            }
        }
    }
    let v1 = |controller: &str| {
        let (_, path) = memberships.iter().find(|(cs, _)| cs.split(',').any(|c| c == controller))?;
        let mount = mounts.iter().find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))?;
        Some((path.to_string(), walk(mount, path)))
    };
    let memory = v1("memory");
    let cpu = v1("cpu");
    let path = memory.as_ref().or(cpu.as_ref()).map(|(p, _)| p.clone())?;
    Some(Location::V1 {
        path,
        memory: memory.map(|(_, w)| w),
        cpu: cpu.map(|(_, w)| w),
        cpuacct: v1("cpuacct").map(|(_, w)| w),
        pids: v1("pids").map(|(_, w)| w),
    })
}

/// The server's own cgroup, if it is in one this process can see.
pub fn locate_self() -> Option<Location> {
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    locate(&proc_cgroup, &mountinfo, &|p| p.exists())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A `key value` line of a flat-keyed file such as `memory.events` or `cpu.stat`.
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `max` or a number, as v2 limit files write them.
fn read_limit(path: &Path) -> Option<Option<u64>> {
    let text = std::fs::read_to_string(path).ok()?;
    match text.trim() {
        "max" => Some(None),
        n => n.parse().ok().map(Some),
    }
}

/// The smallest limit any directory of `walk` sets in `file`.
fn smallest(walk: &Walk, file: &str, parse: impl Fn(&Path) -> Option<Option<u64>>) -> Option<u64> {
    walk.dirs().filter_map(|d| parse(&d.join(file)).flatten()).min()
}

/// `cpu.max` as CPUs: `"150000 100000"` is 1.5, `"max 100000"` is none.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota: f64 = fields.next()?.parse().ok()?;
    let period: f64 = fields.next().unwrap_or("100000").parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

fn smallest_cores(walk: &Walk, read: impl Fn(&Path) -> Option<f64>) -> Option<f64> {
    walk.dirs().filter_map(read).reduce(f64::min)
}

/// Reads the cgroup's limits and use; `cpu_percent` is left for the sampler.
pub fn read(location: &Location) -> CgroupStats {
    match location {
        Location::V2 { path, dir } => {
            let memory_max_bytes = smallest(dir, "memory.max", read_limit);
            let cpu_max_cores = smallest_cores(dir, |d| {
                std::fs::read_to_string(d.join("cpu.max")).ok().as_deref().and_then(parse_cpu_max)
            });
            with_memory_percent(CgroupStats {
                version: 2,
                path: path.clone(),
                memory_max_bytes,
                memory_current_bytes: read_u64(&dir.file("memory.current")),
                oom_kills: keyed(&dir.file("memory.events"), "oom_kill"),
                cpu_max_cores,
                cpu_usage_seconds: keyed(&dir.file("cpu.stat"), "usage_usec").map(|us| us as f64 / 1e6),
                pids_max: smallest(dir, "pids.max", read_limit),
                pids_current: read_u64(&dir.file("pids.current")),
                ..CgroupStats::default()
            })
        }
        Location::V1 { path, memory, cpu, cpuacct, pids } => {
            let v1_limit = |p: &Path| read_u64(p).map(|n| Some(n).filter(|&n| n < V1_UNLIMITED));
            let memory_max_bytes = memory.as_ref().and_then(|m| {
                keyed(&m.file("memory.stat"), "hierarchical_memory_limit")
                    .map(|n| Some(n).filter(|&n| n < V1_UNLIMITED))
                    .unwrap_or_else(|| smallest(m, "memory.limit_in_bytes", v1_limit))
            });
            let cpu_max_cores = cpu.as_ref().and_then(|c| {
                smallest_cores(c, |d| {
                    let quota: i64 = std::fs::read_to_string(d.join("cpu.cfs_quota_us")).ok()?.trim().parse().ok()?;
                    let period = read_u64(&d.join("cpu.cfs_period_us"))?;
                    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
                })
            });
            with_memory_percent(CgroupStats {
                version: 1,
                path: path.clone(),
                memory_max_bytes,
                memory_current_bytes: memory.as_ref().and_then(|m| read_u64(&m.file("memory.usage_in_bytes"))),
                oom_kills: memory.as_ref().and_then(|m| keyed(&m.file("memory.oom_control"), "oom_kill")),
                cpu_max_cores,
                cpu_usage_seconds: cpuacct
                    .as_ref()
                    .and_then(|c| read_u64(&c.file("cpuacct.usage")))
                    .map(|ns| ns as f64 / 1e9),
                pids_max: pids.as_ref().and_then(|p| smallest(p, "pids.max", read_limit)),
                pids_current: pids.as_ref().and_then(|p| read_u64(&p.file("pids.current"))),
                ..CgroupStats::default()
            })
        }
    }
}

/// `stats` with `memory_percent` worked out from its current and maximum memory.
fn with_memory_percent(mut stats: CgroupStats) -> CgroupStats {
    if let (Some(current), Some(max)) = (stats.memory_current_bytes, stats.memory_max_bytes) {
        stats.memory_percent = Some(super::host::percent(current as f64, max as f64));
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn v2_limits_are_the_smallest_on_the_way_up() {
        let tmp = tempfile::tempdir().expect("tmp");
        let top = tmp.path().join("cg");
        let parent = top.join("sandbox.slice");
        let leaf = parent.join("agent");
        write(&top, "cgroup.controllers", "cpu memory pids");
        write(&parent, "memory.max", "536870912\n");
        write(&parent, "cpu.max", "150000 100000\n");
        write(&parent, "pids.max", "64\n");
        write(&leaf, "memory.max", "max\n");
        write(&leaf, "cpu.max", "max 100000\n");
        write(&leaf, "pids.max", "max\n");
        write(&leaf, "memory.current", "134217728\n");
        write(&leaf, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
        write(&leaf, "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n");
        write(&leaf, "pids.current", "7\n");
        let mountinfo = format!(
            "30 23 0:26 / {} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n22 1 0:20 / /proc rw - proc proc rw\n",
            top.display()
        );
        let location =
            locate("0::/sandbox.slice/agent\n", &mountinfo, &|p| p.exists()).expect("a v2 cgroup with controllers");
        let stats = read(&location);
        assert_eq!(
            stats,
            CgroupStats {
                version: 2,
                path: "/sandbox.slice/agent".into(),
                memory_max_bytes: Some(536_870_912),
                memory_current_bytes: Some(134_217_728),
                memory_percent: Some(25.0),
                oom_kills: Some(1),
                cpu_max_cores: Some(1.5),
                cpu_usage_seconds: Some(2.5),
                cpu_percent: None,
                pids_max: Some(64),
                pids_current: Some(7),
            }
        );
    }

    #[test]
    fn a_namespaced_container_sees_its_cgroup_at_the_mount_point() {
        let tmp = tempfile::tempdir().expect("tmp");
        let top = tmp.path().join("cgroup");
        write(&top, "memory.current", "1000\n");
        write(&top, "memory.max", "max\n");
        let mountinfo = format!("30 23 0:26 / {} rw - cgroup2 cgroup2 rw\n", top.display());
        let stats = read(&locate("0::/\n", &mountinfo, &|p| p.exists()).expect("v2"));
        assert_eq!(
            (stats.memory_current_bytes, stats.memory_max_bytes, stats.memory_percent),
            (Some(1000), None, None)
        );
    }

    #[test]
    fn v1_is_used_when_the_unified_hierarchy_has_no_controllers() {
        let tmp = tempfile::tempdir().expect("tmp");
        let unified = tmp.path().join("unified");
        write(&unified, "cpu.stat", "usage_usec 1\n");
        let memory = tmp.path().join("memory");
        let leaf = memory.join("docker/abc");
        write(&memory, "memory.limit_in_bytes", "9223372036854771712\n");
        write(&leaf, "memory.limit_in_bytes", "268435456\n");
        write(&leaf, "memory.usage_in_bytes", "67108864\n");
        write(&leaf, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        let cpu = tmp.path().join("cpu_cpuacct");
        write(&cpu, "cpu.cfs_quota_us", "-1\n");
        write(&cpu, "cpu.cfs_period_us", "100000\n");
        write(&cpu.join("docker/abc"), "cpu.cfs_quota_us", "50000\n");
        write(&cpu.join("docker/abc"), "cpu.cfs_period_us", "100000\n");
        write(&cpu.join("docker/abc"), "cpuacct.usage", "3000000000\n");
        let mountinfo = format!(
            "41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n\
             35 31 0:32 / {} rw - cgroup cgroup rw,memory\n\
             32 31 0:29 / {} rw - cgroup cgroup rw,cpu,cpuacct\n",
            unified.display(),
            memory.display(),
            cpu.display()
        );
        let proc_cgroup = "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n";
        let location = locate(proc_cgroup, &mountinfo, &|p| p.exists()).expect("v1");
        let stats = read(&location);
        assert_eq!(stats.version, 1);
        assert_eq!(stats.path, "/docker/abc");
        assert_eq!(stats.memory_max_bytes, Some(268_435_456));
        assert_eq!(stats.memory_percent, Some(25.0));
        assert_eq!(stats.oom_kills, Some(2));
        assert_eq!(stats.cpu_max_cores, Some(0.5));
        assert_eq!(stats.cpu_usage_seconds, Some(3.0));
        assert_eq!((stats.pids_max, stats.pids_current), (None, None), "no pids hierarchy mounted");
    }

    #[test]
    fn v1_mount_roots_are_stripped_from_cgroup_paths() {
        let tmp = tempfile::tempdir().expect("tmp");
        let memory = tmp.path().join("memory");
        write(&memory, "memory.usage_in_bytes", "42\n");
        write(&memory, "memory.limit_in_bytes", "9223372036854771712\n");
        let mountinfo = format!("35 31 0:32 /docker/abc {} rw - cgroup cgroup rw,memory\n", memory.display());
        let stats = read(&locate("4:memory:/docker/abc\n", &mountinfo, &|p| p.exists()).expect("v1"));
        assert_eq!((stats.memory_current_bytes, stats.memory_max_bytes), (Some(42), None));
    }

    #[test]
    fn no_cgroup_mounts_means_no_cgroup() {
        assert_eq!(locate("0::/\n", "22 1 0:20 / /proc rw - proc proc rw\n", &|_| true), None);
        assert_eq!(parse_cpu_max("max 100000"), None);
        assert_eq!(parse_cpu_max("200000 100000"), Some(2.0));
    }
}

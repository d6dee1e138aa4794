//! System information: what the machine is, how loaded it is, what budget
//! the sandbox really has, which ports listen, which packages are installed,
//! and the environment children start with. No HTTP here.
//!
//! - [`host`]: `/proc` and `statvfs` readers (memory, CPU ticks, load, disk).
//! - [`cgroup`]: the server's own cgroup and its limits and use.
//! - [`cpu`]: CPU use between two samples, without blocking a request long.
//! - [`ports`]: listening TCP sockets and their processes.
//! - [`packages`]: pip, npm and dpkg listings.
//! - [`run`]: the bounded program runner the listings use.
//! - [`env`](mod@env): `GET /env` and `POST /env` over [`crate::environment::ChildEnv`].
//!
//! Everything reads `/proc` and `/sys` directly: a general crate such as
//! `sysinfo` would scan every process on refresh and cost more memory and
//! start-up time than these few files.

pub mod cgroup;
pub mod cpu;
pub mod env;
pub mod host;
pub mod packages;
pub mod ports;
pub mod run;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use abx_wire::api::{CgroupStats, ListeningPort, PackageList, SystemInfo, SystemMetrics};
use tokio::sync::Semaphore;

use self::cgroup::Location;
use self::cpu::{Sample, Sampler, Usage, MIN_WINDOW};
use self::host::{gib, mib, percent, round, CpuTimes, Disk, Memory};
use self::packages::Manager;
use self::run::RunError;
use crate::blocking::run as blocking;
use crate::environment::ChildEnv;

/// Package listings running at once; more callers wait their turn.
const CONCURRENT_LISTINGS: usize = 2;

/// Why a system call failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// `GET /packages` named a manager this server does not know.
    #[error("Unsupported package manager: '{0}'; use 'pip', 'npm' or 'dpkg'")]
    UnsupportedManager(String),
    /// A package manager failed.
    #[error("{manager} {source}")]
    Listing {
        /// The manager.
        manager: &'static str,
        /// What went wrong.
        #[source]
        source: RunError,
    },
    /// A blocking reader could not run (the runtime is shutting down).
    #[error("system reader failed: {0}")]
    Reader(#[from] tokio::task::JoinError),
}

/// The system domain's state: start time, cgroup location, CPU sampler and caches.
#[derive(Debug)]
pub struct System {
    started: Instant,
    cgroup: Option<Location>,
    cpu: Sampler,
    python: OnceLock<String>,
    listings: Semaphore,
    proc_root: PathBuf,
}

impl Default for System {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything read from `/proc` and `/sys` at one instant.
struct Snapshot {
    memory: Option<Memory>,
    disk: Option<Disk>,
    load: Option<[f64; 3]>,
    boot_uptime: Option<f64>,
    cpu_count: u32,
    cpu: Sample,
    cgroup: Option<CgroupStats>,
}

fn snapshot(proc_root: &Path, cgroup: Option<&Location>) -> Snapshot {
    let read = |name: &str| host::read_text(proc_root.join(name));
    let (times, cpu_count): (Option<CpuTimes>, u32) = read("stat").as_deref().map(host::parse_stat).unwrap_or_default();
    let cgroup = cgroup.map(cgroup::read);
    Snapshot {
        memory: read("meminfo").as_deref().and_then(host::parse_meminfo),
        disk: host::read_disk(Path::new("/")),
        load: read("loadavg").as_deref().and_then(host::parse_loadavg),
        boot_uptime: read("uptime").as_deref().and_then(host::parse_uptime),
        cpu_count,
        cpu: Sample {
            at: Instant::now(),
            host: times,
            cgroup_seconds: cgroup.as_ref().and_then(|c| c.cpu_usage_seconds),
        },
        cgroup,
    }
}

impl System {
    /// The state for this process: finds its cgroup once (membership does not change).
    pub fn new() -> Self {
        System {
            started: Instant::now(),
            cgroup: cgroup::locate_self(),
            cpu: Sampler::default(),
            python: OnceLock::new(),
            listings: Semaphore::new(CONCURRENT_LISTINGS),
            proc_root: PathBuf::from("/proc"),
        }
    }

    fn snapshot(&self) -> impl FnOnce() -> Result<Snapshot, SystemError> + Send + 'static {
        let (root, location) = (self.proc_root.clone(), self.cgroup.clone());
        move || Ok(snapshot(&root, location.as_ref()))
    }

    /// `GET /system/info`. `env` and `cwd` are those `python3 --version` runs with.
    ///
    /// # Errors
    /// Only if the blocking reader cannot run.
    pub async fn info(&self, env: &ChildEnv, cwd: &Path) -> Result<SystemInfo, SystemError> {
        let root = self.proc_root.clone();
        let read_identity = move || {
            let line = |name: &str| host::read_line(root.join("sys/kernel").join(name)).unwrap_or_default();
            Ok((line("ostype"), line("hostname"), line("osrelease"), host::read_distro().unwrap_or_default()))
        };
        let ((os, hostname, kernel, distro), snap) =
            tokio::try_join!(blocking(read_identity), blocking(self.snapshot()))?;
        let memory = snap.memory.unwrap_or(Memory { total: 0, available: 0 });
        let disk = snap.disk.unwrap_or(Disk { total: 0, used: 0, free: 0 });
        Ok(SystemInfo {
            os: if os.is_empty() { std::env::consts::OS.to_string() } else { os },
            arch: std::env::consts::ARCH.to_string(),
            cpu_count: snap.cpu_count,
            memory_total_mb: mib(memory.total),
            memory_available_mb: mib(memory.available),
            disk_total_gb: gib(disk.total),
            disk_free_gb: gib(disk.free),
            python_version: self.python_version(env, cwd).await,
            hostname,
            kernel,
            distro,
            server_version: crate::SERVER_VERSION.to_string(),
            cgroup: snap.cgroup,
        })
    }

    /// The version of the `python3` children would run; cached once found.
    async fn python_version(&self, env: &ChildEnv, cwd: &Path) -> String {
        if let Some(version) = self.python.get() {
            return version.clone();
        }
        let ran = run::run("python3", &["--version"], &env.snapshot(), cwd, Duration::from_secs(5), 4096).await;
        let version = ran
            .ok()
            .filter(|r| r.status.success())
            .and_then(|r| String::from_utf8(r.stdout).ok())
            .and_then(|out| out.trim().strip_prefix("Python ").map(str::to_string))
            .unwrap_or_default();
        if !version.is_empty() {
            let _ = self.python.set(version.clone());
        }
        version
    }

    /// `GET /system/metrics`; CPU use is measured over the window since the
    /// previous call, or over [`MIN_WINDOW`] when there is no recent one.
    ///
    /// # Errors
    /// Only if the blocking reader cannot run.
    pub async fn metrics(&self) -> Result<SystemMetrics, SystemError> {
        let first = blocking(self.snapshot()).await?;
        let (earlier, snap) = match self.cpu.exchange(first.cpu) {
            Some(earlier) => (earlier, first),
            None => {
                tokio::time::sleep(MIN_WINDOW).await;
                let later = blocking(self.snapshot()).await?;
                self.cpu.store(later.cpu);
                (first.cpu, later)
            }
        };
        let usage = Usage::between(&earlier, &snap.cpu);
        let memory = snap.memory.unwrap_or(Memory { total: 0, available: 0 });
        let disk = snap.disk.unwrap_or(Disk { total: 0, used: 0, free: 0 });
        let used_mb = mib(memory.total.saturating_sub(memory.available));
        let [load1, load5, load15] = snap.load.unwrap_or_default();
        let cgroup = snap.cgroup.map(|mut c| {
            let cores = c.cpu_max_cores.unwrap_or(f64::from(snap.cpu_count));
            c.cpu_percent = usage.cgroup_cores.map(|used| percent(used, cores).min(100.0));
            c
        });
        Ok(SystemMetrics {
            cpu_load_1m: round(load1, 2),
            cpu_load_5m: round(load5, 2),
            cpu_load_15m: round(load15, 2),
            memory_used_mb: used_mb,
            memory_total_mb: mib(memory.total),
            memory_percent: percent(used_mb as f64, mib(memory.total) as f64),
            disk_used_gb: gib(disk.used),
            disk_total_gb: gib(disk.total),
            disk_percent: percent(disk.used as f64, disk.total as f64),
            uptime_seconds: round(self.started.elapsed().as_secs_f64(), 1),
            cpu_percent: usage.host_percent.map(|p| round(p, 1)),
            cpu_sample_seconds: Some(round(usage.window, 3)),
            memory_available_mb: mib(memory.available),
            system_uptime_seconds: snap.boot_uptime.map(|u| round(u, 1)).unwrap_or_default(),
            cgroup,
        })
    }

    /// `GET /ports`: listening TCP sockets, with their processes where visible.
    ///
    /// # Errors
    /// Only if the blocking reader cannot run.
    pub async fn ports(&self) -> Result<Vec<ListeningPort>, SystemError> {
        let root = self.proc_root.clone();
        blocking(move || Ok(ports::listening(&root))).await
    }

    /// `GET /packages?manager=`: the installed packages of `manager`, listed
    /// by running it with the child environment in `cwd`.
    ///
    /// # Errors
    /// An unknown manager, or a listing that fails, overruns or floods.
    pub async fn packages(&self, manager: &str, env: &ChildEnv, cwd: &Path) -> Result<PackageList, SystemError> {
        let manager = Manager::from_name(manager).ok_or_else(|| SystemError::UnsupportedManager(manager.into()))?;
        // The semaphore is never closed, so acquiring only waits.
        let _slot = self.listings.acquire().await.ok();
        let packages = manager
            .list(&env.snapshot(), cwd)
            .await
            .map_err(|source| SystemError::Listing { manager: manager.as_str(), source })?;
        Ok(PackageList { manager: manager.as_str().to_string(), packages })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metrics_of_this_machine_are_sane() {
        let system = System::new();
        let metrics = system.metrics().await.expect("metrics");
        assert!(metrics.memory_total_mb > 0 && metrics.memory_used_mb <= metrics.memory_total_mb);
        assert!(metrics.disk_total_gb > 0.0 && (0.0..=100.0).contains(&metrics.disk_percent));
        let window = metrics.cpu_sample_seconds.expect("a window");
        assert!(window >= MIN_WINDOW.as_secs_f64(), "first call waits for a second sample: {window}");
        assert!(metrics.cpu_percent.is_some_and(|p| (0.0..=100.0).contains(&p)));
        assert!(metrics.system_uptime_seconds > 0.0);
    }

    #[tokio::test]
    async fn unknown_managers_are_refused_by_name() {
        let env = ChildEnv::from_vars(std::env::vars(), &[]);
        let err = System::new().packages("apt", &env, Path::new("/")).await.expect_err("unknown");
        assert_eq!(err.to_string(), "Unsupported package manager: 'apt'; use 'pip', 'npm' or 'dpkg'");
    }
}

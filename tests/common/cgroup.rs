//! A cgroup made for one test (memory and pids limits), on cgroup v2 or on
//! v1's separate hierarchies, removed when dropped. Where this machine cannot
//! make one (not root, the controller absent or not delegated), the reason
//! comes back so the test can say why it skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The limits to set.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Memory in bytes (swap off too, where that can be set).
    pub memory: Option<u64>,
    /// Tasks (processes and threads).
    pub pids: Option<u64>,
}

/// One test's cgroup: one directory on v2, one per controller on v1.
pub struct Cgroup {
    /// (controller, directory).
    dirs: Vec<(&'static str, PathBuf)>,
    v2: bool,
}

const ROOT: &str = "/sys/fs/cgroup";

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {value:?} to {}: {e}", path.display()))
}

/// This process's cgroup path in the v1 hierarchy of `controller`.
fn v1_own_path(controller: &str) -> String {
    let table = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    table
        .lines()
        .filter_map(|line| line.split_once(':').and_then(|(_, rest)| rest.split_once(':')))
        .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))
        .map_or_else(|| "/".to_string(), |(_, path)| path.to_string())
}

impl Cgroup {
    /// Makes a fresh cgroup with `limits`, or says why it cannot.
    pub fn create(test: &str, limits: Limits) -> Result<Cgroup, String> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err("not root: cannot make a cgroup".into());
        }
        let name = format!("abx-{test}-{}", std::process::id());
        let wanted: Vec<&'static str> =
            [limits.memory.map(|_| "memory"), limits.pids.map(|_| "pids")].into_iter().flatten().collect();
        let v2 = Path::new(ROOT).join("cgroup.controllers").exists();
        let mut cgroup = Cgroup { dirs: Vec::new(), v2 };
        if v2 {
            let available = std::fs::read_to_string(Path::new(ROOT).join("cgroup.controllers")).unwrap_or_default();
            for controller in &wanted {
                if !available.split_whitespace().any(|c| c == *controller) {
                    return Err(format!("cgroup v2 has no {controller} controller here"));
                }
                write(&Path::new(ROOT).join("cgroup.subtree_control"), &format!("+{controller}"))?;
            }
            let dir = Path::new(ROOT).join(&name);
            std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            cgroup.dirs = wanted.iter().map(|c| (*c, dir.clone())).collect();
            cgroup.dirs.truncate(1);
            if let Some(memory) = limits.memory {
                write(&dir.join("memory.max"), &memory.to_string())?;
                let _ = write(&dir.join("memory.swap.max"), "0");
            }
            if let Some(pids) = limits.pids {
                write(&dir.join("pids.max"), &pids.to_string())?;
            }
            return Ok(cgroup);
        }
        for controller in wanted {
            let hierarchy = Path::new(ROOT).join(controller);
            if !hierarchy.join("cgroup.procs").exists() {
                return Err(format!("no cgroup v2 and no v1 {controller} hierarchy at {}", hierarchy.display()));
            }
            let own = v1_own_path(controller);
            let dir = hierarchy.join(own.trim_start_matches('/')).join(&name);
            std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            cgroup.dirs.push((controller, dir.clone()));
            match controller {
                "memory" => {
                    let memory = limits.memory.unwrap_or(u64::MAX).to_string();
                    write(&dir.join("memory.limit_in_bytes"), &memory)?;
                    let _ = write(&dir.join("memory.memsw.limit_in_bytes"), &memory);
                }
                _ => write(&dir.join("pids.max"), &limits.pids.unwrap_or(u64::MAX).to_string())?,
            }
        }
        Ok(cgroup)
    }

    /// Moves process `pid` (all its threads) in; its children are born inside.
    pub fn add(&self, pid: u32) {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string()).expect("join the cgroup");
        }
    }

    fn dir(&self, controller: &str) -> &Path {
        self.dirs.iter().find(|(c, _)| self.v2 || *c == controller).map(|(_, d)| d.as_path()).expect("controller")
    }

    /// Processes killed by the OOM killer in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let text = std::fs::read_to_string(self.dir("memory").join(file)).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
    }

    /// Tasks (processes and threads) in this cgroup now.
    pub fn pids_current(&self) -> u64 {
        let text = std::fs::read_to_string(self.dir("pids").join("pids.current")).unwrap_or_default();
        text.trim().parse().unwrap_or(0)
    }

    /// Processes in this cgroup now.
    pub fn procs(&self) -> Vec<i32> {
        let mut all: Vec<i32> = Vec::new();
        for (_, dir) in &self.dirs {
            let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            all.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        all.sort_unstable();
        all.dedup();
        all
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Whatever a failed test left inside dies, then the directories go.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = self.procs();
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (_, dir) in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

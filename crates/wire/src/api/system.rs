//! System group wire types: `GET /system/info`, `GET /system/metrics`,
//! `GET /env`, `POST /env`, `GET /ports`, `GET /packages`.
//!
//! The reference's fields come first, with its names and units (MiB as
//! integers, GiB with two decimals). The fields after them are ours; the
//! client's models accept extra fields, and every extra field defaults when
//! absent so this client also reads the reference server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /system/info`: what this machine is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SystemInfo {
    /// Kernel name (`Linux`).
    pub os: String,
    /// Machine architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// Online CPUs of the host (not the cgroup quota; see `cgroup.cpu_max_cores`).
    pub cpu_count: u32,
    /// Host memory (`MemTotal`), MiB.
    pub memory_total_mb: u64,
    /// Host memory available without swapping (`MemAvailable`), MiB.
    pub memory_available_mb: u64,
    /// Size of the root file system, GiB.
    pub disk_total_gb: f64,
    /// Space on the root file system available to unprivileged users, GiB.
    pub disk_free_gb: f64,
    /// Version of the `python3` children would run (empty when there is none).
    pub python_version: String,
    /// Host name.
    pub hostname: String,
    /// Kernel release (`6.8.0-45-generic`).
    #[serde(default)]
    pub kernel: String,
    /// Distribution (`PRETTY_NAME` of `/etc/os-release`), empty when unknown.
    #[serde(default)]
    pub distro: String,
    /// Version of the server that answers.
    #[serde(default)]
    pub server_version: String,
    /// The server's own cgroup: the limits that really bound this sandbox.
    #[serde(default)]
    pub cgroup: Option<CgroupStats>,
}

/// `GET /system/metrics`: current load and use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct SystemMetrics {
    /// Load average over 1 minute.
    pub cpu_load_1m: f64,
    /// Load average over 5 minutes.
    pub cpu_load_5m: f64,
    /// Load average over 15 minutes.
    pub cpu_load_15m: f64,
    /// Host memory in use (`MemTotal - MemAvailable`), MiB.
    pub memory_used_mb: u64,
    /// Host memory, MiB.
    pub memory_total_mb: u64,
    /// `memory_used_mb` as a percentage of `memory_total_mb`, one decimal.
    pub memory_percent: f64,
    /// Used space of the root file system, GiB.
    pub disk_used_gb: f64,
    /// Size of the root file system, GiB.
    pub disk_total_gb: f64,
    /// Used space as a percentage of the size, one decimal.
    pub disk_percent: f64,
    /// Seconds since the server started.
    pub uptime_seconds: f64,
    /// Host CPU busy over the last `cpu_sample_seconds`, percent of all CPUs.
    #[serde(default)]
    pub cpu_percent: Option<f64>,
    /// The window `cpu_percent` (and `cgroup.cpu_percent`) were measured over.
    #[serde(default)]
    pub cpu_sample_seconds: Option<f64>,
    /// Host memory available without swapping, MiB.
    #[serde(default)]
    pub memory_available_mb: u64,
    /// Seconds since the host booted.
    #[serde(default)]
    pub system_uptime_seconds: f64,
    /// The server's own cgroup: limits and use.
    #[serde(default)]
    pub cgroup: Option<CgroupStats>,
}

/// Limits and use of the cgroup the server runs in (cgroup v2, or v1 where
/// only v1 controllers are mounted). A `null` limit means none is set at
/// this cgroup or any ancestor up to the mounted root; a `null` reading
/// means the controller is not available.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CgroupStats {
    /// 2 or 1.
    pub version: u8,
    /// The cgroup's path in its hierarchy (`/` inside a cgroup namespace).
    pub path: String,
    /// Smallest `memory.max` (v1: hierarchical limit) on the way to the root, bytes.
    pub memory_max_bytes: Option<u64>,
    /// `memory.current` (v1: `memory.usage_in_bytes`), bytes.
    pub memory_current_bytes: Option<u64>,
    /// `memory_current_bytes` as a percentage of `memory_max_bytes`, one decimal.
    pub memory_percent: Option<f64>,
    /// Processes killed by the OOM killer in this cgroup (`memory.events` `oom_kill`).
    pub oom_kills: Option<u64>,
    /// Smallest `cpu.max` quota on the way to the root, in CPUs (1.5 = one and a half).
    pub cpu_max_cores: Option<f64>,
    /// CPU time used by the cgroup since it was created, seconds.
    pub cpu_usage_seconds: Option<f64>,
    /// CPU used over the sample window, percent of `cpu_max_cores` (or of all
    /// CPUs when unlimited). Only in `/system/metrics`.
    pub cpu_percent: Option<f64>,
    /// Smallest `pids.max` on the way to the root.
    pub pids_max: Option<u64>,
    /// `pids.current`: tasks in the cgroup.
    pub pids_current: Option<u64>,
}

/// `GET /env` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EnvQuery {
    /// Comma-separated names to return; all when absent or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// `GET /env` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EnvVariables {
    /// Visible variables by name.
    pub variables: BTreeMap<String, String>,
}

/// `POST /env` body: `{"vars": {"NAME": "value"}}`.
///
/// `vars` stays raw JSON so the server can refuse a non-object (`null`
/// included) or a non-string value with the reference's messages; a body
/// without `vars` sets nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EnvSetRequest {
    /// The assignments.
    #[serde(default = "empty_object")]
    pub vars: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl EnvSetRequest {
    /// A request setting these variables.
    pub fn new<K: Into<String>, V: Into<String>>(vars: impl IntoIterator<Item = (K, V)>) -> Self {
        let map = vars.into_iter().map(|(k, v)| (k.into(), serde_json::Value::String(v.into()))).collect();
        EnvSetRequest { vars: serde_json::Value::Object(map) }
    }
}

/// `POST /env` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EnvUpdated {
    /// Names set, sorted.
    pub updated: Vec<String>,
}

/// `GET /ports` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PortList {
    /// Listening TCP sockets.
    pub listening: Vec<ListeningPort>,
}

/// One listening TCP socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ListeningPort {
    /// Port number.
    pub port: u16,
    /// `tcp` or `tcp6`.
    pub protocol: String,
    /// Bound address: `0.0.0.0`, `127.0.0.1`, `[::]`, `[::1]`.
    pub address: String,
    /// A process holding the socket, when this server may see it.
    pub pid: Option<u32>,
    /// That process's name (`comm`).
    #[serde(default)]
    pub process: Option<String>,
}

/// `GET /packages` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PackagesQuery {
    /// `pip` (default), `npm` or `dpkg`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(any(test, feature = "openapi"), schemars(example = &"dpkg"))]
    pub manager: Option<String>,
}

/// `GET /packages` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PackageList {
    /// The manager asked.
    pub manager: String,
    /// Installed packages; empty when the manager is not installed.
    pub packages: Vec<PackageInfo>,
}

/// One installed package.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PackageInfo {
    /// Package name.
    pub name: String,
    /// Installed version.
    #[serde(default)]
    pub version: String,
}

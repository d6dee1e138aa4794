//! Configuration of `serve`: flags, environment, config file, defaults.
//!
//! One options struct ([`ServeArgs`]) is filled by clap from flags and
//! `ABX_SERVER_*` variables (a flag beats its variable); the TOML file
//! ([`FileConfig`]) fills what both left unset; built-in defaults fill the
//! rest. [`Config::resolve`] merges them explicitly into a [`Config`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::commands::{CommandSpec, Registry};
use crate::endpoints::Group;
use crate::pty::TerminalSettings;

/// Default API port (the reference's).
pub const DEFAULT_PORT: u16 = crate::endpoints::Port::Api.default_number();
/// Default PTY WebSocket port (the reference's).
pub const DEFAULT_PTY_PORT: u16 = crate::endpoints::Port::Pty.default_number();
/// Default boundary directory for paths (the reference's).
pub const DEFAULT_BASE_DIR: &str = "/home/user";
/// Config file read when none is named; a missing one is fine.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/agent-sandbox/server.toml";
/// Default grace for in-flight requests at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Default code-interpreter port (the code-interpreter protocol's).
pub const DEFAULT_CODE_PORT: u16 = crate::endpoints::Port::Code.default_number();
/// Default envd data-plane port (the envd protocol's).
pub const DEFAULT_ENVD_PORT: u16 = crate::endpoints::Port::Envd.default_number();
/// Default bound on live code contexts.
pub const DEFAULT_CODE_MAX_CONTEXTS: usize = 32;
/// Default idle lifetime of a code context.
pub const DEFAULT_CODE_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Default quiet time after which a running execution sends a keepalive line.
pub const DEFAULT_CODE_KEEPALIVE: Duration = Duration::from_secs(5);

/// A listener port, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PortSetting {
    /// Listen on this port (0 picks a free one).
    Port(u16),
    /// `off`: no listener.
    Named(Off),
}

/// The word `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Off {
    /// No listener.
    Off,
}

impl PortSetting {
    /// The port, or `None` for `off`.
    pub fn port(self) -> Option<u16> {
        match self {
            PortSetting::Port(port) => Some(port),
            PortSetting::Named(Off::Off) => None,
        }
    }
}

impl std::str::FromStr for PortSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(PortSetting::Named(Off::Off)),
            n => n.parse().map(PortSetting::Port).map_err(|_| format!("'{s}' is not a port number or 'off'")),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line.
    Json,
}

/// Options of `serve` from flags and environment; unset fields fall back to the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML config file (default /etc/agent-sandbox/server.toml when it exists).
    #[arg(long, env = "ABX_SERVER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to bind [default: 0.0.0.0].
    #[arg(long, env = "ABX_SERVER_HOST")]
    pub host: Option<String>,
    /// API port [default: 9000].
    #[arg(long, env = "ABX_SERVER_PORT")]
    pub port: Option<u16>,
    /// PTY WebSocket port [default: 9001].
    #[arg(long, env = "ABX_PTY_PORT")]
    pub pty_port: Option<u16>,
    /// Boundary directory for file paths [default: /home/user, else the current directory].
    #[arg(long, env = "ABX_SERVER_BASE_DIR", value_name = "DIR")]
    pub base_dir: Option<PathBuf>,
    /// Policy JSON file (without it: --preset, then ABX_SERVER_POLICY, ABX_SERVER_POLICY_FILE,
    /// /etc/agent-sandbox/server-policy.json).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Policy preset: default, transfer-only, read-only, hardened, locked.
    #[arg(long, env = "ABX_SERVER_PRESET")]
    pub preset: Option<String>,
    /// Opt-in groups to enable, comma-separated (dev_tools, browser, agents).
    #[arg(long, env = "ABX_SERVER_ENABLED_GROUPS", value_delimiter = ',', value_name = "GROUPS")]
    pub enabled_groups: Option<Vec<String>>,
    /// Log format [default: plain].
    #[arg(long, env = "ABX_SERVER_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter when RUST_LOG is unset [default: info].
    #[arg(long, env = "ABX_SERVER_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Seconds in-flight requests get to finish at shutdown [default: 10].
    #[arg(long, env = "ABX_SERVER_SHUTDOWN_GRACE_SECONDS", value_name = "SECONDS")]
    pub shutdown_grace_seconds: Option<f64>,
    /// Close terminal sessions nobody attached to or used for this long; 0 never [default: 1800].
    #[arg(long, env = "ABX_PTY_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
    pub pty_idle_timeout_seconds: Option<f64>,
    /// Output history each terminal session keeps for re-attaching [default: 65536].
    #[arg(long, env = "ABX_PTY_SCROLLBACK_BYTES", value_name = "BYTES")]
    pub pty_scrollback_bytes: Option<u64>,
    /// Live terminal sessions allowed when the policy sets no max_sessions [default: 10].
    #[arg(long, env = "ABX_PTY_MAX_SESSIONS", value_name = "N")]
    pub pty_max_sessions: Option<u64>,
    /// Code-interpreter port, or `off` [default: 49999].
    #[arg(long, env = "ABX_CODE_PORT", value_name = "PORT|off")]
    pub code_port: Option<PortSetting>,
    /// envd data-plane port (the E2B SDK's Connect protocol), or `off` [default: 49983].
    #[arg(long, env = "ABX_ENVD_PORT", value_name = "PORT|off")]
    pub envd_port: Option<PortSetting>,
    /// Live code contexts at most [default: 32].
    #[arg(long, env = "ABX_CODE_MAX_CONTEXTS", value_name = "N")]
    pub code_max_contexts: Option<usize>,
    /// Seconds without executions after which a code context is removed; 0 keeps them [default: 3600].
    #[arg(long, env = "ABX_CODE_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
    pub code_idle_timeout_seconds: Option<f64>,
    /// Quiet seconds after which a running execution sends a keepalive line [default: 5].
    #[arg(long, env = "ABX_CODE_KEEPALIVE_SECONDS", value_name = "SECONDS")]
    pub code_keepalive_seconds: Option<f64>,
    /// Python interpreter of code contexts and /code/run [default: python3].
    #[arg(long, env = "ABX_CODE_PYTHON", value_name = "PROGRAM")]
    pub code_python: Option<String>,
    /// Node.js interpreter [default: node].
    #[arg(long, env = "ABX_CODE_NODE", value_name = "PROGRAM")]
    pub code_node: Option<String>,
    /// bash interpreter [default: bash].
    #[arg(long, env = "ABX_CODE_BASH", value_name = "PROGRAM")]
    pub code_bash: Option<String>,
    /// R interpreter of code contexts [default: Rscript].
    #[arg(long, env = "ABX_CODE_R", value_name = "PROGRAM")]
    pub code_r: Option<String>,
    /// Java launcher of code contexts, from a JDK (JShell runs the cells) [default: java].
    #[arg(long, env = "ABX_CODE_JAVA", value_name = "PROGRAM")]
    pub code_java: Option<String>,
    /// Browser program of the browser group, a path or a name on PATH [default: chromium].
    #[arg(long, env = "ABX_BROWSER_PATH", value_name = "PROGRAM")]
    pub browser_path: Option<String>,
    /// Close the browser after this many seconds without browser calls; 0 never [default: 300].
    #[arg(long, env = "ABX_BROWSER_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
    pub browser_idle_timeout_seconds: Option<f64>,
    /// fdatasync every uploaded file before putting it in place [default: false].
    #[arg(long, env = "ABX_SERVER_SYNC_WRITES", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub sync_writes: Option<bool>,
    /// Largest inflated/compressed size ratio of a gzip upload body; 0 no limit [default: 100].
    #[arg(long, env = "ABX_SERVER_MAX_INFLATE_RATIO", value_name = "RATIO")]
    pub max_inflate_ratio: Option<u64>,
    /// Directory watches open at once, on every port together [default: 128].
    #[arg(long, env = "ABX_SERVER_MAX_WATCHES", value_name = "N")]
    pub max_watches: Option<usize>,
    /// Seconds a client has to send a request's head [default: 15].
    #[arg(long, env = "ABX_SERVER_HEADER_READ_TIMEOUT_SECONDS", value_name = "SECONDS")]
    pub header_read_timeout_seconds: Option<f64>,
    /// Seconds a kept-alive connection may wait for its next request [default: 60].
    #[arg(long, env = "ABX_SERVER_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
    pub idle_timeout_seconds: Option<f64>,
    /// Open connections per port [default: an eighth of the descriptor limit, 32 to 4096].
    #[arg(long, env = "ABX_SERVER_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Of those, the last kept for /health and authenticated callers [default: an eighth].
    #[arg(long, env = "ABX_SERVER_CONNECTION_RESERVE", value_name = "N")]
    pub connection_reserve: Option<usize>,
    /// Serve `GET /metrics` without credentials (a `locked` policy still switches it off) [default: false].
    #[arg(long, env = "ABX_SERVER_METRICS_ANONYMOUS", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_anonymous: Option<bool>,
}

/// The TOML config file; every key optional, unknown keys refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to bind.
    pub host: Option<String>,
    /// API port.
    pub port: Option<u16>,
    /// PTY WebSocket port.
    pub pty_port: Option<u16>,
    /// Boundary directory for file paths.
    pub base_dir: Option<PathBuf>,
    /// Policy JSON file.
    pub policy: Option<PathBuf>,
    /// Policy preset.
    pub preset: Option<String>,
    /// Opt-in groups to enable.
    pub enabled_groups: Option<Vec<String>>,
    /// Log format.
    pub log_format: Option<LogFormat>,
    /// Log filter when RUST_LOG is unset.
    pub log_level: Option<String>,
    /// Seconds in-flight requests get to finish at shutdown.
    pub shutdown_grace_seconds: Option<f64>,
    /// Seconds before an unused terminal session is closed (0: never).
    pub pty_idle_timeout_seconds: Option<f64>,
    /// Output history kept per terminal session.
    pub pty_scrollback_bytes: Option<u64>,
    /// Live terminal sessions when the policy sets no `max_sessions`.
    pub pty_max_sessions: Option<u64>,
    /// Registered commands (`[[commands]]`).
    #[serde(default)]
    pub commands: Vec<CommandSpec>,
    /// Code-interpreter port, or "off".
    pub code_port: Option<PortSetting>,
    /// envd data-plane port, or "off".
    pub envd_port: Option<PortSetting>,
    /// Live code contexts at most.
    pub code_max_contexts: Option<usize>,
    /// Idle lifetime of a code context in seconds (0: forever).
    pub code_idle_timeout_seconds: Option<f64>,
    /// Keepalive interval of running executions in seconds.
    pub code_keepalive_seconds: Option<f64>,
    /// Python interpreter.
    pub code_python: Option<String>,
    /// Node.js interpreter.
    pub code_node: Option<String>,
    /// bash interpreter.
    pub code_bash: Option<String>,
    /// R interpreter.
    pub code_r: Option<String>,
    /// Java launcher.
    pub code_java: Option<String>,
    /// Whether uploads are flushed to disk before they are put in place.
    pub sync_writes: Option<bool>,
    /// Largest inflated/compressed size ratio of a gzip upload body (0: none).
    pub max_inflate_ratio: Option<u64>,
    /// Directory watches open at once.
    pub max_watches: Option<usize>,
    /// Seconds a client has to send a request's head.
    pub header_read_timeout_seconds: Option<f64>,
    /// Seconds a kept-alive connection may wait for its next request.
    pub idle_timeout_seconds: Option<f64>,
    /// Open connections per port.
    pub max_connections: Option<usize>,
    /// Connections kept for /health and authenticated callers.
    pub connection_reserve: Option<usize>,
    /// Browser program (a path, or a name on `PATH`).
    pub browser_path: Option<String>,
    /// Seconds without browser calls before the browser is closed (0: never).
    pub browser_idle_timeout_seconds: Option<f64>,
    /// Whether `GET /metrics` answers without credentials.
    pub metrics_anonymous: Option<bool>,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A named config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this server.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its location.
        message: String,
    },
    /// A group name is not a group.
    #[error("unknown group '{name}'{hint}; allowed: commands, file_ops, process, terminal, system, dev_tools, browser, agents")]
    UnknownGroup {
        /// The name given.
        name: String,
        /// A "did you mean" hint.
        hint: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Where the base dir came from, so the fallback can be reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseDirSource {
    /// Set by a flag, variable or file.
    Configured,
    /// The default `/home/user`.
    Default,
    /// `/home/user` does not exist; the current directory is used.
    FallbackToCurrentDir,
}

/// The resolved configuration of `serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind.
    pub host: String,
    /// API port (0 picks a free one).
    pub port: u16,
    /// PTY WebSocket port (0 picks a free one).
    pub pty_port: u16,
    /// Boundary directory for paths.
    pub base_dir: PathBuf,
    /// Where `base_dir` came from.
    pub base_dir_source: BaseDirSource,
    /// Policy JSON file.
    pub policy: Option<PathBuf>,
    /// Policy preset.
    pub preset: Option<String>,
    /// Opt-in groups enabled.
    pub enabled_groups: Vec<Group>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter when RUST_LOG is unset.
    pub log_level: String,
    /// Grace for in-flight requests at shutdown.
    pub shutdown_grace: Duration,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// Terminal settings.
    pub terminals: TerminalSettings,
    /// Registered commands, validated.
    pub commands: Registry,
    /// Code-interpreter port (0 picks a free one); `None` when off.
    pub code_port: Option<u16>,
    /// Whether the code port was set explicitly (then failing to bind it is fatal).
    pub code_port_configured: bool,
    /// Code contexts and their interpreters.
    pub code: CodeSettings,
    /// Whether uploads are `fdatasync`ed before they are put in place.
    pub sync_writes: bool,
    /// Whether `GET /metrics` answers without credentials.
    pub metrics_anonymous: bool,
    /// envd data-plane port (0 picks a free one); `None` when off.
    pub envd_port: Option<u16>,
    /// Whether the envd port was set explicitly (then failing to bind it is fatal).
    pub envd_port_configured: bool,
    /// What gzip upload bodies may inflate to.
    pub inflate: crate::fs::inflate::Limits,
    /// Bounds of the daemon's shared inotify instance.
    pub watches: crate::fs::inotify::Limits,
    /// Connection timeouts and limits of every port.
    pub connections: crate::http::listener::ConnectionLimits,
    /// How the browser group runs its browser.
    pub browser: crate::browser::BrowserSettings,
}

/// Settings of code execution.
#[derive(Debug, Clone)]
pub struct CodeSettings {
    /// Live code contexts at most.
    pub max_contexts: usize,
    /// Idle lifetime of a context (`None`: forever).
    pub idle_timeout: Option<Duration>,
    /// Quiet time after which a running execution sends a keepalive line.
    pub keepalive: Duration,
    /// Interpreter programs.
    pub interpreters: crate::code::Interpreters,
}

impl Config {
    /// Merges flags and environment over the config file over the defaults.
    ///
    /// # Errors
    /// A named config file that cannot be read or parsed, an unknown group,
    /// or a value out of range.
    pub fn resolve(args: ServeArgs) -> Result<Config, ConfigError> {
        let (file, config_file) = load_file(args.config.as_deref())?;
        Self::merge(args, file, config_file)
    }

    fn merge(args: ServeArgs, file: FileConfig, config_file: Option<PathBuf>) -> Result<Config, ConfigError> {
        let terminals = terminal_settings(&args, &file)?;
        let connections = connection_limits(&args, &file)?;
        let commands = Registry::from_specs(&file.commands).map_err(ConfigError::Invalid)?;
        let host = args.host.or(file.host).unwrap_or_else(|| "0.0.0.0".into());
        let (base_dir, base_dir_source) = match args.base_dir.or(file.base_dir) {
            Some(dir) => (absolute(dir), BaseDirSource::Configured),
            None if Path::new(DEFAULT_BASE_DIR).is_dir() => (PathBuf::from(DEFAULT_BASE_DIR), BaseDirSource::Default),
            None => (absolute(PathBuf::from(".")), BaseDirSource::FallbackToCurrentDir),
        };
        let groups = args.enabled_groups.or(file.enabled_groups).unwrap_or_default();
        let grace = args.shutdown_grace_seconds.or(file.shutdown_grace_seconds);
        let shutdown_grace = match grace {
            None => DEFAULT_SHUTDOWN_GRACE,
            Some(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s),
            Some(s) => return Err(ConfigError::Invalid(format!("shutdown_grace_seconds must be >= 0, got {s}"))),
        };
        let seconds = |name: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(ConfigError::Invalid(format!("{name} must be >= 0, got {s}"))),
        };
        let idle = seconds(
            "code_idle_timeout_seconds",
            args.code_idle_timeout_seconds.or(file.code_idle_timeout_seconds),
            DEFAULT_CODE_IDLE_TIMEOUT,
        )?;
        let keepalive = seconds(
            "code_keepalive_seconds",
            args.code_keepalive_seconds.or(file.code_keepalive_seconds),
            DEFAULT_CODE_KEEPALIVE,
        )?;
        let browser_idle = seconds(
            "browser_idle_timeout_seconds",
            args.browser_idle_timeout_seconds.or(file.browser_idle_timeout_seconds),
            crate::browser::DEFAULT_IDLE_TIMEOUT,
        )?;
        let browser = crate::browser::BrowserSettings {
            program: args.browser_path.or(file.browser_path).filter(|p| !p.is_empty()),
            idle_timeout: (!browser_idle.is_zero()).then_some(browser_idle),
        };
        let defaults = crate::code::Interpreters::default();
        let code = CodeSettings {
            max_contexts: args.code_max_contexts.or(file.code_max_contexts).unwrap_or(DEFAULT_CODE_MAX_CONTEXTS),
            idle_timeout: (!idle.is_zero()).then_some(idle),
            keepalive: keepalive.max(Duration::from_millis(10)),
            interpreters: crate::code::Interpreters {
                python: args.code_python.or(file.code_python).unwrap_or(defaults.python),
                node: args.code_node.or(file.code_node).unwrap_or(defaults.node),
                bash: args.code_bash.or(file.code_bash).unwrap_or(defaults.bash),
                r: args.code_r.or(file.code_r).unwrap_or(defaults.r),
                java: args.code_java.or(file.code_java).unwrap_or(defaults.java),
            },
        };
        Ok(Config {
            host,
            port: args.port.or(file.port).unwrap_or(DEFAULT_PORT),
            pty_port: args.pty_port.or(file.pty_port).unwrap_or(DEFAULT_PTY_PORT),
            base_dir,
            base_dir_source,
            policy: args.policy.or(file.policy),
            preset: args.preset.or(file.preset),
            enabled_groups: parse_groups(&groups)?,
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            log_level: args.log_level.or(file.log_level).unwrap_or_else(|| "info".into()),
            shutdown_grace,
            config_file,
            terminals,
            commands,
            code_port_configured: args.code_port.or(file.code_port).is_some(),
            code_port: args.code_port.or(file.code_port).unwrap_or(PortSetting::Port(DEFAULT_CODE_PORT)).port(),
            code,
            sync_writes: args.sync_writes.or(file.sync_writes).unwrap_or(false),
            metrics_anonymous: args.metrics_anonymous.or(file.metrics_anonymous).unwrap_or(false),
            envd_port_configured: args.envd_port.or(file.envd_port).is_some(),
            envd_port: args.envd_port.or(file.envd_port).unwrap_or(PortSetting::Port(DEFAULT_ENVD_PORT)).port(),
            inflate: crate::fs::inflate::Limits {
                max_ratio: match args.max_inflate_ratio.or(file.max_inflate_ratio) {
                    None => Some(crate::fs::inflate::DEFAULT_MAX_RATIO),
                    Some(0) => None,
                    Some(ratio) => Some(ratio),
                },
            },
            watches: match args.max_watches.or(file.max_watches) {
                None => crate::fs::inotify::Limits::default(),
                Some(0) => return Err(ConfigError::Invalid("max_watches must be at least 1".into())),
                Some(n) => crate::fs::inotify::Limits { max_watches: n, ..crate::fs::inotify::Limits::default() },
            },
            connections,
            browser,
        })
    }

    /// Whether the bind address is reachable only from this machine.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

fn connection_limits(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<crate::http::listener::ConnectionLimits, ConfigError> {
    crate::http::listener::ConnectionLimits::resolve(
        args.header_read_timeout_seconds.or(file.header_read_timeout_seconds),
        args.idle_timeout_seconds.or(file.idle_timeout_seconds),
        args.max_connections.or(file.max_connections),
        args.connection_reserve.or(file.connection_reserve),
    )
    .map_err(ConfigError::Invalid)
}

fn terminal_settings(args: &ServeArgs, file: &FileConfig) -> Result<TerminalSettings, ConfigError> {
    let defaults = TerminalSettings::default();
    let idle_timeout = match args.pty_idle_timeout_seconds.or(file.pty_idle_timeout_seconds) {
        None => defaults.idle_timeout,
        Some(0.0) => None,
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => return Err(ConfigError::Invalid(format!("pty_idle_timeout_seconds must be >= 0, got {s}"))),
    };
    let scrollback_bytes = match args.pty_scrollback_bytes.or(file.pty_scrollback_bytes) {
        None => defaults.scrollback_bytes,
        Some(n) if (1024..=64 * 1024 * 1024).contains(&n) => usize::try_from(n).unwrap_or(defaults.scrollback_bytes),
        Some(n) => {
            return Err(ConfigError::Invalid(format!("pty_scrollback_bytes must be from 1024 to 67108864, got {n}")))
        }
    };
    let max_sessions = match args.pty_max_sessions.or(file.pty_max_sessions) {
        None => defaults.max_sessions,
        Some(n) => {
            usize::try_from(n).map_err(|_| ConfigError::Invalid(format!("pty_max_sessions is too large: {n}")))?
        }
    };
    Ok(TerminalSettings { idle_timeout, scrollback_bytes, max_sessions })
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// Reads the named config file, or the default one when it exists.
fn load_file(named: Option<&Path>) -> Result<(FileConfig, Option<PathBuf>), ConfigError> {
    let path = match named {
        Some(path) => path.to_path_buf(),
        None if Path::new(DEFAULT_CONFIG_FILE).is_file() => PathBuf::from(DEFAULT_CONFIG_FILE),
        None => return Ok((FileConfig::default(), None)),
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    let file = parse_file(&text).map_err(|message| ConfigError::Parse { path: path.clone(), message })?;
    Ok((file, Some(path)))
}

/// Parses config file text.
///
/// # Errors
/// The TOML error, naming the key and line.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

/// Parses group names (`core` and blanks are ignored, as the reference does).
///
/// # Errors
/// [`ConfigError::UnknownGroup`] with a suggestion.
pub fn parse_groups(names: &[String]) -> Result<Vec<Group>, ConfigError> {
    let mut groups = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty() && *n != "core") {
        let group = Group::from_name(name).ok_or_else(|| ConfigError::UnknownGroup {
            name: name.to_string(),
            hint: crate::policy::suggest(name, Group::ALL.iter().map(|g| g.as_str())),
        })?;
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_file_which_beats_defaults() {
        let args = ServeArgs { port: Some(1), ..ServeArgs::default() };
        let file =
            FileConfig { port: Some(2), pty_port: Some(3), host: Some("127.0.0.1".into()), ..FileConfig::default() };
        let config = Config::merge(args, file, None).expect("valid");
        assert_eq!((config.port, config.pty_port, config.host.as_str()), (1, 3, "127.0.0.1"));
        let defaults = Config::merge(ServeArgs::default(), FileConfig::default(), None).expect("valid");
        assert_eq!((defaults.port, defaults.pty_port, defaults.host.as_str()), (9000, 9001, "0.0.0.0"));
        assert_eq!(defaults.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
        assert!(!defaults.sync_writes, "uploads are not synced unless asked");
        let file = parse_file("sync_writes = true").expect("valid");
        assert!(Config::merge(ServeArgs::default(), file.clone(), None).expect("valid").sync_writes);
        let args = ServeArgs { sync_writes: Some(false), ..ServeArgs::default() };
        assert!(!Config::merge(args, file, None).expect("valid").sync_writes, "the flag beats the file");
    }

    #[test]
    fn groups_are_validated_with_a_hint() {
        assert_eq!(
            parse_groups(&["dev_tools".into(), " core".into(), "".into()]).expect("valid"),
            vec![Group::DevTools]
        );
        let err = parse_groups(&["devtools".into()]).expect_err("unknown");
        assert!(err.to_string().contains("did you mean 'dev_tools'"), "{err}");
    }

    #[test]
    fn browser_settings_merge_flags_over_the_file() {
        let file = parse_file("browser_path = \"/opt/chrome\"\nbrowser_idle_timeout_seconds = 0\n").expect("valid");
        let config = Config::merge(ServeArgs::default(), file.clone(), None).expect("valid");
        assert_eq!(config.browser.program.as_deref(), Some("/opt/chrome"));
        assert_eq!(config.browser.idle_timeout, None, "0 keeps the browser");
        let args = ServeArgs { browser_idle_timeout_seconds: Some(2.5), ..ServeArgs::default() };
        let config = Config::merge(args, file, None).expect("valid");
        assert_eq!(config.browser.idle_timeout, Some(Duration::from_millis(2500)));
        let defaults = Config::merge(ServeArgs::default(), FileConfig::default(), None).expect("valid");
        assert_eq!(defaults.browser.idle_timeout, Some(crate::browser::DEFAULT_IDLE_TIMEOUT));
        assert_eq!(defaults.browser.program, None);
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let err = parse_file("prot = 9000\n").expect_err("unknown key");
        assert!(err.contains("prot"), "{err}");
    }

    #[test]
    fn the_example_config_parses_and_documents_every_key() {
        let text = include_str!("../config.example.toml");
        let file = parse_file(text).expect("config.example.toml parses");
        assert_eq!(file.port, Some(DEFAULT_PORT));
        assert_eq!(file.pty_port, Some(DEFAULT_PTY_PORT));
        for key in [
            "host",
            "port",
            "pty_port",
            "base_dir",
            "policy",
            "preset",
            "enabled_groups",
            "log_format",
            "log_level",
            "shutdown_grace_seconds",
            "pty_idle_timeout_seconds",
            "pty_scrollback_bytes",
            "pty_max_sessions",
            "code_port",
            "envd_port",
            "code_max_contexts",
            "code_idle_timeout_seconds",
            "code_keepalive_seconds",
            "code_python",
            "code_node",
            "code_bash",
            "code_r",
            "code_java",
            "sync_writes",
            "max_inflate_ratio",
            "max_watches",
            "header_read_timeout_seconds",
            "idle_timeout_seconds",
            "max_connections",
            "connection_reserve",
            "browser_path",
            "browser_idle_timeout_seconds",
            "metrics_anonymous",
        ] {
            assert!(
                text.lines().any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} ="))),
                "{key} undocumented"
            );
        }
    }

    #[test]
    fn the_example_config_declares_a_hello_command() {
        let file = parse_file(include_str!("../config.example.toml")).expect("parses");
        let registry = Registry::from_specs(&file.commands).expect("valid commands");
        let everyone = crate::policy::Identity::new("t", ["*"]);
        let listed = registry.list(&everyone);
        assert!(listed.iter().any(|c| c.name == "hello"), "{listed:?}");
    }

    #[test]
    fn terminal_settings_are_merged_and_checked() {
        let args = ServeArgs { pty_idle_timeout_seconds: Some(0.0), ..ServeArgs::default() };
        let file = FileConfig { pty_max_sessions: Some(3), pty_scrollback_bytes: Some(4096), ..FileConfig::default() };
        let config = Config::merge(args, file, None).expect("valid");
        assert_eq!(config.terminals, TerminalSettings { idle_timeout: None, scrollback_bytes: 4096, max_sessions: 3 });
        let bad = FileConfig { pty_scrollback_bytes: Some(10), ..FileConfig::default() };
        assert!(Config::merge(ServeArgs::default(), bad, None).is_err());
    }

    #[test]
    fn invalid_commands_stop_the_server_with_their_position() {
        let file = parse_file("[[commands]]\nname = \"a\"\nargv = [\"x\", \"{b}\"]\n").expect("parses");
        let err = Config::merge(ServeArgs::default(), file, None).expect_err("unknown placeholder");
        assert!(err.to_string().starts_with("commands[0] ('a'): argv[1] uses {b}"), "{err}");
    }

    #[test]
    fn a_named_config_file_that_is_missing_is_fatal() {
        let err = load_file(Some(Path::new("/nonexistent/server.toml"))).expect_err("missing");
        assert!(matches!(err, ConfigError::Read { .. }));
    }

    #[test]
    fn the_code_port_takes_a_number_or_off() {
        let defaults = Config::merge(ServeArgs::default(), FileConfig::default(), None).expect("valid");
        assert_eq!(defaults.code_port, Some(DEFAULT_CODE_PORT));
        assert_eq!(defaults.code.idle_timeout, Some(DEFAULT_CODE_IDLE_TIMEOUT));
        let file = parse_file("code_port = \"off\"\ncode_idle_timeout_seconds = 0\n").expect("valid");
        let config = Config::merge(ServeArgs::default(), file, None).expect("valid");
        assert_eq!((config.code_port, config.code.idle_timeout), (None, None));
        let args = ServeArgs { code_port: Some("0".parse().expect("port")), ..ServeArgs::default() };
        assert_eq!(
            Config::merge(args, parse_file("code_port = 1234").expect("valid"), None).expect("ok").code_port,
            Some(0)
        );
        assert!("of".parse::<PortSetting>().is_err());
        assert!(parse_file("code_port = \"on\"").is_err());
    }

    #[test]
    fn the_envd_port_defaults_to_49983_and_can_be_off() {
        let defaults = Config::merge(ServeArgs::default(), FileConfig::default(), None).expect("valid");
        assert_eq!((defaults.envd_port, defaults.envd_port_configured), (Some(DEFAULT_ENVD_PORT), false));
        let off = Config::merge(ServeArgs::default(), parse_file("envd_port = \"off\"").expect("valid"), None);
        assert_eq!(off.expect("ok").envd_port, None);
        let args = ServeArgs { envd_port: Some("0".parse().expect("port")), ..ServeArgs::default() };
        let config = Config::merge(args, parse_file("envd_port = 1234").expect("valid"), None).expect("ok");
        assert_eq!((config.envd_port, config.envd_port_configured), (Some(0), true));
    }

    #[test]
    fn connection_limits_are_merged_and_checked() {
        let args =
            ServeArgs { max_connections: Some(100), header_read_timeout_seconds: Some(2.5), ..ServeArgs::default() };
        let file =
            parse_file("max_connections = 7\nconnection_reserve = 10\nidle_timeout_seconds = 5\n").expect("valid");
        let config = Config::merge(args, file, None).expect("valid");
        let limits = config.connections;
        assert_eq!((limits.max_connections, limits.reserve), (100, 10), "the flag beats the file");
        assert_eq!(
            (limits.header_read_timeout, limits.idle_timeout),
            (Duration::from_millis(2500), Duration::from_secs(5))
        );
        let defaults = Config::merge(ServeArgs::default(), FileConfig::default(), None).expect("valid").connections;
        assert_eq!(defaults.reserve, (defaults.max_connections / 8).max(1));
        assert!((32..=4096).contains(&defaults.max_connections));
        let bad = FileConfig { max_connections: Some(4), connection_reserve: Some(4), ..FileConfig::default() };
        assert!(Config::merge(ServeArgs::default(), bad, None).is_err(), "no place left outside the reserve");
        let bad = FileConfig { idle_timeout_seconds: Some(0.0), ..FileConfig::default() };
        assert!(Config::merge(ServeArgs::default(), bad, None).is_err());
    }

    #[test]
    fn negative_grace_is_refused() {
        let args = ServeArgs { shutdown_grace_seconds: Some(-1.0), ..ServeArgs::default() };
        assert!(Config::merge(args, FileConfig::default(), None).is_err());
    }
}

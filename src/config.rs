//! Configuration of `serve`: flags, environment, config file, defaults.
//!
//! Every option is declared once, in [`Options`], which clap fills from
//! flags and `ABX_*` variables (a flag beats its variable) and serde from
//! the TOML file. [`Config::resolve`] lays the command line over the file
//! ([`Options::or`]), then fills what is still unset with the defaults and
//! checks ranges, into a [`Config`]: precedence flag > variable > file >
//! default comes from that one place.
//!
//! - `options`: the options struct, the file parser.
//! - `values`: ports that can be `off`, log formats, seconds.
//! - `agents_options`: the agents group's settings read from the `agents_*` options.

mod agents_options;
mod options;
mod values;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use abx_wire::endpoints::Group;
pub use options::{parse_file, Options};
pub use values::{LogFormat, Off, PortSetting, Seconds};

use abx_domain::commands::Registry;
use abx_domain::pty::TerminalSettings;

/// Default API port (the reference's).
pub const DEFAULT_PORT: u16 = abx_wire::endpoints::Port::Api.default_number();
/// Default PTY WebSocket port (the reference's).
pub const DEFAULT_PTY_PORT: u16 = abx_wire::endpoints::Port::Pty.default_number();
/// Default boundary directory for paths (the reference's).
pub const DEFAULT_BASE_DIR: &str = "/home/user";
/// Config file read when none is named; a missing one is fine.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/agent-sandbox/server.toml";
/// Default grace for in-flight requests at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Default code-interpreter port (the code-interpreter protocol's).
pub const DEFAULT_CODE_PORT: u16 = abx_wire::endpoints::Port::Code.default_number();
/// Default envd data-plane port (the envd protocol's).
pub const DEFAULT_ENVD_PORT: u16 = abx_wire::endpoints::Port::Envd.default_number();
/// Default bound on live code contexts.
pub const DEFAULT_CODE_MAX_CONTEXTS: usize = 32;
/// Default idle lifetime of a code context.
pub const DEFAULT_CODE_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Default quiet time after which a running execution sends a keepalive line.
pub const DEFAULT_CODE_KEEPALIVE: Duration = Duration::from_secs(5);

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
    pub inflate: abx_domain::fs::inflate::Limits,
    /// Bounds of the daemon's shared inotify instance.
    pub watches: abx_domain::fs::inotify::Limits,
    /// Connection timeouts and limits of every port.
    pub connections: crate::http::limits::ConnectionLimits,
    /// MCP sessions one identity may hold open.
    pub mcp_max_sessions: usize,
    /// How the browser group runs its browser.
    pub browser: abx_domain::browser::BrowserSettings,
    /// Settings of the agents group (its runtime starts at first use).
    pub agents: abx_domain::agents::AgentsConfig,
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
    pub interpreters: abx_domain::code::Interpreters,
}

impl Config {
    /// Merges flags and environment over the config file over the defaults.
    ///
    /// # Errors
    /// A named config file that cannot be read or parsed, an unknown group,
    /// or a value out of range.
    pub fn resolve(options: Options) -> Result<Config, ConfigError> {
        let (file, config_file) = load_file(options.config.as_deref())?;
        Self::from_options(options.or(file), config_file)
    }

    /// The configuration from merged options, defaults filling what they leave unset.
    fn from_options(o: Options, config_file: Option<PathBuf>) -> Result<Config, ConfigError> {
        let terminals = terminal_settings(&o)?;
        let home = std::env::var("HOME").ok();
        let agents = agents_options::agents_config(&o, home.as_deref()).map_err(ConfigError::Invalid)?;
        let connections = crate::http::limits::ConnectionLimits::resolve(
            o.header_read_timeout_seconds.map(|s| s.0),
            o.idle_timeout_seconds.map(|s| s.0),
            o.max_connections,
            o.connection_reserve,
        )
        .map_err(ConfigError::Invalid)?;
        let commands = Registry::from_specs(o.commands.as_deref().unwrap_or_default()).map_err(ConfigError::Invalid)?;
        let (base_dir, base_dir_source) = match o.base_dir {
            Some(dir) => (absolute(dir), BaseDirSource::Configured),
            None if Path::new(DEFAULT_BASE_DIR).is_dir() => (PathBuf::from(DEFAULT_BASE_DIR), BaseDirSource::Default),
            None => (absolute(PathBuf::from(".")), BaseDirSource::FallbackToCurrentDir),
        };
        let browser = abx_domain::browser::BrowserSettings {
            program: o.browser_path.filter(|p| !p.is_empty()),
            idle_timeout: o
                .browser_idle_timeout_seconds
                .map_or(Some(abx_domain::browser::DEFAULT_IDLE_TIMEOUT), Seconds::nonzero),
        };
        let defaults = abx_domain::code::Interpreters::default();
        let code = CodeSettings {
            max_contexts: o.code_max_contexts.unwrap_or(DEFAULT_CODE_MAX_CONTEXTS),
            idle_timeout: o.code_idle_timeout_seconds.map_or(Some(DEFAULT_CODE_IDLE_TIMEOUT), Seconds::nonzero),
            keepalive: o.code_keepalive_seconds.map_or(DEFAULT_CODE_KEEPALIVE, |s| s.0).max(Duration::from_millis(10)),
            interpreters: abx_domain::code::Interpreters {
                python: o.code_python.unwrap_or(defaults.python),
                node: o.code_node.unwrap_or(defaults.node),
                bash: o.code_bash.unwrap_or(defaults.bash),
                r: o.code_r.unwrap_or(defaults.r),
                java: o.code_java.unwrap_or(defaults.java),
            },
        };
        Ok(Config {
            host: o.host.unwrap_or_else(|| "0.0.0.0".into()),
            port: o.port.unwrap_or(DEFAULT_PORT),
            pty_port: o.pty_port.unwrap_or(DEFAULT_PTY_PORT),
            base_dir,
            base_dir_source,
            policy: o.policy,
            preset: o.preset,
            enabled_groups: parse_groups(&o.enabled_groups.unwrap_or_default())?,
            log_format: o.log_format.unwrap_or_default(),
            log_level: o.log_level.unwrap_or_else(|| "info".into()),
            shutdown_grace: o.shutdown_grace_seconds.map_or(DEFAULT_SHUTDOWN_GRACE, |s| s.0),
            config_file,
            terminals,
            commands,
            code_port_configured: o.code_port.is_some(),
            code_port: o.code_port.unwrap_or(PortSetting::Port(DEFAULT_CODE_PORT)).port(),
            code,
            sync_writes: o.sync_writes.unwrap_or(false),
            metrics_anonymous: o.metrics_anonymous.unwrap_or(false),
            envd_port_configured: o.envd_port.is_some(),
            envd_port: o.envd_port.unwrap_or(PortSetting::Port(DEFAULT_ENVD_PORT)).port(),
            inflate: abx_domain::fs::inflate::Limits {
                max_ratio: match o.max_inflate_ratio {
                    None => Some(abx_domain::fs::inflate::DEFAULT_MAX_RATIO),
                    Some(0) => None,
                    Some(ratio) => Some(ratio),
                },
            },
            watches: match o.max_watches {
                None => abx_domain::fs::inotify::Limits::default(),
                Some(0) => return Err(ConfigError::Invalid("max_watches must be at least 1".into())),
                Some(n) => {
                    abx_domain::fs::inotify::Limits { max_watches: n, ..abx_domain::fs::inotify::Limits::default() }
                }
            },
            connections,
            mcp_max_sessions: match o.mcp_max_sessions {
                None => crate::http::mcp::DEFAULT_MAX_SESSIONS,
                Some(0) => return Err(ConfigError::Invalid("mcp_max_sessions must be at least 1".into())),
                Some(n) => n,
            },
            browser,
            agents,
        })
    }

    /// The daemon's own paths that every path rule denies: the agents state
    /// directory, the config file and the agents group's JSON file (the
    /// policy engine adds the policy file and the token files).
    pub fn daemon_paths(&self) -> Vec<abx_domain::policy::daemon::DaemonPath> {
        use abx_domain::policy::daemon::DaemonPath;
        let mut paths = Vec::new();
        paths
            .extend(self.agents.state_dir.iter().map(|d| DaemonPath::new(d, abx_domain::policy::daemon::AGENTS_STATE)));
        paths.extend(self.agents.file.iter().map(|f| DaemonPath::new(f, "agents config file")));
        paths.extend(self.config_file.iter().map(|f| DaemonPath::new(f, "config file")));
        paths
    }

    /// Whether the bind address is reachable only from this machine.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

fn terminal_settings(o: &Options) -> Result<TerminalSettings, ConfigError> {
    let defaults = TerminalSettings::default();
    let idle_timeout = o.pty_idle_timeout_seconds.map_or(defaults.idle_timeout, Seconds::nonzero);
    let scrollback_bytes = match o.pty_scrollback_bytes {
        None => defaults.scrollback_bytes,
        Some(n) if (1024..=64 * 1024 * 1024).contains(&n) => usize::try_from(n).unwrap_or(defaults.scrollback_bytes),
        Some(n) => {
            return Err(ConfigError::Invalid(format!("pty_scrollback_bytes must be from 1024 to 67108864, got {n}")))
        }
    };
    let max_sessions = match o.pty_max_sessions {
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
fn load_file(named: Option<&Path>) -> Result<(Options, Option<PathBuf>), ConfigError> {
    let path = match named {
        Some(path) => path.to_path_buf(),
        None if Path::new(DEFAULT_CONFIG_FILE).is_file() => PathBuf::from(DEFAULT_CONFIG_FILE),
        None => return Ok((Options::default(), None)),
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    let file = parse_file(&text).map_err(|message| ConfigError::Parse { path: path.clone(), message })?;
    Ok((file, Some(path)))
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
            hint: abx_domain::policy::suggest(name, Group::ALL.iter().map(|g| g.as_str())),
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

    /// Flags and variables laid over the file, then the defaults.
    fn merge(args: Options, file: Options) -> Result<Config, ConfigError> {
        Config::from_options(args.or(file), None)
    }

    fn secs(s: f64) -> Option<Seconds> {
        Some(Seconds::from_f64(s).expect("seconds"))
    }

    #[test]
    fn flags_beat_the_file_which_beats_defaults() {
        let args = Options { port: Some(1), ..Options::default() };
        let file = Options { port: Some(2), pty_port: Some(3), host: Some("127.0.0.1".into()), ..Options::default() };
        let config = merge(args, file).expect("valid");
        assert_eq!((config.port, config.pty_port, config.host.as_str()), (1, 3, "127.0.0.1"));
        let defaults = merge(Options::default(), Options::default()).expect("valid");
        assert_eq!((defaults.port, defaults.pty_port, defaults.host.as_str()), (9000, 9001, "0.0.0.0"));
        assert_eq!(defaults.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
        assert!(!defaults.sync_writes, "uploads are not synced unless asked");
        let file = parse_file("sync_writes = true").expect("valid");
        assert!(merge(Options::default(), file.clone()).expect("valid").sync_writes);
        let args = Options { sync_writes: Some(false), ..Options::default() };
        assert!(!merge(args, file).expect("valid").sync_writes, "the flag beats the file");
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
        let config = merge(Options::default(), file.clone()).expect("valid");
        assert_eq!(config.browser.program.as_deref(), Some("/opt/chrome"));
        assert_eq!(config.browser.idle_timeout, None, "0 keeps the browser");
        let args = Options { browser_idle_timeout_seconds: secs(2.5), ..Options::default() };
        let config = merge(args, file).expect("valid");
        assert_eq!(config.browser.idle_timeout, Some(Duration::from_millis(2500)));
        let defaults = merge(Options::default(), Options::default()).expect("valid");
        assert_eq!(defaults.browser.idle_timeout, Some(abx_domain::browser::DEFAULT_IDLE_TIMEOUT));
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
        for key in Options::NAMES.iter().filter(|k| **k != "config") {
            assert!(
                text.lines().any(|l| {
                    let l = l.trim_start_matches("# ");
                    l.starts_with(&format!("{key} =")) || l.starts_with(&format!("[[{key}]]"))
                }),
                "{key} undocumented"
            );
        }
    }

    #[test]
    fn the_example_config_declares_a_hello_command() {
        let file = parse_file(include_str!("../config.example.toml")).expect("parses");
        let registry = Registry::from_specs(file.commands.as_deref().unwrap_or_default()).expect("valid commands");
        let everyone = abx_domain::policy::Identity::new("t", ["*"]);
        let listed = registry.list(&everyone);
        assert!(listed.iter().any(|c| c.name == "hello"), "{listed:?}");
    }

    #[test]
    fn terminal_settings_are_merged_and_checked() {
        let args = Options { pty_idle_timeout_seconds: secs(0.0), ..Options::default() };
        let file = Options { pty_max_sessions: Some(3), pty_scrollback_bytes: Some(4096), ..Options::default() };
        let config = merge(args, file).expect("valid");
        assert_eq!(config.terminals, TerminalSettings { idle_timeout: None, scrollback_bytes: 4096, max_sessions: 3 });
        let bad = Options { pty_scrollback_bytes: Some(10), ..Options::default() };
        assert!(merge(Options::default(), bad).is_err());
    }

    #[test]
    fn invalid_commands_stop_the_server_with_their_position() {
        let file = parse_file("[[commands]]\nname = \"a\"\nargv = [\"x\", \"{b}\"]\n").expect("parses");
        let err = merge(Options::default(), file).expect_err("unknown placeholder");
        assert!(err.to_string().starts_with("commands[0] ('a'): argv[1] uses {b}"), "{err}");
    }

    #[test]
    fn a_named_config_file_that_is_missing_is_fatal() {
        let err = load_file(Some(Path::new("/nonexistent/server.toml"))).expect_err("missing");
        assert!(matches!(err, ConfigError::Read { .. }));
    }

    #[test]
    fn the_code_port_takes_a_number_or_off() {
        let defaults = merge(Options::default(), Options::default()).expect("valid");
        assert_eq!(defaults.code_port, Some(DEFAULT_CODE_PORT));
        assert_eq!(defaults.code.idle_timeout, Some(DEFAULT_CODE_IDLE_TIMEOUT));
        let file = parse_file("code_port = \"off\"\ncode_idle_timeout_seconds = 0\n").expect("valid");
        let config = merge(Options::default(), file).expect("valid");
        assert_eq!((config.code_port, config.code.idle_timeout), (None, None));
        let args = Options { code_port: Some("0".parse().expect("port")), ..Options::default() };
        assert_eq!(merge(args, parse_file("code_port = 1234").expect("valid")).expect("ok").code_port, Some(0));
        assert!("of".parse::<PortSetting>().is_err());
        assert!(parse_file("code_port = \"on\"").is_err());
    }

    #[test]
    fn the_envd_port_defaults_to_49983_and_can_be_off() {
        let defaults = merge(Options::default(), Options::default()).expect("valid");
        assert_eq!((defaults.envd_port, defaults.envd_port_configured), (Some(DEFAULT_ENVD_PORT), false));
        let off = merge(Options::default(), parse_file("envd_port = \"off\"").expect("valid"));
        assert_eq!(off.expect("ok").envd_port, None);
        let args = Options { envd_port: Some("0".parse().expect("port")), ..Options::default() };
        let config = merge(args, parse_file("envd_port = 1234").expect("valid")).expect("ok");
        assert_eq!((config.envd_port, config.envd_port_configured), (Some(0), true));
    }

    #[test]
    fn connection_limits_are_merged_and_checked() {
        let args = Options { max_connections: Some(100), header_read_timeout_seconds: secs(2.5), ..Options::default() };
        let file =
            parse_file("max_connections = 7\nconnection_reserve = 10\nidle_timeout_seconds = 5\n").expect("valid");
        let config = merge(args, file).expect("valid");
        let limits = config.connections;
        assert_eq!((limits.max_connections, limits.reserve), (100, 10), "the flag beats the file");
        assert_eq!(
            (limits.header_read_timeout, limits.idle_timeout),
            (Duration::from_millis(2500), Duration::from_secs(5))
        );
        let defaults = merge(Options::default(), Options::default()).expect("valid").connections;
        assert_eq!(defaults.reserve, (defaults.max_connections / 8).max(1));
        assert!((32..=4096).contains(&defaults.max_connections));
        let bad = Options { max_connections: Some(4), connection_reserve: Some(4), ..Options::default() };
        assert!(merge(Options::default(), bad).is_err(), "no place left outside the reserve");
        let bad = Options { idle_timeout_seconds: secs(0.0), ..Options::default() };
        assert!(merge(Options::default(), bad).is_err());
    }
}

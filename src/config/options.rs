//! [`Options`]: every option of `serve`, declared once.
//!
//! The one struct derives the command-line parser (clap: `--flag`, and the
//! `ABX_*` variable a flag falls back to) and the config file format (serde,
//! unknown keys refused), so an option is one field: its flag, variable and
//! file key cannot drift apart. Every field is optional; [`Options::or`]
//! lays one source over another (flags and variables over the file), and
//! `Config::resolve` fills what is left with the defaults.

use std::path::PathBuf;

use abx_domain::commands::CommandSpec;
use serde::Deserialize;

use super::values::{LogFormat, PortSetting, Seconds};

/// Declares the options struct and what is generated from its field list.
macro_rules! options {
    (
        $(#[$outer:meta])*
        pub struct $name:ident {
            $( $(#[$attr:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$outer])*
        pub struct $name {
            $( $(#[$attr])* pub $field: $ty, )*
        }

        impl $name {
            /// Every option's name, as its config file key spells it.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// These options, with what they leave unset taken from `lower`.
            pub fn or(self, lower: Self) -> Self {
                Self { $( $field: self.$field.or(lower.$field), )* }
            }
        }
    };
}

options! {
    /// Options of `serve`, from flags and variables (clap) or the config file (serde).
    #[derive(Debug, Clone, Default, clap::Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Options {
        /// TOML config file (default /etc/agent-sandbox/server.toml when it exists).
        #[arg(long, env = "ABX_SERVER_CONFIG", value_name = "FILE")]
        #[serde(skip)]
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
        pub shutdown_grace_seconds: Option<Seconds>,
        /// Close terminal sessions nobody attached to or used for this long; 0 never [default: 1800].
        #[arg(long, env = "ABX_PTY_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
        pub pty_idle_timeout_seconds: Option<Seconds>,
        /// Output history each terminal session keeps for re-attaching [default: 65536].
        #[arg(long, env = "ABX_PTY_SCROLLBACK_BYTES", value_name = "BYTES")]
        pub pty_scrollback_bytes: Option<u64>,
        /// Live terminal sessions allowed when the policy sets no max_sessions [default: 10].
        #[arg(long, env = "ABX_PTY_MAX_SESSIONS", value_name = "N")]
        pub pty_max_sessions: Option<u64>,
        /// Registered commands (`[[commands]]`; the config file only).
        #[arg(skip)]
        pub commands: Option<Vec<CommandSpec>>,
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
        pub code_idle_timeout_seconds: Option<Seconds>,
        /// Quiet seconds after which a running execution sends a keepalive line [default: 5].
        #[arg(long, env = "ABX_CODE_KEEPALIVE_SECONDS", value_name = "SECONDS")]
        pub code_keepalive_seconds: Option<Seconds>,
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
        pub browser_idle_timeout_seconds: Option<Seconds>,
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
        pub header_read_timeout_seconds: Option<Seconds>,
        /// Seconds a kept-alive connection may wait for its next request [default: 60].
        #[arg(long, env = "ABX_SERVER_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
        pub idle_timeout_seconds: Option<Seconds>,
        /// Open connections per port [default: an eighth of the descriptor limit, 32 to 4096].
        #[arg(long, env = "ABX_SERVER_MAX_CONNECTIONS", value_name = "N")]
        pub max_connections: Option<usize>,
        /// Of those, the last kept for /health and authenticated callers [default: an eighth].
        #[arg(long, env = "ABX_SERVER_CONNECTION_RESERVE", value_name = "N")]
        pub connection_reserve: Option<usize>,
        /// Serve `GET /metrics` without credentials (a `locked` policy still switches it off) [default: false].
        #[arg(long, env = "ABX_SERVER_METRICS_ANONYMOUS", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub metrics_anonymous: Option<bool>,
        /// Agents group: where sessions, items and artifacts are kept [default: ~/.agent-sandbox/agents].
        #[arg(long, env = "ABX_AGENTS_STATE_DIR", value_name = "DIR")]
        pub agents_state_dir: Option<PathBuf>,
        /// Agents group: keep state on disk; false keeps it in memory [default: true].
        #[arg(long, env = "ABX_AGENTS_PERSIST", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub agents_persist: Option<bool>,
        /// Agents group: the runtime of a request that names none [default: codex].
        #[arg(long, env = "ABX_AGENTS_DEFAULT", value_name = "RUNTIME")]
        pub agents_default: Option<String>,
        /// Agents group: the reference's JSON file (`default`; ours: `limits`, `command`), read at first use.
        #[arg(long, env = "ABX_AGENTS_CONFIG", value_name = "FILE")]
        pub agents_config: Option<PathBuf>,
        /// Agents group: agent CLIs running at once, daemon-wide [default: 4].
        #[arg(long, env = "ABX_AGENTS_MAX_CONCURRENT_TURNS", value_name = "N")]
        pub agents_max_concurrent_turns: Option<usize>,
        /// Agents group: whether the `command` runtime may run [default: true].
        #[arg(long, env = "ABX_AGENTS_ALLOW_COMMAND", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub agents_allow_command: Option<bool>,
        /// Agents group: more server variables handed to every agent CLI, comma-separated.
        #[arg(long, env = "ABX_AGENTS_PASSTHROUGH_ENV", value_delimiter = ',', value_name = "NAMES")]
        pub agents_passthrough_env: Option<Vec<String>>,
        /// Agents group: largest file snapshotted as an artifact [default: 10485760].
        #[arg(long, env = "ABX_AGENTS_MAX_ARTIFACT_BYTES", value_name = "BYTES")]
        pub agents_max_artifact_bytes: Option<u64>,
        /// Agents group: serve one trace per finished turn [default: false].
        #[arg(long, env = "ABX_AGENTS_TRACES", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub agents_traces: Option<bool>,
        /// Agents group: wall-clock limit of a turn [default: 1800].
        #[arg(long, env = "ABX_AGENTS_TURN_TIMEOUT_SECONDS", value_name = "SECONDS")]
        pub agents_turn_timeout_seconds: Option<Seconds>,
        /// Agents group: a turn whose CLI is silent this long is ended [default: 300].
        #[arg(long, env = "ABX_AGENTS_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS")]
        pub agents_idle_timeout_seconds: Option<Seconds>,
        /// Agents group: standard output a turn's CLI may print [default: 8388608].
        #[arg(long, env = "ABX_AGENTS_MAX_OUTPUT_BYTES", value_name = "BYTES")]
        pub agents_max_output_bytes: Option<u64>,
        /// Agents group: the working directory of `/v1/responses` turns [default: /workspace].
        #[arg(long, env = "ABX_AGENTS_RESPONSES_WORKSPACE", value_name = "DIR")]
        pub agents_responses_workspace: Option<String>,
        /// Agents group: vaults per caller at most [default: 100].
        #[arg(long, env = "ABX_AGENTS_MAX_VAULTS", value_name = "N")]
        pub agents_max_vaults: Option<usize>,
        /// Agents group: private, loopback and link-local hosts in vault credential and webhook URLs [default: false].
        #[arg(long, env = "ABX_AGENTS_ALLOW_PRIVATE_URLS", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub agents_allow_private_urls: Option<bool>,
        /// Agents group: webhook endpoints may be plain http URLs, not only https [default: false].
        #[arg(long, env = "ABX_AGENTS_WEBHOOK_ALLOW_HTTP", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
        pub agents_webhook_allow_http: Option<bool>,
        /// Agents group: largest file blob (`POST /v1/files`), template or environment file [default: 10485760].
        #[arg(long, env = "ABX_AGENTS_MAX_FILE_BYTES", value_name = "BYTES")]
        pub agents_max_file_bytes: Option<u64>,
        /// Agents group: sessions per caller; at the quota its own least recently active idle one goes [default: 100].
        #[arg(long, env = "ABX_AGENTS_MAX_SESSIONS", value_name = "N")]
        pub agents_max_sessions: Option<usize>,
        /// Agents group: agent definitions per caller [default: 100].
        #[arg(long, env = "ABX_AGENTS_MAX_DEFINITIONS", value_name = "N")]
        pub agents_max_definitions: Option<usize>,
        /// Agents group: environments per caller [default: 100].
        #[arg(long, env = "ABX_AGENTS_MAX_ENVIRONMENTS", value_name = "N")]
        pub agents_max_environments: Option<usize>,
        /// Agents group: environment templates per caller [default: 100].
        #[arg(long, env = "ABX_AGENTS_MAX_TEMPLATES", value_name = "N")]
        pub agents_max_templates: Option<usize>,
        /// Agents group: bytes of a caller's template files together [default: 67108864].
        #[arg(long, env = "ABX_AGENTS_MAX_TEMPLATE_BYTES", value_name = "BYTES")]
        pub agents_max_template_bytes: Option<u64>,
        /// Agents group: webhook endpoints per caller [default: 20].
        #[arg(long, env = "ABX_AGENTS_MAX_WEBHOOKS", value_name = "N")]
        pub agents_max_webhooks: Option<usize>,
        /// MCP sessions (`initialize` on /mcp) per identity; each identity has its own share [default: 32].
        #[arg(long, env = "ABX_MCP_MAX_SESSIONS", value_name = "N")]
        pub mcp_max_sessions: Option<usize>,
    }
}

/// Parses config file text into options (`config` is no file key).
///
/// # Errors
/// The TOML error, naming the key and line.
pub fn parse_file(text: &str) -> Result<Options, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The options as the command line sees them.
    #[derive(Debug, Parser)]
    struct Line {
        #[command(flatten)]
        options: Options,
    }

    #[test]
    fn a_flag_and_a_file_key_fill_the_same_field() {
        let line = Line::try_parse_from(["x", "--port", "1", "--code-port", "off", "--shutdown-grace-seconds", "2.5"]);
        let flags = line.expect("parses").options;
        let file = parse_file("port = 2\npty_port = 3\nshutdown_grace_seconds = 7\n").expect("parses");
        let merged = flags.or(file);
        assert_eq!((merged.port, merged.pty_port), (Some(1), Some(3)));
        assert_eq!(merged.code_port, Some("off".parse().expect("off")));
        assert_eq!(merged.shutdown_grace_seconds, Some(Seconds(std::time::Duration::from_millis(2500))));
    }

    #[test]
    fn every_option_but_the_config_file_itself_is_a_file_key_and_every_flag_a_field() {
        for name in Options::NAMES.iter().filter(|n| **n != "config") {
            let err = parse_file(&format!("{name} = {{ x = 1 }}")).expect_err("no option is a table");
            assert!(!err.contains("unknown field"), "{name}: {err}");
        }
        assert!(parse_file("config = \"/x\"").expect_err("no key").contains("unknown field"));
        let command = <Line as clap::CommandFactory>::command();
        for arg in command.get_arguments().filter(|a| a.get_long().is_some()) {
            assert!(Options::NAMES.contains(&arg.get_id().as_str()), "--{:?} is no field", arg.get_long());
        }
    }

    #[test]
    fn bad_seconds_are_refused_by_flag_variable_and_file_alike() {
        assert!(Line::try_parse_from(["x", "--idle-timeout-seconds", "-1"]).is_err());
        assert!(Line::try_parse_from(["x", "--idle-timeout-seconds=-1"]).is_err());
        let err = parse_file("idle_timeout_seconds = -1").expect_err("negative");
        assert!(err.contains("idle_timeout_seconds") && err.contains(">= 0"), "{err}");
    }

    #[test]
    fn the_configuration_page_lists_every_flag_and_variable() {
        let page = include_str!("../../docs/configuration.md");
        let command = <Line as clap::CommandFactory>::command();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let row = page.lines().find(|l| l.starts_with('|') && l.contains(&format!("`--{long}`")));
            let row = row.unwrap_or_else(|| panic!("docs/configuration.md has no row for --{long}"));
            if let Some(env) = arg.get_env() {
                let env = env.to_string_lossy();
                assert!(row.contains(&format!("`{env}`")), "the --{long} row does not name {env}: {row}");
            }
        }
    }
}

//! What callers ask of the terminal domain, checked in the reference's
//! order with its messages: the `POST /pty/sessions` body, resize bodies,
//! WebSocket messages, and the `ws_url` handed back.

use std::collections::BTreeMap;

use nix::sys::signal::Signal;
use serde_json::{Map, Value};

use super::TerminalError;
use crate::policy::guards;
use crate::policy::guards::env::VarRules;
use crate::pyrepr;

/// Shells a session may start when the policy names none (the reference's list).
pub const ALLOWED_SHELLS: [&str; 5] = ["/bin/bash", "/bin/sh", "/bin/zsh", "/usr/bin/bash", "/usr/bin/zsh"];
/// Largest terminal side.
pub const MAX_SIDE: i64 = 1000;

/// The policy's say over a new session.
#[derive(Debug, Clone, Default)]
pub struct CreatePolicy {
    /// The `shells` parameter: when set, exactly these shells may start.
    pub shells: Option<Vec<String>>,
    /// The `env_deny` parameter, compiled: globs of variables a caller may
    /// not set and that are removed from the inherited environment.
    pub env_deny: VarRules,
    /// Whether the policy restricts commands: then no variable that makes a
    /// program run code of the caller's choosing (`env_var_denied`).
    pub commands_restricted: bool,
}

/// A checked `POST /pty/sessions` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// The shell.
    pub shell: String,
    /// Width.
    pub cols: u16,
    /// Height.
    pub rows: u16,
    /// The caller's variables, admitted.
    pub env: Vec<(String, String)>,
    /// The user the shell runs as (the caller identity's), `None`: the daemon's.
    pub run_as: Option<crate::syscalls::RunAs>,
}

impl CreateRequest {
    /// Checks a create body against the policy; `is_secret` names the server's secrets.
    ///
    /// # Errors
    /// The reference's refusals, in its order: shell not allowed (400), size
    /// not integers (400), `env` not a mapping or an invalid or `ABX_*`
    /// assignment (400/403), shell not permitted by policy (403), variables
    /// the policy or the server's secrets forbid (403); then ours: a size out
    /// of range (400).
    pub fn parse(
        body: &Map<String, Value>,
        policy: &CreatePolicy,
        is_secret: &dyn Fn(&str) -> bool,
    ) -> Result<CreateRequest, TerminalError> {
        let shell = match body.get("shell") {
            None | Some(Value::Null) => "/bin/bash".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(TerminalError::ShellNotAllowed(pyrepr::repr(other))),
        };
        if policy.shells.is_none() && !ALLOWED_SHELLS.contains(&shell.as_str()) {
            return Err(TerminalError::ShellNotAllowed(pyrepr::repr_str(&shell)));
        }
        let side = |key: &str, default: i64| match body.get(key) {
            None => Ok(default),
            Some(v) => pyrepr::int_of(v).map_err(|_| TerminalError::InvalidSize),
        };
        let (cols, rows) = (side("cols", 80)?, side("rows", 24)?);
        let env = match body.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(vars)) => guards::env::check_assignments(vars).map_err(TerminalError::Env)?,
            Some(_) => return Err(TerminalError::EnvNotAMapping),
        };
        guards::check_not_dangerous(env.iter().map(|(k, _)| k), policy.commands_restricted)
            .map_err(TerminalError::Env)?;
        if let Some(shells) = &policy.shells {
            if !shells.contains(&shell) {
                return Err(TerminalError::ShellDenied(shell));
            }
        }
        let mut blocked: Vec<String> =
            env.iter().map(|(k, _)| k).filter(|k| !policy.env_deny.allows(k) || is_secret(k)).cloned().collect();
        if !blocked.is_empty() {
            blocked.sort();
            return Err(TerminalError::EnvNotAllowed(blocked));
        }
        let env: Vec<(String, String)> =
            env.into_iter().filter(|(k, _)| !guards::env::TERMINAL_DROPPED.contains(&k.as_str())).collect();
        Ok(CreateRequest { shell, cols: side_in_range(cols)?, rows: side_in_range(rows)?, env, run_as: None })
    }

    /// The shell's environment: `inherited` minus what `env_deny` matches,
    /// `TERM=xterm-256color`, then the caller's variables.
    pub fn environment(&self, inherited: BTreeMap<String, String>, policy: &CreatePolicy) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> =
            inherited.into_iter().filter(|(k, _)| policy.env_deny.allows(k)).collect();
        env.insert("TERM".into(), "xterm-256color".into());
        env.extend(self.env.iter().cloned());
        env
    }
}

fn side_in_range(value: i64) -> Result<u16, TerminalError> {
    if (1..=MAX_SIDE).contains(&value) {
        u16::try_from(value).map_err(|_| TerminalError::SizeOutOfRange)
    } else {
        Err(TerminalError::SizeOutOfRange)
    }
}

/// Checks a resize body (`cols` and `rows`, integers from 1 to 1000).
///
/// # Errors
/// 400 refusals with the reference's messages.
pub fn parse_resize(body: &Map<String, Value>) -> Result<(u16, u16), TerminalError> {
    let side = |key: &str| {
        body.get(key)
            .ok_or(TerminalError::ResizeNotIntegers)
            .and_then(|v| pyrepr::int_of(v).map_err(|_| TerminalError::ResizeNotIntegers))
    };
    let (cols, rows) = (side("cols")?, side("rows")?);
    Ok((side_in_range(cols)?, side_in_range(rows)?))
}

/// A message a WebSocket client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// Text for the terminal.
    Input(String),
    /// A new size (cols, rows).
    Resize(u16, u16),
    /// A signal for the foreground process group.
    Signal(Signal),
}

/// Parses a WebSocket text message; `size` fills a resize's missing side.
///
/// # Errors
/// What is wrong with it, for an `error` event (the reference ignores such messages silently).
pub fn parse_message(text: &str, size: (u16, u16)) -> Result<ClientMessage, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "input" => match value.get("data") {
            None => Ok(ClientMessage::Input(String::new())),
            Some(Value::String(s)) => Ok(ClientMessage::Input(s.clone())),
            Some(_) => Err("'data' must be a string".into()),
        },
        "resize" => {
            let side = |key: &str, current: u16| match value.get(key) {
                None => Ok(i64::from(current)),
                Some(v) => pyrepr::int_of(v).map_err(|_| "'cols' and 'rows' must be integers".to_string()),
            };
            let (cols, rows) = (side("cols", size.0)?, side("rows", size.1)?);
            match (side_in_range(cols), side_in_range(rows)) {
                (Ok(cols), Ok(rows)) => Ok(ClientMessage::Resize(cols, rows)),
                _ => Err(TerminalError::SizeOutOfRange.to_string()),
            }
        }
        "signal" => {
            let name = value.get("signal").and_then(Value::as_str).unwrap_or("SIGINT");
            signal_named(name).map(ClientMessage::Signal).ok_or_else(|| {
                format!(
                    "unknown signal {}; accepted: SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT",
                    pyrepr::repr_str(name)
                )
            })
        }
        other => Err(format!("unknown message type {}; expected input, resize or signal", pyrepr::repr_str(other))),
    }
}

/// The signals a client may send by name (the reference's list).
pub fn signal_named(name: &str) -> Option<Signal> {
    match name {
        "SIGINT" => Some(Signal::SIGINT),
        "SIGTERM" => Some(Signal::SIGTERM),
        "SIGKILL" => Some(Signal::SIGKILL),
        "SIGHUP" => Some(Signal::SIGHUP),
        "SIGQUIT" => Some(Signal::SIGQUIT),
        _ => None,
    }
}

/// The WebSocket URL of a session, for a caller that reached the API as
/// `host` (the `Host` header; its port is replaced by the PTY port), over
/// TLS when `forwarded_proto` is `https`.
pub fn ws_url(host: Option<&str>, forwarded_proto: Option<&str>, pty_port: u16, session_id: &str) -> String {
    let host = host.map(str::trim).filter(|h| !h.is_empty()).unwrap_or("localhost");
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(host, |(inside, _)| inside)
    } else {
        host.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(n, _)| n)
    };
    let name = if name.contains(':') { format!("[{name}]") } else { name.to_string() };
    let scheme = if forwarded_proto.is_some_and(|p| p.trim().eq_ignore_ascii_case("https")) { "wss" } else { "ws" };
    let id: String = form_urlencoded::byte_serialize(session_id.as_bytes()).collect();
    format!("{scheme}://{name}:{pty_port}/pty?session_id={id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    fn parse(v: Value, policy: &CreatePolicy) -> Result<CreateRequest, String> {
        CreateRequest::parse(&body(v), policy, &|k| k == "SECRET_TOKEN").map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_the_references_loose_numbers() {
        let ok = parse(json!({"cols": "100", "rows": 30.7}), &CreatePolicy::default()).expect("valid");
        assert_eq!((ok.shell.as_str(), ok.cols, ok.rows), ("/bin/bash", 100, 30));
    }

    #[test]
    fn refusals_follow_the_references_order_and_wording() {
        let none = CreatePolicy::default();
        assert_eq!(
            parse(json!({"shell": "/bin/fish", "cols": "x"}), &none).expect_err("shell first"),
            "Shell '/bin/fish' is not allowed; permitted: ['/bin/bash', '/bin/sh', '/bin/zsh', '/usr/bin/bash', '/usr/bin/zsh']"
        );
        assert_eq!(parse(json!({"cols": "x"}), &none).expect_err("size"), "Invalid 'cols' or 'rows': must be integers");
        assert_eq!(
            parse(json!({"env": "x"}), &none).expect_err("env"),
            "Environment updates must be a mapping of KEY to VALUE"
        );
        assert_eq!(
            parse(json!({"env": {"ABX_X": "1"}}), &none).expect_err("abx"),
            "Environment variable 'ABX_X' cannot be overwritten"
        );
        assert_eq!(
            parse(json!({"env": {"SECRET_TOKEN": "1", "B": "2"}}), &none).expect_err("secret"),
            "Environment variable(s) not allowed: ['SECRET_TOKEN']"
        );
        assert_eq!(
            parse(json!({"cols": 0}), &none).expect_err("range"),
            "'cols' and 'rows' must be between 1 and 1000"
        );
        let policy = CreatePolicy {
            shells: Some(vec!["/bin/sh".into()]),
            env_deny: VarRules::new(&[], &["AWS_*".into()]),
            commands_restricted: false,
        };
        assert_eq!(parse(json!({}), &policy).expect_err("policy"), "Shell '/bin/bash' is not permitted by policy");
        assert_eq!(
            parse(json!({"shell": "/bin/sh", "env": {"AWS_KEY": "k", "A": "1"}}), &policy).expect_err("deny"),
            "Environment variable(s) not allowed: ['AWS_KEY']"
        );
    }

    #[test]
    fn the_environment_drops_denied_and_dangerous_variables() {
        let mut policy =
            CreatePolicy { shells: None, env_deny: VarRules::new(&[], &["AWS_*".into()]), commands_restricted: true };
        let preload = body(json!({"env": {"LD_PRELOAD": "/x.so", "MINE": "1"}}));
        let refused = CreateRequest::parse(&preload, &policy, &|_| false).map_err(|e| e.to_string());
        assert_eq!(
            refused,
            Err("Environment variable 'LD_PRELOAD' cannot be set while the policy restricts commands".into())
        );
        policy.commands_restricted = false;
        let request = CreateRequest::parse(&preload, &policy, &|_| false).expect("valid");
        let inherited = [("AWS_SECRET", "s"), ("HOME", "/h"), ("TERM", "dumb")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into_iter()
            .collect();
        let env = request.environment(inherited, &policy);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["HOME", "MINE", "TERM"]);
        assert_eq!(env["TERM"], "xterm-256color");
    }

    #[test]
    fn messages_are_parsed_leniently_with_reasons() {
        assert_eq!(
            parse_message(r#"{"type":"input","data":"ls\n"}"#, (80, 24)),
            Ok(ClientMessage::Input("ls\n".into()))
        );
        assert_eq!(parse_message(r#"{"type":"resize","cols":"120"}"#, (80, 24)), Ok(ClientMessage::Resize(120, 24)));
        assert_eq!(parse_message(r#"{"type":"signal"}"#, (80, 24)), Ok(ClientMessage::Signal(Signal::SIGINT)));
        assert!(parse_message(r#"{"type":"signal","signal":"SIGUSR1"}"#, (80, 24)).is_err());
        assert!(parse_message(r#"{"type":"resize","cols":0}"#, (80, 24)).is_err());
        assert!(parse_message("not json", (80, 24)).is_err());
        assert!(parse_message(r#"{"type":"paste"}"#, (80, 24)).is_err());
    }

    #[test]
    fn ws_urls_use_the_callers_host_and_the_pty_port() {
        assert_eq!(
            ws_url(Some("sandbox.example:9000"), None, 9101, "ab"),
            "ws://sandbox.example:9101/pty?session_id=ab"
        );
        assert_eq!(ws_url(Some("[::1]:9000"), None, 7, "ab"), "ws://[::1]:7/pty?session_id=ab");
        assert_eq!(ws_url(Some("10.0.0.2"), Some("https"), 7, "a b"), "wss://10.0.0.2:7/pty?session_id=a+b");
        assert_eq!(ws_url(None, None, 9001, "x"), "ws://localhost:9001/pty?session_id=x");
    }

    #[test]
    fn resize_bodies_need_both_sides_in_range() {
        assert_eq!(parse_resize(&body(json!({"cols": 100, "rows": "40"}))).expect("valid"), (100, 40));
        assert_eq!(
            parse_resize(&body(json!({"cols": 100}))).map_err(|e| e.to_string()),
            Err("'cols' and 'rows' must be integers".into())
        );
        assert_eq!(
            parse_resize(&body(json!({"cols": 1001, "rows": 5}))).map_err(|e| e.to_string()),
            Err("'cols' and 'rows' must be between 1 and 1000".into())
        );
    }
}

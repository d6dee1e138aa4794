//! Every rule about environment variable names, in one place: which names
//! are valid ([`is_valid_name`]), the server's secrets ([`SECRET_VARS`]),
//! names that look like credentials and are never shown ([`is_sensitive`]),
//! names `POST /env` may not overwrite ([`PROTECTED`]), the policy's
//! `allow_vars`/`deny_vars` globs ([`VarRules`]), what a terminal drops
//! ([`TERMINAL_DROPPED`]) and what makes a program run code of the caller's
//! choosing ([`is_dangerous`]).
//!
//! The guards built from them: per-call `env` maps hold ordinary `KEY=VALUE`
//! assignments ([`check_env`], [`check_assignments`]), never `ABX_*`, never a
//! deny-listed or secret name ([`check_not_secret`]); and, while the policy
//! restricts commands, never a dangerous variable ([`check_not_dangerous`]).
//! The child environment itself is [`crate::environment::ChildEnv`].

use std::collections::BTreeMap;

use abx_wire::api::Fault;
use abx_wire::endpoints::Param;
use globset::{Glob, GlobMatcher};

use super::super::{Denial, PolicyEngine};

/// Variables that are always secret: never shown, set, or passed to children.
pub const SECRET_VARS: [&str; 3] = ["ABX_SERVER_TOKEN", "ABX_SERVER_POLICY", "ABX_SERVER_POLICY_FILE"];

/// Name fragments that make a variable look like a credential: never shown.
const SENSITIVE: [&str; 5] = ["TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL"];

/// Variables `POST /env` may not overwrite (the reference's list).
pub const PROTECTED: [&str; 4] = ["PATH", "HOME", "USER", "SHELL"];

/// Variables a terminal never takes from a caller (silently dropped, as the reference does).
pub const TERMINAL_DROPPED: [&str; 3] = ["LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES"];

/// Prefixes of variables that programs read at start to load or run code
/// (compared without case): the dynamic loader (`LD_*`, glibc's `GCONV_PATH`
/// modules), git (`GIT_SSH_COMMAND`, `GIT_EXEC_PATH`, `GIT_CONFIG_*`...),
/// Python (`PYTHONPATH`, `PYTHONSTARTUP`, `PYTHONHOME`, `PYTHONWARNINGS`
/// imports), Perl (`PERL5OPT`, `PERL5LIB`), Ruby (`RUBYOPT`, `RUBYLIB`),
/// Node.js and npm (`NODE_OPTIONS --require`, `NODE_PATH`, `npm_config_*`),
/// the JVM (`JAVA_TOOL_OPTIONS -javaagent`, `_JAVA_OPTIONS`,
/// `JDK_JAVA_OPTIONS`), .NET (`DOTNET_STARTUP_HOOKS`, `CORECLR_*` profilers),
/// Lua (`LUA_INIT`, `LUA_PATH`), less (`LESSOPEN` runs a preprocessor), bash
/// exported functions (`BASH_FUNC_*`) and macOS's loader (`DYLD_*`).
pub const DANGEROUS_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GCONV_",
    "GIT_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "JAVA_",
    "_JAVA_",
    "JDK_JAVA_",
    "DOTNET_",
    "CORECLR_",
    "LUA_",
    "LESS",
    "BASH_FUNC_",
];

/// Whole names of the same kind: shells' start-up files and tracing hooks
/// (`BASH_ENV`, `ENV`, `ZDOTDIR`, `SHELLOPTS`/`BASHOPTS` with `PS4`,
/// `PROMPT_COMMAND`, `IFS`), glibc (`GLIBC_TUNABLES`, `LOCPATH`, `NLSPATH`,
/// `HOSTALIASES`, `RESOLV_HOST_CONF`), the program lookup itself (`PATH`:
/// an allowed `ls` found in a directory of the caller's), programs that
/// start helpers (`SHELL`, `PAGER`, `EDITOR`, `VISUAL`, `MANPAGER`,
/// `BROWSER`, `SSH_ASKPASS`, `MAKEFLAGS`, `MAKEFILES`, `GOFLAGS`), OpenSSL
/// engines and providers (`OPENSSL_CONF`, `OPENSSL_ENGINES`,
/// `OPENSSL_MODULES`), PHP, Tcl and R start-up (`PHPRC`,
/// `PHP_INI_SCAN_DIR`, `TCLLIBPATH`, `R_PROFILE`, `R_PROFILE_USER`) and the
/// JVM class path (`CLASSPATH`).
pub const DANGEROUS_NAMES: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "ZDOTDIR",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "GLIBC_TUNABLES",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RESOLV_HOST_CONF",
    "PATH",
    "SHELL",
    "PAGER",
    "EDITOR",
    "VISUAL",
    "MANPAGER",
    "BROWSER",
    "SSH_ASKPASS",
    "MAKEFLAGS",
    "MAKEFILES",
    "GOFLAGS",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "OPENSSL_MODULES",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "R_PROFILE",
    "R_PROFILE_USER",
    "CLASSPATH",
];

/// Whether a caller setting `name` for a child could make it run code of the
/// caller's choosing (see [`DANGEROUS_PREFIXES`] and [`DANGEROUS_NAMES`]).
pub fn is_dangerous(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    DANGEROUS_NAMES.contains(&upper.as_str()) || DANGEROUS_PREFIXES.iter().any(|prefix| upper.starts_with(prefix))
}

/// Whether the policy restricts which commands run (`allow_commands` or
/// `deny_commands` on an enabled endpoint). Then a caller's environment may
/// not hold [`is_dangerous`] variables, on any port, or the restriction
/// could be stepped around (`ls` with `LD_PRELOAD` runs anything).
pub fn commands_restricted(engine: &PolicyEngine) -> bool {
    engine.rules().iter().filter(|rule| rule.enabled).any(|rule| {
        [Param::AllowCommands, Param::DenyCommands].iter().any(
            |param| matches!(rule.param(*param), Some(super::super::ParamValue::Strings(list)) if !list.is_empty()),
        )
    })
}

/// Refuses, while `restricted` (see [`commands_restricted`]), a variable a
/// caller sets for a child that [`is_dangerous`]. Every way a caller sets a
/// child's environment applies it: exec requests on the API and envd ports,
/// `POST /env`, terminals, envd `/init`, and code executions.
///
/// # Errors
/// `env_var_denied` (403).
pub fn check_not_dangerous<'a>(names: impl IntoIterator<Item = &'a String>, restricted: bool) -> Result<(), Denial> {
    if !restricted {
        return Ok(());
    }
    match names.into_iter().find(|name| is_dangerous(name)) {
        Some(name) => Err(Denial::new(
            Fault::EnvVarDenied,
            format!("Environment variable '{name}' cannot be set while the policy restricts commands"),
        )),
        None => Ok(()),
    }
}

fn fnmatch(name: &str, pattern: &str) -> bool {
    globset::Glob::new(pattern).map(|g| g.compile_matcher().is_match(name)).unwrap_or(false)
}

/// Admits `updates`, as the reference's `check_env`.
///
/// # Errors
/// `env_invalid` (400) for a malformed name or a value with a NUL byte;
/// `env_var_denied` (403) for `ABX_*` (any case) or a name matching `deny`.
pub fn check_env(updates: &BTreeMap<String, String>, deny: &[String]) -> Result<(), Denial> {
    for (name, value) in updates {
        check_assignment(name, Some(value), |name| deny.iter().any(|p| fnmatch(name, p)))?;
    }
    Ok(())
}

/// One assignment: a valid name and a string value without NUL
/// (`env_invalid`), never `ABX_*` in any case nor a name `denied` names
/// (`env_var_denied`).
fn check_assignment(name: &str, value: Option<&str>, denied: impl Fn(&str) -> bool) -> Result<(), Denial> {
    if !is_valid_name(name) || value.is_none_or(|v| v.contains('\0')) {
        return Err(Denial::new(Fault::EnvInvalid, format!("Invalid environment assignment '{name}'")));
    }
    if name.to_ascii_uppercase().starts_with("ABX_") || denied(name) {
        return Err(Denial::new(Fault::EnvVarDenied, format!("Environment variable '{name}' cannot be overwritten")));
    }
    Ok(())
}

/// Admits ordinary `NAME=value` assignments from a JSON object, in order,
/// as the reference's environment guard does: a name must look like
/// `[A-Za-z_][A-Za-z0-9_]*` and a value must be a string without NUL
/// (`env_invalid`, 400); `ABX_*` in any case is never settable
/// (`env_var_denied`, 403). Every spawn that takes a caller's environment
/// (`POST /env`, processes, terminals) uses it.
///
/// # Errors
/// The first refused assignment.
pub fn check_assignments(vars: &serde_json::Map<String, serde_json::Value>) -> Result<Vec<(String, String)>, Denial> {
    let mut admitted = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        let value = value.as_str();
        check_assignment(name, value, |_| false)?;
        admitted.push((name.clone(), value.unwrap_or_default().to_string()));
    }
    Ok(admitted)
}

/// Whether `name` is a portable environment variable name.
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Names an agent environment's or template's `env` may never set (the
/// reference's agents deny list, compared upper-cased): the model endpoint
/// and provider keys, loader and interpreter hooks, `PATH`, `HOME`, ...
const AGENT_ENV_DENIED: [&str; 36] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "IFS",
    "ENV",
    "BASH_ENV",
    "PS4",
    "PROMPT_COMMAND",
    "TMPDIR",
    "TERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "NPM_CONFIG_REGISTRY",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "RUBYOPT",
    "PERL5OPT",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_ORG_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
];
/// Prefixes of [`AGENT_ENV_DENIED`]'s kind (and every `*_PROXY`).
const AGENT_ENV_DENIED_PREFIXES: [&str; 12] = [
    "LD_",
    "DYLD_",
    "CODEX_",
    "QWEN_",
    "ABX_",
    "GIT_",
    "XDG_",
    "LC_",
    "BASH_FUNC_",
    "NPM_CONFIG_",
    "OPENAI_",
    "ANTHROPIC_",
];

/// Whether an agent environment's `env` may not set `name`.
pub fn agent_env_denied(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    AGENT_ENV_DENIED.contains(&upper.as_str())
        || AGENT_ENV_DENIED_PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper.ends_with("_PROXY")
}

/// Whether `name` looks like it holds a credential.
pub fn is_sensitive(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SENSITIVE.iter().any(|s| upper.contains(s))
}

/// The policy's `allow_vars` and `deny_vars` globs (deny wins; no allow list allows all).
#[derive(Debug, Clone, Default)]
pub struct VarRules {
    allow: Vec<GlobMatcher>,
    deny: Vec<GlobMatcher>,
}

impl VarRules {
    /// Compiles the globs; a pattern that is not a glob matches its literal text only.
    pub fn new(allow: &[String], deny: &[String]) -> Self {
        let compile = |patterns: &[String]| {
            patterns
                .iter()
                .map(|p| Glob::new(p).or_else(|_| Glob::new(&globset::escape(p))).map(|g| g.compile_matcher()))
                .filter_map(Result::ok)
                .collect()
        };
        VarRules { allow: compile(allow), deny: compile(deny) }
    }

    /// Whether the policy lets `name` be read or written.
    pub fn allows(&self, name: &str) -> bool {
        !self.deny.iter().any(|g| g.is_match(name))
            && (self.allow.is_empty() || self.allow.iter().any(|g| g.is_match(name)))
    }
}

/// Refuses names that hold secrets of the server.
///
/// # Errors
/// `env_var_not_allowed` (403).
pub fn check_not_secret<'a>(
    names: impl IntoIterator<Item = &'a String>,
    is_secret: impl Fn(&str) -> bool,
) -> Result<(), Denial> {
    match names.into_iter().find(|n| is_secret(n)) {
        Some(name) => Err(Denial::new(Fault::EnvVarNotAllowed, format!("Environment variable '{name}' is protected"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn ordinary_assignments_pass() {
        assert_eq!(check_env(&env(&[("PATH", "/bin"), ("_x1", "")]), &[]), Ok(()));
    }

    #[test]
    fn malformed_and_reserved_names_are_refused() {
        let err = check_env(&env(&[("1A", "x")]), &[]).expect_err("bad name");
        assert_eq!(
            (err.code(), err.status(), err.to_string().as_str()),
            ("env_invalid", 400, "Invalid environment assignment '1A'")
        );
        assert_eq!(check_env(&env(&[("A", "x\0")]), &[]).map_err(|d| d.code()), Err("env_invalid"));
        let err = check_env(&env(&[("abx_server_token", "x")]), &[]).expect_err("reserved");
        assert_eq!((err.code(), err.status()), ("env_var_denied", 403));
        assert_eq!(err.to_string(), "Environment variable 'abx_server_token' cannot be overwritten");
        assert!(check_env(&env(&[("AWS_KEY", "x")]), &["AWS_*".into()]).is_err());
    }

    #[test]
    fn dangerous_variables_are_refused_only_under_command_rules() {
        let names: Vec<String> =
            ["HOME", "LD_PRELOAD", "ld_audit", "PYTHONPATH", "GIT_SSH_COMMAND", "BASH_ENV", "PATH"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        assert_eq!(check_not_dangerous(&names, false), Ok(()));
        let err = check_not_dangerous(&names, true).expect_err("dangerous");
        assert_eq!((err.code(), err.status()), ("env_var_denied", 403));
        assert_eq!(
            err.to_string(),
            "Environment variable 'LD_PRELOAD' cannot be set while the policy restricts commands"
        );
        for name in &names[1..] {
            assert!(is_dangerous(name), "{name}");
        }
        for harmless in ["HOME", "LANG", "TERM", "MY_VAR", "ENVIRONMENT", "PATHS", "NODEJS"] {
            assert!(!is_dangerous(harmless), "{harmless}");
        }
        assert!(is_dangerous("npm_config_script_shell") && is_dangerous("R_PROFILE_USER"));
    }

    #[test]
    fn secrets_are_protected() {
        let names = ["HOME".to_string(), "MY_TOKEN".to_string()];
        let err = check_not_secret(&names, |n| n == "MY_TOKEN").expect_err("secret");
        assert_eq!(
            (err.code(), err.to_string().as_str()),
            ("env_var_not_allowed", "Environment variable 'MY_TOKEN' is protected")
        );
    }

    #[test]
    fn assignments_are_checked_in_order_as_the_reference() {
        let map = |v: serde_json::Value| v.as_object().cloned().expect("object");
        let ok = check_assignments(&map(serde_json::json!({"B": "1", "_a9": ""}))).expect("admitted");
        assert_eq!(ok, vec![("B".into(), "1".into()), ("_a9".into(), String::new())]);
        for bad in [
            serde_json::json!({"1A": "x"}),
            serde_json::json!({"A B": "x"}),
            serde_json::json!({"": "x"}),
            serde_json::json!({"A": 1}),
            serde_json::json!({"A": "a\u{0}b"}),
            serde_json::json!({"OK": "x", "ABX_LATER": "x", "bad name": "x"}),
        ] {
            let code = check_assignments(&map(bad.clone())).map(|_| ()).map_err(|d| (d.code(), d.status()));
            let expected = if bad.get("OK").is_some() { ("env_var_denied", 403) } else { ("env_invalid", 400) };
            assert_eq!(code, Err(expected), "{bad}");
        }
        let denied = check_assignments(&map(serde_json::json!({"abx_x": "1"}))).expect_err("ABX_ in any case");
        assert_eq!(denied.to_string(), "Environment variable 'abx_x' cannot be overwritten");
    }
}

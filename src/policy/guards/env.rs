//! The environment guard: per-call `env` maps hold ordinary `KEY=VALUE`
//! assignments, never `ABX_*`, never a deny-listed or secret name.

use std::collections::BTreeMap;

use super::super::Denial;

fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
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
        if !valid_name(name) || value.contains('\0') {
            return Err(Denial::invalid("env_invalid", format!("Invalid environment assignment '{name}'")));
        }
        if name.to_ascii_uppercase().starts_with("ABX_") || deny.iter().any(|p| fnmatch(name, p)) {
            return Err(Denial::forbidden(
                "env_var_denied",
                format!("Environment variable '{name}' cannot be overwritten"),
            ));
        }
    }
    Ok(())
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
        Some(name) => {
            Err(Denial::forbidden("env_var_not_allowed", format!("Environment variable '{name}' is protected")))
        }
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
    fn secrets_are_protected() {
        let names = ["HOME".to_string(), "MY_TOKEN".to_string()];
        let err = check_not_secret(&names, |n| n == "MY_TOKEN").expect_err("secret");
        assert_eq!(
            (err.code(), err.to_string().as_str()),
            ("env_var_not_allowed", "Environment variable 'MY_TOKEN' is protected")
        );
    }
}

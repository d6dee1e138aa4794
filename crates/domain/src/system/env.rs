//! `GET /env` and `POST /env` over the child environment ([`ChildEnv`]).
//!
//! Reads show the environment children start with, minus the server's
//! secrets, minus names that look like credentials (`TOKEN`, `SECRET`,
//! `KEY`, `PASSWORD`, `CREDENTIAL`, as the reference hides them), filtered by
//! the policy's `allow_vars`/`deny_vars` globs. Writes go through the same
//! checks, in the reference's order, and land in [`ChildEnv`]: the server
//! never changes its own environment.

use std::collections::BTreeMap;

use abx_wire::api::Fault;

use crate::environment::ChildEnv;
use crate::policy::guards::env::{check_assignments, is_sensitive, VarRules, PROTECTED};
use crate::policy::Denial;

/// Why `POST /env` refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    /// `vars` is not a JSON object.
    #[error("'vars' must be an object")]
    NotAnObject,
    /// A protected variable was named.
    #[error("Cannot overwrite protected variable(s): {}", .0.join(", "))]
    Protected(Vec<String>),
    /// An assignment the guard or the policy refuses.
    #[error(transparent)]
    Denied(#[from] Denial),
}

impl EnvError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            EnvError::NotAnObject => Fault::BadRequest,
            EnvError::Protected(_) => Fault::EnvProtected,
            EnvError::Denied(denial) => denial.fault(),
        }
    }
}

/// The variables `GET /env` shows; `filter` is a comma-separated list of names.
pub fn visible(
    env: &ChildEnv,
    rules: &VarRules,
    is_secret: &dyn Fn(&str) -> bool,
    filter: Option<&str>,
) -> BTreeMap<String, String> {
    let wanted: Option<Vec<&str>> =
        filter.filter(|f| !f.is_empty()).map(|f| f.split(',').map(str::trim).filter(|n| !n.is_empty()).collect());
    env.snapshot()
        .into_iter()
        .filter(|(name, _)| {
            !is_sensitive(name)
                && !is_secret(name)
                && rules.allows(name)
                && wanted.as_ref().is_none_or(|w| w.contains(&name.as_str()))
        })
        .collect()
}

/// Applies `POST /env`'s `vars` to `env` and returns the names set, sorted.
///
/// Checks, in the reference's order: `vars` is an object; each assignment
/// passes [`check_assignments`]; none is [`PROTECTED`]; none is a secret or
/// refused by `rules` (`env_var_not_allowed`). Nothing is set unless all pass.
/// While `commands_restricted`, no variable is one that makes a program run
/// code of the caller's choosing either (`env_var_denied`, see
/// [`crate::policy::guards::check_not_dangerous`]): every later child would get it.
///
/// # Errors
/// The first refusal.
pub fn set(
    env: &ChildEnv,
    rules: &VarRules,
    is_secret: &dyn Fn(&str) -> bool,
    commands_restricted: bool,
    vars: &serde_json::Value,
) -> Result<Vec<String>, EnvError> {
    let serde_json::Value::Object(vars) = vars else {
        return Err(EnvError::NotAnObject);
    };
    let admitted = check_assignments(vars)?;
    let mut protected: Vec<String> =
        admitted.iter().map(|(k, _)| k).filter(|k| PROTECTED.contains(&k.as_str())).cloned().collect();
    if !protected.is_empty() {
        protected.sort();
        return Err(EnvError::Protected(protected));
    }
    crate::policy::guards::check_not_dangerous(admitted.iter().map(|(name, _)| name), commands_restricted)?;
    if let Some((name, _)) = admitted.iter().find(|(name, _)| is_secret(name) || !rules.allows(name)) {
        return Err(
            Denial::new(Fault::EnvVarNotAllowed, format!("Environment variable '{name}' is not allowed")).into()
        );
    }
    let mut updated: Vec<String> = admitted.iter().map(|(k, _)| k.clone()).collect();
    updated.sort();
    updated.dedup();
    env.set(admitted);
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env() -> ChildEnv {
        let vars =
            [("HOME", "/home/user"), ("FOO_A", "1"), ("FOO_B", "2"), ("API_KEY", "k"), ("ABX_SERVER_TOKEN", "t")];
        ChildEnv::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())), &["MY_SECRET_ENV".into()])
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn no_secret(name: &str) -> bool {
        name == "MY_SECRET_ENV"
    }

    #[test]
    fn reads_hide_secrets_and_credential_names_and_apply_the_policy() {
        let env = env();
        let all = visible(&env, &VarRules::default(), &no_secret, None);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["FOO_A", "FOO_B", "HOME"]);
        let rules = VarRules::new(&strings(&["FOO_*", "HOME"]), &strings(&["FOO_B"]));
        assert_eq!(visible(&env, &rules, &no_secret, None).keys().collect::<Vec<_>>(), ["FOO_A", "HOME"]);
        let filtered = visible(&env, &VarRules::default(), &no_secret, Some(" HOME , API_KEY,NOPE"));
        assert_eq!(filtered.keys().collect::<Vec<_>>(), ["HOME"]);
        assert_eq!(visible(&env, &VarRules::default(), &no_secret, Some("")).len(), 3, "empty filter: all");
    }

    #[test]
    fn writes_follow_the_reference_order_and_are_all_or_nothing() {
        let env = env();
        let rules = VarRules::new(&strings(&["X*", "PATH", "MY_SECRET_ENV"]), &strings(&["XY"]));
        let set = |v: serde_json::Value| set(&env, &rules, &no_secret, false, &v);
        assert_eq!(set(json!({"X2": "b", "X1": "a"})), Ok(strings(&["X1", "X2"])));
        assert_eq!(env.get("X1").as_deref(), Some("a"));
        assert_eq!(set(json!([1])), Err(EnvError::NotAnObject));
        assert_eq!(set(json!(null)), Err(EnvError::NotAnObject));
        let code = |r: Result<Vec<String>, EnvError>| match r {
            Err(EnvError::Denied(d)) => d.code(),
            other => panic!("expected a denial, got {other:?}"),
        };
        assert_eq!(code(set(json!({"X3": "c", "1bad": "x"}))), "env_invalid");
        assert_eq!(code(set(json!({"PATH": "x", "ABX_Y": "1"}))), "env_var_denied", "the guard runs first");
        assert_eq!(set(json!({"SHELL": "x", "PATH": "x"})), Err(EnvError::Protected(strings(&["PATH", "SHELL"]))));
        assert_eq!(code(set(json!({"X4": "d", "XY": "1"}))), "env_var_not_allowed");
        assert_eq!(code(set(json!({"Y": "1"}))), "env_var_not_allowed");
        assert_eq!(code(set(json!({"MY_SECRET_ENV": "1"}))), "env_var_not_allowed");
        assert_eq!(env.get("X3").or(env.get("X4")), None, "a refused request sets nothing");
        assert_eq!(set(json!({})), Ok(vec![]));
    }

    #[test]
    fn loader_and_interpreter_variables_wait_for_no_command_rules() {
        let env = env();
        let vars = json!({"OK": "1", "LD_PRELOAD": "/x.so"});
        let refused = set(&env, &VarRules::default(), &no_secret, true, &vars);
        assert!(matches!(refused, Err(EnvError::Denied(ref d)) if d.code() == "env_var_denied"), "{refused:?}");
        assert_eq!(env.get("OK"), None, "nothing set");
        assert_eq!(set(&env, &VarRules::default(), &no_secret, false, &vars), Ok(strings(&["LD_PRELOAD", "OK"])));
    }

    #[test]
    fn credential_like_names_can_be_set_but_are_never_read_back() {
        let env = env();
        assert_eq!(
            set(&env, &VarRules::default(), &no_secret, false, &json!({"GH_TOKEN": "x"})),
            Ok(strings(&["GH_TOKEN"]))
        );
        assert_eq!(env.get("GH_TOKEN").as_deref(), Some("x"), "children get it");
        assert!(visible(&env, &VarRules::default(), &no_secret, Some("GH_TOKEN")).is_empty());
    }
}

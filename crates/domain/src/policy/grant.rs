//! [`Grant`]: an admitted request, as handlers see it.

use std::path::PathBuf;
use std::sync::Arc;

use abx_wire::api::Fault;
use abx_wire::endpoints::{Endpoint, Limit, Param};

use super::paths::Touched;
use super::rules::AuditMode;
use super::{Denial, EffectiveRule, Identity, LimitValue, Op, ParamValue, PathGuard, PolicyEngine};

/// The endpoint whose rule decides every start of a program.
const PROCESS_START: &str = "process_start";

/// An admitted request: the endpoint's rule and the caller.
///
/// Handlers receive it to resolve paths and read limits and parameters.
/// Cloning it is cheap (a reference count); every clone records into the
/// same list of paths touched, which the audit line reports.
#[derive(Clone)]
pub struct Grant(Arc<Admitted>);

struct Admitted {
    engine: Arc<PolicyEngine>,
    endpoint: &'static Endpoint,
    identity: Arc<Identity>,
    user: Option<String>,
    touched: Arc<Touched>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant").field("endpoint", &self.0.endpoint.id).field("identity", &self.0.identity.id).finish()
    }
}

impl Grant {
    pub(super) fn new(
        engine: Arc<PolicyEngine>,
        endpoint: &'static Endpoint,
        identity: Arc<Identity>,
        user: Option<String>,
    ) -> Self {
        Grant(Arc::new(Admitted { engine, endpoint, identity, user, touched: Arc::default() }))
    }

    /// The account the request asks to act as (envd's `Authorization: Basic`
    /// user, or the user a signed URL names), if any.
    pub fn user(&self) -> Option<&str> {
        self.0.user.as_deref()
    }

    /// The grant of the endpoint's `also` ([`Endpoint`]), for a call that asks
    /// for more than its own endpoint gives (envd `Start` with a terminal):
    /// that rule must be enabled and its scopes held too. Its rate and
    /// concurrency limits are not taken again.
    ///
    /// # Errors
    /// `endpoint_disabled` or `missing_scope` of the other endpoint.
    pub fn also(&self) -> Result<Grant, Denial> {
        let Some(other) = self.0.endpoint.also.and_then(abx_wire::endpoints::find) else {
            return Ok(self.clone());
        };
        let rule = self.0.engine.rule(other);
        if !rule.enabled {
            return Err(rule.disabled());
        }
        if let Some(scope) = self.0.identity.missing(&rule.scopes) {
            return Err(Denial::MissingScope {
                identity: self.0.identity.id.clone(),
                scope: scope.to_string(),
                endpoint: other.id.to_string(),
            });
        }
        let engine = Arc::clone(&self.0.engine);
        Ok(Grant::new(engine, other, Arc::clone(&self.0.identity), self.0.user.clone()))
    }

    /// The grant of `process_start`'s rule, for a call that starts a program
    /// of its own (an agent turn's CLI): that rule must be enabled, and its
    /// commands, environment and path rules then decide, exactly as for
    /// `process_start`. The caller's scopes stay its own endpoint's
    /// (`agents:use`, as the reference's clients hold).
    ///
    /// # Errors
    /// `endpoint_disabled` naming the rule that switched process execution off.
    pub fn process_execution(&self) -> Result<Grant, Denial> {
        let Some(start) = abx_wire::endpoints::find(PROCESS_START) else {
            return Err(Denial::new(Fault::ProcessDenied, "process execution is not configured"));
        };
        let rule = self.0.engine.rule(start);
        if !rule.enabled {
            return Err(rule.disabled());
        }
        let engine = Arc::clone(&self.0.engine);
        Ok(Grant::new(engine, start, Arc::clone(&self.0.identity), self.0.user.clone()))
    }

    /// The endpoint admitted.
    pub fn endpoint(&self) -> &'static Endpoint {
        self.0.endpoint
    }

    /// The caller.
    pub fn identity(&self) -> &Identity {
        &self.0.identity
    }

    /// The user the caller's programs run as, when its identity names one
    /// other than the daemon's (`auth.tokens[].user`).
    pub fn program_user(&self) -> Option<&crate::accounts::Account> {
        self.0.identity.user.as_deref().filter(|u| u.is_other())
    }

    /// How the caller's programs drop to their user ([`Grant::program_user`]), if at all.
    pub fn run_as(&self) -> Option<crate::syscalls::RunAs> {
        self.program_user().map(crate::accounts::Account::run_as)
    }

    /// The caller, shared.
    pub fn identity_arc(&self) -> &Arc<Identity> {
        &self.0.identity
    }

    /// The engine that admitted the request.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.0.engine
    }

    /// The endpoint's effective rule.
    pub fn rule(&self) -> &EffectiveRule {
        self.0.engine.rule(self.0.endpoint)
    }

    /// The path guard of the endpoint's rule. Every path it authorises is
    /// recorded for the request's audit line (unless the rule's audit is off).
    pub fn guard(&self) -> PathGuard {
        let guard = self.0.engine.path_guard(self.0.endpoint);
        if self.rule().audit == AuditMode::Off {
            return guard;
        }
        guard.recording(Arc::clone(&self.0.touched))
    }

    /// Resolves and authorises `raw` for the endpoint's default operation.
    ///
    /// # Errors
    /// The path refusals of [`PathGuard::resolve`].
    pub fn resolve_path(&self, raw: &str) -> Result<PathBuf, Denial> {
        self.resolve(raw, Op::default_for(self.0.endpoint.id), "")
    }

    /// Resolves and authorises `raw` for `op`, labelling messages with
    /// `field`; the resolved path is recorded for the audit line.
    ///
    /// # Errors
    /// The path refusals of [`PathGuard::resolve`].
    pub fn resolve(&self, raw: &str, op: Op, field: &str) -> Result<PathBuf, Denial> {
        self.guard().resolve(raw, op, field)
    }

    /// The paths recorded so far.
    pub fn paths_touched(&self) -> Vec<String> {
        self.0.touched.list()
    }

    /// The limit `key`, if the policy sets it.
    pub fn limit(&self, key: Limit) -> Option<LimitValue> {
        self.rule().limit(key)
    }

    /// The parameter `key`, if the policy sets it.
    pub fn param(&self, key: Param) -> Option<&ParamValue> {
        self.rule().param(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyInputs;

    #[test]
    fn resolved_paths_are_recorded_for_the_audit_line_within_bounds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inputs = PolicyInputs { base_dir: dir.path().to_path_buf(), ..PolicyInputs::default() };
        let engine = Arc::new(PolicyEngine::new(inputs).expect("valid"));
        let endpoint = abx_wire::endpoints::find("files_stat").expect("files_stat");
        let grant = Grant::new(engine, endpoint, Arc::new(Identity::new("t", ["*"])), None);
        let clone = grant.clone();
        let resolved = clone.resolve_path("a.txt").expect("inside");
        assert!(grant.resolve_path("/etc/passwd").is_err(), "refused paths are not recorded");
        assert_eq!(grant.paths_touched(), vec![resolved.display().to_string()]);
        grant.resolve_path("a.txt").expect("inside");
        assert_eq!(grant.paths_touched().len(), 1, "the path recorded last is not repeated");
        for i in 0..20 {
            grant.guard().resolve(&format!("{}{i}", "é".repeat(400)), Op::Read, "").expect("inside");
        }
        let touched = grant.paths_touched();
        assert_eq!(touched.len(), 8);
        assert!(touched[1].len() <= 512 && touched[1].contains("éé"), "{}", touched[1]);
    }
}

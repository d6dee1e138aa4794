//! The URL policy's verdicts on the browser's requests: host names resolved
//! and every address decided, and each refusal written where it must be
//! (the audit log, `navigate`'s blocked list). Request interception and the
//! network path ([`super::egress`]) both decide through here.

use std::net::IpAddr;
use std::time::Duration;

use super::shared::{Blocked, Shared};
use crate::policy::guards::{Host, UrlPolicy, UrlRefusal};

/// How long a host name may take to resolve before the request is refused.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes a refused request to the audit log (unless the rule's audit is
/// `off`) and to the info log, and remembers it for `navigate`'s answer.
pub fn refused(shared: &Shared, policy: &UrlPolicy, method: &str, blocked: Blocked) {
    let (url, rule) = (blocked.url.as_str(), blocked.refusal.rule.as_str());
    if policy.audits() {
        let denial = &blocked.refusal.denial;
        let identity = shared.lock().actor.clone();
        tracing::info!(
            target: "audit",
            port = "browser",
            endpoint = "browser_navigate",
            identity,
            method,
            decision = "deny",
            status = denial.status(),
            code = denial.code(),
            rule,
            url,
        );
    }
    tracing::info!(url, rule, resource = blocked.resource_type, "browser request blocked");
    shared.lock().block(blocked);
}

/// The policy's verdict on `url`, resolving its host name first.
///
/// # Errors
/// The refusal and its rule.
pub async fn check(policy: &UrlPolicy, url: &str) -> Result<(), UrlRefusal> {
    decide_host(policy, policy.check(url)?).await
}

/// Decides `host`: a name by the addresses it resolves to.
///
/// # Errors
/// The refusal and its rule.
pub async fn decide_host(policy: &UrlPolicy, host: Host) -> Result<(), UrlRefusal> {
    resolve(policy, host).await.map(drop)
}

/// The addresses `host` stands for, each decided: the address written in
/// the URL, or every address its name resolves to (none when it does not
/// resolve: it reaches nothing, and the browser reports the failure).
///
/// # Errors
/// The refusal and its rule.
pub async fn resolve(policy: &UrlPolicy, host: Host) -> Result<Vec<IpAddr>, UrlRefusal> {
    match host {
        Host::None => Ok(Vec::new()),
        Host::Address(ip) => Ok(vec![ip]),
        Host::Name(name, port) => {
            let addresses: Vec<IpAddr> =
                match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name.as_str(), port))).await {
                    Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                    _ => Vec::new(),
                };
            policy.check_addresses(&name, &addresses)?;
            Ok(addresses)
        }
    }
}

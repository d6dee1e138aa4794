//! How a session's turn gets its vault credentials: each MCP tool bound to
//! a credential (see `vaults.rs`) carries the credential's token as its
//! `Authorization` header, and the token is masked in the turn's events.
//!
//! A credential's URL is checked as written when it is stored; when a turn
//! is about to hand its token to a CLI, the server's host is resolved and
//! checked again with the webhook deliveries' check
//! ([`admit_destination`]): a name that now resolves to a loopback,
//! private or link-local address (`ip6-localhost`, `*.nip.io`, a rebinding
//! name) fails the turn before the CLI starts, so the token is not used.
//! A name that does not resolve here is let through: the CLI cannot reach
//! it either.

use super::error::{AgentError, Failure};
use super::runtime::Agents;
use super::session::SessionMeta;
use super::spec::McpServer;
use super::vaults::recorded_bindings;
use super::webhooks::delivery::{admit_destination, DeliveryError};
use super::worker::TurnInput;
use crate::policy::guards::UrlPolicy;
use crate::pyrepr::repr_str;

impl Agents {
    /// `input` with the session's vault credentials added: the bound MCP
    /// servers with their `Authorization` header, and their tokens to redact.
    ///
    /// # Errors
    /// A bound credential that is gone, lost its secret, or expired.
    pub fn with_vault_credentials(
        &self,
        meta: &SessionMeta,
        servers: &[McpServer],
        mut input: TurnInput,
    ) -> Result<TurnInput, AgentError> {
        let bindings = recorded_bindings(meta);
        if bindings.is_empty() {
            return Ok(input);
        }
        let (bound, secrets) = self.vaults.turn_servers(&meta.owner, &bindings, servers)?;
        input.mcp_servers.extend(bound);
        input.redact.extend(secrets);
        Ok(input)
    }

    /// Checks the hosts of a turn's credential-bearing MCP servers
    /// (`(label, url)`) as they resolve now, unless private URLs are allowed.
    ///
    /// # Errors
    /// A turn failure (`invalid_request`) naming the server.
    pub(crate) async fn check_credential_hosts(&self, bound: &[(String, String)]) -> Result<(), Failure> {
        if bound.is_empty() || self.config.allow_private_urls {
            return Ok(());
        }
        let policy = UrlPolicy::new(&[], &[], None);
        for (label, url) in bound {
            let why = match admit_destination(&policy, url).await {
                Ok(()) | Err(DeliveryError::Unresolved) => continue,
                Err(DeliveryError::Private) => "resolves to a loopback, private or link-local address",
                Err(_) => "is not a URL a credential may be sent to",
            };
            let message = format!("the MCP server {} {why}; its vault credential was not used", repr_str(label));
            return Err(Failure::new("invalid_request", message));
        }
        Ok(())
    }
}

//! How a session's turn gets its vault credentials: each MCP tool bound to
//! a credential (see `vaults.rs`) carries the credential's token as its
//! `Authorization` header, and the token is masked in the turn's events.

use super::error::AgentError;
use super::runtime::Agents;
use super::session::SessionMeta;
use super::spec::McpServer;
use super::vaults::recorded_bindings;
use super::worker::TurnInput;

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
}

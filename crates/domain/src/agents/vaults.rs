//! Vaults and their write-only credentials, and how a session's turns use
//! them.
//!
//! A credential authorises one MCP server (a `static_bearer` token or an
//! `mcp_oauth` access token). A session that names vaults binds each of
//! its MCP tools to at most one of their credentials, matched on scheme,
//! host and port ([`Vaults::bind`]); each of its turns then carries the
//! token as the tool's `Authorization` header, which reaches the CLI through
//! its environment only (`ABX_MCP_<LABEL>_AUTHORIZATION`), and the token is
//! registered with the turn's redactor (`vault_credentials.rs`).
//!
//! Vaults and credential metadata are journaled under the state directory
//! (`vaults.jsonl`) and come back after a restart; a secret never leaves
//! memory: it is not written, logged, or returned by any call. After a
//! restart a credential has no secret until it is rotated, and a turn that
//! needs it fails as the reference fails one whose credential was deleted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::AgentError;
use super::journal::{self, Journal};
use super::session::SessionMeta;
use super::spec::McpServer;
use crate::pyrepr::repr_str;

/// The key of a session's credential bindings in its metadata's `extra`.
const BINDINGS_KEY: &str = "vault_bindings";
/// Vaults a session may name at most.
pub const MAX_SESSION_VAULTS: usize = 16;
/// `vault_ids[i]`: the field a missing vault is reported at.
const VAULT_ID_PARAMS: [&str; MAX_SESSION_VAULTS] = [
    "vault_ids[0]",
    "vault_ids[1]",
    "vault_ids[2]",
    "vault_ids[3]",
    "vault_ids[4]",
    "vault_ids[5]",
    "vault_ids[6]",
    "vault_ids[7]",
    "vault_ids[8]",
    "vault_ids[9]",
    "vault_ids[10]",
    "vault_ids[11]",
    "vault_ids[12]",
    "vault_ids[13]",
    "vault_ids[14]",
    "vault_ids[15]",
];

/// A vault: a named group of credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vault {
    /// `vlt_<24 hex>`.
    pub id: String,
    /// The caller that owns it.
    pub owner: String,
    /// When it was created (seconds since the epoch).
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
    /// Its name, trimmed.
    pub name: Option<String>,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
}

/// A credential's metadata: nothing here is derived from its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Credential {
    /// `cred_<24 hex>`.
    pub id: String,
    /// The caller that owns it.
    pub owner: String,
    /// The vault it belongs to.
    pub vault_id: String,
    /// Its name, trimmed.
    pub name: String,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// The public part of `auth` (`type`, `mcp_server_url`, `networking`,
    /// `expires_at`, `refresh`), as the wire shows it.
    pub auth: Map<String, Value>,
    /// When it was created.
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
}

impl Credential {
    /// `static_bearer` or `mcp_oauth`.
    pub fn kind(&self) -> &str {
        self.auth.get("type").and_then(Value::as_str).unwrap_or_default()
    }

    fn url(&self) -> &str {
        self.auth.get("mcp_server_url").and_then(Value::as_str).unwrap_or_default()
    }

    fn expires_at(&self) -> Option<&str> {
        self.auth.get("expires_at").and_then(Value::as_str)
    }
}

/// A new credential: its metadata and its secret (the token).
#[derive(Clone)]
pub struct NewCredential {
    /// Its name.
    pub name: String,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
    /// The public part of `auth`.
    pub auth: Map<String, Value>,
    /// The token.
    pub secret: String,
}

/// What a vault update changes (`None`: left as it is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VaultChange {
    /// A new name (`Some(None)` clears it).
    #[allow(clippy::option_option)]
    pub name: Option<Option<String>>,
    /// New metadata.
    pub metadata: Option<Map<String, Value>>,
}

/// What a credential update changes (`None`: left as it is).
#[derive(Clone, Default)]
pub struct CredentialChange {
    /// New metadata.
    pub metadata: Option<Map<String, Value>>,
    /// A new token.
    pub secret: Option<String>,
    /// A new `expires_at` (`Some(None)` clears it).
    pub expires_at: Option<Option<String>>,
}

// Debug views that never print a secret.
impl std::fmt::Debug for NewCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewCredential").field("name", &self.name).field("auth", &self.auth).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CredentialChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialChange")
            .field("metadata", &self.metadata)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// An MCP tool of a session, as binding sees it.
#[derive(Debug, Clone, Copy)]
pub struct ToolTarget<'a> {
    /// `server_label`.
    pub label: &'a str,
    /// Its server URL.
    pub url: &'a str,
    /// The credential it names, if it names one.
    pub credential_id: Option<&'a str>,
}

/// One tool of a session bound to one credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The tool's `server_label`.
    pub tool: String,
    /// The vault of the credential.
    pub vault_id: String,
    /// The credential.
    pub credential_id: String,
}

/// One line of `vaults.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Line {
    Vault { vault: Vault },
    VaultDeleted { id: String },
    Credential { credential: Credential },
    CredentialDeleted { id: String },
}

#[derive(Default)]
struct Inner {
    /// Oldest first.
    vaults: Vec<Vault>,
    /// Oldest first.
    credentials: Vec<Credential>,
    /// Credential id to token: memory only.
    secrets: HashMap<String, String>,
    journal: Option<Journal>,
}

impl Inner {
    fn write(&mut self, line: &Line) {
        if let Some(journal) = self.journal.as_mut() {
            if let Err(e) = journal.append(line) {
                tracing::warn!(path = %journal.path().display(), error = %e, "agents: cannot write the vault journal");
            }
        }
    }

    fn vault(&self, owner: &str, id: &str) -> Result<usize, AgentError> {
        self.vaults
            .iter()
            .position(|v| v.id == id && v.owner == owner)
            .ok_or_else(|| AgentError::not_found("vault", id, "vault_id"))
    }

    fn credential(&self, owner: &str, vault_id: &str, id: &str) -> Result<usize, AgentError> {
        self.vault(owner, vault_id)?;
        self.credentials
            .iter()
            .position(|c| c.id == id && c.owner == owner && c.vault_id == vault_id)
            .ok_or_else(|| AgentError::not_found("credential", id, "credential_id"))
    }
}

/// The vaults of the daemon; see the module documentation.
pub struct Vaults {
    inner: Mutex<Inner>,
    max_per_owner: usize,
}

impl std::fmt::Debug for Vaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Vaults")
            .field("vaults", &inner.vaults.len())
            .field("credentials", &inner.credentials.len())
            .field("max_per_owner", &self.max_per_owner)
            .finish_non_exhaustive()
    }
}

fn now() -> i64 {
    super::turn::now() as i64
}

impl Vaults {
    /// Vaults kept in memory only.
    pub fn in_memory(max_per_owner: usize) -> Self {
        Vaults { inner: Mutex::new(Inner::default()), max_per_owner }
    }

    /// The vaults journaled at `path` (compacted as they are read); a file
    /// that cannot be used is logged, and vaults are then kept in memory.
    /// Blocking: call it off the async runtime.
    pub fn load(path: &Path, max_per_owner: usize) -> Self {
        let vaults = Vaults::in_memory(max_per_owner);
        match load_lines(path) {
            Ok((kept, journal)) => {
                let mut inner = vaults.lock();
                for line in kept {
                    match line {
                        Line::Vault { vault } => inner.vaults.push(vault),
                        Line::Credential { credential } => inner.credentials.push(credential),
                        Line::VaultDeleted { .. } | Line::CredentialDeleted { .. } => {}
                    }
                }
                inner.journal = Some(journal);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "agents: the vault journal cannot be used; vaults are kept in memory");
            }
        }
        vaults
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates a vault.
    ///
    /// # Errors
    /// 400 `agents.limit_exceeded` when `owner` holds the most vaults allowed.
    pub fn create_vault(
        &self,
        owner: &str,
        name: Option<String>,
        metadata: Map<String, Value>,
    ) -> Result<Vault, AgentError> {
        let mut inner = self.lock();
        if inner.vaults.iter().filter(|v| v.owner == owner).count() >= self.max_per_owner {
            return Err(AgentError::invalid_code("too many vaults", Some("name"), "agents.limit_exceeded"));
        }
        let at = now();
        let vault = Vault {
            id: format!("vlt_{}", crate::ids::random_hex(12)),
            owner: owner.to_string(),
            created_at: at,
            updated_at: at,
            name,
            metadata,
        };
        inner.vaults.push(vault.clone());
        inner.write(&Line::Vault { vault: vault.clone() });
        Ok(vault)
    }

    /// Vault `id` of `owner`.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id.
    pub fn vault(&self, owner: &str, id: &str) -> Result<Vault, AgentError> {
        let inner = self.lock();
        inner.vault(owner, id).map(|i| inner.vaults[i].clone())
    }

    /// `owner`'s vaults, oldest first.
    pub fn vaults(&self, owner: &str) -> Vec<Vault> {
        self.lock().vaults.iter().filter(|v| v.owner == owner).cloned().collect()
    }

    /// Renames a vault and/or replaces its metadata.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id.
    pub fn update_vault(&self, owner: &str, id: &str, change: VaultChange) -> Result<Vault, AgentError> {
        let mut inner = self.lock();
        let i = inner.vault(owner, id)?;
        let vault = &mut inner.vaults[i];
        if let Some(name) = change.name {
            vault.name = name;
        }
        if let Some(metadata) = change.metadata {
            vault.metadata = metadata;
        }
        vault.updated_at = now().max(vault.updated_at);
        let vault = vault.clone();
        inner.write(&Line::Vault { vault: vault.clone() });
        Ok(vault)
    }

    /// Deletes a vault and every credential in it.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id.
    pub fn delete_vault(&self, owner: &str, id: &str) -> Result<(), AgentError> {
        let mut inner = self.lock();
        let i = inner.vault(owner, id)?;
        inner.vaults.remove(i);
        let (gone, kept): (Vec<Credential>, Vec<Credential>) =
            std::mem::take(&mut inner.credentials).into_iter().partition(|c| c.vault_id == id);
        inner.credentials = kept;
        for credential in gone {
            inner.secrets.remove(&credential.id);
            inner.write(&Line::CredentialDeleted { id: credential.id });
        }
        inner.write(&Line::VaultDeleted { id: id.to_string() });
        Ok(())
    }

    /// Stores a credential in vault `vault_id`.
    ///
    /// # Errors
    /// 404 for an unknown or foreign vault.
    pub fn create_credential(&self, owner: &str, vault_id: &str, new: NewCredential) -> Result<Credential, AgentError> {
        let mut inner = self.lock();
        inner.vault(owner, vault_id)?;
        let at = now();
        let credential = Credential {
            id: format!("cred_{}", crate::ids::random_hex(12)),
            owner: owner.to_string(),
            vault_id: vault_id.to_string(),
            name: new.name,
            metadata: new.metadata,
            auth: new.auth,
            created_at: at,
            updated_at: at,
        };
        inner.secrets.insert(credential.id.clone(), new.secret);
        inner.credentials.push(credential.clone());
        inner.write(&Line::Credential { credential: credential.clone() });
        Ok(credential)
    }

    /// Credential `id` of vault `vault_id`.
    ///
    /// # Errors
    /// 404 for an unknown vault, then for an unknown credential.
    pub fn credential(&self, owner: &str, vault_id: &str, id: &str) -> Result<Credential, AgentError> {
        let inner = self.lock();
        inner.credential(owner, vault_id, id).map(|i| inner.credentials[i].clone())
    }

    /// The credentials of vault `vault_id`, oldest first.
    ///
    /// # Errors
    /// 404 for an unknown or foreign vault.
    pub fn credentials(&self, owner: &str, vault_id: &str) -> Result<Vec<Credential>, AgentError> {
        let inner = self.lock();
        inner.vault(owner, vault_id)?;
        Ok(inner.credentials.iter().filter(|c| c.vault_id == vault_id && c.owner == owner).cloned().collect())
    }

    /// Relabels or rotates a credential.
    ///
    /// # Errors
    /// 404 for an unknown vault or credential.
    pub fn update_credential(
        &self,
        owner: &str,
        vault_id: &str,
        id: &str,
        change: CredentialChange,
    ) -> Result<Credential, AgentError> {
        let mut inner = self.lock();
        let i = inner.credential(owner, vault_id, id)?;
        if let Some(secret) = change.secret {
            inner.secrets.insert(id.to_string(), secret);
        }
        let credential = &mut inner.credentials[i];
        if let Some(metadata) = change.metadata {
            credential.metadata = metadata;
        }
        if let Some(expires_at) = change.expires_at {
            credential.auth.insert("expires_at".into(), expires_at.map_or(Value::Null, Value::String));
        }
        credential.updated_at = now().max(credential.updated_at);
        let credential = credential.clone();
        inner.write(&Line::Credential { credential: credential.clone() });
        Ok(credential)
    }

    /// Deletes a credential.
    ///
    /// # Errors
    /// 404 for an unknown vault or credential.
    pub fn delete_credential(&self, owner: &str, vault_id: &str, id: &str) -> Result<Credential, AgentError> {
        let mut inner = self.lock();
        let i = inner.credential(owner, vault_id, id)?;
        let credential = inner.credentials.remove(i);
        inner.secrets.remove(id);
        inner.write(&Line::CredentialDeleted { id: id.to_string() });
        Ok(credential)
    }

    /// The vaults a new session names, each checked, without repeats.
    ///
    /// # Errors
    /// 404 at `vault_ids[i]` for an unknown or foreign vault.
    pub fn resolve(&self, owner: &str, ids: &[String]) -> Result<Vec<String>, AgentError> {
        let inner = self.lock();
        let mut out: Vec<String> = Vec::new();
        for (id, param) in ids.iter().zip(VAULT_ID_PARAMS) {
            if inner.vault(owner, id).is_err() {
                return Err(AgentError::NotFound { what: "vault", id: id.clone(), param });
            }
            if !out.contains(id) {
                out.push(id.clone());
            }
        }
        Ok(out)
    }

    /// Binds each tool to at most one credential of `vault_ids`: the one it
    /// names, or the only one whose URL has the tool's scheme, host and port.
    ///
    /// # Errors
    /// 400 `agents.credential_not_found` (a named credential not in the
    /// vaults), `agents.credential_mismatch` (its URL is another server's),
    /// `agents.credential_ambiguous` (two match and none is named).
    pub fn bind(
        &self,
        owner: &str,
        vault_ids: &[String],
        tools: &[ToolTarget<'_>],
    ) -> Result<Vec<Binding>, AgentError> {
        let inner = self.lock();
        let attached: Vec<&Credential> =
            inner.credentials.iter().filter(|c| c.owner == owner && vault_ids.contains(&c.vault_id)).collect();
        let mut bindings = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let param = format!("tools[{i}].credential_id");
            let target = origin(tool.url);
            let matches: Vec<&Credential> = match tool.credential_id {
                Some(named) => {
                    let Some(chosen) = attached.iter().find(|c| c.id == named) else {
                        return Err(AgentError::invalid_code(
                            "credential_id does not belong to an attached vault",
                            Some(&param),
                            "agents.credential_not_found",
                        ));
                    };
                    if origin(chosen.url()) != target {
                        return Err(AgentError::invalid_code(
                            "the credential's mcp_server_url does not match the MCP server URL",
                            Some(&param),
                            "agents.credential_mismatch",
                        ));
                    }
                    vec![chosen]
                }
                None => attached.iter().copied().filter(|c| origin(c.url()) == target).collect(),
            };
            if matches.len() > 1 {
                return Err(AgentError::invalid_code(
                    "more than one attached credential matches this MCP server; set credential_id",
                    Some(&param),
                    "agents.credential_ambiguous",
                ));
            }
            if let Some(found) = matches.first() {
                bindings.push(Binding {
                    tool: tool.label.to_string(),
                    vault_id: found.vault_id.clone(),
                    credential_id: found.id.clone(),
                });
            }
        }
        Ok(bindings)
    }

    /// The MCP servers of one turn with their bound tokens as `Authorization`
    /// headers (replacing the session's servers of the same name), and the
    /// tokens to redact.
    ///
    /// # Errors
    /// 400 `agents.credential_unavailable` when a bound vault or credential
    /// was deleted, or its secret was lost with a restart;
    /// `agents.credential_expired` when its access token has expired.
    pub fn turn_servers(
        &self,
        owner: &str,
        bindings: &[Binding],
        servers: &[McpServer],
    ) -> Result<(Vec<McpServer>, Vec<String>), AgentError> {
        let inner = self.lock();
        let (mut out, mut secrets) = (Vec::new(), Vec::new());
        for binding in bindings {
            let unavailable = |why: &str| {
                AgentError::invalid_code(
                    format!("the credential for MCP server {} is no longer available{why}", repr_str(&binding.tool)),
                    Some("vault_ids"),
                    "agents.credential_unavailable",
                )
            };
            let Ok(i) = inner.credential(owner, &binding.vault_id, &binding.credential_id) else {
                return Err(unavailable(""));
            };
            let credential = &inner.credentials[i];
            let Some(secret) = inner.secrets.get(&credential.id) else {
                return Err(unavailable(
                    ": its secret was kept in memory only and the server restarted; rotate the credential to set it again",
                ));
            };
            if let Some(expires) = credential.expires_at() {
                if abx_wire::time::parse_iso(expires).is_some_and(|at| at <= now()) {
                    return Err(AgentError::invalid_code(
                        format!("the access token for MCP server {} has expired", repr_str(&binding.tool)),
                        Some("vault_ids"),
                        "agents.credential_expired",
                    ));
                }
            }
            let Some(base) = servers.iter().find(|s| s.name == binding.tool) else { continue };
            let mut server = base.clone();
            server.headers.insert("Authorization".into(), format!("Bearer {secret}"));
            out.push(server);
            secrets.push(secret.clone());
        }
        Ok((out, secrets))
    }
}

/// Reads, keeps the latest record of each live object, rewrites the file
/// with only those, and opens it for appending.
fn load_lines(path: &Path) -> std::io::Result<(Vec<Line>, Journal)> {
    if let Some(parent) = path.parent() {
        journal::private_dir(parent)?;
    }
    let mut vaults: Vec<Vault> = Vec::new();
    let mut credentials: Vec<Credential> = Vec::new();
    for line in journal::replay::<Line>(path)? {
        match line {
            Line::Vault { vault } => match vaults.iter_mut().find(|v| v.id == vault.id) {
                Some(existing) => *existing = vault,
                None => vaults.push(vault),
            },
            Line::VaultDeleted { id } => vaults.retain(|v| v.id != id),
            Line::Credential { credential } => match credentials.iter_mut().find(|c| c.id == credential.id) {
                Some(existing) => *existing = credential,
                None => credentials.push(credential),
            },
            Line::CredentialDeleted { id } => credentials.retain(|c| c.id != id),
        }
    }
    credentials.retain(|c| vaults.iter().any(|v| v.id == c.vault_id));
    let kept: Vec<Line> = vaults
        .into_iter()
        .map(|vault| Line::Vault { vault })
        .chain(credentials.into_iter().map(|credential| Line::Credential { credential }))
        .collect();
    journal::rewrite(path, &kept)?;
    Ok((kept, Journal::open(path)?))
}

/// `(scheme, host, port)` of an `http(s)` URL, as the reference compares them.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let parsed = url::Url::parse(url).ok()?;
    let scheme = parsed.scheme();
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let host = parsed.host_str().filter(|h| !h.is_empty())?.to_ascii_lowercase();
    Some((scheme.to_string(), host, parsed.port_or_known_default()?))
}

/// Where the vault journal lives under a state directory.
pub fn journal_path(state_dir: &Path) -> PathBuf {
    state_dir.join("vaults.jsonl")
}

/// Records a session's credential bindings in its metadata (journaled with
/// the session: ids only, never a secret).
pub fn record_bindings(meta: &mut SessionMeta, bindings: &[Binding]) {
    if !bindings.is_empty() {
        meta.extra.insert(BINDINGS_KEY.into(), serde_json::to_value(bindings).unwrap_or_default());
    }
}

/// The credential bindings a session's metadata records (none when it records none).
pub fn recorded_bindings(meta: &SessionMeta) -> Vec<Binding> {
    meta.extra.get(BINDINGS_KEY).and_then(|raw| serde_json::from_value(raw.clone()).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn auth(url: &str) -> Map<String, Value> {
        let mut auth = Map::new();
        auth.insert("type".into(), "static_bearer".into());
        auth.insert("mcp_server_url".into(), url.into());
        auth
    }

    fn new(url: &str, secret: &str) -> NewCredential {
        NewCredential { name: "c".into(), metadata: Map::new(), auth: auth(url), secret: secret.into() }
    }

    #[test]
    fn metadata_survives_a_reload_and_secrets_do_not() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = journal_path(dir.path());
        let vaults = Vaults::load(&path, 10);
        let kept = vaults.create_vault("a", Some("v".into()), Map::new()).expect("vault");
        let gone = vaults.create_vault("a", None, Map::new()).expect("vault");
        let cred = vaults.create_credential("a", &kept.id, new("https://m.example/mcp", "tok-123456")).expect("cred");
        vaults.create_credential("a", &gone.id, new("https://n.example/mcp", "tok-654321")).expect("cred");
        let change = VaultChange { name: Some(Some("renamed".into())), metadata: None };
        vaults.update_vault("a", &kept.id, change).expect("update");
        vaults.delete_vault("a", &gone.id).expect("delete");
        let text = std::fs::read_to_string(&path).expect("journal");
        assert!(!text.contains("tok-123456") && !text.contains("tok-654321"), "{text}");
        drop(vaults);

        let back = Vaults::load(&path, 10);
        assert_eq!(back.vaults("a").iter().map(|v| v.name.clone()).collect::<Vec<_>>(), [Some("renamed".to_string())]);
        assert_eq!(back.credential("a", &kept.id, &cred.id).expect("cred").name, "c");
        assert_eq!(std::fs::read_to_string(&path).expect("journal").lines().count(), 2, "compacted");
        let bindings = [Binding { tool: "docs".into(), vault_id: kept.id.clone(), credential_id: cred.id.clone() }];
        let servers = [McpServer::remote("docs", "https://m.example/mcp", BTreeMap::new())];
        let err = back.turn_servers("a", &bindings, &servers).expect_err("no secret after a restart");
        assert!(err.to_string().contains("restarted"), "{err}");
        let change = CredentialChange { secret: Some("tok-rotated".into()), ..CredentialChange::default() };
        back.update_credential("a", &kept.id, &cred.id, change).expect("rotate");
        let (bound, secrets) = back.turn_servers("a", &bindings, &servers).expect("bound");
        assert_eq!(bound[0].headers["Authorization"], "Bearer tok-rotated");
        assert_eq!(secrets, ["tok-rotated"]);
    }

    #[test]
    fn tools_bind_by_origin_and_owners_are_apart() {
        let vaults = Vaults::in_memory(2);
        let v = vaults.create_vault("a", None, Map::new()).expect("vault");
        vaults.create_vault("a", None, Map::new()).expect("vault");
        assert!(vaults.create_vault("a", None, Map::new()).is_err(), "the limit");
        assert!(vaults.vault("b", &v.id).is_err(), "a foreign id reads as unknown");
        let c = vaults.create_credential("a", &v.id, new("https://M.example:443/x", "tok-aaaaaa")).expect("cred");
        let ids = vaults.resolve("a", &[v.id.clone(), v.id.clone()]).expect("resolve");
        assert_eq!(ids.len(), 1);
        let tool = |url| ToolTarget { label: "docs", url, credential_id: None };
        let bound = vaults.bind("a", &ids, &[tool("https://m.example/mcp")]).expect("bind");
        assert_eq!(bound[0].credential_id, c.id);
        assert!(vaults.bind("a", &ids, &[tool("http://m.example/mcp")]).expect("no match").is_empty());
        vaults.create_credential("a", &v.id, new("https://m.example/y", "tok-bbbbbb")).expect("cred");
        let err = vaults.bind("a", &ids, &[tool("https://m.example/mcp")]).expect_err("ambiguous");
        assert!(matches!(err, AgentError::Invalid { code: "agents.credential_ambiguous", .. }));
        let named = ToolTarget { credential_id: Some(&c.id), ..tool("https://m.example/mcp") };
        assert_eq!(vaults.bind("a", &ids, &[named]).expect("named").len(), 1);
        let err = vaults.resolve("a", &["vlt_x".into()]).expect_err("unknown");
        assert!(matches!(err, AgentError::NotFound { param: "vault_ids[0]", .. }));
    }
}

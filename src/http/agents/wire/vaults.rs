//! Vaults and vault credentials on the wire: the `vault` and
//! `vault.credential` objects, in the reference's key order (metadata only:
//! no value, prefix, length or hash of a secret), their deletion receipts, and the request bodies of
//! create and update read into domain values, refused with the reference's
//! 400s.

use abx_domain::agents::error::AgentError;
use abx_domain::agents::vaults::{Credential, CredentialChange, NewCredential, Vault, VaultChange};
use abx_domain::policy::guards::urls::is_public;
use serde_json::{json, Map, Value};

use super::requests::metadata_strict;
use super::Label;

/// A name's most UTF-8 bytes after trimming.
const NAME_MAX_BYTES: usize = 256;
/// A token's most characters.
const TOKEN_MAX: usize = 8192;

fn vault_label() -> Label {
    Label::state(&["memory_only"])
}

fn credential_label() -> Label {
    Label::state(&["memory_only", "secret_in_agent_env"])
}

/// The `vault` object: `id`, `name`, `metadata`, `created_at` only.
pub fn vault_object(vault: &Vault) -> Value {
    json!({
        "id": vault.id,
        "object": "vault",
        "created_at": vault.created_at,
        "metadata": vault.metadata,
        "name": vault.name,
        "x_agent_sandbox": vault_label(),
    })
}

/// The `vault.credential` object: metadata only, nothing derived from the secret.
pub fn credential_object(credential: &Credential) -> Value {
    json!({
        "id": credential.id,
        "object": "vault.credential",
        "vault_id": credential.vault_id,
        "name": credential.name,
        "metadata": credential.metadata,
        "auth": credential.auth,
        "created_at": credential.created_at,
        "updated_at": credential.updated_at,
        "x_agent_sandbox": credential_label(),
    })
}

/// The receipt of a deleted vault.
pub fn vault_deleted(id: &str) -> super::Deleted {
    super::Deleted { id: id.to_string(), object: "vault.deleted", deleted: true, x_agent_sandbox: vault_label() }
}

/// The receipt of a deleted credential.
pub fn credential_deleted(id: &str) -> super::Deleted {
    super::Deleted {
        id: id.to_string(),
        object: "vault.credential.deleted",
        deleted: true,
        x_agent_sandbox: credential_label(),
    }
}

fn invalid(message: impl Into<String>, param: impl Into<String>) -> AgentError {
    AgentError::invalid(message, param)
}

/// Refuses any key of `body` outside `allowed`.
fn only(body: &Map<String, Value>, allowed: &[&str], prefix: &str) -> Result<(), AgentError> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(invalid(format!("{prefix}{key}: unknown or unsupported parameter"), format!("{prefix}{key}"))),
        None => Ok(()),
    }
}

/// A name: a string of 1 to 256 UTF-8 bytes after trimming (`None` for null).
fn name(value: Option<&Value>, required: bool) -> Result<Option<String>, AgentError> {
    match value {
        None | Some(Value::Null) if required => Err(invalid("name: required", "name")),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(raw)) => {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.len() > NAME_MAX_BYTES {
                return Err(invalid(format!("name: 1 to {NAME_MAX_BYTES} UTF-8 bytes after trimming"), "name"));
            }
            Ok(Some(trimmed.to_string()))
        }
        Some(_) => Err(invalid("name: expected a string", "name")),
    }
}

fn metadata(body: &Map<String, Value>) -> Result<Map<String, Value>, AgentError> {
    metadata_strict(body.get("metadata").unwrap_or(&Value::Null), "metadata")
}

/// `name` and `metadata` of `POST /v1/vaults`.
///
/// # Errors
/// 400 for another key or a bad field.
pub fn vault_create(body: &Map<String, Value>) -> Result<(Option<String>, Map<String, Value>), AgentError> {
    only(body, &["name", "metadata"], "")?;
    Ok((name(body.get("name"), false)?, metadata(body)?))
}

/// What `POST /v1/vaults/{vault_id}` changes: the name and the metadata.
///
/// # Errors
/// 400 for another key or a bad field.
pub fn vault_update(body: &Map<String, Value>) -> Result<VaultChange, AgentError> {
    only(body, &["name", "metadata"], "")?;
    Ok(VaultChange {
        name: body.contains_key("name").then(|| name(body.get("name"), false)).transpose()?,
        metadata: body.contains_key("metadata").then(|| metadata(body)).transpose()?,
    })
}

/// A token: a non-empty single-line string of at most 8192 characters.
fn secret(value: Option<&Value>, field: &str) -> Result<String, AgentError> {
    match value.and_then(Value::as_str) {
        Some(v) if !v.is_empty() && v.chars().count() <= TOKEN_MAX && !v.contains(['\r', '\n', '\0']) => {
            Ok(v.to_string())
        }
        _ => Err(invalid(format!("{field}: expected a non-empty single-line string"), field)),
    }
}

/// An `expires_at`: an ISO 8601 timestamp, or null.
fn expires(value: Option<&Value>, field: &str) -> Result<Option<String>, AgentError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(v)) if abx_wire::time::parse_iso(v).is_some() => Ok(Some(v.clone())),
        Some(_) => Err(invalid(format!("{field}: expected an RFC 3339 timestamp"), field)),
    }
}

/// Whether `host` names this machine or a private network (the reference's
/// list of names, and the policy's notion of a public address).
fn private_host(host: &str) -> bool {
    let lowered = host.trim_end_matches('.').to_ascii_lowercase();
    if lowered == "localhost" || [".localhost", ".local", ".internal"].iter().any(|s| lowered.ends_with(s)) {
        return true;
    }
    lowered.trim_matches(['[', ']']).parse().is_ok_and(|ip| !is_public(ip))
}

/// Admits an `https` MCP server URL without credentials, query or fragment,
/// on a public host unless `allow_private`; returns its lower-case host.
fn server_url(value: Option<&Value>, field: &str, allow_private: bool) -> Result<String, AgentError> {
    let Some(raw) = value.and_then(Value::as_str).filter(|u| !u.is_empty()) else {
        return Err(invalid(format!("{field}: expected a URL string"), field));
    };
    let parsed =
        url::Url::parse(raw).ok().filter(|u| u.scheme() == "https" && u.host_str().is_some_and(|h| !h.is_empty()));
    let Some(parsed) = parsed else { return Err(invalid(format!("{field}: must be an https URL"), field)) };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(format!("{field}: must not contain credentials"), field));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(format!("{field}: must not contain a query string or fragment"), field));
    }
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    if !allow_private && private_host(&host) {
        return Err(invalid(format!("{field}: private and loopback hosts are not allowed"), field));
    }
    Ok(host)
}

/// `auth.networking`: only `limited` to the credential's own host is enforceable.
fn networking(auth: &Map<String, Value>, host: &str) -> Result<Option<Value>, AgentError> {
    let Some(net) = auth.get("networking").filter(|n| !n.is_null()) else { return Ok(None) };
    if net.get("type").and_then(Value::as_str) != Some("limited") {
        return Err(invalid(
            "auth.networking: unrestricted needs a hosted network policy; use limited",
            "auth.networking",
        ));
    }
    let hosts = net.get("allowed_hosts").and_then(Value::as_array).filter(|h| !h.is_empty());
    let own = |h: &Value| h.as_str().is_some_and(|h| h.to_lowercase() == host);
    if !hosts.is_some_and(|hosts| hosts.iter().all(own)) {
        return Err(invalid(
            "auth.networking.allowed_hosts: only the credential's own URL host is enforceable",
            "auth.networking.allowed_hosts",
        ));
    }
    Ok(Some(json!({"type": "limited", "allowed_hosts": [host]})))
}

/// The body of `POST /v1/vaults/{vault_id}/credentials`.
///
/// # Errors
/// 400 naming the offending field; the message never holds a secret.
pub fn credential_create(body: &Map<String, Value>, allow_private: bool) -> Result<NewCredential, AgentError> {
    only(body, &["auth", "name", "metadata"], "")?;
    let name = name(body.get("name"), true)?.unwrap_or_default();
    let metadata = metadata(body)?;
    let Some(auth) = body.get("auth").and_then(Value::as_object) else {
        return Err(invalid("auth: required", "auth"));
    };
    let kind = auth.get("type").and_then(Value::as_str);
    if kind == Some("environment_variable") {
        return Err(invalid(
            "auth.type environment_variable needs an egress proxy; the only local delivery would hand the secret to code the agent runs",
            "auth.type",
        ));
    }
    let (kind, secret_key, extra): (&str, &str, &[&str]) = match kind {
        Some("static_bearer") => ("static_bearer", "token", &["token"]),
        Some("mcp_oauth") => ("mcp_oauth", "access_token", &["access_token", "expires_at", "refresh"]),
        _ => return Err(invalid("auth.type: must be static_bearer or mcp_oauth", "auth.type")),
    };
    let allowed: Vec<&str> = ["type", "mcp_server_url", "networking"].iter().chain(extra).copied().collect();
    only(auth, &allowed, "auth.")?;
    if kind == "mcp_oauth" && auth.get("refresh").is_some_and(|r| !r.is_null()) {
        return Err(invalid(
            "auth.refresh: there is no refresh broker; sending a refresh token to a caller-chosen endpoint would move it off the machine",
            "auth.refresh",
        ));
    }
    let url = auth.get("mcp_server_url");
    let host = server_url(url, "auth.mcp_server_url", allow_private)?;
    let mut public = Map::new();
    public.insert("type".into(), kind.into());
    public.insert("mcp_server_url".into(), url.cloned().unwrap_or_default());
    if let Some(net) = networking(auth, &host)? {
        public.insert("networking".into(), net);
    }
    if kind == "mcp_oauth" {
        let expires_at = expires(auth.get("expires_at"), "auth.expires_at")?;
        public.insert("expires_at".into(), expires_at.map_or(Value::Null, Value::String));
        public.insert("refresh".into(), Value::Null);
    }
    let secret = secret(auth.get(secret_key), &format!("auth.{secret_key}"))?;
    Ok(NewCredential { name, metadata, auth: public, secret })
}

/// The body of `POST /v1/vaults/{vault_id}/credentials/{credential_id}`
/// for a credential of type `kind`: new metadata, a rotated token, a new expiry.
///
/// # Errors
/// 400 naming the offending field; the message never holds a secret.
pub fn credential_update(body: &Map<String, Value>, kind: &str) -> Result<CredentialChange, AgentError> {
    only(body, &["auth", "metadata"], "")?;
    let mut change = CredentialChange {
        metadata: body.contains_key("metadata").then(|| metadata(body)).transpose()?,
        ..CredentialChange::default()
    };
    let Some(auth) = body.get("auth").filter(|a| !a.is_null()) else { return Ok(change) };
    let auth = auth.as_object().filter(|a| a.get("type").and_then(Value::as_str) == Some(kind));
    let Some(auth) = auth else {
        return Err(invalid(
            format!("auth.type: must stay {kind}; the type of a credential cannot change"),
            "auth.type",
        ));
    };
    if kind == "static_bearer" {
        only(auth, &["type", "token"], "auth.")?;
        change.secret = Some(secret(auth.get("token"), "auth.token")?);
        return Ok(change);
    }
    only(auth, &["type", "access_token", "expires_at", "refresh"], "auth.")?;
    if auth.get("refresh").is_some_and(|r| !r.is_null()) {
        return Err(invalid("auth.refresh: there is no refresh broker", "auth.refresh"));
    }
    if auth.get("access_token").is_some_and(|t| !t.is_null()) {
        change.secret = Some(secret(auth.get("access_token"), "auth.access_token")?);
    }
    if auth.contains_key("expires_at") {
        change.expires_at = Some(expires(auth.get("expires_at"), "auth.expires_at")?);
    } else if change.secret.is_some() {
        change.expires_at = Some(None);
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn credentials_keep_their_secret_out_of_the_public_part() {
        let body = obj(json!({"name": " c ", "auth": {"type": "mcp_oauth", "access_token": "tok-secret-1",
            "mcp_server_url": "https://MCP.example.com/mcp", "expires_at": "2030-01-01T00:00:00Z",
            "networking": {"type": "limited", "allowed_hosts": ["mcp.example.com"]}}}));
        let new = credential_create(&body, false).expect("valid");
        assert_eq!(new.name, "c");
        assert_eq!(new.secret, "tok-secret-1");
        assert!(!Value::Object(new.auth.clone()).to_string().contains("tok-secret"));
        assert_eq!(new.auth["networking"]["allowed_hosts"], json!(["mcp.example.com"]));
        assert_eq!(new.auth["refresh"], Value::Null);
    }

    #[test]
    fn bad_credentials_are_refused_at_the_field_that_is_wrong() {
        let refused = |v: Value| credential_create(&obj(v), false).expect_err("refused");
        let param = |e: AgentError| match e {
            AgentError::Invalid { param, .. } => param.unwrap_or_default(),
            other => panic!("{other}"),
        };
        let url = "https://m.example.com/x";
        assert_eq!(
            param(refused(json!({"auth": {"type": "static_bearer", "token": "t", "mcp_server_url": url}}))),
            "name"
        );
        assert_eq!(param(refused(json!({"name": "c"}))), "auth");
        assert_eq!(param(refused(json!({"name": "c", "auth": {"type": "environment_variable"}}))), "auth.type");
        let local = json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "https://127.0.0.1/x"}});
        assert_eq!(param(refused(local.clone())), "auth.mcp_server_url");
        assert!(credential_create(&obj(local), true).is_ok(), "allowed by the option");
        let http = json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": "http://m.example.com/x"}});
        assert_eq!(param(refused(http)), "auth.mcp_server_url");
        let lines = json!({"name": "c", "auth": {"type": "static_bearer", "token": "a\nb", "mcp_server_url": url}});
        let err = refused(lines);
        assert!(!err.to_string().contains("a\nb"));
        assert_eq!(param(err), "auth.token");
        let extra =
            json!({"name": "c", "auth": {"type": "static_bearer", "token": "t", "mcp_server_url": url, "x": 1}});
        assert_eq!(param(refused(extra)), "auth.x");
        let update =
            credential_update(&obj(json!({"auth": {"type": "mcp_oauth", "access_token": "n"}})), "static_bearer");
        assert_eq!(param(update.expect_err("type change")), "auth.type");
        let rotated = credential_update(&obj(json!({"auth": {"type": "mcp_oauth", "access_token": "n"}})), "mcp_oauth");
        assert_eq!(rotated.expect("ok").expires_at, Some(None), "a new token clears the old expiry");
    }
}

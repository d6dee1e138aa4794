//! Environments, environment templates, their files and file blobs on the
//! wire: request bodies read into the domain's requests with the
//! reference's validation, and the `agent.environment`,
//! `agent.environment.template`, `agent.environment.file` and `file`
//! objects (env values and file bodies are never returned).

use std::collections::BTreeMap;

use abx_domain::agents::environments::{FileRequest, FileSource, NewEnvironment};
use abx_domain::agents::records::Stored;
use abx_domain::agents::resources::{Blob, Environment, PlannedFile, Template};
use abx_domain::agents::vaults::MAX_SESSION_VAULTS;
use abx_domain::agents::workspace_files::{check_workspace_spelling, normalize_relative, refused_location};
use abx_domain::agents::AgentError;
use abx_domain::policy::guards::env::{agent_env_denied, is_valid_name};
use base64::Engine;
use serde_json::{json, Map, Value};

use super::Label;

/// Fields that need a hosted environment.
const HOSTED_ONLY: [&str; 8] = [
    "network",
    "packages",
    "setup_commands",
    "plugins",
    "skills",
    "desktop",
    "container_size",
    "capability_directories",
];
const MAX_FILES: usize = 100;
const ENV_MAX_ENTRIES: usize = 64;
const ENV_MAX_VALUE: usize = 32 * 1024;

fn invalid(message: impl Into<String>, param: impl Into<String>) -> AgentError {
    AgentError::invalid(message, param)
}

fn empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Refuses keys of `src` outside `allowed`.
///
/// # Errors
/// 400 naming the first unknown key.
pub fn known_keys(src: &Map<String, Value>, allowed: &[&str], prefix: &str) -> Result<(), AgentError> {
    match src.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(invalid(format!("{prefix}{key}: unknown or unsupported parameter"), format!("{prefix}{key}"))),
        None => Ok(()),
    }
}

fn refuse_hosted_fields(src: &Map<String, Value>, prefix: &str) -> Result<(), AgentError> {
    for key in HOSTED_ONLY {
        let Some(value) = src.get(key).filter(|v| !empty(v)) else { continue };
        if key == "desktop"
            && value.as_object().is_some_and(|d| !d.get("enabled").is_some_and(abx_wire::api::process::is_truthy))
        {
            continue;
        }
        let param = format!("{prefix}{key}");
        return Err(invalid(format!("{param}: needs a hosted environment and is not available locally"), param));
    }
    Ok(())
}

/// An `env` map: up to 64 valid names outside the agents deny list, string values without NUL.
///
/// # Errors
/// 400 naming `field` or the offending entry.
pub fn check_env_map(raw: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, AgentError> {
    let map = match raw {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(invalid(format!("{field}: expected a mapping of strings"), field)),
    };
    if map.len() > ENV_MAX_ENTRIES {
        return Err(invalid(format!("{field}: at most {ENV_MAX_ENTRIES} entries"), field));
    }
    let mut out = BTreeMap::new();
    for (name, value) in map {
        if !is_valid_name(name) || name.len() > 128 {
            return Err(invalid(format!("{field}: invalid environment variable name"), field));
        }
        if agent_env_denied(name) {
            return Err(invalid(
                format!("{field}: environment variable {name} is not allowed"),
                format!("{field}.{name}"),
            ));
        }
        match value.as_str() {
            Some(v) if !v.contains('\0') && v.len() <= ENV_MAX_VALUE => out.insert(name.clone(), v.to_string()),
            _ => {
                let param = format!("{field}.{name}");
                let message = format!("{param}: expected a string without NUL up to {ENV_MAX_VALUE} bytes");
                return Err(invalid(message, param));
            }
        };
    }
    Ok(out)
}

/// Strict base64 of at most `limit` decoded bytes.
///
/// # Errors
/// 400 `agents.file_too_large` or not base64.
pub fn decode_base64(raw: Option<&Value>, field: &str, limit: u64) -> Result<Vec<u8>, AgentError> {
    let Some(text) = raw.and_then(Value::as_str) else {
        return Err(invalid(format!("{field}: expected a base64 string"), field));
    };
    let too_large = || {
        AgentError::invalid_code(format!("{field}: larger than {limit} bytes"), Some(field), "agents.file_too_large")
    };
    if text.len() as u64 > limit * 4 / 3 + 8 {
        return Err(too_large());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| invalid(format!("{field}: not valid base64"), field))?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// One file of a request (`{type: inline, path, data}` or `{type: file_id, path, file_id}`).
///
/// # Errors
/// 400 for a bad path, a refused location, bad base64 or an unknown type.
pub fn parse_file(raw: &Value, field: &str, limit: u64) -> Result<FileRequest, AgentError> {
    let Some(item) = raw.as_object() else { return Err(invalid(format!("{field}: expected an object"), field)) };
    let path_field = format!("{field}.path");
    let rel = normalize_relative(item.get("path").and_then(Value::as_str), &path_field)?;
    if rel.is_empty() {
        return Err(invalid(format!("{field}.path: names the workspace directory itself"), field));
    }
    if let Some(why) = refused_location(&rel) {
        return Err(AgentError::invalid_code(format!("{path_field}: {why}"), Some(&path_field), "agents.path_refused"));
    }
    let source = match item.get("type").and_then(Value::as_str) {
        Some("inline") => FileSource::Inline(decode_base64(item.get("data"), &format!("{field}.data"), limit)?),
        Some("file_id") => {
            FileSource::Blob(item.get("file_id").and_then(Value::as_str).unwrap_or_default().to_string())
        }
        _ => return Err(invalid(format!("{field}.type: must be inline or file_id"), format!("{field}.type"))),
    };
    Ok(FileRequest { rel, source, field: field.to_string() })
}

fn parse_files(raw: Option<&Value>, field: &str, limit: u64) -> Result<Vec<FileRequest>, AgentError> {
    match raw {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_FILES => {
            items.iter().enumerate().map(|(i, item)| parse_file(item, &format!("{field}[{i}]"), limit)).collect()
        }
        Some(_) => Err(invalid(format!("{field}: expected a list of up to {MAX_FILES} files"), field)),
    }
}

/// `vault_ids`: up to 16 strings, duplicates dropped (their existence is the caller's to check).
///
/// # Errors
/// 400 otherwise.
pub fn vault_ids(raw: Option<&Value>, field: &str) -> Result<Vec<String>, AgentError> {
    match raw {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(ids)) if ids.len() <= MAX_SESSION_VAULTS && ids.iter().all(Value::is_string) => {
            let mut out: Vec<String> = Vec::new();
            for id in ids.iter().filter_map(Value::as_str) {
                if !out.iter().any(|o| o == id) {
                    out.push(id.to_string());
                }
            }
            Ok(out)
        }
        Some(_) => Err(invalid(format!("{field}: expected up to {MAX_SESSION_VAULTS} vault ids"), field)),
    }
}

/// `POST /v1/agents/environments`.
///
/// # Errors
/// 400 naming the first offending field.
pub fn parse_environment(body: &Map<String, Value>, limit: u64) -> Result<NewEnvironment, AgentError> {
    known_keys(body, &["environment", "vault_ids"], "")?;
    let Some(env) = body.get("environment").and_then(Value::as_object) else {
        return Err(invalid("environment: required", "environment"));
    };
    let kind = env.get("type").filter(|t| abx_wire::api::process::is_truthy(t));
    let configured = env.iter().any(|(k, v)| k != "type" && !empty(v));
    let converted = match kind.map(|k| k.as_str()) {
        None | Some(Some("self_hosted")) => false,
        Some(Some("openai_hosted")) if !configured => true,
        Some(Some("openai_hosted")) => {
            let message = "environment.type: a configured openai_hosted environment cannot be provisioned locally; send an empty request or type self_hosted";
            return Err(invalid(message, "environment.type"));
        }
        Some(_) => {
            return Err(invalid("environment.type: must be openai_hosted (empty) or self_hosted", "environment.type"))
        }
    };
    refuse_hosted_fields(env, "environment.")?;
    let mut allowed = vec!["type", "workspace_directory", "env", "files", "environment_template_id"];
    allowed.extend(HOSTED_ONLY);
    known_keys(env, &allowed, "environment.")?;
    let template_id = match env.get("environment_template_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().map_or_else(|| abx_domain::pyrepr::str_of(v), str::to_string)),
    };
    let workspace_directory = match env.get("workspace_directory").filter(|v| abx_wire::api::process::is_truthy(v)) {
        None => "/workspace".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            let field = "environment.workspace_directory";
            return Err(invalid(format!("{field}: must be an absolute path"), field));
        }
    };
    check_workspace_spelling(workspace_directory.trim(), "environment.workspace_directory")?;
    Ok(NewEnvironment {
        workspace_directory,
        env: check_env_map(env.get("env"), "environment.env")?,
        files: parse_files(env.get("files"), "environment.files", limit)?,
        vault_ids: vault_ids(body.get("vault_ids"), "vault_ids")?,
        template_id,
        converted,
    })
}

/// The fields of a template body that were present.
#[derive(Debug, Default)]
pub struct TemplateFields {
    /// `name` (present: `Some`).
    pub name: Option<Option<String>>,
    /// `env`.
    pub env: Option<BTreeMap<String, String>>,
    /// `files`.
    pub files: Option<Vec<FileRequest>>,
}

/// A template's create (`create`: env and files default to empty) or update body.
///
/// # Errors
/// 400 naming the first offending field.
pub fn parse_template(body: &Map<String, Value>, create: bool, limit: u64) -> Result<TemplateFields, AgentError> {
    let mut allowed = vec!["name", "env", "files"];
    allowed.extend(HOSTED_ONLY);
    known_keys(body, &allowed, "")?;
    refuse_hosted_fields(body, "")?;
    let mut out = TemplateFields::default();
    match body.get("name") {
        None => {}
        Some(Value::Null) => out.name = Some(None),
        Some(Value::String(s)) if s.chars().count() <= 256 => out.name = Some(Some(s.clone())),
        Some(_) => return Err(invalid("name: expected a string up to 256 characters", "name")),
    }
    if body.contains_key("env") || create {
        out.env = Some(check_env_map(body.get("env"), "env")?);
    }
    if body.contains_key("files") || create {
        out.files = Some(parse_files(body.get("files"), "files", limit)?);
    }
    Ok(out)
}

/// The `agent.environment` object.
pub fn environment_object(record: &Stored<Environment>) -> Value {
    let d = &record.data;
    let mut differences = vec!["local_workspace", "nothing_provisioned"];
    if d.converted {
        differences.push("hosted_request_converted");
    }
    json!({
        "id": record.id,
        "object": "agent.environment",
        "type": "self_hosted",
        "status": "ready",
        "files": d.files,
        "plugins": [],
        "skills": [],
        "capability_directories": [],
        "workspace_directory": d.workspace_directory,
        "vault_ids": d.vault_ids,
        "created_at": record.created_at,
        "x_agent_sandbox": Label::state(&differences),
    })
}

/// An `agent.environment.file` (with the label when it was just written).
pub fn environment_file_object(environment_id: &str, rel: &str, size: u64, written: bool) -> Value {
    let mut object = json!({
        "object": "agent.environment.file",
        "environment_id": environment_id,
        "path": format!("/workspace/{rel}"),
        "size_bytes": size,
    });
    if written {
        object["x_agent_sandbox"] = json!(Label::state(&["local_workspace", "no_overwrite"]));
    }
    object
}

/// The query of an environment's files list.
#[derive(Debug, Default, serde::Deserialize)]
pub struct FilesQuery {
    path: Option<String>,
    limit: Option<String>,
    order: Option<String>,
    page: Option<String>,
}

/// An environment's files list, as asked.
#[derive(Debug, Clone, PartialEq)]
pub struct FilesListing {
    /// The directory listed, relative to the workspace.
    pub prefix: String,
    /// Rows per page (1-100, default 20).
    pub limit: usize,
    /// Newest path last (`asc`) or first (`desc`, the default).
    pub descending: bool,
    /// Rows skipped (`page=o<n>`).
    pub offset: usize,
}

/// Reads `path`, `limit`, `order` and `page`.
///
/// # Errors
/// 400 naming the offending parameter.
pub fn parse_files_query(query: &FilesQuery) -> Result<FilesListing, AgentError> {
    let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let prefix = match given(&query.path) {
        Some(raw) => normalize_relative(Some(&raw), "path")?,
        None => String::new(),
    };
    let limit = match given(&query.limit) {
        None => 20,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if raw.bytes().all(|b| b.is_ascii_digit()) && (1..=100).contains(&n) => n,
            _ => return Err(invalid("limit: must be between 1 and 100", "limit")),
        },
    };
    let descending = match given(&query.order).as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(_) => return Err(invalid("order: must be asc or desc", "order")),
    };
    let offset = match given(&query.page) {
        None => 0,
        Some(token) => match token.strip_prefix('o').filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            Some(n) => n.parse::<usize>().unwrap_or(usize::MAX),
            None => return Err(invalid("page: not a token this server issued", "page")),
        },
    };
    Ok(FilesListing { prefix, limit, descending, offset })
}

/// One page of an environment's files (`rows`: path order), with its `next` token.
pub fn files_page(environment_id: &str, mut rows: Vec<(String, u64)>, listing: &FilesListing) -> Value {
    if listing.descending {
        rows.reverse();
    }
    let more = listing.offset.saturating_add(listing.limit) < rows.len();
    let data: Vec<Value> = rows
        .iter()
        .skip(listing.offset)
        .take(listing.limit)
        .map(|(rel, size)| environment_file_object(environment_id, rel, *size, false))
        .collect();
    json!({
        "object": "list",
        "data": data,
        "has_more": more,
        "next": more.then(|| format!("o{}", listing.offset + listing.limit)),
        "x_agent_sandbox": Label::state(&["local_workspace"]),
    })
}

fn template_file(file: &PlannedFile) -> Value {
    let path = format!("/workspace/{}", file.rel);
    match &file.file_id {
        Some(id) => json!({"type": "file_id", "file_id": id, "path": path}),
        None => json!({"type": "inline", "path": path, "size_bytes": file.size}),
    }
}

fn template_label() -> Label {
    Label::state(&["not_hosted_template", "applies_env_and_files_only"])
}

/// The `agent.environment.template` object.
pub fn template_object(record: &Stored<Template>) -> Value {
    json!({
        "id": record.id,
        "object": "agent.environment.template",
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "name": record.data.name,
        "files": record.data.files.iter().map(template_file).collect::<Vec<_>>(),
        "capability_directories": [],
        "network": {"access": "enabled", "allowed_domains": []},
        "packages": {"npm": [], "python": [], "system": []},
        "plugins": [],
        "skills": [],
        "desktop": null,
        "x_agent_sandbox": template_label(),
    })
}

/// The `agent.environment.template.deleted` receipt.
pub fn template_deleted(id: &str) -> Value {
    json!({"id": id, "object": "agent.environment.template.deleted", "deleted": true, "x_agent_sandbox": template_label()})
}

/// The `file` object of a stored blob.
pub fn blob_object(record: &Stored<Blob>) -> Value {
    json!({
        "id": record.id,
        "object": "file",
        "bytes": record.data.bytes,
        "created_at": record.created_at,
        "filename": record.data.filename,
        "purpose": "user_data",
        "status": "processed",
        "expires_at": null,
        "x_agent_sandbox": Label::state(&["local_blob"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn environment_requests_are_validated_as_the_reference() {
        let ok = parse_environment(&obj(json!({"environment": {"env": {"FOO": "1"}, "files": [{"type": "inline", "path": "/workspace/a.txt", "data": "aGk="}]}})), 10).expect("ok");
        assert_eq!((ok.workspace_directory.as_str(), ok.files[0].rel.as_str()), ("/workspace", "a.txt"));
        assert_eq!(ok.files[0].source, FileSource::Inline(b"hi".to_vec()));
        assert!(parse_environment(&obj(json!({"environment": {"type": "openai_hosted"}})), 10).expect("ok").converted);
        let err = |v: Value| parse_environment(&obj(v), 10).expect_err("refused").to_string();
        assert_eq!(err(json!({})), "environment: required");
        assert_eq!(
            err(json!({"environment": {"env": {"PATH": "/x"}}})),
            "environment.env: environment variable PATH is not allowed"
        );
        assert_eq!(
            err(json!({"environment": {"network": {"x": 1}}})),
            "environment.network: needs a hosted environment and is not available locally"
        );
        assert_eq!(
            err(json!({"environment": {"files": [{"type": "inline", "path": "/workspace/.git/x", "data": ""}]}})),
            "environment.files[0].path: writes under .git/ are refused: they change what the agent runs"
        );
        assert_eq!(
            err(json!({"environment": {"files": [{"type": "inline", "path": "/a", "data": "!!"}]}})),
            "environment.files[0].data: not valid base64"
        );
        assert_eq!(
            err(json!({"environment": {"files": [{"type": "inline", "path": "/a", "data": "aGloaGloaGloaGlo"}]}})),
            "environment.files[0].data: larger than 10 bytes"
        );
        assert_eq!(err(json!({"environment": {}, "x": 1})), "x: unknown or unsupported parameter");
    }

    #[test]
    fn template_bodies_keep_what_was_present() {
        let fields = parse_template(&obj(json!({"name": null})), false, 10).expect("ok");
        assert_eq!((fields.name, fields.env.is_none(), fields.files.is_none()), (Some(None), true, true));
        let fields = parse_template(&obj(json!({})), true, 10).expect("ok");
        assert_eq!((fields.env.map(|e| e.len()), fields.files.map(|f| f.len())), (Some(0), Some(0)));
        assert!(parse_template(&obj(json!({"packages": {"npm": ["x"]}})), true, 10).is_err());
        assert!(parse_template(&obj(json!({"desktop": {"enabled": false}})), true, 10).is_ok());
    }
}

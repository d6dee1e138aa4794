//! The MCP tools of an agent block: only `mcp` tools over `http` are real
//! locally; every other tool type, and the options neither CLI can honour,
//! are refused with the reference's 400s.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use abx_domain::agents::error::AgentError;
use abx_domain::agents::spec::McpServer;

const MAX_TOOLS: usize = 32;

/// One MCP tool of an agent: its public shape and its write-only headers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// `server_label`.
    pub label: String,
    /// `transport.server_url`.
    pub url: String,
    /// Header values (never echoed).
    pub headers: BTreeMap<String, String>,
    /// A vault credential it uses.
    pub credential_id: Option<String>,
}

impl McpTool {
    /// The tool as the wire shows it (header values masked).
    pub fn wire(&self) -> Value {
        let headers: Map<String, Value> = self.headers.keys().map(|k| (k.clone(), json!("***"))).collect();
        json!({
            "type": "mcp",
            "server_label": self.label,
            "transport": {"type": "http", "server_url": self.url, "headers": headers},
            "allowed_tools": null,
            "connection_origin": "environment",
            "credential_id": self.credential_id,
            "request_metadata": {},
            "required": false,
        })
    }

    /// The server handed to the CLI.
    pub fn server(&self) -> McpServer {
        McpServer::remote(&self.label, &self.url, self.headers.clone())
    }
}

fn valid_label(label: &str) -> bool {
    (1..=40).contains(&label.len()) && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Admits an `http(s)` URL without credentials, query or fragment.
pub(super) fn url_check(url: Option<&Value>, field: &str) -> Result<String, AgentError> {
    let Some(raw) = url.and_then(Value::as_str).filter(|u| !u.is_empty()) else {
        return Err(AgentError::invalid(format!("{field}: expected a URL string"), field));
    };
    let parsed = reqwest::Url::parse(raw)
        .map_err(|_| AgentError::invalid(format!("{field}: must be an http or https URL"), field))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(AgentError::invalid(format!("{field}: must be an http or https URL"), field));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(AgentError::invalid(format!("{field}: must not contain credentials"), field));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(AgentError::invalid(format!("{field}: must not contain a query string or fragment"), field));
    }
    Ok(raw.to_string())
}

fn headers_of(raw: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, AgentError> {
    let map = match raw {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(AgentError::invalid(format!("{field}: expected a mapping of strings"), field)),
    };
    let token_char = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&b);
    let mut out = BTreeMap::new();
    for (name, value) in map {
        if name.is_empty() || name.len() > 128 || !name.bytes().all(token_char) {
            return Err(AgentError::invalid(format!("{field}: invalid header name"), field));
        }
        match value.as_str() {
            Some(v) if !v.is_empty() && v.len() <= 8192 && !v.contains(['\r', '\n', '\0']) => {
                out.insert(name.clone(), v.to_string());
            }
            _ => {
                let param = format!("{field}.{name}");
                return Err(AgentError::invalid(format!("{param}: expected a non-empty single-line string"), param));
            }
        }
    }
    Ok(out)
}

/// `tools`: only `mcp` tools over `http` are real; anything else is refused.
///
/// # Errors
/// 400 naming the offending tool field.
pub fn parse_tools(raw: &Value, field: &str) -> Result<Vec<McpTool>, AgentError> {
    let list = match raw {
        Value::Null => return Ok(Vec::new()),
        Value::Array(list) => list,
        _ => return Err(AgentError::invalid(format!("{field}: expected a list"), field)),
    };
    if list.len() > MAX_TOOLS {
        return Err(AgentError::invalid(format!("{field}: at most {MAX_TOOLS} tools"), field));
    }
    let mut tools: Vec<McpTool> = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Some(tool) = tool.as_object().filter(|t| t.get("type").and_then(Value::as_str) == Some("mcp")) else {
            let param = format!("{at}.type");
            return Err(AgentError::invalid(
                format!("{param}: only mcp tools are supported by the local agent runtime"),
                param,
            ));
        };
        let label = tool.get("server_label").and_then(Value::as_str).filter(|l| valid_label(l));
        let Some(label) = label else {
            let param = format!("{at}.server_label");
            return Err(AgentError::invalid(format!("{param}: 1 to 40 characters of [A-Za-z0-9_-]"), param));
        };
        if tools.iter().any(|t| t.label == label) {
            return Err(AgentError::invalid(format!("{at}.server_label: duplicate label"), at));
        }
        let transport = tool
            .get("transport")
            .and_then(Value::as_object)
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("http"));
        let Some(transport) = transport else {
            let param = format!("{at}.transport.type");
            return Err(AgentError::invalid(format!("{param}: only http MCP transports are supported"), param));
        };
        let url = url_check(transport.get("server_url"), &format!("{at}.transport.server_url"))?;
        let headers = headers_of(transport.get("headers"), &format!("{at}.transport.headers"))?;
        refuse_unenforced(tool, &at)?;
        let credential_id = match tool.get("credential_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                let param = format!("{at}.credential_id");
                return Err(AgentError::invalid(format!("{param}: expected a string"), param));
            }
        };
        tools.push(McpTool { label: label.to_string(), url, headers, credential_id });
    }
    Ok(tools)
}

fn refuse_unenforced(tool: &Map<String, Value>, at: &str) -> Result<(), AgentError> {
    let set = |k: &str| {
        tool.get(k)
            .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)) && v != &json!({}) && v != &json!([]))
    };
    let refusals = [
        ("allowed_tools", "neither CLI can restrict the MCP tool list"),
        ("request_metadata", "not forwarded to MCP servers locally"),
        ("required", "a failing MCP connection does not fail the turn locally"),
    ];
    for (key, why) in refusals {
        if set(key) {
            let param = format!("{at}.{key}");
            return Err(AgentError::invalid(format!("{param}: {why}"), param));
        }
    }
    if !matches!(tool.get("connection_origin"), None | Some(Value::Null))
        && tool.get("connection_origin") != Some(&json!("environment"))
    {
        let param = format!("{at}.connection_origin");
        return Err(AgentError::invalid(format!("{param}: there is no Managed Agents service network locally"), param));
    }
    Ok(())
}

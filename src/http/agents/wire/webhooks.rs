//! Wire types of `/v1/webhook_endpoints` and `/v1/webhook_event_types`, and
//! their request bodies read into domain values with the reference's
//! refusals (400 `invalid_request` naming the field).

use abx_domain::agents::webhooks::registry::{EndpointFields, WebhookEndpoint};
use abx_domain::agents::webhooks::EVENT_TYPES;
use abx_domain::agents::AgentError;
use abx_domain::pyrepr::repr_str;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Label;

/// The fields a create or update may send.
const ENDPOINT_KEYS: &[&str] = &["url", "event_types", "name"];
/// The one field a rotation may send.
const KEEP_OLD: &str = "keep_old_secret_active_for_24_hours";

/// The label of endpoint objects: signed and delivered here, kept as local state.
pub fn endpoint_label() -> Label {
    Label::state(&["local_signer"])
}

/// A webhook endpoint on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WebhookEndpointObject {
    /// `we_<24 hex>`.
    pub id: String,
    /// `webhook_endpoint`.
    pub object: &'static str,
    /// When it was registered.
    pub created_at: i64,
    /// The event types it receives.
    pub event_types: Vec<String>,
    /// Its name (empty when none).
    pub name: String,
    /// Always null (the secret is shown whole, once).
    pub signing_secret_hint: Option<String>,
    /// Where events go.
    pub url: String,
    /// When it last changed.
    pub updated_at: i64,
    /// The label.
    pub x_agent_sandbox: Label,
    /// The secret: in the answers of create and rotate only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
}

impl WebhookEndpointObject {
    /// `endpoint` on the wire, with its secret when `reveal`.
    pub fn new(endpoint: &WebhookEndpoint, reveal: bool) -> Self {
        WebhookEndpointObject {
            id: endpoint.id.clone(),
            object: "webhook_endpoint",
            created_at: endpoint.created_at,
            event_types: endpoint.event_types.clone(),
            name: endpoint.name.clone(),
            signing_secret_hint: None,
            url: endpoint.url.clone(),
            updated_at: endpoint.updated_at,
            x_agent_sandbox: endpoint_label(),
            signing_secret: reveal.then(|| endpoint.secret.clone()),
        }
    }
}

/// The answer of `POST /v1/webhook_endpoints/{id}/test`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestResult {
    /// `webhook_endpoint.test`.
    pub object: &'static str,
    /// The type of the event sent.
    pub event_type: &'static str,
    /// The receiver's HTTP status.
    pub status_code: u16,
    /// Always true: the request completed (OpenAI's contract; `status_code` says how it went).
    pub success: bool,
    /// The endpoint.
    pub webhook_endpoint_id: String,
    /// The label.
    pub x_agent_sandbox: Label,
}

/// The answer of `GET /v1/webhook_event_types`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventTypeList {
    /// `list`.
    pub object: &'static str,
    /// The event types this server sends.
    pub data: &'static [&'static str],
    /// The label.
    pub x_agent_sandbox: Label,
}

impl Default for EventTypeList {
    fn default() -> Self {
        EventTypeList { object: "list", data: EVENT_TYPES, x_agent_sandbox: Label::new("none", &["local_signer"]) }
    }
}

fn only_keys(body: &Map<String, Value>, allowed: &[&str]) -> Result<(), AgentError> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(AgentError::invalid(format!("{key}: unknown or unsupported parameter"), key.as_str())),
        None => Ok(()),
    }
}

/// The fields of a create (`create`: every field, absent ones as null) or
/// an update (the fields sent), checked in the reference's order; `admit`
/// decides the URL.
///
/// # Errors
/// 400 for an unknown field or a bad value.
pub fn endpoint_fields(
    body: &Map<String, Value>,
    create: bool,
    admit: impl Fn(&str) -> Result<(), AgentError>,
) -> Result<EndpointFields, AgentError> {
    only_keys(body, ENDPOINT_KEYS)?;
    let field = |key: &str| if create { Some(body.get(key).unwrap_or(&Value::Null)) } else { body.get(key) };
    let mut fields = EndpointFields::default();
    if let Some(url) = field("url") {
        let url = url.as_str().filter(|u| !u.is_empty());
        let url = url.ok_or_else(|| AgentError::invalid("url: expected a URL string", "url"))?;
        admit(url)?;
        fields.url = Some(url.to_string());
    }
    if let Some(types) = field("event_types") {
        fields.event_types = Some(event_types(types)?);
    }
    if let Some(name) = field("name") {
        fields.name = Some(match name {
            Value::Null => String::new(),
            Value::String(s) if s.chars().count() <= 256 => s.clone(),
            _ => return Err(AgentError::invalid("name: expected a string up to 256 characters", "name")),
        });
    }
    Ok(fields)
}

/// A non-empty list of event types this server sends, without duplicates.
fn event_types(raw: &Value) -> Result<Vec<String>, AgentError> {
    let bad = || AgentError::invalid("event_types: a non-empty list of strings", "event_types");
    let list = raw.as_array().filter(|l| !l.is_empty()).ok_or_else(bad)?;
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        let name = item.as_str().ok_or_else(bad)?;
        if !EVENT_TYPES.contains(&name) {
            return Err(AgentError::invalid(
                format!("event_types: this server does not send {}; see /v1/webhook_event_types", repr_str(name)),
                "event_types",
            ));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// Checks a rotation's body: only `keep_old_secret_active_for_24_hours`, and not true.
///
/// # Errors
/// 400 for another field or a true value (one secret signs at a time).
pub fn rotation(body: &Map<String, Value>) -> Result<(), AgentError> {
    only_keys(body, &[KEEP_OLD])?;
    if body.get(KEEP_OLD).is_some_and(abx_wire::api::process::is_truthy) {
        return Err(AgentError::invalid(format!("{KEEP_OLD}: events are signed with one secret locally"), KEEP_OLD));
    }
    Ok(())
}

/// The `event_type` a test asks for.
///
/// # Errors
/// 400 when it is not one this server sends.
pub fn test_event_type(body: &Map<String, Value>) -> Result<&'static str, AgentError> {
    let asked = body.get("event_type").and_then(Value::as_str);
    EVENT_TYPES
        .iter()
        .find(|t| Some(**t) == asked)
        .copied()
        .ok_or_else(|| AgentError::invalid("event_type: not an event type this server sends", "event_type"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn refusal(value: Value, create: bool) -> (String, Option<String>) {
        match endpoint_fields(&body(value), create, |_| Ok(())) {
            Err(AgentError::Invalid { message, param, .. }) => (message, param),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn fields_are_checked_in_the_reference_order() {
        let ok = endpoint_fields(
            &body(json!({"url": "https://h.test/", "event_types": ["agent.session.idle", "agent.session.idle"]})),
            true,
            |_| Ok(()),
        )
        .expect("valid");
        assert_eq!(ok.event_types, Some(vec!["agent.session.idle".to_string()]));
        assert_eq!(ok.name.as_deref(), Some(""));
        assert_eq!(refusal(json!({"secret": 1}), true).0, "secret: unknown or unsupported parameter");
        assert_eq!(refusal(json!({"event_types": []}), true).0, "url: expected a URL string");
        assert_eq!(refusal(json!({"url": "https://h.test/"}), true).0, "event_types: a non-empty list of strings");
        assert_eq!(
            refusal(json!({"url": "https://h.test/", "event_types": ["x"]}), true).0,
            "event_types: this server does not send 'x'; see /v1/webhook_event_types"
        );
        let long = "n".repeat(257);
        assert_eq!(refusal(json!({"name": long}), false).1.as_deref(), Some("name"));
        let partial = endpoint_fields(&body(json!({"name": null})), false, |_| Ok(())).expect("valid");
        assert_eq!((partial.url, partial.name.as_deref()), (None, Some("")));
    }

    #[test]
    fn rotation_and_test_bodies() {
        assert!(rotation(&body(json!({}))).is_ok());
        assert!(rotation(&body(json!({KEEP_OLD: false}))).is_ok());
        assert!(rotation(&body(json!({KEEP_OLD: true}))).is_err());
        assert!(rotation(&body(json!({"x": 1}))).is_err());
        assert_eq!(
            test_event_type(&body(json!({"event_type": "agent.session.failed"}))).ok(),
            Some("agent.session.failed")
        );
        assert!(test_event_type(&body(json!({"event_type": 3}))).is_err());
    }
}

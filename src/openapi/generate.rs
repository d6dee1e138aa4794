//! Builds the API port's OpenAPI 3.1 document from the endpoint table and
//! the wire types (compiled for tests and the `openapi` feature only; the
//! daemon serves the committed bytes, see the module above).
//!
//! Paths, methods, operation ids, tags (groups), scopes and authentication
//! come from [`ENDPOINTS`]; request and answer schemas from the wire types'
//! `JsonSchema` derives (schemars, JSON Schema 2020-12, which is OpenAPI
//! 3.1's dialect), named per endpoint in `shapes`. Requests are described as
//! the server reads them (`serde`'s deserialising view: defaulted fields
//! are optional), answers as it writes them (skipped fields are optional,
//! the others required). Opt-in groups are in the document, marked
//! `x-abx-opt-in`; they answer 404 `endpoint_disabled` until enabled.

use abx_wire::api::ErrorBody;
use abx_wire::endpoints::{Endpoint, Method, Port, ENDPOINTS};
use schemars::generate::{Contract, SchemaSettings};
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use super::shapes::{self, Answer, Content, Shape};

/// The document, serialised as `docs/openapi.json` holds it.
pub fn serialised() -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(&build()).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Schema generators for the two directions: requests as they are read,
/// answers as they are written. Their named schemas share one namespace.
struct Generators {
    requests: SchemaGenerator,
    answers: SchemaGenerator,
}

impl Generators {
    fn new() -> Self {
        let settings = |contract: Contract| {
            SchemaSettings::draft2020_12().with(|s| {
                s.definitions_path = "#/components/schemas".into();
                s.meta_schema = None;
                s.contract = contract;
            })
        };
        Generators {
            requests: settings(Contract::Deserialize).into_generator(),
            answers: settings(Contract::Serialize).into_generator(),
        }
    }

    /// Every named schema, sorted, and the names of types used both ways
    /// whose two views differ (the answer view is kept; the tests want none).
    fn into_schemas(mut self) -> (Map<String, Value>, Vec<String>) {
        let mut all: Vec<(String, Value)> = self.answers.take_definitions(true).into_iter().collect();
        let mut conflicts = Vec::new();
        for (name, schema) in self.requests.take_definitions(true) {
            match all.iter().find(|(n, _)| *n == name) {
                Some((_, existing)) if *existing != schema => conflicts.push(name),
                Some(_) => {}
                None => all.push((name, schema)),
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        (all.into_iter().collect(), conflicts)
    }
}

/// Builds the document from the table.
pub fn build() -> Value {
    assemble().0
}

/// The document, and the types whose request and answer views differ.
pub(super) fn assemble() -> (Value, Vec<String>) {
    let mut generators = Generators::new();
    let error = generators.answers.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for endpoint in ENDPOINTS.iter().filter(|e| e.port == Port::Api && !e.is_virtual()) {
        let shape = shapes::shape(endpoint.id)
            .unwrap_or_else(|| Shape::generic(matches!(endpoint.method, Method::Post | Method::Put)));
        let operation = operation(endpoint, &shape, &mut generators);
        let item = paths.entry(endpoint.path).or_insert_with(|| Value::Object(Map::new()));
        let others: Vec<_> = shapes::other_methods(endpoint.id)
            .into_iter()
            .map(|(method, id, summary, shape)| {
                let mut other = self::operation(endpoint, &shape, &mut generators);
                other["operationId"] = id.into();
                other["summary"] = summary.into();
                (method, other)
            })
            .collect();
        if let Value::Object(item) = item {
            item.insert(endpoint.method.as_str().to_ascii_lowercase(), operation);
            for (method, other) in others {
                item.insert(method.to_string(), other);
            }
        }
    }
    let (schemas, conflicts) = generators.into_schemas();
    let document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agent-sandbox-server API",
            "version": crate::SERVER_VERSION,
            "description": "The API port (9000) of the in-sandbox agent server, a drop-in replacement for the Python \
                agent-sandbox-server 0.4.0a6. Generated from the endpoint table; see docs/openapi.md.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "http://localhost:9000"}],
        "security": [{"bearer": []}, {"accessToken": []}],
        "tags": tags(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {
                "Error": {
                    "description": "The JSON error body: `error` and `type`, with `code`, `endpoint`, `rule`, \
                        `scope`, `limit` or `retry_after` where they apply.",
                    "content": {"application/json": {"schema": error}},
                }
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`Authorization: Bearer <token>`: `ABX_SERVER_TOKEN`, or a token of the policy's `auth.tokens`.",
                },
                "accessToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Access-Token",
                    "description": "The same token in `X-Access-Token`.",
                },
            },
        },
    });
    (document, conflicts)
}

fn tags() -> Vec<Value> {
    let mut groups: Vec<_> = ENDPOINTS.iter().filter(|e| e.port == Port::Api).map(|e| e.group).collect();
    groups.dedup();
    groups.sort();
    groups.dedup();
    let describe = |g: abx_wire::endpoints::Group| {
        if g.opt_in() {
            format!("Opt-in group `{g}`: its endpoints answer 404 `endpoint_disabled` until a policy or `ABX_SERVER_ENABLED_GROUPS` enables it.")
        } else {
            format!("Group `{g}`.")
        }
    };
    groups.into_iter().map(|g| json!({"name": g.as_str(), "description": describe(g)})).collect()
}

/// One operation of the document.
fn operation(endpoint: &Endpoint, shape: &Shape, generators: &mut Generators) -> Value {
    let mut op = Map::new();
    op.insert("operationId".into(), endpoint.id.into());
    op.insert("summary".into(), endpoint.summary.into());
    op.insert("tags".into(), json!([endpoint.group.as_str()]));
    let parameters = parameters(endpoint, shape, &mut generators.requests);
    if !parameters.is_empty() {
        op.insert("parameters".into(), parameters.into());
    }
    if let Some(body) = shape.body {
        let content = content(body, &mut generators.requests);
        op.insert("requestBody".into(), json!({"required": false, "content": content}));
    }
    op.insert("responses".into(), responses(endpoint, shape, &mut generators.answers));
    if !endpoint.auth_required {
        op.insert("security".into(), json!([]));
    }
    op.insert("x-abx-scopes".into(), json!(endpoint.scopes));
    if endpoint.group.opt_in() {
        op.insert("x-abx-opt-in".into(), true.into());
    }
    if let Some(governing) = endpoint.governed_by {
        op.insert("x-abx-extension".into(), true.into());
        op.insert("x-abx-governed-by".into(), governing.into());
    }
    if shapes::shape(endpoint.id).is_none() {
        op.insert("x-abx-generic".into(), true.into());
    }
    Value::Object(op)
}

/// Path parameters from the template, then the query type's fields.
fn parameters(endpoint: &Endpoint, shape: &Shape, generator: &mut SchemaGenerator) -> Vec<Value> {
    let mut out: Vec<Value> = endpoint
        .path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let schema = if name == "pid" { json!({"type": "integer"}) } else { json!({"type": "string"}) };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    let Some(query) = shape.query else { return out };
    let schema = query(generator);
    let object = resolve(&schema, generator);
    let required: Vec<&str> =
        object.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    for (name, property) in object.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let mut property = property.clone();
        let description = property.as_object_mut().and_then(|p| p.remove("description"));
        drop_null(&mut property);
        let mut parameter =
            json!({"name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": property});
        if let (Some(description), Value::Object(p)) = (description, &mut parameter) {
            p.insert("description".into(), description);
        }
        out.push(parameter);
    }
    out
}

/// The object schema a `$ref` names (query types are flat objects).
fn resolve(schema: &schemars::Schema, generator: &SchemaGenerator) -> Value {
    let reference = schema.get("$ref").and_then(Value::as_str).unwrap_or_default();
    let name = reference.rsplit('/').next().unwrap_or_default();
    generator.definitions().get(name).cloned().unwrap_or_else(|| schema.clone().to_value())
}

/// A query parameter is never `null`: `["string", "null"]` becomes `"string"`, a `null` default goes.
fn drop_null(schema: &mut Value) {
    if let Some(object) = schema.as_object_mut() {
        if object.get("default") == Some(&Value::Null) {
            object.remove("default");
        }
    }
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            schema["type"] = only;
        }
    }
}

fn content(content: Content, generator: &mut SchemaGenerator) -> Value {
    match content {
        Content::Json(schema) => json!({"application/json": {"schema": schema(generator)}}),
        Content::Events(names, text) => json!({"text/event-stream": {"schema": {
            "description": format!("One server-sent event: {text}."),
            "type": "object",
            "properties": {
                "event": {"enum": names},
                "id": {"type": "string"},
                "data": {"type": "string", "contentMediaType": "application/json"},
            },
            "required": ["event", "data"],
        }}}),
        Content::Bytes => {
            json!({"application/octet-stream": {"schema": {"type": "string", "contentMediaType": "application/octet-stream"}}})
        }
        Content::Prometheus => json!({"application/openmetrics-text": {"schema": {"type": "string"}}}),
        Content::Empty => json!({}),
        Content::Any => json!({"*/*": {"schema": {}}}),
    }
}

/// Statuses every operation may answer with the error body: the pipeline's
/// refusals (credentials, a disabled endpoint, scopes, rate, size) and bad input.
fn error_statuses(endpoint: &Endpoint, shape: &Shape) -> Vec<u16> {
    let mut statuses = vec![400, 404, 429, 503];
    if endpoint.auth_required {
        statuses.extend([401, 403]);
    }
    if endpoint.paths {
        statuses.push(403);
    }
    if shape.body.is_some() {
        statuses.push(413);
    }
    if shadowed(endpoint) {
        statuses.push(405);
    }
    statuses.extend(shape.errors);
    statuses.sort_unstable();
    statuses.dedup();
    statuses
}

/// Whether a value of one of the endpoint's path parameters can name another
/// route of the port instead (`/process/{pid}` with `start` is `POST
/// /process/start`), which answers 405 to this method.
fn shadowed(endpoint: &Endpoint) -> bool {
    let segments: Vec<&str> = endpoint.path.split('/').collect();
    ENDPOINTS.iter().filter(|e| e.port == endpoint.port && e.method != endpoint.method).any(|other| {
        let theirs: Vec<&str> = other.path.split('/').collect();
        theirs.len() == segments.len()
            && segments.iter().zip(&theirs).all(|(ours, theirs)| ours == theirs || ours.starts_with('{'))
            && !ENDPOINTS.iter().any(|e| e.port == endpoint.port && e.method == endpoint.method && e.path == other.path)
    })
}

fn responses(endpoint: &Endpoint, shape: &Shape, generator: &mut SchemaGenerator) -> Value {
    let mut out = Map::new();
    for (index, Answer { status, description, content: body }) in shape.answers.iter().enumerate() {
        let mut answer = json!({"description": description});
        let body = content(*body, generator);
        if body.as_object().is_some_and(|b| !b.is_empty()) {
            answer["content"] = body;
        }
        if index == 0 && !shape.links.is_empty() {
            let links: Map<String, Value> = shape
                .links
                .iter()
                .map(|(op, param, pointer)| {
                    (
                        op.to_string(),
                        json!({"operationId": op, "parameters": {*param: format!("$response.body#{pointer}")}}),
                    )
                })
                .collect();
            answer["links"] = links.into();
        }
        out.insert(status.to_string(), answer);
    }
    for status in error_statuses(endpoint, shape) {
        out.entry(status.to_string()).or_insert_with(|| json!({"$ref": "#/components/responses/Error"}));
    }
    Value::Object(out)
}

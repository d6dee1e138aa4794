//! The document built from the table and the wire types against itself and
//! against the committed `docs/openapi.json` (which the daemon serves).

use abx_wire::endpoints::{Port, ENDPOINTS};
use serde_json::Value;

use super::generate::{assemble, serialised};
use super::shapes;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            out.push((path.clone(), method.clone(), op));
        }
    }
    out
}

#[test]
fn docs_openapi_json_is_current() {
    let built = serialised();
    if std::env::var_os("ABX_UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &built).expect("write docs/openapi.json");
    }
    let committed = std::fs::read(COMMITTED).unwrap_or_default();
    assert!(
        committed == built,
        "docs/openapi.json is stale; regenerate it with: ABX_UPDATE_OPENAPI=1 cargo test --lib openapi::"
    );
}

#[test]
fn every_api_endpoint_is_one_operation_with_its_id() {
    let (doc, _) = assemble();
    let ops = operations(&doc);
    let api: Vec<_> = ENDPOINTS.iter().filter(|e| e.port == Port::Api && !e.is_virtual()).collect();
    // One operation per row, and one for each other method a row serves (`/mcp`'s GET and DELETE).
    let others: usize = api.iter().map(|e| shapes::other_methods(e.id).len()).sum();
    assert_eq!(ops.len(), api.len() + others);
    for endpoint in api {
        let op = &doc["paths"][endpoint.path][endpoint.method.as_str().to_ascii_lowercase()];
        assert_eq!(op["operationId"], endpoint.id, "{} {}", endpoint.method.as_str(), endpoint.path);
        assert_eq!(op["tags"][0], endpoint.group.as_str());
        assert_eq!(op["x-abx-scopes"], serde_json::json!(endpoint.scopes));
        assert_eq!(op.get("x-abx-opt-in").is_some(), endpoint.group.opt_in(), "{}", endpoint.id);
        assert_eq!(op.get("security") == Some(&serde_json::json!([])), !endpoint.auth_required, "{}", endpoint.id);
        for segment in endpoint.path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')) {
            let params = op["parameters"].as_array().expect("path parameters");
            assert!(params.iter().any(|p| p["name"] == segment && p["in"] == "path"), "{}: {segment}", endpoint.id);
        }
    }
}

#[test]
fn no_wire_type_has_two_differing_views() {
    let (_, conflicts) = assemble();
    assert!(conflicts.is_empty(), "types whose request and answer schemas differ: {conflicts:?}");
}

#[test]
fn every_reference_resolves() {
    fn walk<'a>(value: &'a Value, refs: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    refs.push(r);
                }
                map.values().for_each(|v| walk(v, refs));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, refs)),
            _ => {}
        }
    }
    let (doc, _) = assemble();
    let mut refs = Vec::new();
    walk(&doc, &mut refs);
    assert!(refs.len() > 50, "{}", refs.len());
    for r in refs {
        let pointer = r.strip_prefix('#').expect("a local reference");
        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
    }
}

#[test]
fn every_served_endpoint_outside_the_opt_in_groups_has_a_shape() {
    let generic: Vec<_> = ENDPOINTS
        .iter()
        .filter(|e| e.port == Port::Api && !e.is_virtual() && !e.group.opt_in())
        .filter(|e| shapes::shape(e.id).is_none())
        .map(|e| e.id)
        .collect();
    assert!(generic.is_empty(), "give these a line in src/openapi/shapes.rs: {generic:?}");
}

#[test]
fn links_name_operations_and_their_parameters() {
    let (doc, _) = assemble();
    for (path, method, op) in operations(&doc) {
        for answer in op["responses"].as_object().expect("responses").values() {
            for link in answer.get("links").and_then(Value::as_object).into_iter().flat_map(|l| l.values()) {
                let id = link["operationId"].as_str().expect("operationId");
                let target = ENDPOINTS.iter().find(|e| e.id == id).unwrap_or_else(|| panic!("{method} {path}: {id}"));
                for param in link["parameters"].as_object().expect("parameters").keys() {
                    assert!(target.path.contains(&format!("{{{param}}}")), "{id} has no {param}");
                }
            }
        }
    }
}

#[test]
fn requests_are_read_leniently_and_answers_state_their_required_fields() {
    let (doc, _) = assemble();
    let schemas = &doc["components"]["schemas"];
    // An answer field always written is required; a request field with a default is not.
    assert!(schemas["ShellResult"]["required"].as_array().expect("required").contains(&"exit_code".into()));
    assert!(schemas["ExecRequest"].get("required").is_none());
    assert_eq!(
        doc["components"]["responses"]["Error"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorBody"
    );
    let stat = &doc["paths"]["/files/stat"]["get"];
    assert_eq!(stat["parameters"][0]["name"], "path");
    assert_eq!(stat["parameters"][0]["schema"]["type"], "string");
}

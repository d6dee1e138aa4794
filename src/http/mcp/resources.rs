//! `file://` resources: the files under the base directory, listed by the
//! file list endpoint's rule (a bounded, recursive walk) and read by the
//! file read endpoint's rule (the `read` tool's reader).

use std::sync::Arc;

use abx_domain::policy::Identity;
use base64::Engine as _;
use rmcp::model::{Cursor, ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use rmcp::ErrorData;
use serde_json::json;

use super::files::{image_type, load, Loaded};
use crate::http::error::ApiError;
use crate::http::extract::Query;
use crate::http::files::entries as handlers;
use crate::http::pipeline::admit_call;
use crate::http::AppState;

/// Resources one `resources/list` gives (then a cursor for the next page).
pub const PAGE: usize = 100;
/// Entries the listing walks at most (the base directory, three levels deep).
pub const LISTED: u64 = 1000;
/// How deep the listing walks.
pub const DEPTH: u64 = 3;

/// The template a client fills to read any file by path.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new("file://{path}", "file")
        .with_description("A file under the sandbox's base directory, by absolute path (text up to 256 KiB per read).")
}

/// An admitted call's error as a protocol error carrying the HTTP API's JSON body.
fn protocol_error(error: &ApiError) -> ErrorData {
    let data = serde_json::to_value(error.body()).ok();
    if error.status().as_u16() == 404 {
        return ErrorData::resource_not_found(error.body().error.clone(), data);
    }
    ErrorData::invalid_request(error.body().error.clone(), data)
}

/// `resources/list`: files under the base directory, [`PAGE`] at a time,
/// from a walk bounded to [`LISTED`] entries and [`DEPTH`] levels.
pub async fn list(
    app: &AppState,
    identity: &Arc<Identity>,
    cursor: Option<Cursor>,
) -> Result<ListResourcesResult, ErrorData> {
    let endpoint = endpoint("files_list")?;
    let call = admit_call(app, endpoint, identity, ("MCP", "resources/list"))
        .map_err(|d| protocol_error(&ApiError::from(d).with_endpoint(endpoint.id)))?;
    let base = app.engine.base_dir().display().to_string();
    let query =
        json!({"path": base, "recursive": "true", "max_depth": DEPTH.to_string(), "max_entries": LISTED.to_string()});
    let query = serde_json::from_value(query).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let listed = match handlers::list(call.grant().clone(), Query(query)).await {
        Ok(listed) => listed.0,
        Err(error) => {
            call.finish(error.status().as_u16(), error.code());
            return Err(protocol_error(&error));
        }
    };
    call.finish(200, None);
    let skip = cursor.and_then(|c| c.parse::<usize>().ok()).unwrap_or(0);
    let files: Vec<_> = listed.entries.into_iter().filter(|e| e.kind == "file").skip(skip).take(PAGE + 1).collect();
    let more = files.len() > PAGE;
    let resources = files
        .into_iter()
        .take(PAGE)
        .map(|e| Resource::new(format!("file://{}", e.path), e.name).with_size(e.size))
        .collect();
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = more.then(|| (skip + PAGE).to_string());
    Ok(result)
}

/// `resources/read` of a `file://` URI: text as text, bytes as base64.
pub async fn read(app: &AppState, identity: &Arc<Identity>, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let Some(path) = uri.strip_prefix("file://") else {
        return Err(ErrorData::invalid_params(format!("Not a file:// URI: {uri}"), None));
    };
    let endpoint = endpoint("files_content_read")?;
    let call = admit_call(app, endpoint, identity, ("MCP", "resources/read"))
        .map_err(|d| protocol_error(&ApiError::from(d).with_endpoint(endpoint.id)))?;
    let loaded = load(call.grant(), path.to_string(), 1, None).await;
    let contents = match loaded {
        Ok(Loaded::Text(_, lines)) => ResourceContents::text(lines.text, uri).with_mime_type("text/plain"),
        Ok(Loaded::Binary(_, bytes)) => {
            let mime = image_type(&bytes).unwrap_or("application/octet-stream");
            ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(&bytes), uri).with_mime_type(mime)
        }
        Err(error) => {
            call.finish(error.status().as_u16(), error.code());
            return Err(protocol_error(&error));
        }
    };
    call.finish(200, None);
    Ok(ReadResourceResult::new(vec![contents]))
}

fn endpoint(id: &str) -> Result<&'static abx_wire::endpoints::Endpoint, ErrorData> {
    abx_wire::endpoints::find(id).ok_or_else(|| ErrorData::internal_error("Internal server error", None))
}

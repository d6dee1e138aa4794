//! The MCP protocol handler: lists the tools the caller's policy allows,
//! admits each call through the pipeline's decision ([`admit_call`]), runs
//! the tool and audits the outcome, and serves `file://` resources.
//!
//! The caller is the identity the pipeline authenticated for the HTTP request
//! carrying the message (its [`Grant`] travels with the request's parts).

use std::sync::Arc;

use abx_domain::policy::{Grant, Identity};
use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use super::call::{refused, Ctx, Outcome};
use super::tools::{self, Tool};
use crate::http::error::ApiError;
use crate::http::pipeline::{admit_call, Call};
use crate::http::AppState;

/// The handler the SDK runs for each session (or each stateless request).
#[derive(Debug, Clone, Copy)]
pub struct McpServer;

/// The caller of the HTTP request carrying the message, and the server state.
pub fn caller(context: &RequestContext<RoleServer>) -> Result<(AppState, Arc<Identity>), ErrorData> {
    let parts = context.extensions.get::<Parts>();
    let app = parts.and_then(|p| p.extensions.get::<AppState>()).cloned();
    let grant = parts.and_then(|p| p.extensions.get::<Grant>());
    match (app, grant) {
        (Some(app), Some(grant)) => Ok((app, Arc::clone(grant.identity_arc()))),
        _ => {
            tracing::error!("an MCP message arrived without the pipeline's grant");
            Err(ErrorData::internal_error("Internal server error", None))
        }
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_resources().build();
        let info = rmcp::model::Implementation::new("agent-sandbox-server", env!("CARGO_PKG_VERSION"));
        ServerConfig::new(capabilities).with_server_info(info).with_instructions(
            "Tools for the sandbox this server runs in: files (paths relative to the base directory), \
             processes, terminals, code contexts and system information. Each tool is allowed or \
             refused by the sandbox's policy; a refusal names the rule that decided.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (app, identity) = caller(&context)?;
        let listed = tools::TOOLS.iter().filter(|t| allowed(&app, &identity, t)).map(Tool::describe).collect();
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (app, identity) = caller(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        call(&app, &identity, request.name.as_ref(), arguments, Some(&context)).await.map(Into::into)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let (app, identity) = caller(&context)?;
        let cursor = request.and_then(|r| r.cursor);
        super::resources::list(&app, &identity, cursor).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![super::resources::template()]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (app, identity) = caller(&context)?;
        super::resources::read(&app, &identity, &request.uri).await.map(Into::into)
    }
}

/// Runs the tool `name` for `identity`: admitted by its endpoint's rule,
/// audited with the status the same call over HTTP would have answered.
/// `request` is the protocol request when the SDK dispatched the call, `None`
/// when `direct.rs` answers it on its HTTP request's task.
///
/// # Errors
/// The protocol's invalid-params error for an unknown tool or arguments
/// that do not fit its schema; anything else is a tool result.
pub async fn call(
    app: &AppState,
    identity: &Arc<Identity>,
    name: &str,
    arguments: Map<String, Value>,
    request: Option<&RequestContext<RoleServer>>,
) -> Result<CallToolResult, ErrorData> {
    let Some(tool) = tools::find(name) else {
        return Err(ErrorData::invalid_params(format!("Unknown tool: {name}"), None));
    };
    let call = match admit(app, identity, tool) {
        Ok(call) => call,
        Err(error) => return Ok(refused(&error)),
    };
    let ctx = Ctx { app, grant: call.grant(), request };
    match tools::call(tool, &ctx, arguments).await {
        Ok(Outcome::Done(result)) => {
            call.finish(200, None);
            Ok(result)
        }
        Ok(Outcome::Failed(error)) => {
            call.finish(error.status().as_u16(), error.code());
            Ok(refused(&error))
        }
        Err(invalid) => {
            call.finish(400, Some("invalid_arguments"));
            Err(invalid)
        }
    }
}

/// Whether this server serves `tool` (the code tools need the code port)
/// and the caller's policy allows it (its endpoint, and its second one).
pub fn allowed(app: &AppState, identity: &Identity, tool: &Tool) -> bool {
    tool.endpoints().all(|endpoint| {
        let rule = app.engine.rule(endpoint);
        app.served(endpoint) && rule.enabled && identity.missing(&rule.scopes).is_none()
    })
}

/// The pipeline's decision for `tool`'s endpoint (and its second one, which
/// must be allowed too: an edit reads and writes).
fn admit(app: &AppState, identity: &Arc<Identity>, tool: &'static Tool) -> Result<Call, ApiError> {
    let mut endpoints = tool.endpoints();
    let first = endpoints.next().ok_or_else(ApiError::internal)?;
    for other in endpoints {
        let call = admit_call(app, other, identity, ("MCP", tool.name)).map_err(|d| denied(d, other.id))?;
        call.finish(200, None);
    }
    admit_call(app, first, identity, ("MCP", tool.name)).map_err(|d| denied(d, first.id))
}

fn denied(denial: abx_domain::policy::Denial, endpoint: &str) -> ApiError {
    ApiError::from(denial).with_endpoint(endpoint)
}

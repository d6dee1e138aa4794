//! `GET /v1/models` and `GET /v1/models/{model}`: the caller's agent
//! definitions and the runtimes implemented here as models (a response names one as its `model`), with whether each
//! CLI is installed; and the operations with no local capability, refused
//! as the reference refuses them: `404 not_found_error`,
//! `agents.not_implemented_locally`, `x-should-retry: false`.

use abx_domain::agents::AgentError;
use abx_domain::policy::Grant;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::{owner, runtime, Result};
use crate::http::agents::wire::Label;
use crate::http::AppState;

/// Who owns the models listed here.
const OWNED_BY: &str = "agent-sandbox-local";

/// The models: the caller's agent definitions, then every implemented runtime.
async fn models(app: &AppState, owner: &str) -> Vec<Value> {
    let agents = runtime(app).await;
    let created = agents.started_at as i64;
    let infos = agents.runtimes().await;
    let installed = |runtime: &str| infos.iter().any(|i| i.descriptor.name == runtime && i.installed);
    let definitions = agents.resources.definitions.list(owner).into_iter().map(|d| {
        let label =
            Label::new("none", &[]).with("kind", "agent_definition").with("installed", installed(&d.data.adapter));
        json!({"id": d.id, "object": "model", "created": d.created_at, "owned_by": OWNED_BY, "x_agent_sandbox": label})
    });
    let runtimes = infos.iter().filter(|info| info.descriptor.implemented).map(|info| {
        let label = Label::new("none", &[]).with("kind", "adapter").with("installed", info.installed);
        json!({"id": info.descriptor.name, "object": "model", "created": created, "owned_by": OWNED_BY, "x_agent_sandbox": label})
    });
    definitions.chain(runtimes).collect()
}

/// `GET /v1/models`.
pub async fn models_list(State(app): State<AppState>, grant: Grant) -> Json<Value> {
    Json(json!({"object": "list", "data": models(&app, owner(&grant)).await}))
}

/// `GET /v1/models/{model}`: only a listed id.
pub async fn models_get(State(app): State<AppState>, grant: Grant, Path(model): Path<String>) -> Result<Json<Value>> {
    let found = models(&app, owner(&grant)).await.into_iter().find(|m| m["id"] == model.as_str());
    Ok(Json(found.ok_or(AgentError::ModelNotFound(model))?))
}

/// `POST /v1/responses/input_tokens`.
pub async fn cannot_input_tokens() -> Result<Json<Value>> {
    Err(AgentError::Unavailable(
        "input token counting is not available: no local tokenizer matches the model the CLI will call, \
         and a generation would be needed to learn the real count",
    )
    .into())
}

/// `DELETE /v1/models/{model}`.
pub async fn cannot_model_delete() -> Result<Json<Value>> {
    Err(AgentError::Unavailable(
        "models cannot be deleted: there are no fine-tuned models here; \
         delete an agent definition with DELETE /v1/agents/{agent_id}",
    )
    .into())
}

/// `POST /v1/agents/environments/{environment_id}/register`.
pub async fn cannot_executor_registration() -> Result<Json<Value>> {
    Err(AgentError::Unavailable(
        "executor registration is not available: it registers with api.openai.com, which this local server cannot host",
    )
    .into())
}

/// `GET /v1/agents/environments/{environment_id}/connect`.
pub async fn cannot_executor_channel() -> Result<Json<Value>> {
    Err(AgentError::Unavailable("the executor channel is not available: its peer is the hosted harness socket").into())
}

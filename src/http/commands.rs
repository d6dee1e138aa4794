//! Handlers of the commands group: `GET /commands`, `POST /commands/{name}`,
//! and the mapping of the commands domain's errors to the reference's
//! error bodies.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::extract::JsonBody;
use super::AppState;
use crate::api::{CommandList, CommandResult};
use crate::commands::{self, CommandError};
use crate::policy::{Denial, Grant};

/// `GET /commands`: the commands the caller may run.
pub async fn list(State(app): State<AppState>, grant: Grant) -> Json<CommandList> {
    Json(CommandList { commands: app.commands.list(grant.identity()) })
}

/// `POST /commands/{name}` with the arguments as a JSON object.
pub async fn run(
    State(app): State<AppState>,
    grant: Grant,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Json<CommandResult>, ApiError> {
    let refuse = |e: CommandError| match e {
        CommandError::MissingScope(scope) => ApiError::from(Denial::MissingScope {
            identity: grant.identity().id.clone(),
            scope,
            endpoint: grant.endpoint().id.to_string(),
        }),
        other => ApiError::from(other),
    };
    let (command, args) = app.commands.prepare(&name, grant.identity(), &body).map_err(refuse)?;
    let result = commands::execute(command, &args, app.env.snapshot(), app.engine.base_dir()).await.map_err(refuse)?;
    Ok(Json(CommandResult { result }))
}

impl From<CommandError> for ApiError {
    fn from(err: CommandError) -> Self {
        let message = err.to_string();
        let server = |kind: &str| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message.clone(), kind);
        match &err {
            CommandError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, message, "ValueError").with_code("command_not_found")
            }
            CommandError::MissingScope(_) => Denial::forbidden("missing_scope", message).into(),
            CommandError::Arguments(e) => ApiError::new(StatusCode::BAD_REQUEST, message, e.error_type()),
            CommandError::Failed { error_type, .. } => server(error_type).with_code("command_failed"),
            CommandError::Timeout { .. } => server("TimeoutError").with_code("timeout"),
            CommandError::TooMuchOutput { .. } => server("RuntimeError").with_code("output_too_large"),
            CommandError::InvalidOutput { .. } => server("RuntimeError").with_code("invalid_output"),
            CommandError::Start { source, .. } => {
                tracing::error!(error = %source, "cannot start a registered command");
                server("OSError").with_code("command_not_started")
            }
        }
    }
}

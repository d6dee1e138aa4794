//! Handlers of the commands group: `GET /commands`, `POST /commands/{name}`,
//! and the mapping of the commands domain's errors to the reference's
//! error bodies.

use abx_domain::commands::{self, CommandError};
use abx_domain::policy::Grant;
use abx_wire::api::{CommandList, CommandResult};
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::extract::JsonBody;
use super::AppState;

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
    let refuse = |e: CommandError| match &e {
        CommandError::MissingScope(scope) => {
            let scope = scope.clone();
            ApiError::from(e).with_endpoint(grant.endpoint().id).with_scope(&scope)
        }
        _ => ApiError::from(e),
    };
    let (command, args) = app.commands.prepare(&name, grant.identity(), &body).map_err(refuse)?;
    let (env, base_dir, user) = (app.env.snapshot(), app.engine.base_dir(), grant.program_user());
    let result = commands::execute(command, &args, env, base_dir, user).await.map_err(refuse)?;
    Ok(Json(CommandResult { result }))
}

impl From<CommandError> for ApiError {
    fn from(err: CommandError) -> Self {
        let error = ApiError::of(err.fault(), err.to_string());
        match &err {
            CommandError::Failed { error_type, .. } => error.with_type(error_type.as_str()),
            CommandError::Start { source, .. } => {
                tracing::error!(error = %source, "cannot start a registered command");
                error
            }
            _ => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use serde_json::{json, Value};
    use sha2::{Digest, Sha256};
    use tokio_util::sync::CancellationToken;

    use crate::http::testing::send;
    use abx_domain::commands::{CommandSpec, Registry};
    use abx_domain::policy::document::{AuthSpec, TokenSecret, TokenSpec};
    use abx_domain::policy::{PolicyDocument, PolicyEngine, PolicyInputs};
    use abx_domain::pty::TerminalSettings;

    fn app() -> axum::Router {
        let token = |id: &str, secret: &str, scopes: &[&str]| TokenSpec {
            id: id.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
            secret: TokenSecret::Sha256(Sha256::digest(secret.as_bytes()).into()),
            user: None,
        };
        let auth = AuthSpec {
            tokens: vec![token("ops", "ops-token", &["*"]), token("agent", "agent-token", &["commands:*"])],
            ..AuthSpec::default()
        };
        let document = PolicyDocument { auth, ..PolicyDocument::default() };
        let engine =
            PolicyEngine::new(PolicyInputs { document: Some(document), ..PolicyInputs::default() }).expect("policy");
        #[derive(serde::Deserialize)]
        struct File {
            commands: Vec<CommandSpec>,
        }
        let file: File = toml::from_str(
            "[[commands]]\nname = \"open\"\nargv = [\"printf\", \"open\"]\n\
             [[commands]]\nname = \"deploy\"\nargv = [\"printf\", \"deployed\"]\nscopes = [\"deploy:run\"]\n",
        )
        .expect("toml");
        let registry = Registry::from_specs(&file.commands).expect("valid");
        let state = super::AppState::new(Arc::new(engine), CancellationToken::new())
            .configured(TerminalSettings::default(), registry);
        super::super::router(state)
    }

    async fn call(app: &axum::Router, token: &str, method: &str, uri: &str) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from("{}"))
            .expect("request");
        send(app, request).await
    }

    #[tokio::test]
    async fn command_scopes_hide_and_refuse_as_the_reference() {
        let app = app();
        let (_, listed) = call(&app, "agent-token", "GET", "/commands").await;
        assert_eq!(listed["commands"].as_array().map(Vec::len), Some(1), "{listed}");
        assert_eq!(listed["commands"][0]["name"], "open");
        assert_eq!(
            call(&app, "agent-token", "POST", "/commands/deploy").await,
            (
                403,
                json!({"error": "Missing required scope 'deploy:run'", "type": "PolicyDenied", "code": "missing_scope",
                       "endpoint": "run_command", "scope": "deploy:run"})
            )
        );
        assert_eq!(call(&app, "ops-token", "POST", "/commands/deploy").await, (200, json!({"result": "deployed"})));
        let (_, listed) = call(&app, "ops-token", "GET", "/commands").await;
        assert_eq!(listed["commands"].as_array().map(Vec::len), Some(2));
    }
}

//! Which handler serves which endpoint id.
//!
//! This is the only place handlers meet the endpoint table: the method and
//! path come from the table, so a handler cannot be bound to the wrong
//! binding. An id with no handler here answers 501 and is reported as
//! `not_implemented` in `/capabilities`.

use abx_wire::endpoints::Endpoint;
use axum::handler::Handler;
use axum::routing::{on, MethodFilter, MethodRouter};

use super::{agents, browser, code, commands, core, files, mcp, method_filter, process, pty, system, AppState};

/// The handler of `endpoint`, bound to its method, if this build serves it.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<AppState>> {
    let route = match endpoint.id {
        "health" => bind(endpoint, core::health),
        "capabilities" => bind(endpoint, core::capabilities),
        "capabilities_check" => bind(endpoint, core::check),
        "openapi" => bind(endpoint, core::openapi),
        "shell" => bind(endpoint, process::shell),
        "shell_stream" => bind(endpoint, process::shell_stream),
        "process_start" => bind(endpoint, process::start),
        "process_list" => bind(endpoint, process::list),
        "process_detail" => bind(endpoint, process::detail),
        "process_signal" => bind(endpoint, process::signal),
        "process_stdin" => bind(endpoint, process::stdin),
        "process_output" => bind(endpoint, process::output),
        "system_info" => bind(endpoint, system::info),
        "system_metrics" => bind(endpoint, system::metrics),
        "metrics" => bind(endpoint, system::prometheus),
        "env_get" => bind(endpoint, system::env_get),
        "env_set" => bind(endpoint, system::env_set),
        "ports" => bind(endpoint, system::ports),
        "packages" => bind(endpoint, system::packages),
        "files_list" => bind(endpoint, files::entries::list),
        "files_stat" => bind(endpoint, files::entries::stat),
        "files_mkdir" => bind(endpoint, files::entries::mkdir),
        "files_delete" => bind(endpoint, files::entries::delete),
        "files_move" => bind(endpoint, files::entries::rename),
        "files_search" => bind(endpoint, files::entries::search),
        "files_upload_stream" => bind(endpoint, files::json_upload::upload_stream),
        "files_download_stream" => bind(endpoint, files::json_download::download_stream),
        "files_archive" => bind(endpoint, files::json_download::archive),
        "files_watch" => bind(endpoint, files::watch::watch),
        "files_content_read" => bind(endpoint, files::content::content_read),
        "files_content_write" => bind(endpoint, files::content::content_write),
        "files_upload_status" => bind(endpoint, files::content::upload_status),
        "files_upload_cancel" => bind(endpoint, files::content::upload_cancel),
        "list_commands" => bind(endpoint, commands::list),
        "run_command" => bind(endpoint, commands::run),
        "pty_create_session" => bind(endpoint, pty::create),
        "pty_list_sessions" => bind(endpoint, pty::list),
        "pty_detail" => bind(endpoint, pty::detail),
        "pty_resize" => bind(endpoint, pty::resize),
        "pty_delete_session" => bind(endpoint, pty::delete),
        "code_run" => bind(endpoint, code::api::code_run),
        "git_status" => bind(endpoint, code::api::git_status),
        "git_diff" => bind(endpoint, code::api::git_diff),
        "browser_navigate" => bind(endpoint, browser::navigate),
        "browser_screenshot" => bind(endpoint, browser::screenshot),
        "browser_content" => bind(endpoint, browser::content),
        "browser_click" => bind(endpoint, browser::click),
        "browser_type" => bind(endpoint, browser::type_text),
        "browser_evaluate" => bind(endpoint, browser::evaluate),
        "browser_pdf" => bind(endpoint, browser::pdf),
        "browser_console" => bind(endpoint, browser::console),
        // One row, three methods: the protocol posts messages, opens its event stream, ends sessions.
        "mcp" => on(MethodFilter::POST.or(MethodFilter::GET).or(MethodFilter::DELETE), mcp::handle),
        _ => return agents_handler(endpoint),
    };
    Some(route)
}

/// The agents group's handlers; every answer carries `X-Agent-Sandbox-Local: 1`.
fn agents_handler(endpoint: &Endpoint) -> Option<MethodRouter<AppState>> {
    let route = match endpoint.id {
        "agents_sessions_create" => bind(endpoint, agents::sessions_create),
        "agents_sessions_list" => bind(endpoint, agents::sessions_list),
        "agents_sessions_get" => bind(endpoint, agents::sessions_get),
        "agents_sessions_update" => bind(endpoint, agents::sessions_update),
        "agents_sessions_delete" => bind(endpoint, agents::sessions_delete),
        "agents_sessions_events_create" => bind(endpoint, agents::events_create),
        "agents_sessions_events_stream" => bind(endpoint, agents::events_stream),
        "agents_sessions_items_list" => bind(endpoint, agents::items_list),
        "agents_sessions_turns_list" => bind(endpoint, agents::turns_list),
        "agents_sessions_turns_get" => bind(endpoint, agents::turn_get),
        "agents_sessions_turns_items_list" => bind(endpoint, agents::turn_items),
        "agents_artifacts_list" => bind(endpoint, agents::artifacts_list),
        "agents_artifacts_get" => bind(endpoint, agents::artifacts_get),
        "agents_artifacts_delete" => bind(endpoint, agents::artifacts_delete),
        "agents_artifacts_content" => bind(endpoint, agents::artifact_content),
        "agents_traces_list" => bind(endpoint, agents::traces_list),
        "agents_subagents_list" => bind(endpoint, agents::subagents_list),
        "agents_subagents_get" => bind(endpoint, agents::subagent_get),
        "agents_subagents_items_list" => bind(endpoint, agents::subagent_items),
        "agents_subagents_turns_list" => bind(endpoint, agents::subagent_turns),
        "agents_subagents_turns_get" => bind(endpoint, agents::subagent_turn_get),
        "agents_subagents_turns_items_list" => bind(endpoint, agents::subagent_turn_items),
        "agents_runtimes_list" => bind(endpoint, agents::runtimes_list),
        "agents_responses_create" => bind(endpoint, agents::responses_create),
        "agents_responses_connect" => bind(endpoint, agents::responses_connect),
        "agents_responses_compact" => bind(endpoint, agents::responses_compact),
        "agents_responses_get" => bind(endpoint, agents::responses_get),
        "agents_responses_delete" => bind(endpoint, agents::responses_delete),
        "agents_responses_cancel" => bind(endpoint, agents::responses_cancel),
        "agents_responses_input_items" => bind(endpoint, agents::responses_input_items),
        "agents_cannot_responses_input_tokens" => bind(endpoint, agents::cannot_input_tokens),
        "agents_models_list" => bind(endpoint, agents::models_list),
        "agents_models_get" => bind(endpoint, agents::models_get),
        "agents_cannot_models_delete" => bind(endpoint, agents::cannot_model_delete),
        "agents_cannot_executor_registration" => bind(endpoint, agents::cannot_executor_registration),
        "agents_cannot_executor_channel" => bind(endpoint, agents::cannot_executor_channel),
        "agents_vaults_create" => bind(endpoint, agents::vaults_create),
        "agents_vaults_list" => bind(endpoint, agents::vaults_list),
        "agents_vaults_get" => bind(endpoint, agents::vaults_get),
        "agents_vaults_update" => bind(endpoint, agents::vaults_update),
        "agents_vaults_delete" => bind(endpoint, agents::vaults_delete),
        "agents_vault_credentials_create" => bind(endpoint, agents::credentials_create),
        "agents_vault_credentials_list" => bind(endpoint, agents::credentials_list),
        "agents_vault_credentials_get" => bind(endpoint, agents::credentials_get),
        "agents_vault_credentials_update" => bind(endpoint, agents::credentials_update),
        "agents_vault_credentials_delete" => bind(endpoint, agents::credentials_delete),
        "agents_webhooks_create" => bind(endpoint, agents::webhooks_create),
        "agents_webhooks_list" => bind(endpoint, agents::webhooks_list),
        "agents_webhooks_get" => bind(endpoint, agents::webhooks_get),
        "agents_webhooks_update" => bind(endpoint, agents::webhooks_update),
        "agents_webhooks_delete" => bind(endpoint, agents::webhooks_delete),
        "agents_webhooks_rotate_secret" => bind(endpoint, agents::webhooks_rotate_secret),
        "agents_webhooks_test" => bind(endpoint, agents::webhooks_test),
        "agents_webhook_event_types" => bind(endpoint, agents::webhook_event_types),
        "agents_definitions_create" => bind(endpoint, agents::definitions_create),
        "agents_definitions_list" => bind(endpoint, agents::definitions_list),
        "agents_definitions_get" => bind(endpoint, agents::definitions_get),
        "agents_definitions_update" => bind(endpoint, agents::definitions_update),
        "agents_definitions_delete" => bind(endpoint, agents::definitions_delete),
        "agents_environments_create" => bind(endpoint, agents::environments_create),
        "agents_environments_list" => bind(endpoint, agents::environments_list),
        "agents_environments_get" => bind(endpoint, agents::environments_get),
        "agents_environment_files_create" => bind(endpoint, agents::environment_files_create),
        "agents_environment_files_list" => bind(endpoint, agents::environment_files_list),
        "agents_environment_templates_create" => bind(endpoint, agents::templates_create),
        "agents_environment_templates_list" => bind(endpoint, agents::templates_list),
        "agents_environment_templates_get" => bind(endpoint, agents::templates_get),
        "agents_environment_templates_update" => bind(endpoint, agents::templates_update),
        "agents_environment_templates_delete" => bind(endpoint, agents::templates_delete),
        "agents_files_create" => bind(endpoint, agents::files_create),
        _ => return None,
    };
    Some(route.layer(axum::middleware::map_response(agents::local_header)))
}

/// Binds `handler` to `endpoint`'s method.
pub fn bind<H, T>(endpoint: &Endpoint, handler: H) -> MethodRouter<AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
{
    on(method_filter(endpoint.method), handler)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use tokio_util::sync::CancellationToken;
    use tower::ServiceExt;

    use crate::http::code::port::{self as code_port, CodeState};
    use crate::http::envd::{self, EnvdState};
    use crate::http::{self as edge, AppState};
    use abx_domain::policy::{PolicyEngine, PolicyInputs};
    use abx_wire::endpoints::{Endpoint, Port, ENDPOINTS};

    /// Every port's router, behind a server token.
    fn routers() -> Vec<(Port, axum::Router)> {
        let inputs = PolicyInputs { server_token: Some("t".into()), ..PolicyInputs::default() };
        let engine = Arc::new(PolicyEngine::new(inputs).expect("engine"));
        let shutdown = CancellationToken::new();
        let app = AppState::new(engine, shutdown.clone()).serving_pty(1);
        let envd = Arc::new(abx_domain::envd::Envd::new(
            Arc::clone(&app.env),
            shutdown.clone(),
            1024,
            app.processes.registry().clone(),
        ));
        let config = abx_domain::code::CodeConfig {
            max_contexts: 1,
            idle_timeout: None,
            interpreters: abx_domain::code::Interpreters::default(),
            base_dir: std::env::temp_dir(),
        };
        let code = abx_domain::code::CodeInterpreter::new(config, Arc::clone(&app.env), shutdown);
        vec![
            (Port::Api, edge::router(app.clone())),
            (Port::Pty, edge::pty::router(app.clone())),
            (Port::Envd, envd::router(EnvdState { app: app.clone(), envd })),
            (
                Port::Code,
                code_port::router(CodeState {
                    app,
                    code,
                    keepalive: std::time::Duration::from_secs(1),
                    executions: Default::default(),
                }),
            ),
        ]
    }

    fn has_handler(endpoint: &Endpoint) -> bool {
        match endpoint.port {
            Port::Api => super::handler(endpoint).is_some() || endpoint.group.opt_in(),
            Port::Pty => endpoint.id == "pty_connect",
            Port::Envd => envd::handler(endpoint).is_some(),
            Port::Code => code_port::handler(endpoint).is_some(),
        }
    }

    #[test]
    fn every_entry_has_a_handler_on_its_port() {
        let missing: Vec<_> = ENDPOINTS.iter().filter(|e| !has_handler(e)).map(|e| e.id).collect();
        assert!(missing.is_empty(), "entries without a handler: {missing:?}");
    }

    /// Each router answers every entry of its port through the pipeline (a
    /// call without credentials is refused 401 there, not 404 by the
    /// fallback), and nothing else: a path no entry has is the fallback's.
    #[tokio::test]
    async fn every_route_is_an_entry_and_every_entry_a_route_behind_the_pipeline() {
        let placeholder = regex::Regex::new(r"\{[a-z_]+\}").expect("regex");
        for (port, router) in routers() {
            for endpoint in ENDPOINTS.iter().filter(|e| e.port == port) {
                let path = placeholder.replace_all(&endpoint.path.replace("{pid}", "1"), "x").into_owned();
                let method = crate::http::method_filter(endpoint.method);
                let method = ["GET", "POST", "PUT", "DELETE", "HEAD"]
                    .into_iter()
                    .find(|m| {
                        method
                            == axum::routing::MethodFilter::try_from(
                                axum::http::Method::from_bytes(m.as_bytes()).expect("method"),
                            )
                            .expect("filter")
                    })
                    .expect("a method");
                let request = Request::builder().method(method).uri(&path).body(Body::empty()).expect("request");
                let response = router.clone().oneshot(request).await.expect("response");
                let status = response.status().as_u16();
                if endpoint.auth_required {
                    assert_eq!(status, 401, "{} ({method} {path} on {port:?}) is not behind the pipeline", endpoint.id);
                } else {
                    assert!(status < 400, "{} ({method} {path} on {port:?}) answered {status}", endpoint.id);
                }
            }
            let request = Request::builder().uri("/no-such-route").body(Body::empty()).expect("request");
            let response = router.clone().oneshot(request).await.expect("response");
            assert_eq!(response.status().as_u16(), 404, "{port:?}");
        }
    }
}

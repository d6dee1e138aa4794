//! Which handler serves which endpoint id.
//!
//! This is the only place handlers meet the endpoint table: the method and
//! path come from the table, so a handler cannot be bound to the wrong
//! binding. An id with no handler here answers 501 and is reported as
//! `not_implemented` in `/capabilities`.

use axum::handler::Handler;
use axum::routing::{on, MethodFilter, MethodRouter};

use super::{core, process, system, AppState};
use crate::endpoints::{Endpoint, Method};

/// The handler of `endpoint`, bound to its method, if this build serves it.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<AppState>> {
    let route = match endpoint.id {
        "health" => bind(endpoint, core::health),
        "capabilities" => bind(endpoint, core::capabilities),
        "capabilities_check" => bind(endpoint, core::check),
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
        "env_get" => bind(endpoint, system::env_get),
        "env_set" => bind(endpoint, system::env_set),
        "ports" => bind(endpoint, system::ports),
        "packages" => bind(endpoint, system::packages),
        _ => return None,
    };
    Some(route)
}

/// Binds `handler` to `endpoint`'s method.
pub fn bind<H, T>(endpoint: &Endpoint, handler: H) -> MethodRouter<AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
{
    on(method_filter(endpoint.method), handler)
}

/// The axum method filter of a table method.
pub fn method_filter(method: Method) -> MethodFilter {
    match method {
        Method::Get | Method::Ws => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Put => MethodFilter::PUT,
        Method::Delete => MethodFilter::DELETE,
        Method::Head => MethodFilter::HEAD,
    }
}

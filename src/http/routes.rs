//! Which handler serves which endpoint id.
//!
//! This is the only place handlers meet the endpoint table: the method and
//! path come from the table, so a handler cannot be bound to the wrong
//! binding. An id with no handler here answers 501 and is reported as
//! `not_implemented` in `/capabilities`.

use axum::handler::Handler;
use axum::routing::{on, MethodFilter, MethodRouter};

use super::{code, core, AppState};
use crate::endpoints::{Endpoint, Method};

/// The handler of `endpoint`, bound to its method, if this build serves it.
pub fn handler(endpoint: &Endpoint) -> Option<MethodRouter<AppState>> {
    let route = match endpoint.id {
        "health" => bind(endpoint, core::health),
        "capabilities" => bind(endpoint, core::capabilities),
        "capabilities_check" => bind(endpoint, core::check),
        "code_run" => bind(endpoint, code::code_run),
        "git_status" => bind(endpoint, code::git_status),
        "git_diff" => bind(endpoint, code::git_diff),
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

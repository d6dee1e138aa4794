//! `agent-sandbox-server`: the in-sandbox agent server daemon.
//!
//! Every agent sandbox runs it as its long-running HTTP service; it is a
//! drop-in replacement for the Python `agent-sandbox-server` 0.4.0a6.
//!
//! # Layout
//!
//! The workspace's crates are its layers (`docs/architecture.md`):
//! `abx-wire` (the endpoint table, the wire types, `codec`, `time`) depends
//! on nothing of ours; `abx-domain` (policy, files, processes, terminals,
//! code, system, commands, envd's domain, browser, agents) on the wire crate
//! alone, with no HTTP server stack; `abx-client` (the companion client) and
//! `abx` (its command line) on the wire crate; this crate, the daemon's
//! edge, on all of them but `abx`.
//!
//! The edge's modules:
//! - [`http`]: listeners, connections, the pipeline that authenticates and
//!   admits every request, the router built from the endpoint table, and the
//!   handlers that extract, call the domain and render; `http::error` writes
//!   every failure as the reference's JSON error body.
//! - [`metrics`]: the Prometheus metrics the pipeline records (no HTTP).
//! - [`config`]: flags > environment > config file > defaults.
//! - [`server`]: lifecycle: listeners, signals, graceful shutdown.
//! - [`cli`]: `serve`, `healthcheck`, `check-config`, `version`.
//! - [`logging`]: the daemon's logs and the audit log.
//! - [`openapi`]: the API port's OpenAPI 3.1 document (the committed
//!   `docs/openapi.json`, served at `/openapi.json`; tests check it against
//!   the document built from the endpoint table and the wire types).

pub mod cli;
pub mod config;
#[doc(hidden)]
pub mod fuzz;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod server;

/// Version reported by `version` and `/capabilities`.
pub use abx_domain::SERVER_VERSION;

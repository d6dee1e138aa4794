//! `agent-sandbox-server`: the in-sandbox agent server daemon.
//!
//! Every agent sandbox runs it as its long-running HTTP service; it is a
//! drop-in replacement for the Python `agent-sandbox-server` 0.4.0a6.
//!
//! # Layout
//!
//! The workspace's crates are its layers (`docs/architecture.md`):
//! `abx-wire` (the endpoint table, the wire types, `codec`, `time`) depends
//! on nothing of ours; `abx-client` (the companion client) and `abx` (its
//! command line) depend on the wire crate alone; this crate, the daemon,
//! depends on both.
//!
//! The daemon's modules:
//! - [`policy`]: authentication, the per-endpoint rules compiled from every
//!   policy input, path scoping, rate limits and discovery. No HTTP.
//! - [`http`]: the edge. The router is built from the table; one pipeline
//!   authenticates and admits every request; handlers extract, call a
//!   domain module and map the result; `http::error` writes every failure as
//!   the reference's JSON error body.
//! - [`environment`]: the environment children start with (server's minus
//!   secrets, plus `POST /env` overrides).
//! - [`metrics`]: the Prometheus metrics the pipeline records (no HTTP).
//! - [`config`]: flags > environment > config file > defaults.
//! - [`server`]: lifecycle: listeners, signals, graceful shutdown.
//! - [`cli`]: `serve`, `healthcheck`, `check-config`, `version`.
//! - [`process`]: supervised processes: the reaper that owns every child's
//!   exit, process groups, `/shell` and background processes, bounded
//!   output capture with cursors (no axum).
//! - [`syscalls`]: the one module allowed `unsafe` (a child's setup before `exec`, pidfds).
//! - [`system`]: system information, metrics, ports, packages and
//!   `/env` (no axum; the rules on variable names are `policy::guards::env`).
//! - [`pyrepr`]: how Python spells values (`repr`, `json.dumps`, type
//!   names, `int()`/`float()`), so messages and hashes match the reference's.
//! - [`fs`]: files: race-safe path access, listing, search, atomic and
//!   resumable writes, streamed reads, archives, inotify watches. No HTTP.
//! - [`pty`]: terminal sessions: pseudo-terminals, scrollback, re-attach,
//!   idle reaping (no axum).
//! - [`envd`]: the envd data plane's domain (tokens, users, entries,
//!   watchers) for the `e2b` SDK's Connect protocol; `http::envd` serves it
//!   on its own port (no axum in the domain).
//! - [`openapi`]: the API port's OpenAPI 3.1 document (the committed
//!   `docs/openapi.json`, served at `/openapi.json`; tests check it against
//!   the document built from the endpoint table and the wire types).
//! - [`commands`]: registered commands declared in the config file:
//!   validation, Python-compatible argument coercion, running (no axum).
//! - [`code`]: code execution: stateful contexts of the code-interpreter
//!   port, one-shot runs and git helpers (no axum).
//! - [`browser`]: the headless Chromium of the `browser` group over the
//!   DevTools Protocol, every request held to the URL policy (no axum).
//! - [`agents`]: the opt-in agents group's runtime: coding-agent CLIs as
//!   supervised sessions, turns, items, event logs, artifacts (no axum).
//! - [`ids`]: random hex identifiers.
//! - [`accounts`]: the user accounts programs act as (a policy identity's
//!   own user, envd's users, `/process`'s `user`): one lookup, one login
//!   environment, how a child drops to them.
//! - [`resume`]: what resumable streams share: the registry of kept runs
//!   found by id and owner, their connection counts, the bounded ring of
//!   numbered events, and cursor parsing.

pub mod accounts;
pub mod agents;
pub mod browser;
pub mod cli;
pub mod code;
pub mod commands;
pub mod config;
pub mod envd;
pub mod environment;
pub mod fs;
#[doc(hidden)]
pub mod fuzz;
pub mod http;
pub mod ids;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod policy;
pub mod process;
pub mod pty;
pub mod pyrepr;
pub mod resume;
pub mod server;
pub mod syscalls;
pub mod system;

/// Version reported by `version` and `/capabilities`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

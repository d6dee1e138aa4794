//! `agent-sandbox-server`: the in-sandbox agent server daemon.
//!
//! Every agent sandbox runs it as its long-running HTTP service; it is a
//! drop-in replacement for the Python `agent-sandbox-server` 0.4.0a6.
//!
//! # Layout
//!
//! - [`endpoints`]: the endpoint table, the single source of truth for ids,
//!   bindings, groups, scopes and tunable limits.
//! - [`policy`]: authentication, the per-endpoint rules compiled from every
//!   policy input, path scoping, rate limits and discovery. No HTTP.
//! - [`http`]: the edge. The router is built from the table; one pipeline
//!   authenticates and admits every request; handlers extract, call a
//!   domain module and map the result; `http::error` writes every failure as
//!   the reference's JSON error body.
//! - [`api`]: the JSON wire types shared by handlers and [`client`].
//! - [`client`]: the companion async Rust client.
//! - [`environment`]: the environment children start with (server's minus
//!   secrets, plus `POST /env` overrides).
//! - [`metrics`]: the Prometheus metrics the pipeline records (no HTTP).
//! - [`config`]: flags > environment > config file > defaults.
//! - [`server`]: lifecycle: listeners, signals, graceful shutdown.
//! - [`cli`]: `serve`, `healthcheck`, `check-config`, `version`.
//! - [`process`]: supervised processes: the reaper that owns every child's
//!   exit, process groups, `/shell` and background processes.
//! - [`sys`]: the one module allowed `unsafe` (a child's setup before `exec`, pidfds).
//! - [`system`]: system information, metrics, ports, packages and the
//!   `/env` rules (no axum).
//! - [`time`]: seconds since the epoch as UTC dates, for every timestamp format.
//! - [`python`]: how Python spells values (`repr`, `json.dumps`, type
//!   names, `int()`/`float()`), so messages and hashes match the reference's.
//! - [`fs`]: files: race-safe path access, listing, search, atomic and
//!   resumable writes, streamed reads, archives, inotify watches. No HTTP.
//! - [`pty`]: terminal sessions: pseudo-terminals, scrollback, re-attach,
//!   idle reaping (no axum).
//! - [`envd`]: the envd data plane's domain (tokens, users, entries,
//!   watchers) for the `e2b` SDK's Connect protocol; `http::envd` serves it
//!   on its own port (no axum in the domain).
//! - [`commands`]: registered commands declared in the config file:
//!   validation, Python-compatible argument coercion, running (no axum).
//! - [`process`]: supervised processes: the reaper, process groups,
//!   bounded output capture with cursors (no axum).
//! - [`agents`]: the opt-in agents group's runtime: coding-agent CLIs as
//!   supervised sessions, turns, items, event logs, artifacts (no axum).
//! - [`ids`]: random hex identifiers.
//! - [`browser`]: the headless Chromium of the `browser` group over the
//!   DevTools Protocol, every request held to the URL policy (no axum).

pub mod agents;
pub mod api;
pub mod browser;
pub mod cli;
pub mod client;
pub mod code;
pub mod commands;
pub mod config;
pub mod endpoints;
pub mod envd;
pub mod environment;
pub mod fs;
pub mod http;
pub mod ids;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod process;
pub mod pty;
pub mod python;
pub mod server;
pub mod sys;
pub mod system;
pub mod time;

/// Version reported by `version` and `/capabilities`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

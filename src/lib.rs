//! `agent-sandbox-server`: the in-sandbox agent server daemon.
//!
//! Every agent sandbox runs it as its long-running HTTP service; it is a
//! drop-in replacement for the Python `agent-sandbox-server` 0.4.0a6.
//!
//! # Layout
//!
//! Three build configurations share this crate (`Cargo.toml`'s features,
//! `docs/client.md`): the daemon (`server`, on by default), the companion
//! client alone (`client`), and the `abx` command line (`cli`). The client's
//! side never imports a daemon module: the client-only build, which CI
//! checks, does not contain them.
//!
//! Every configuration:
//! - [`endpoints`]: the endpoint table, the single source of truth for ids,
//!   bindings, groups, scopes and tunable limits.
//! - [`api`]: the JSON wire types shared by handlers and the client.
//! - [`codec`]: base64, shell-style argv splitting and joining, the
//!   streaming UTF-8 decoder; leaves both sides use.
//! - [`time`]: seconds since the epoch as UTC dates, for every timestamp format.
//!
//! `client` and `cli`:
//! - [`client`]: the companion async Rust client (native API,
//!   code-interpreter protocol, envd's plain HTTP calls).
//! - [`abx`]: the `abx` command line, on the client only.
//!
//! `server`, the daemon:
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

// The layout above links every module; a build without some of them has no target for those links.
#![cfg_attr(not(all(feature = "server", feature = "cli")), allow(rustdoc::broken_intra_doc_links))]

// Every configuration: the wire vocabulary both sides share. These modules
// import nothing of the daemon (the client-only build checks it).
pub mod api;
pub mod codec;
pub mod endpoints;
pub mod powers;
pub mod time;

// `client`: the companion client library.
#[cfg(feature = "client")]
pub mod client;

// `cli`: the `abx` command line, on the client only.
#[cfg(feature = "cli")]
pub mod abx;

// `server`: the daemon. A new module only the daemon needs goes here, under
// the same attribute.
#[cfg(feature = "server")]
pub mod accounts;
#[cfg(feature = "server")]
pub mod agents;
#[cfg(feature = "server")]
pub mod browser;
#[cfg(feature = "server")]
pub mod cli;
#[cfg(feature = "server")]
pub mod code;
#[cfg(feature = "server")]
pub mod commands;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod envd;
#[cfg(feature = "server")]
pub mod environment;
#[cfg(feature = "server")]
pub mod fs;
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod fuzz;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub mod ids;
#[cfg(feature = "server")]
pub mod logging;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod openapi;
#[cfg(feature = "server")]
pub mod policy;
#[cfg(feature = "server")]
pub mod process;
#[cfg(feature = "server")]
pub mod pty;
#[cfg(feature = "server")]
pub mod pyrepr;
#[cfg(feature = "server")]
pub mod resume;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod syscalls;
#[cfg(feature = "server")]
pub mod system;

/// Version reported by `version` and `/capabilities`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

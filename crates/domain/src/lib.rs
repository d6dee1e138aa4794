//! `abx-domain`: what the agent sandbox daemon does, without HTTP.
//!
//! The daemon's edge (the `agent-sandbox-server` package: listeners, the
//! request pipeline, handlers, config, logging, metrics) serves these
//! modules on its ports; nothing here knows of the edge, and the HTTP server
//! stack (axum, hyper, tower) is not among this crate's dependencies
//! (`tests/layers.rs`). The only layer below is `abx-wire`, the wire
//! vocabulary (`docs/architecture.md`).
//!
//! - [`policy`]: authentication, the per-endpoint rules compiled from every
//!   policy input, path scoping, rate limits and discovery.
//! - [`environment`]: the environment children start with (server's minus
//!   secrets, plus `POST /env` overrides).
//! - [`process`]: supervised processes: the reaper that owns every child's
//!   exit, process groups, `/shell` and background processes, bounded
//!   output capture with cursors.
//! - [`syscalls`]: the one module allowed `unsafe` (a child's setup before `exec`, pidfds).
//! - [`system`]: system information, metrics, ports, packages and
//!   `/env` (the rules on variable names are `policy::guards::env`).
//! - [`pyrepr`]: how Python spells values (`repr`, `json.dumps`, type
//!   names, `int()`/`float()`), so messages and hashes match the reference's.
//! - [`fs`]: files: race-safe path access, listing, search, atomic and
//!   resumable writes, streamed reads, archives, inotify watches.
//! - [`pty`]: terminal sessions: pseudo-terminals, scrollback, re-attach,
//!   idle reaping.
//! - [`envd`]: the envd data plane's domain (tokens, users, entries,
//!   watchers) for the `e2b` SDK's Connect protocol.
//! - [`commands`]: registered commands declared in the config file:
//!   validation, Python-compatible argument coercion, running.
//! - [`code`]: code execution: stateful contexts of the code-interpreter
//!   port, one-shot runs and git helpers.
//! - [`browser`]: the headless Chromium of the `browser` group over the
//!   DevTools Protocol, every request held to the URL policy (its network
//!   path, an HTTP proxy, is the edge's: [`browser::egress::Egress`]).
//! - [`agents`]: the opt-in agents group's runtime: coding-agent CLIs as
//!   supervised sessions, turns, items, event logs, artifacts.
//! - [`ids`]: random hex identifiers.
//! - [`blocking`]: the one hand-off of blocking work to tokio's blocking pool.
//! - [`accounts`]: the user accounts programs act as (a policy identity's
//!   own user, envd's users, `/process`'s `user`): one lookup, one login
//!   environment, how a child drops to them.
//! - [`resume`]: what resumable streams share: the registry of kept runs
//!   found by id and owner, their connection counts, the bounded ring of
//!   numbered events, and cursor parsing.

pub mod accounts;
pub mod agents;
pub mod blocking;
pub mod browser;
pub mod code;
pub mod commands;
pub mod envd;
pub mod environment;
pub mod fs;
pub mod ids;
pub mod policy;
pub mod process;
pub mod pty;
pub mod pyrepr;
pub mod resume;
pub mod syscalls;
pub mod system;

/// Version reported by `version` and `/capabilities`.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

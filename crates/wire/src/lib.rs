//! `abx-wire`: the vocabulary `agent-sandbox-server` and its clients share.
//!
//! Nothing here knows the daemon: this crate depends on no other crate of
//! the workspace, so the companion client and the `abx` command line, which
//! depend on it alone, cannot reach the daemon's code, and the daemon's
//! handlers and the client read the same types, so they cannot drift.
//!
//! - [`endpoints`]: the endpoint table, the single source of truth for ids,
//!   bindings, groups, scopes, powers and tunable limits of every port.
//! - [`powers`]: what an endpoint may do (run programs, write files, ...).
//! - [`api`]: the JSON wire types of every port.
//! - [`codec`]: base64, shell-style argv splitting and joining, the
//!   streaming UTF-8 decoder.
//! - [`time`]: seconds since the epoch as UTC dates, for every timestamp format.

pub mod api;
pub mod codec;
pub mod endpoints;
pub mod powers;
pub mod time;

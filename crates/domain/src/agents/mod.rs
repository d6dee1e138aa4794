//! The agents group's runtime: coding-agent CLIs run as supervised
//! sessions. No HTTP and no wire types here: domain types in, domain types out.
//!
//! - [`runtime`]: the sessions of the daemon ([`Agents`]): creation, lookup,
//!   eviction, deletion, runtime selection, subscriptions ([`subscription`]).
//! - [`worker`]: turns: queueing, one worker per busy session, the
//!   concurrency limit, cancellation, artifacts; [`turn_end`]: how a turn
//!   ends, and every turn of a deleted session.
//! - [`runner`]: one turn's CLI under the process supervisor: its own
//!   group, timeouts, output limit, line parsing with backpressure.
//! - [`adapters`]: one per CLI (`codex`, `qwen-code`, `claude-code`,
//!   `command`): argv/env/files of a turn, and the parser of its output into
//!   the neutral vocabulary of [`parsed`].
//! - [`build`]: parsed events into items and session events, redacted ([`redact`]).
//! - [`session`], [`turn`], [`log`]: a session's state, its turns and
//!   items, and its append-only event log with resumable subscribers.
//! - [`artifacts`], [`subagents`], [`runtimes`]: snapshots of written files,
//!   subagents the CLIs named, and the installed/implemented report (its
//!   probes cached in [`runtime_probes`]).
//! - [`journal`], [`store`]: persistence under `ABX_AGENTS_STATE_DIR`
//!   (append-only JSON lines, compacted at load).
//! - [`resources`], [`records`], [`workspace_files`]: definitions,
//!   environments, templates and file blobs, journaled beside the sessions.
//! - [`settings`], [`spec`], [`error`], [`procenv`]: settings, what a session
//!   runs, errors, and the CLI's environment.
//! - [`vaults`]: vaults and write-only credentials, bound to a session's MCP
//!   tools (secrets in memory only); [`vault_credentials`]: handed to its turns.
//! - [`webhooks`]: endpoints that receive signed session lifecycle events.
//!
//! [`runtime`] holds the parts it starts with ([`settings`], [`runtime_probes`],
//! [`vaults`], [`webhooks`], [`turn_end`], [`subscription`]), and none of
//! them knows [`Agents`]; the files that add methods to [`Agents`]
//! ([`worker`], [`runtimes`], [`vault_credentials`]) sit above it, so the
//! imports run one way. The settings are read from the options by the
//! configuration, which imports this group, never the other way.
//!
//! Later layers (responses, definitions, environments, vaults, webhooks)
//! sit beside these: they create sessions of their own kind
//! ([`session::SessionKind`]), submit turns with per-turn options
//! ([`worker::TurnInput`]), wait for them, subscribe to their events, and
//! persist their records with [`journal`].

pub mod adapters;
pub mod artifacts;
pub mod build;
pub mod environments;
pub mod error;
pub mod journal;
pub mod log;
pub mod parsed;
pub mod procenv;
pub mod records;
pub mod redact;
pub mod resources;
pub mod responses;
pub mod runner;
pub mod runtime;
pub mod runtime_probes;
pub mod runtimes;
pub mod session;
pub mod settings;
pub mod spec;
pub mod store;
pub mod subagents;
pub mod subscription;
pub mod turn;
pub mod turn_end;
pub mod vault_credentials;
pub mod vaults;
pub mod webhooks;
pub mod worker;
pub mod workspace_files;

pub use self::error::{AgentError, Failure};
pub use self::runtime::{Agents, NewSession};
pub use self::session::{Session, SessionKind, SessionMeta, SessionView};
pub use self::settings::AgentsConfig;
pub use self::spec::AgentSpec;
pub use self::subscription::Subscription;
pub use self::worker::TurnInput;

use std::sync::Arc;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::environment::ChildEnv;

/// The runtime, started on first use (nothing of the group runs before).
/// One pointer wide: the daemon's state is cloned into every route.
#[derive(Debug, Clone)]
pub struct LazyAgents(Arc<Pending>);

#[derive(Debug)]
struct Pending {
    cell: OnceCell<Arc<Agents>>,
    config: AgentsConfig,
    env: Arc<ChildEnv>,
    shutdown: CancellationToken,
}

impl LazyAgents {
    /// A runtime that will start with these settings when first asked for
    /// (the JSON file they name is read then).
    pub fn new(config: AgentsConfig, env: Arc<ChildEnv>, shutdown: CancellationToken) -> Self {
        LazyAgents(Arc::new(Pending { cell: OnceCell::new(), config, env, shutdown }))
    }

    /// The runtime, starting it now if needed.
    pub async fn get(&self) -> Arc<Agents> {
        let pending = &*self.0;
        let started = pending
            .cell
            .get_or_init(|| {
                let config = pending.config.clone().load_file();
                Agents::start(config, Arc::clone(&pending.env), pending.shutdown.clone())
            })
            .await;
        Arc::clone(started)
    }

    /// The runtime if it has been started (never starts it).
    pub fn if_started(&self) -> Option<Arc<Agents>> {
        self.0.cell.get().cloned()
    }

    /// Whether it has been started.
    pub fn started(&self) -> bool {
        self.0.cell.initialized()
    }
}

//! The agents runtime: the sessions of this daemon, their creation,
//! lookup, eviction and deletion, and what the rest of the group asks of it
//! (runtime selection, subscriptions, artifacts). Turns are run by
//! `worker.rs`; state is loaded and compacted by `store.rs`.
//!
//! Nothing here starts before the group is used: the HTTP layer creates the
//! runtime on the first call of an enabled `agents` endpoint.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::adapters::Adapters;
use super::artifacts::{self, ArtifactRecord};
use super::error::AgentError;
use super::journal::{self, Journal};
use super::log::EventLog;
use super::runtime_probes::RuntimeCache;
use super::session::{Record, Session, SessionHeader, SessionKind, SessionMeta};
use super::settings::AgentsConfig;
use super::spec::AgentSpec;
use super::subscription::Subscription;
use crate::environment::ChildEnv;

/// Where `GET /v1/agents/runtimes` is (named in refusals).
pub const RUNTIMES_PATH: &str = "/v1/agents/runtimes";

/// What a new session is made of.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// What it runs.
    pub spec: AgentSpec,
    /// What the API knows about it.
    pub meta: SessionMeta,
    /// The caller's metadata.
    pub metadata: Map<String, Value>,
}

/// The agents runtime; see the module documentation.
#[derive(Debug)]
pub struct Agents {
    pub(crate) config: AgentsConfig,
    pub(crate) adapters: Adapters,
    pub(crate) env: Arc<ChildEnv>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) shutdown: CancellationToken,
    /// `state_dir/sessions`, or a scratch directory when nothing persists.
    sessions_dir: PathBuf,
    persistent: bool,
    _scratch: Option<tempfile::TempDir>,
    pub(crate) runtimes: RuntimeCache,
    /// When it started (seconds since the epoch): the `created` of the runtimes as models.
    pub started_at: f64,
    /// Vaults and credentials.
    pub(crate) vaults: super::vaults::Vaults,
    /// The webhook endpoints and their deliveries.
    pub webhooks: Arc<super::webhooks::Webhooks>,
    /// Definitions, environments, templates and file blobs.
    pub resources: super::resources::Resources,
}

impl Agents {
    /// Starts the runtime: loads the sessions persisted under the state
    /// directory (interrupted turns become failed ones). A state directory
    /// that cannot be used is logged, and the runtime keeps state in memory.
    pub async fn start(config: AgentsConfig, env: Arc<ChildEnv>, shutdown: CancellationToken) -> Arc<Agents> {
        let (sessions_dir, persistent, scratch) = match config.state_dir.as_ref().map(|d| d.join("sessions")) {
            Some(dir) => match journal::private_dir(&dir) {
                Ok(()) => (dir, true, None),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "agents: the state directory cannot be used; keeping state in memory");
                    scratch_dir()
                }
            },
            None => scratch_dir(),
        };
        let slots = Arc::new(Semaphore::new(config.max_concurrent_turns));
        let vaults = match config.state_dir.as_ref().filter(|_| persistent) {
            Some(dir) => {
                let (path, max) = (super::vaults::journal_path(dir), config.max_vaults);
                tokio::task::spawn_blocking(move || super::vaults::Vaults::load(&path, max))
                    .await
                    .unwrap_or_else(|_| super::vaults::Vaults::in_memory(config.max_vaults))
            }
            None => super::vaults::Vaults::in_memory(config.max_vaults),
        };
        let state_dir = config.state_dir.as_deref().filter(|_| persistent);
        let webhooks = super::webhooks::Webhooks::start(&config, state_dir, shutdown.clone());
        let resources = {
            let dir = match (persistent, sessions_dir.parent()) {
                (true, Some(state)) => state.join("resources"),
                _ => sessions_dir.join("_resources"),
            };
            let max = config.max_file_bytes;
            tokio::task::spawn_blocking(move || super::resources::Resources::open(&dir, persistent, max))
                .await
                .unwrap_or_else(|_| super::resources::Resources::open(&std::env::temp_dir(), false, 0))
                .with_quotas(&config.quotas)
        };
        let mut agents = Agents {
            config,
            adapters: Adapters::default(),
            env,
            sessions: Mutex::new(HashMap::new()),
            slots,
            shutdown,
            sessions_dir,
            persistent,
            _scratch: scratch,
            runtimes: RuntimeCache::default(),
            started_at: super::turn::now(),
            vaults,
            webhooks,
            resources,
        };
        if agents.persistent {
            let dir = agents.sessions_dir.clone();
            let loaded = tokio::task::spawn_blocking(move || super::store::load_all(&dir)).await.unwrap_or_default();
            let map = agents.sessions.get_mut().unwrap_or_else(PoisonError::into_inner);
            for session in loaded {
                map.insert(session.id.clone(), Arc::new(session));
            }
            if !map.is_empty() {
                tracing::info!(sessions = map.len(), "agents: sessions restored from the state directory");
            }
        }
        Arc::new(agents)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings it runs with.
    pub fn config(&self) -> &AgentsConfig {
        &self.config
    }

    /// The declared runtimes.
    pub fn adapters(&self) -> &Adapters {
        &self.adapters
    }

    /// The vaults of this daemon.
    pub fn vaults(&self) -> &super::vaults::Vaults {
        &self.vaults
    }

    /// The environment CLIs start from (the daemon's children's, before the allowlist).
    pub fn child_env(&self) -> BTreeMap<String, String> {
        self.env.snapshot()
    }

    /// The runtime a request that names none uses, when it has a backend here.
    pub fn default_runtime(&self) -> Option<&'static str> {
        let configured = self.config.default_runtime.as_deref().unwrap_or(super::adapters::DEFAULT_ORDER[0]);
        self.adapters.resolve(configured).filter(|name| self.is_implemented(name))
    }

    fn is_implemented(&self, name: &str) -> bool {
        self.adapters.get(name).is_some_and(|a| a.descriptor().implemented)
    }

    /// The canonical runtime for `named` (or the default): refused when it is
    /// not declared or has no backend here.
    ///
    /// # Errors
    /// [`AgentError::NotImplementedLocally`].
    pub fn select_runtime(&self, named: Option<&str>) -> Result<&'static str, AgentError> {
        let raw =
            named.map_or_else(|| self.config.default_runtime.clone().unwrap_or_else(|| "codex".into()), str::to_string);
        match self.adapters.resolve(&raw) {
            Some(name) if self.is_implemented(name) => Ok(name),
            known => {
                let what = if known.is_some() { "declared but has no local backend" } else { "not a declared runtime" };
                let mut implemented: Vec<&str> =
                    self.adapters.ordered().into_iter().filter(|d| d.implemented).map(|d| d.name).collect();
                implemented.sort_unstable();
                Err(AgentError::NotImplementedLocally {
                    message: format!(
                        "adapter {} is {what}; GET {RUNTIMES_PATH} reports which runtimes are implemented ({}) and installed",
                        crate::pyrepr::repr_str(&raw),
                        implemented.join(", ")
                    ),
                })
            }
        }
    }

    /// Checks `spec` against its runtime and this server's settings.
    ///
    /// # Errors
    /// 400 listing every problem.
    pub fn validate(&self, spec: &AgentSpec) -> Result<(), AgentError> {
        let Some(adapter) = self.adapters.get(&spec.runtime) else {
            return Err(AgentError::invalid(
                format!("runtime: unknown runtime {}", crate::pyrepr::repr_str(&spec.runtime)),
                "runtime",
            ));
        };
        let mut problems = Vec::new();
        if adapter.descriptor().name == "command" && !self.config.allow_command {
            problems.push("runtime 'command' is disabled on this server (ABX_AGENTS_ALLOW_COMMAND=0)".to_string());
        }
        problems.extend(adapter.validate(spec));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(AgentError::Invalid { message: problems.join("; "), param: None, code: "invalid_request" })
        }
    }

    /// Creates an idle session (evicting expired ones first, and the
    /// owner's own least recently active idle one when it is at its quota).
    ///
    /// # Errors
    /// An invalid spec, [`AgentError::QuotaExceeded`] when the owner is at
    /// its quota with no idle session to let go, or a session directory
    /// that cannot be written.
    pub fn create_session(&self, new: NewSession) -> Result<Arc<Session>, AgentError> {
        self.validate(&new.spec)?;
        self.evict(&new.meta.owner)?;
        let header = SessionHeader {
            id: format!("agsess_{}", crate::ids::random_hex(12)),
            created_at: super::turn::now(),
            spec: new.spec,
            meta: new.meta,
            metadata: new.metadata,
        };
        let dir = self.sessions_dir.join(&header.id);
        journal::private_dir(&dir).map_err(|e| AgentError::internal("cannot create the session directory", e))?;
        let (log, journal) = if self.persistent {
            let log = EventLog::on_disk(&dir.join("events.jsonl"))
                .map_err(|e| AgentError::internal("cannot create the event log", e))?;
            let mut journal = Journal::open(&dir.join("journal.jsonl"))
                .map_err(|e| AgentError::internal("cannot create the session journal", e))?;
            journal
                .append(&Record::Session(Box::new(header.clone())))
                .map_err(|e| AgentError::internal("cannot write the session journal", e))?;
            (log, Some(journal))
        } else {
            (EventLog::in_memory(), None)
        };
        let session = Arc::new(Session::new(&header, log, journal, dir));
        self.lock().insert(session.id.clone(), Arc::clone(&session));
        if header.meta.kind == SessionKind::Session {
            let meta = &header.meta;
            self.webhooks.emit(&meta.owner, "agent.session.created", &session.id, meta.environment_id.as_deref());
        }
        Ok(session)
    }

    /// The session `id` of `owner`, of any kind.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id.
    pub fn session_any(&self, owner: &str, id: &str) -> Result<Arc<Session>, AgentError> {
        let found = self.lock().get(id).cloned();
        found.filter(|s| s.meta().owner == owner).ok_or_else(|| AgentError::not_found("session", id, "session_id"))
    }

    /// The session `id` of `owner` created through the sessions API.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id, or a response's session.
    pub fn session(&self, owner: &str, id: &str) -> Result<Arc<Session>, AgentError> {
        let session = self.session_any(owner, id)?;
        if session.meta().kind != SessionKind::Session {
            return Err(AgentError::not_found("session", id, "session_id"));
        }
        Ok(session)
    }

    /// `owner`'s sessions of `kind`, oldest first.
    pub fn sessions(&self, owner: &str, kind: SessionKind) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = self
            .lock()
            .values()
            .filter(|s| {
                let meta = s.meta();
                meta.owner == owner && meta.kind == kind
            })
            .cloned()
            .collect();
        all.sort_by(|a, b| a.created_at.total_cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Deletes a session: queued turns are cancelled, the running one is
    /// ended (its process group killed), streams end, and its state and
    /// artifacts are removed from disk.
    pub async fn delete_session(&self, session: &Arc<Session>) {
        let waiting = super::turn_end::close(session);
        for mut done in waiting {
            let bound = self.config.kill_grace + std::time::Duration::from_secs(5);
            let _ = tokio::time::timeout(bound, done.wait_for(|d| *d)).await;
        }
        self.lock().remove(&session.id);
        session.close_journal();
        session.log.close();
        let dir = session.dir().to_path_buf();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }

    /// Forgets idle, unwatched sessions past the TTL (anyone's), then, when
    /// `owner` holds its quota of sessions, its own least recently active
    /// idle one: one caller's sessions never push out another's.
    ///
    /// # Errors
    /// [`AgentError::QuotaExceeded`] when `owner` is at its quota and none
    /// of its sessions is idle and unwatched.
    fn evict(&self, owner: &str) -> Result<(), AgentError> {
        let now = super::turn::now();
        let ttl = self.config.session_ttl.as_secs_f64();
        let quota = self.config.quotas.sessions;
        let victims: Vec<Arc<Session>> = {
            let map = self.lock();
            let mut idle: Vec<(f64, Arc<Session>)> = map
                .values()
                .filter(|s| {
                    let state = s.lock();
                    state.status() == "idle" && state.subscribers == 0
                })
                .map(|s| (s.last_active_at(), Arc::clone(s)))
                .collect();
            idle.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (expired, kept): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(at, _)| now - at > ttl);
            let owned = |s: &Session| s.meta().owner == owner;
            let held = map.values().filter(|s| owned(s)).count() - expired.iter().filter(|(_, s)| owned(s)).count();
            let overflow = (held + 1).saturating_sub(quota);
            let own_idle: Vec<Arc<Session>> = kept.into_iter().map(|(_, s)| s).filter(|s| owned(s)).collect();
            if overflow > own_idle.len() {
                return Err(AgentError::QuotaExceeded {
                    quota: "agents_max_sessions",
                    limit: quota as u64,
                    what: "sessions",
                });
            }
            expired.into_iter().map(|(_, s)| s).chain(own_idle.into_iter().take(overflow)).collect()
        };
        for session in victims {
            tracing::info!(session = %session.id, "agents: evicting an idle session");
            self.lock().remove(&session.id);
            session.lock().closed = true;
            session.close_journal();
            session.log.close();
            let dir = session.dir().to_path_buf();
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(move || std::fs::remove_dir_all(dir))),
                Err(_) => drop(std::fs::remove_dir_all(dir)),
            }
        }
        Ok(())
    }

    /// A stream of `session`'s events after `after` (`None`: from now on).
    ///
    /// # Errors
    /// [`AgentError::TooManySubscribers`].
    pub fn subscribe(&self, session: &Arc<Session>, after: Option<u64>) -> Result<Subscription, AgentError> {
        Subscription::subscriber(session, after)
    }

    /// Deletes one artifact's copy.
    ///
    /// # Errors
    /// 404 when the session has no such artifact.
    pub fn delete_artifact(&self, session: &Session, id: &str) -> Result<ArtifactRecord, AgentError> {
        let record = {
            let mut state = session.lock();
            let position = state.artifacts.iter().position(|a| a.id == id);
            position.map(|p| state.artifacts.remove(p))
        };
        let record = record.ok_or_else(|| AgentError::not_found("artifact", id, "artifact_id"))?;
        session.record(&Record::ArtifactDeleted { id: id.to_string() });
        artifacts::remove(session.dir(), &record);
        Ok(record)
    }

    /// Where Codex keeps its rollouts for the CLIs started here.
    pub fn codex_home(&self) -> Option<PathBuf> {
        let env = super::procenv::base_env(&self.child_env(), &self.config.passthrough_env);
        super::subagents::codex_home(&env)
    }
}

fn scratch_dir() -> (PathBuf, bool, Option<tempfile::TempDir>) {
    match tempfile::Builder::new().prefix("abx-agents-").tempdir() {
        Ok(dir) => (dir.path().to_path_buf(), false, Some(dir)),
        Err(_) => (std::env::temp_dir().join(format!("abx-agents-{}", std::process::id())), false, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::log::Read;
    use crate::agents::spec::CommandSpec;

    async fn agents(max_sessions: usize, state: &std::path::Path) -> Arc<Agents> {
        let quotas = crate::agents::settings::Quotas { sessions: max_sessions, ..Default::default() };
        let config = AgentsConfig { state_dir: Some(state.to_path_buf()), quotas, ..AgentsConfig::default() };
        Agents::start(config, Arc::new(ChildEnv::from_vars([], &[])), CancellationToken::new()).await
    }

    fn new_session(owner: &str) -> NewSession {
        let command = CommandSpec { argv: vec!["/bin/true".into()], ..CommandSpec::default() };
        NewSession {
            spec: AgentSpec {
                runtime: "command".into(),
                workspace: "/tmp".into(),
                command: Some(command),
                ..AgentSpec::default()
            },
            meta: SessionMeta { owner: owner.into(), ..SessionMeta::default() },
            metadata: Map::new(),
        }
    }

    #[tokio::test]
    async fn idle_sessions_beyond_the_limit_are_evicted_oldest_first_and_owners_are_apart() {
        let state = tempfile::tempdir().expect("state");
        let agents = agents(2, state.path()).await;
        let first = agents.create_session(new_session("a")).expect("first");
        let theirs = agents.create_session(new_session("b")).expect("b's");
        let second = agents.create_session(new_session("a")).expect("second");
        let third = agents.create_session(new_session("a")).expect("third");
        let ids: Vec<String> = agents.sessions("a", SessionKind::Session).iter().map(|s| s.id.clone()).collect();
        assert_eq!(ids, [second.id.clone(), third.id.clone()]);
        assert!(matches!(first.log.read(0, 1), Read::Closed), "its streams end");
        let again = agents.create_session(new_session("b")).expect("b's second");
        let _held =
            (agents.subscribe(&theirs, None).expect("watched"), agents.subscribe(&again, None).expect("watched"));
        let refused = agents.create_session(new_session("b"));
        assert!(
            matches!(refused, Err(AgentError::QuotaExceeded { quota: "agents_max_sessions", limit: 2, .. })),
            "b's sessions are watched, a's are not b's to take: {refused:?}"
        );
        assert_eq!(agents.sessions("a", SessionKind::Session).len(), 2);
        assert!(
            matches!(agents.session("b", &second.id), Err(AgentError::NotFound { .. })),
            "a foreign id reads as unknown"
        );
        assert_eq!(agents.sessions("b", SessionKind::Session).len(), 2);
    }

    #[tokio::test]
    async fn runtimes_are_selected_by_name_alias_or_default() {
        let state = tempfile::tempdir().expect("state");
        let agents = agents(10, state.path()).await;
        assert_eq!(agents.select_runtime(None).ok(), Some("codex"));
        assert_eq!(agents.select_runtime(Some("Claude")).ok(), Some("claude-code"));
        assert!(matches!(agents.select_runtime(Some("cursor")), Err(AgentError::NotImplementedLocally { .. })));
        assert_eq!(agents.default_runtime(), Some("codex"));
        let bad =
            NewSession { spec: AgentSpec { runtime: "command".into(), ..AgentSpec::default() }, ..new_session("a") };
        assert!(matches!(agents.create_session(bad), Err(AgentError::Invalid { .. })), "command needs a program");
    }
}

//! Turns: queueing (input during a turn queues the next one, as the
//! reference), one worker task per busy session that runs its turns in
//! order, a daemon-wide limit of concurrent CLIs, cancellation, and what a
//! turn leaves behind (its record, its artifacts, its final events).
//!
//! Session events are emitted while the session's state lock is held, so
//! their order is the order of the state changes they report.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::adapters::TurnContext;
use super::build::{truncate, TurnBuilder};
use super::error::{AgentError, Failure};
use super::log::EventKind;
use super::redact::Redactor;
use super::runner::{Outcome, Run};
use super::runtime::Agents;
use super::session::{Record, Session, TurnControl};
use super::spec::{AgentSpec, McpServer};
use super::turn::{now, TurnRecord, TurnStatus};
use super::turn_end::{finish, finish_unrun};
use crate::process::ExecSpec;

/// Turns waiting per session at most (the reference's limit).
pub const MAX_QUEUED_TURNS: usize = 32;
/// Events an idle session keeps in memory when its log is on disk.
const IDLE_EVENTS_IN_MEMORY: usize = 64;
/// `Idempotency-Key`s remembered per session.
const MAX_KEYS: usize = 256;

/// One input to run as a turn.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// The prompt.
    pub prompt: String,
    /// Instructions prepended to this turn's prompt only.
    pub instructions: Option<String>,
    /// MCP servers added for this turn only (their secrets stay in memory);
    /// one named as a session's server replaces it.
    pub mcp_servers: Vec<McpServer>,
    /// More secret values masked in this turn's events (memory only).
    pub redact: Vec<String>,
    /// Listed with the session's turns and items (`false` hides it).
    pub hidden: bool,
    /// The input items as accepted (kept with the turn).
    pub input_items: Vec<Value>,
    /// A turn id chosen by the caller.
    pub turn_id: Option<String>,
    /// Labels kept with the turn.
    pub extra: Map<String, Value>,
}

/// What one turn's CLI is started with, beside its adapter and spec.
struct Launch<'a> {
    prompt: String,
    workdir: PathBuf,
    native: Option<String>,
    cancel: CancellationToken,
    /// The user it runs as (the session owner's), `None`: the daemon's.
    user: Option<&'a crate::accounts::Account>,
}

impl Agents {
    /// Queues a turn; it starts at once when the session is idle. Returns its record.
    ///
    /// # Errors
    /// 404 once the session is deleted; 400 when too many turns wait.
    pub fn submit(self: &Arc<Self>, session: &Arc<Session>, input: TurnInput) -> Result<TurnRecord, AgentError> {
        let mut state = session.lock();
        if state.closed {
            return Err(AgentError::not_found("session", &session.id, "session_id"));
        }
        let input = self.with_vault_credentials(&state.meta, &state.spec.mcp_servers, input)?;
        if state.queue.len() >= MAX_QUEUED_TURNS {
            return Err(AgentError::invalid("too many queued turns for this session", "events"));
        }
        let id = input.turn_id.unwrap_or_else(|| format!("turn_{}", crate::ids::random_hex(12)));
        let turn = TurnRecord {
            keep: !input.hidden,
            instructions: input.instructions,
            input_items: input.input_items,
            extra: input.extra,
            ..TurnRecord::queued(id, &session.id, input.prompt)
        };
        state.turns.push(turn.clone());
        state.queue.push_back(turn.id.clone());
        let control = TurnControl {
            cancel: CancellationToken::new(),
            done: watch::channel(false).0,
            mcp_servers: input.mcp_servers,
            redact: input.redact,
        };
        state.controls.insert(turn.id.clone(), control);
        let after = session.log.last_seq();
        let start = !state.worker_running;
        if start {
            state.worker_running = true;
            session.emit(None, EventKind::SessionInProgress { usage: state.usage() });
        }
        session.emit(Some(&turn.id), EventKind::TurnQueued { turn: turn.summary() });
        drop(state);
        session.record(&Record::Turn { turn: Box::new(turn.clone()) });
        if start {
            tokio::spawn(Arc::clone(self).drain(Arc::clone(session)));
        }
        self.webhooks.watch(session, after);
        Ok(turn)
    }

    /// Whether `key` was used with this body before (`Ok(true)`: answer as
    /// then), with another body (409), or not at all.
    ///
    /// # Errors
    /// [`AgentError::IdempotencyMismatch`].
    pub fn idempotent(&self, session: &Session, key: &str, digest: &str) -> Result<bool, AgentError> {
        let state = session.lock();
        match state.idempotency.iter().find(|(k, _)| k == key) {
            Some((_, d)) if d == digest => Ok(true),
            Some(_) => Err(AgentError::IdempotencyMismatch),
            None => Ok(false),
        }
    }

    /// Remembers that `key` was used with this body.
    pub fn remember_key(&self, session: &Session, key: &str, digest: &str) {
        let mut state = session.lock();
        state.idempotency.retain(|(k, _)| k != key);
        state.idempotency.push_back((key.to_string(), digest.to_string()));
        while state.idempotency.len() > MAX_KEYS {
            state.idempotency.pop_front();
        }
    }

    /// Cancels the running turn, if there is one; returns its id.
    pub fn cancel_active(&self, session: &Session) -> Option<String> {
        let state = session.lock();
        let active = state.active.clone()?;
        if let Some(control) = state.controls.get(&active) {
            control.cancel.cancel();
        }
        Some(active)
    }

    /// Cancels a queued or running turn; `false` when it is already over.
    pub fn cancel_turn(&self, session: &Session, turn_id: &str) -> bool {
        let mut state = session.lock();
        if let Some(position) = state.queue.iter().position(|t| t == turn_id) {
            state.queue.remove(position);
            finish_unrun(session, &mut state, turn_id, TurnStatus::Cancelled);
            return true;
        }
        match state.controls.get(turn_id) {
            Some(control) => {
                control.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Waits until turn `turn_id` is over (at once if it is, or unknown).
    pub async fn wait_turn(&self, session: &Session, turn_id: &str) {
        let done = session.lock().controls.get(turn_id).map(|c| c.done.subscribe());
        if let Some(mut done) = done {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Runs the session's queued turns in order, then marks it idle.
    async fn drain(self: Arc<Self>, session: Arc<Session>) {
        loop {
            let next = {
                let mut state = session.lock();
                match state.queue.pop_front() {
                    Some(id) => {
                        state.active = Some(id.clone());
                        Some(id)
                    }
                    None => {
                        state.worker_running = false;
                        state.active = None;
                        if !state.closed {
                            session.emit(None, EventKind::SessionIdle { usage: state.usage() });
                        }
                        None
                    }
                }
            };
            let Some(turn_id) = next else { break };
            self.execute(&session, &turn_id).await;
            session.lock().active = None;
        }
        session.log.shrink(IDLE_EVENTS_IN_MEMORY);
    }

    async fn execute(&self, session: &Arc<Session>, turn_id: &str) {
        let cancel = session.lock().controls.get(turn_id).map(|c| c.cancel.clone()).unwrap_or_default();
        let permit = tokio::select! {
            permit = Arc::clone(&self.slots).acquire_owned() => permit.ok(),
            () = cancel.cancelled() => None,
        };
        let Some(_permit) = permit.filter(|_| !cancel.is_cancelled()) else {
            finish_unrun(session, &mut session.lock(), turn_id, TurnStatus::Cancelled);
            return;
        };
        self.run_turn(session, turn_id, cancel).await;
    }

    async fn run_turn(&self, session: &Arc<Session>, turn_id: &str, cancel: CancellationToken) {
        let (mut spec, native, prompt, redact, bound) = {
            let mut state = session.lock();
            let (extra, redact) =
                state.controls.get(turn_id).map(|c| (c.mcp_servers.clone(), c.redact.clone())).unwrap_or_default();
            let bound: Vec<(String, String)> = extra
                .iter()
                .filter(|s| {
                    let header = s.headers.get("Authorization");
                    redact.iter().any(|secret| header.is_some_and(|h| *h == format!("Bearer {secret}")))
                })
                .filter_map(|s| s.url.clone().map(|url| (s.name.clone(), url)))
                .collect();
            let native = state.native_session_id.clone();
            let mut spec = state.spec.clone();
            spec.mcp_servers.retain(|s| !extra.iter().any(|e| e.name == s.name));
            spec.mcp_servers.extend(extra);
            let Some(turn) = state.turn_mut(turn_id) else { return };
            turn.status = TurnStatus::InProgress;
            turn.started_at = Some(now());
            let prompt = match turn.instructions.as_deref().filter(|i| !i.is_empty()) {
                Some(instructions) => format!("{}\n\n---\n\n{}", instructions.trim(), turn.prompt),
                None => turn.prompt.clone(),
            };
            let summary = turn.summary();
            session.emit(Some(turn_id), EventKind::TurnStarted { turn: summary });
            (spec, native, prompt, redact, bound)
        };
        spec.limits = self.config.limits;
        let mut redactor = Redactor::new(spec.secret_values());
        redactor.add(redact.iter().map(String::as_str));
        let adapter = self.adapters.get(&spec.runtime);
        let hosts = self.check_credential_hosts(&bound).await;
        // The CLI runs as the user the owner identity names, if any.
        let user = self.config.users.get(&session.meta().owner).cloned();
        let workspace = hosts.and_then(|()| super::procenv::prepare_workspace(&spec.workspace, user.as_deref()));
        let outcome = match (adapter, workspace) {
            (None, _) => (
                Outcome::Failed(Failure::new("invalid_request", format!("unknown runtime {}", spec.runtime))),
                Vec::new(),
            ),
            (Some(_), Err(failure)) => (Outcome::Failed(failure), Vec::new()),
            (Some(adapter), Ok(workdir)) => {
                let cwd = Some(workdir.display().to_string());
                let mut builder = TurnBuilder::new(session, turn_id, redactor.clone(), adapter.descriptor().name, cwd);
                let turn = Launch { prompt, workdir: workdir.clone(), native, cancel, user: user.as_deref() };
                let outcome = self.launch(adapter, &spec, turn, &mut builder).await;
                builder.finalize(outcome != Outcome::Completed);
                let reported =
                    if outcome == Outcome::Completed { std::mem::take(&mut builder.reported) } else { Vec::new() };
                (outcome, reported.into_iter().map(|r| (workdir.clone(), r)).collect())
            }
        };
        let (outcome, reported) = outcome;
        if !reported.is_empty() {
            self.take_artifacts(session, turn_id, reported).await;
        }
        let (status, failure) = match outcome {
            Outcome::Completed => (TurnStatus::Completed, None),
            Outcome::Cancelled => (TurnStatus::Cancelled, None),
            Outcome::Failed(f) => {
                (TurnStatus::Failed, Some(Failure::new(&f.code, truncate(&redactor.redact(&f.message), 2000))))
            }
        };
        let mut state = session.lock();
        finish(session, &mut state, turn_id, status, failure);
    }

    /// Builds the invocation, starts the CLI and supervises it.
    async fn launch(
        &self,
        adapter: &dyn super::adapters::Adapter,
        spec: &AgentSpec,
        turn: Launch<'_>,
        builder: &mut TurnBuilder<'_>,
    ) -> Outcome {
        let Launch { prompt, workdir, native, cancel, user } = turn;
        let turn_dir = match tempfile::Builder::new().prefix("abx-agent-turn-").tempdir() {
            Ok(dir) => dir,
            Err(e) => {
                return Outcome::Failed(Failure::new("sandbox_error", format!("cannot create a turn directory: {e}")))
            }
        };
        if let Err(e) = crate::accounts::give(user, turn_dir.path()) {
            return Outcome::Failed(Failure::new("sandbox_error", format!("cannot give the turn directory away: {e}")));
        }
        let ctx = TurnContext {
            spec,
            prompt,
            workdir: workdir.clone(),
            turn_dir: turn_dir.path().to_path_buf(),
            native_session_id: native,
            is_root: nix::unistd::geteuid().is_root(),
        };
        let invocation = adapter.invocation(&ctx);
        for file in &invocation.files {
            if let Err(e) = super::procenv::write_file(file, user) {
                return Outcome::Failed(Failure::new(
                    "workspace_error",
                    format!("cannot write {}: {e}", file.path.display()),
                ));
            }
        }
        let mut env =
            super::procenv::child_env(&self.child_env(), &self.config.passthrough_env, adapter, &invocation.env, spec);
        if let Some(user) = user {
            user.login_env(&mut env);
        }
        let Some(first) = invocation.argv.first().cloned() else {
            return Outcome::Failed(Failure::new("invalid_request", "the runtime has no program to run"));
        };
        let path = env.get("PATH").cloned().unwrap_or_default();
        let Some(program) = super::procenv::which(&first, &path) else {
            let install = adapter.descriptor().install_steps.first().map(|s| s.join(" "));
            let hint = install.map_or_else(String::new, |i| format!("; install it with `{i}`"));
            let message = format!("{} was not found on PATH{hint}", crate::pyrepr::repr_str(&first));
            return Outcome::Failed(Failure::new("runtime_not_installed", message));
        };
        let exec = ExecSpec {
            command: invocation.argv.join(" "),
            argv: invocation.argv,
            program: Some(program),
            cwd: Some(workdir),
            env,
            timeout: None,
            credentials: user.map(crate::accounts::Account::run_as),
        };
        let mut parser = adapter.parser(&ctx);
        let run = Run {
            exec,
            stdin: invocation.stdin,
            limits: spec.limits,
            cancel,
            shutdown: self.shutdown.clone(),
            kill_grace: self.config.kill_grace,
        };
        let outcome = super::runner::run(run, adapter, parser.as_mut(), builder).await;
        drop(turn_dir);
        outcome
    }

    async fn take_artifacts(
        &self,
        session: &Arc<Session>,
        turn_id: &str,
        reported: Vec<(PathBuf, super::artifacts::Reported)>,
    ) {
        let Some(workdir) = reported.first().map(|(w, _)| w.clone()) else { return };
        let paths: Vec<_> = reported.into_iter().map(|(_, r)| r).collect();
        let dir = session.dir().to_path_buf();
        let turn = turn_id.to_string();
        let max = self.config.max_artifact_bytes;
        let taken =
            tokio::task::spawn_blocking(move || super::artifacts::snapshot(&dir, &workdir, &turn, &paths, max)).await;
        match taken {
            Ok(Ok(records)) => {
                for artifact in records {
                    session.lock().artifacts.push(artifact.clone());
                    session.record(&Record::Artifact { artifact });
                }
            }
            Ok(Err(e)) => tracing::warn!(session = %session.id, error = %e, "agents: cannot snapshot artifacts"),
            Err(e) => tracing::warn!(session = %session.id, error = %e, "agents: the artifact task failed"),
        }
    }
}

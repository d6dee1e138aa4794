//! Starting a process for a grant and a request: the one use case behind
//! every endpoint that runs a program the caller names (`/shell`,
//! `/shell/stream`, `/process/start`, their MCP tools, envd's `Start`).
//!
//! [`start_process`] owns the sequence, so no handler writes it again:
//! the `max_processes` limit of the grant, a slot reserved under it
//! ([`Registry::reserve`]), the command checked by the policy and built
//! ([`prepare`], on the blocking pool when it may look a user up), then the
//! spawn. What differs between callers is a [`Plane`]: which endpoint's
//! defaults the command takes, whether the command is checked before the
//! slot, and what "spawn" means (run to completion, stream lines, a
//! background process, envd's process with an optional terminal).
//!
//! The API port reserves first and then checks the command, as the
//! reference does; envd checks the command first, because its account and
//! working directory go into the command ([`crate::envd::start`]).

use std::future::Future;
use std::sync::Arc;

use abx_wire::api::process::{ShellEvent, ShellResult, Started};
use abx_wire::endpoints::Limit;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::exec::{prepare, ExecInput, ExecKind, ExecSpec};
use super::registry::{Registry, Slot, SlotKind, DEFAULT_MAX_PROCESSES};
use super::stream_runs::Attached;
use super::{shell, ProcessError, Processes};
use crate::environment::ChildEnv;
use crate::policy::{owner, Grant, LimitValue, Viewer};

/// A request a command is built from: the API port's [`ExecInput`], or
/// envd's `Start` ([`crate::envd::start::Command`]).
pub trait CommandRequest: Send + 'static {
    /// Why a start fails; every [`ProcessError`] and a failed blocking task become one.
    type Error: From<ProcessError> + From<tokio::task::JoinError> + Send + 'static;

    /// Whether building the command may block (a user database lookup).
    fn blocks(&self) -> bool;

    /// The command this request runs, checked by `grant`'s policy under
    /// `kind`'s defaults. Blocking where [`CommandRequest::blocks`] says so.
    ///
    /// # Errors
    /// The policy's refusals, malformed requests.
    fn command(self, grant: &Grant, env: &ChildEnv, kind: ExecKind) -> Result<ExecSpec, Self::Error>;
}

impl CommandRequest for ExecInput {
    type Error = ProcessError;

    fn blocks(&self) -> bool {
        self.user.is_some()
    }

    fn command(self, grant: &Grant, env: &ChildEnv, kind: ExecKind) -> Result<ExecSpec, ProcessError> {
        prepare(grant, env, &self, kind)
    }
}

/// The error of a plane's starts.
pub type StartError<P> = <<P as Plane>::Request as CommandRequest>::Error;

/// How one kind of caller spawns a command that passed the checks.
pub trait Plane {
    /// What the caller gets once the process runs (or has run).
    type Started;
    /// What the command is built from.
    type Request: CommandRequest;

    /// Which endpoint's defaults and process count the command takes.
    fn kind(&self) -> ExecKind;

    /// The registry whose slots count this plane's processes.
    fn registry(&self) -> &Registry;

    /// Whether the command is checked before a slot is reserved (envd),
    /// rather than after (the API port, as the reference).
    fn command_first(&self) -> bool {
        false
    }

    /// Spawns `spec` for `grant`, holding `slot` until the process has ended.
    fn spawn(
        self,
        grant: &Grant,
        spec: ExecSpec,
        slot: Slot,
    ) -> impl Future<Output = Result<Self::Started, StartError<Self>>> + Send;
}

/// Starts a process for `grant` and `request` on `plane`: limit, slot,
/// command, spawn (the command before the slot where the plane says so).
///
/// # Errors
/// [`ProcessError::ProcessLimit`] when `max_processes` is reached, the
/// policy's refusals of the command, and the plane's spawn errors.
pub async fn start_process<P: Plane>(
    grant: &Grant,
    env: &Arc<ChildEnv>,
    request: P::Request,
    plane: P,
) -> Result<P::Started, StartError<P>> {
    let kind = plane.kind();
    let (slot, spec) = if plane.command_first() {
        let spec = command::<P>(grant, env, request, kind).await?;
        (reserve(plane.registry(), grant, kind)?, spec)
    } else {
        let slot = reserve(plane.registry(), grant, kind)?;
        (slot, command::<P>(grant, env, request, kind).await?)
    };
    plane.spawn(grant, spec, slot).await
}

/// A place under the grant's `max_processes` for a `kind` process (a
/// background process counts under the reference's default when the policy sets none).
fn reserve(registry: &Registry, grant: &Grant, kind: ExecKind) -> Result<Slot, ProcessError> {
    let limit = grant.limit(Limit::MaxProcesses).map(LimitValue::as_u64);
    match kind {
        ExecKind::Shell => registry.reserve(SlotKind::Shell, limit),
        ExecKind::Stream => registry.reserve(SlotKind::Stream, limit),
        ExecKind::Start => registry.reserve(SlotKind::Background, Some(limit.unwrap_or(DEFAULT_MAX_PROCESSES))),
    }
}

/// The checked command, built on the blocking pool when it may block.
async fn command<P: Plane>(
    grant: &Grant,
    env: &Arc<ChildEnv>,
    request: P::Request,
    kind: ExecKind,
) -> Result<ExecSpec, StartError<P>> {
    if !request.blocks() {
        return request.command(grant, env, kind);
    }
    let (grant, env) = (grant.clone(), Arc::clone(env));
    crate::blocking::run(move || request.command(&grant, &env, kind)).await
}

/// The caller as the process table's owner checks see it.
pub fn viewer(grant: &Grant) -> Viewer {
    Viewer::new(grant.identity(), owner::PROCESS_ADMIN)
}

/// The grant's `max_output_bytes`, if it sets one.
pub fn max_output(grant: &Grant) -> Option<usize> {
    grant.limit(Limit::MaxOutputBytes).map(|v| usize::try_from(v.as_u64()).unwrap_or(usize::MAX))
}

/// `POST /shell` (and MCP's `run`): run to completion, keeping at most
/// `max_output` bytes of each stream.
pub struct RunToEnd<'a> {
    /// The daemon's processes.
    pub processes: &'a Processes,
    /// Bytes kept of each stream (`None`: the default).
    pub max_output: Option<usize>,
}

impl Plane for RunToEnd<'_> {
    type Started = ShellResult;
    type Request = ExecInput;

    fn kind(&self) -> ExecKind {
        ExecKind::Shell
    }

    fn registry(&self) -> &Registry {
        self.processes.registry()
    }

    async fn spawn(self, _: &Grant, spec: ExecSpec, slot: Slot) -> Result<ShellResult, ProcessError> {
        let result = shell::run(spec, self.max_output).await;
        drop(slot);
        result
    }
}

/// `POST /shell/stream`: a run a client can resume, attached from its start.
pub struct StreamLines<'a> {
    /// The daemon's processes (and their resumable runs).
    pub processes: &'a Processes,
    /// Ends the run when the server shuts down.
    pub shutdown: CancellationToken,
}

impl Plane for StreamLines<'_> {
    type Started = Attached;
    type Request = ExecInput;

    fn kind(&self) -> ExecKind {
        ExecKind::Stream
    }

    fn registry(&self) -> &Registry {
        self.processes.registry()
    }

    async fn spawn(self, grant: &Grant, spec: ExecSpec, slot: Slot) -> Result<Attached, ProcessError> {
        let streams = Arc::clone(self.processes.streams());
        let run = streams.create(&viewer(grant));
        let attached = run.attach(None).map_err(|e| ProcessError::Invalid(e.to_string()))?;
        let retired = Arc::clone(&run);
        shell::stream_into(run, spec, max_output(grant), self.shutdown, move || {
            drop(slot);
            streams.retire(retired);
        });
        Ok(attached)
    }
}

/// MCP's `run` with progress: the run's events as they come; dropping the
/// receiver kills the process group.
pub struct Events<'a> {
    /// The daemon's processes.
    pub processes: &'a Processes,
    /// Ends the run when the server shuts down.
    pub shutdown: CancellationToken,
}

impl Plane for Events<'_> {
    type Started = (mpsc::Receiver<ShellEvent>, Option<f64>);
    type Request = ExecInput;

    fn kind(&self) -> ExecKind {
        ExecKind::Shell
    }

    fn registry(&self) -> &Registry {
        self.processes.registry()
    }

    async fn spawn(self, _: &Grant, spec: ExecSpec, slot: Slot) -> Result<Self::Started, ProcessError> {
        let timeout = spec.timeout;
        Ok((shell::stream(spec, None, self.shutdown, move || drop(slot)), timeout))
    }
}

/// `POST /process/start`: a background process in the native table.
pub struct Background<'a> {
    /// The daemon's processes.
    pub processes: &'a Processes,
    /// Capture its output for `/process/{pid}/output`.
    pub capture: bool,
    /// Give it a stdin pipe.
    pub stdin: bool,
}

impl Plane for Background<'_> {
    type Started = Started;
    type Request = ExecInput;

    fn kind(&self) -> ExecKind {
        ExecKind::Start
    }

    fn registry(&self) -> &Registry {
        self.processes.registry()
    }

    async fn spawn(self, grant: &Grant, spec: ExecSpec, slot: Slot) -> Result<Started, ProcessError> {
        self.processes.start(&viewer(grant), spec, self.capture, self.stdin, max_output(grant), slot).await
    }
}

//! A running interpreter and the task that owns it.
//!
//! [`Kernel::start`] spawns the language's interpreter with its driver and
//! waits for the driver's `ready`. A task then owns the process and its
//! pipes: it runs one execution at a time, streams its output into the
//! execution's bounded sink (a slow client pauses the interpreter, nothing
//! piles up), and between executions reads and drops stray output so a
//! background writer never blocks. A timeout or a client that went away
//! interrupts the execution with SIGINT; an execution that ignores two
//! interrupts gets its interpreter killed. When the interpreter dies, the
//! running execution is told so and [`Kernel::death`] says why.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use abx_wire::api::code::OutputLine;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant};

use super::io::{Item, KernelIo};
use super::language::Language;
use super::pipe::PipeWriter;
use super::protocol::{encode_exec, error_line, output_line, result_from_bundle, timeout_error, Event};
use super::spawn::{spawn, ExitWatch, Process, SpawnSpec};
use crate::process::ExitStatus;

/// How long a driver may take to say it is ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Executions waiting for a busy kernel.
const QUEUE: usize = 64;
/// Lines read ahead of a slow client.
const READ_AHEAD: usize = 8;
/// Waits after the first and second interrupt before the next step.
const ESCALATION: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(3)];
/// Stderr kept to explain a start failure.
const START_DIAGNOSTIC_BYTES: usize = 2048;

/// What to start.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    /// The language.
    pub language: Language,
    /// The interpreter program.
    pub program: PathBuf,
    /// Working directory.
    pub cwd: PathBuf,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// The user it runs as, `None`: the daemon's.
    pub run_as: Option<crate::syscalls::RunAs>,
}

/// One execution for a kernel.
pub struct Execution {
    /// The execution counter (also the cell number in tracebacks).
    pub seq: u64,
    /// Source code.
    pub code: String,
    /// Variables set for this execution only.
    pub env: Vec<(String, String)>,
    /// Interrupt after this long.
    pub timeout: Option<Duration>,
    /// Where output lines go; closing it interrupts the execution.
    pub sink: mpsc::Sender<OutputLine>,
    /// Kept alive until the execution is over (activity tracking).
    pub hold: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution").field("seq", &self.seq).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// Why a kernel stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Death {
    /// The interpreter exited by itself.
    Exited(ExitStatus),
    /// It ignored interrupts and was killed.
    Unresponsive,
    /// Its driver broke the protocol.
    Broken(String),
    /// It was stopped on purpose.
    Stopped(StopReason),
}

/// Why a kernel was stopped on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The context is being restarted.
    Restart,
    /// The context was deleted or expired.
    Delete,
    /// The server is shutting down.
    Shutdown,
}

/// Why a kernel could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The interpreter could not be spawned.
    #[error("{0}")]
    Spawn(#[from] std::io::Error),
    /// It ended or broke before its driver was ready.
    #[error("{0}")]
    Failed(String),
    /// Its driver reported that a program it needs is missing.
    #[error("{0} is missing")]
    Missing(String),
}

/// A handle to a running kernel; dropping it stops the kernel.
#[derive(Debug)]
pub struct Kernel {
    commands: mpsc::Sender<Execution>,
    stop: watch::Sender<Option<StopReason>>,
    death: watch::Receiver<Option<Death>>,
    pid: i32,
}

/// An execution the kernel did not take.
#[derive(Debug)]
pub enum Refused {
    /// The kernel has stopped.
    Dead(Execution),
    /// Too many executions are already waiting.
    Busy(Execution),
}

impl Kernel {
    /// Starts `spec`'s interpreter and waits until its driver is ready.
    ///
    /// # Errors
    /// The interpreter cannot be spawned, exits, or is not ready within [`START_TIMEOUT`].
    pub async fn start(spec: KernelSpec) -> Result<Kernel, StartError> {
        let spawned = spawn(SpawnSpec {
            program: spec.program.clone(),
            args: spec.language.driver_args()?,
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            channels: true,
            run_as: spec.run_as.clone(),
        })?;
        let (process, mut io, control) =
            KernelIo::split(spawned).ok_or_else(|| StartError::Failed("no command pipes".into()))?;
        let mut exit = process.exit_watch();
        let mut diagnostic = String::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            tokio::select! {
                item = io.next() => match item {
                    Item::Event(Event::Ready) => break,
                    Item::Event(Event::Missing { program }) => return Err(StartError::Missing(program)),
                    Item::Event(_) => {}
                    Item::Output(_, text) => {
                        diagnostic.push_str(&text);
                        let excess = diagnostic.len().saturating_sub(START_DIAGNOSTIC_BYTES);
                        let cut = (excess..diagnostic.len()).find(|&i| diagnostic.is_char_boundary(i)).unwrap_or(0);
                        diagnostic.drain(..cut);
                    }
                    Item::Closed | Item::Broken(_) => {
                        let info = exit.exited().await;
                        return Err(StartError::Failed(failure(info, &diagnostic)));
                    }
                },
                info = exit.exited() => return Err(StartError::Failed(failure(info, &diagnostic))),
                () = sleep_until(deadline) => {
                    return Err(StartError::Failed(format!("its driver was not ready after {} s", START_TIMEOUT.as_secs())));
                }
            }
        }
        let pid = process.pid();
        let (commands, commands_rx) = mpsc::channel(QUEUE);
        let (stop, stop_rx) = watch::channel(None);
        let (death_tx, death) = watch::channel(None);
        let actor = Actor { language: spec.language, process, exit, io, control, commands: commands_rx, stop: stop_rx };
        tokio::spawn(async move {
            let why = actor.run().await;
            let _ = death_tx.send(Some(why));
        });
        Ok(Kernel { commands, stop, death, pid })
    }

    /// Queues an execution.
    ///
    /// # Errors
    /// The execution back when the kernel is dead or its queue is full.
    pub fn submit(&self, execution: Execution) -> Result<(), Refused> {
        self.commands.try_send(execution).map_err(|e| match e {
            mpsc::error::TrySendError::Full(x) => Refused::Busy(x),
            mpsc::error::TrySendError::Closed(x) => Refused::Dead(x),
        })
    }

    /// Why the kernel stopped, once it has.
    pub fn death(&self) -> Option<Death> {
        self.death.borrow().clone()
    }

    /// Stops the kernel (its process group is killed).
    pub fn stop(&self, reason: StopReason) {
        self.stop.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(reason);
            }
            first
        });
    }

    /// Waits until the kernel has stopped.
    pub async fn stopped(&self) {
        let mut death = self.death.clone();
        let _ = death.wait_for(Option::is_some).await;
    }

    /// The interpreter's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.stop(StopReason::Delete);
    }
}

fn failure(info: ExitStatus, diagnostic: &str) -> String {
    let diagnostic = diagnostic.trim();
    if diagnostic.is_empty() {
        format!("it ended with {info} before its driver was ready")
    } else {
        format!("it ended with {info} before its driver was ready: {diagnostic}")
    }
}

/// How the select loop of an execution ended early.
enum Ended {
    /// The event pipe closed.
    Closed,
    /// The kernel died.
    Dead(Death),
}

/// Why an execution is being interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Timeout(Duration),
    Abandoned,
}

struct Interrupting {
    cause: Cause,
    sent: usize,
    next_at: Instant,
}

/// The task that owns one interpreter.
struct Actor {
    language: Language,
    process: Process,
    exit: ExitWatch,
    io: KernelIo,
    control: PipeWriter,
    commands: mpsc::Receiver<Execution>,
    stop: watch::Receiver<Option<StopReason>>,
}

impl Actor {
    async fn run(mut self) -> Death {
        let death = loop {
            tokio::select! {
                command = self.commands.recv() => match command {
                    None => break Death::Stopped(StopReason::Delete),
                    Some(execution) if execution.sink.is_closed() => {}
                    Some(execution) => {
                        if let Some(death) = self.execute(execution).await {
                            break death;
                        }
                    }
                },
                _ = self.stop.changed() => break Death::Stopped(self.stop_reason()),
                item = self.io.next() => match item {
                    Item::Event(_) | Item::Output(..) => {}
                    Item::Closed => break Death::Exited(self.reap().await),
                    Item::Broken(why) => break Death::Broken(why),
                },
                info = self.exit.exited() => break Death::Exited(info),
            }
        };
        self.process.signal_group(Signal::SIGKILL);
        tracing::debug!(language = self.language.as_str(), pid = self.process.pid(), ?death, "kernel stopped");
        self.commands.close();
        while let Ok(waiting) = self.commands.try_recv() {
            let line = error_line("ContextDied", "the context's interpreter stopped before this execution started", "");
            tokio::spawn(async move {
                let _ = waiting.sink.send(line).await;
            });
        }
        death
    }

    fn stop_reason(&self) -> StopReason {
        self.stop.borrow().unwrap_or(StopReason::Delete)
    }

    /// Runs one execution; `Some` when the kernel died during it.
    async fn execute(&mut self, execution: Execution) -> Option<Death> {
        let Execution { seq, code, env, timeout, sink, hold: _hold } = execution;
        let mut pending = VecDeque::from([OutputLine::NumberOfExecutions { execution_count: seq }]);
        let command = encode_exec(seq, &env, &code);
        tokio::select! {
            written = self.control.write_all(&command) => if let Err(e) = written {
                return Some(self.died(Death::Broken(format!("cannot send the code: {e}")), pending, None, sink));
            },
            info = self.exit.exited() => return Some(self.died(Death::Exited(info), pending, None, sink)),
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut interrupting: Option<Interrupting> = None;
        let mut abandoned = false;
        let mut finished = false;
        let mut errored = false;
        let mut drained = false;
        loop {
            if finished && (pending.is_empty() || abandoned) {
                if let (Some(Interrupting { cause: Cause::Timeout(t), .. }), false, false) =
                    (&interrupting, errored, abandoned)
                {
                    let _ = sink.send(timeout_error(*t, String::new())).await;
                }
                return None;
            }
            let escalate_at = interrupting.as_ref().map(|i| i.next_at);
            let cause = interrupting.as_ref().map(|i| i.cause);
            let ended: Option<Ended> = tokio::select! {
                biased;
                _ = self.stop.changed() => Some(Ended::Dead(Death::Stopped(self.stop_reason()))),
                permit = sink.reserve(), if !pending.is_empty() && !abandoned => {
                    match permit {
                        Ok(permit) => {
                            if let Some(line) = pending.pop_front() {
                                permit.send(line);
                            }
                        }
                        Err(_) => abandoned = true,
                    }
                    None
                }
                () = sink.closed(), if !abandoned => {
                    abandoned = true;
                    pending.clear();
                    if !finished && interrupting.is_none() {
                        interrupting = Some(self.interrupt(Cause::Abandoned));
                    }
                    None
                }
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() && interrupting.is_none() && !finished => {
                    interrupting = timeout.map(|t| self.interrupt(Cause::Timeout(t)));
                    None
                }
                () = sleep_until(escalate_at.unwrap_or_else(Instant::now)), if escalate_at.is_some() && !finished => {
                    match interrupting.as_mut() {
                        Some(state) if state.sent >= ESCALATION.len() => Some(Ended::Dead(Death::Unresponsive)),
                        Some(state) => {
                            self.process.signal_group(Signal::SIGINT);
                            state.next_at = Instant::now() + ESCALATION[state.sent];
                            state.sent += 1;
                            None
                        }
                        None => None,
                    }
                }
                item = self.io.next(), if !finished && (abandoned || pending.len() < READ_AHEAD) => match item {
                    Item::Event(Event::Done { seq: done }) if done == seq => {
                        finished = true;
                        None
                    }
                    Item::Event(Event::Done { .. } | Event::Ready | Event::Missing { .. }) => None,
                    Item::Event(Event::Out { s, text }) | Item::Output(s, text) => {
                        if !abandoned {
                            pending.push_back(output_line(s, text));
                        }
                        None
                    }
                    Item::Event(Event::Result { main, data }) => {
                        if !abandoned {
                            pending.push_back(OutputLine::Result(Box::new(result_from_bundle(main, data))));
                        }
                        None
                    }
                    Item::Event(Event::Error { name, value, traceback }) => {
                        errored = true;
                        if !abandoned {
                            pending.push_back(match cause {
                                Some(Cause::Timeout(t)) => timeout_error(t, traceback),
                                _ => error_line(&name, value, traceback),
                            });
                        }
                        None
                    }
                    Item::Closed => Some(Ended::Closed),
                    Item::Broken(why) => Some(Ended::Dead(Death::Broken(why))),
                },
                info = self.exit.exited() => Some(Ended::Dead(Death::Exited(info))),
            };
            match ended {
                None if finished && !drained => {
                    // Output written by subprocesses before the driver finished is in the pipes already.
                    drained = true;
                    while let Some(Item::Output(stream, text)) = self.io.output_now() {
                        if !abandoned {
                            pending.push_back(output_line(stream, text));
                        }
                    }
                }
                None => {}
                Some(Ended::Closed) => {
                    let info = self.reap().await;
                    return Some(self.died(Death::Exited(info), pending, cause, sink));
                }
                Some(Ended::Dead(death)) => {
                    if death == Death::Unresponsive {
                        tracing::warn!(
                            pid = self.process.pid(),
                            "an execution ignored two interrupts; killing its interpreter"
                        );
                    }
                    return Some(self.died(death, pending, cause, sink));
                }
            }
        }
    }

    /// The exit status once the event pipe closed: the driver is exiting, or is killed if it lingers.
    async fn reap(&mut self) -> ExitStatus {
        match tokio::time::timeout(Duration::from_millis(500), self.exit.exited()).await {
            Ok(info) => info,
            Err(_) => {
                self.process.signal_group(Signal::SIGKILL);
                self.exit.exited().await
            }
        }
    }

    fn interrupt(&self, cause: Cause) -> Interrupting {
        tracing::debug!(pid = self.process.pid(), ?cause, "interrupting an execution");
        self.process.signal_group(Signal::SIGINT);
        Interrupting { cause, sent: 1, next_at: Instant::now() + ESCALATION[0] }
    }

    /// Reports the kernel's death to the execution that was running, and returns it.
    fn died(
        &mut self,
        death: Death,
        mut pending: VecDeque<OutputLine>,
        cause: Option<Cause>,
        sink: mpsc::Sender<OutputLine>,
    ) -> Death {
        self.process.signal_group(Signal::SIGKILL);
        for item in self.io.drain_now() {
            match item {
                Item::Event(Event::Out { s, text }) | Item::Output(s, text) => pending.push_back(output_line(s, text)),
                Item::Event(Event::Result { main, data }) => {
                    pending.push_back(OutputLine::Result(Box::new(result_from_bundle(main, data))))
                }
                Item::Event(Event::Error { name, value, traceback }) => {
                    pending.push_back(error_line(&name, value, traceback))
                }
                _ => {}
            }
        }
        let language = self.language.as_str();
        let line = match (&death, cause) {
            (Death::Unresponsive, Some(Cause::Timeout(t))) => error_line(
                "TimeoutError",
                format!(
                    "the execution timed out after {} s and ignored two interrupts, so its interpreter was killed; \
                     the context's state is lost and the next execution starts a fresh interpreter",
                    t.as_secs_f64()
                ),
                "",
            ),
            (Death::Unresponsive, _) => error_line(
                "ContextDied",
                "the execution ignored two interrupts, so its interpreter was killed; the context's state is lost \
                 and the next execution starts a fresh interpreter",
                "",
            ),
            (Death::Exited(info), _) => error_line(
                "ContextDied",
                format!(
                    "the {language} interpreter of this context exited ({info}); its state is lost and the next \
                     execution starts a fresh interpreter"
                ),
                "",
            ),
            (Death::Broken(why), _) => error_line(
                "ContextDied",
                format!(
                    "the {language} interpreter of this context stopped answering correctly ({why}); it was killed"
                ),
                "",
            ),
            (Death::Stopped(StopReason::Restart), _) => {
                error_line("ContextRestarting", "the context was restarted during this execution", "")
            }
            (Death::Stopped(StopReason::Delete), _) => {
                error_line("ContextDeleted", "the context was deleted during this execution", "")
            }
            (Death::Stopped(StopReason::Shutdown), _) => {
                error_line("ServerShutdown", "the server is shutting down", "")
            }
        };
        pending.push_back(line);
        if !sink.is_closed() {
            tokio::spawn(async move {
                for line in pending {
                    if sink.send(line).await.is_err() {
                        break;
                    }
                }
            });
        }
        death
    }
}

//! Detached code executions: this server's extension of `POST /execute`
//! that lets a client leave a running execution and come back to it.
//!
//! By default an execution belongs to its connection: dropping it
//! interrupts the execution, as the code-interpreter server does (the
//! `e2b-code-interpreter` SDK relies on it). An execution started with
//! `X-Abx-Detach: keep` is instead kept here under a numeric id, owned by
//! the identity that started it, and runs to its end whether or not a
//! client listens. Its lines (every line but `keepalive` and
//! `end_of_execution`, each as the exact NDJSON text sent) are numbered in
//! one sequence and held in a [`Capture`] of [`KEEP_BYTES`]:
//!
//! - while a connection is attached, the execution waits for it (the
//!   capture's backpressure, released after the capture's bounds), so an
//!   attached reader loses nothing;
//! - while none is, the execution never waits: over the budget the oldest
//!   lines go, and a connection that asks for them later first gets a
//!   `gap` line with their exact count and bytes.
//!
//! A connection attaches after an [`ExecutionCursor`] (`<execution>:<lines>:<bytes>`,
//! the numbered lines it has received or skipped over a gap, and their
//! bytes with newlines), gets the held lines after it, then follows live,
//! and gets `end_of_execution` only once the execution ended and every line
//! was delivered. An ended execution is forgotten after [`KEEP_GRACE`]
//! without a connection; at most [`MAX_KEPT`] are kept at once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use abx_wire::api::code::OutputLine;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::CodeError;
use crate::policy::Viewer;
use crate::process::capture::{Capture, Lost, SeekError, Subscription};
use crate::process::output::Stream;
use crate::resume::{parse_cursor, MalformedCursor, Owned, Presence, Registry};

/// Line bytes a detached execution holds for its client.
pub const KEEP_BYTES: usize = 4 * 1024 * 1024;
/// How long an ended execution stays re-attachable without a connection.
pub const KEEP_GRACE: Duration = Duration::from_secs(600);
/// Detached executions kept at once (running, or ended within the grace).
pub const MAX_KEPT: usize = 16;
/// Line bytes read at once for a connection.
const BATCH_BYTES: usize = 64 * 1024;

/// A position in an execution's numbered lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionCursor {
    /// The execution.
    pub execution: u64,
    /// Numbered lines received (or skipped over a gap).
    pub lines: u64,
    /// Their bytes, each line with its newline.
    pub bytes: u64,
}

impl ExecutionCursor {
    /// Parses `<execution>:<lines>:<bytes>`.
    ///
    /// # Errors
    /// [`CodeError::BadCursor`].
    pub fn parse(text: &str) -> Result<ExecutionCursor, CodeError> {
        let [execution, lines, bytes] = parse_cursor(text).map_err(|MalformedCursor(shown)| {
            CodeError::BadCursor(format!("cursor {shown:?} is not <execution>:<lines>:<bytes>"))
        })?;
        Ok(ExecutionCursor { execution, lines, bytes })
    }
}

impl std::fmt::Display for ExecutionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.execution, self.lines, self.bytes)
    }
}

/// One detached execution; see the module documentation.
#[derive(Debug)]
pub struct KeptExecution {
    id: u64,
    owner: String,
    lines: Arc<Capture>,
    presence: Presence,
}

impl Owned for KeptExecution {
    fn owner(&self) -> &str {
        &self.owner
    }
}

impl KeptExecution {
    /// Its id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether it ended (its last line is held or delivered).
    fn ended(&self) -> bool {
        !self.lines.position().1
    }

    /// Attaches a connection after `cursor` (from the first line without one).
    ///
    /// # Errors
    /// [`CodeError::BadCursor`] for another execution's cursor or a
    /// position this execution never reached.
    pub fn attach(self: &Arc<Self>, cursor: Option<ExecutionCursor>) -> Result<Attached, CodeError> {
        let attached = self.attach_at_start();
        if let Some(cursor) = cursor {
            if cursor.execution != self.id {
                return Err(CodeError::BadCursor(format!("cursor {cursor} is not one of execution {}", self.id)));
            }
            attached.subscription.seek(cursor.lines, cursor.bytes).map_err(|why| {
                let (lines, _) = self.lines.position();
                let bytes = self.lines.total_bytes();
                let why = match why {
                    SeekError::Future => "past what it produced",
                    SeekError::Mismatch => "not a line boundary of it",
                };
                CodeError::BadCursor(format!(
                    "cursor {cursor} is {why}: execution {} has produced {lines} lines, {bytes} bytes",
                    self.id
                ))
            })?;
        }
        Ok(attached)
    }

    /// Attaches a connection before the first line.
    fn attach_at_start(self: &Arc<Self>) -> Attached {
        let subscription = self.lines.subscribe();
        self.presence.join();
        Attached { execution: Arc::clone(self), subscription, queue: VecDeque::new(), done: false }
    }
}

/// What a connection to a detached execution sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A numbered line: its NDJSON text with the newline.
    Line(Bytes),
    /// Lines between the cursor and the next line were no longer held.
    Gap(Lost),
    /// The execution ended and every line was delivered.
    End,
}

/// One connection's view of a detached execution; detaches when dropped.
#[derive(Debug)]
pub struct Attached {
    execution: Arc<KeptExecution>,
    subscription: Subscription,
    queue: VecDeque<Delivery>,
    done: bool,
}

impl Attached {
    /// The execution's id.
    pub fn execution_id(&self) -> u64 {
        self.execution.id
    }

    /// The next thing to send; `None` after [`Delivery::End`]. Cancel-safe.
    pub async fn next(&mut self) -> Option<Delivery> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let batch = self.subscription.read(BATCH_BYTES);
            if !batch.lost.is_none() {
                self.queue.push_back(Delivery::Gap(batch.lost));
            }
            self.queue.extend(batch.events.into_iter().map(|e| Delivery::Line(e.bytes)));
            if self.queue.is_empty() {
                if !batch.open {
                    self.queue.push_back(Delivery::End);
                    self.done = true;
                } else {
                    self.subscription.wait().await;
                }
            }
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.execution.presence.leave();
    }
}

/// The detached executions of the daemon.
#[derive(Debug, Default)]
pub struct Executions {
    kept: Registry<KeptExecution>,
}

impl Executions {
    /// Makes room for and registers a detached execution owned by `owner`
    /// (its lines come with [`Executions::run`]).
    ///
    /// # Errors
    /// [`CodeError::TooManyExecutions`] when [`MAX_KEPT`] are kept and none
    /// of them is ended and unattended.
    pub fn admit(&self, owner: &Viewer) -> Result<Arc<KeptExecution>, CodeError> {
        let ids = self.kept.ids();
        let mut excess = (ids.len() + 1).saturating_sub(MAX_KEPT);
        for id in ids {
            if excess == 0 {
                break;
            }
            let idle = self.kept.find(id, &Viewer::admin()).is_some_and(|k| k.ended() && k.presence.count() == 0);
            if idle {
                self.kept.remove(id);
                excess -= 1;
            }
        }
        if excess > 0 {
            return Err(CodeError::TooManyExecutions(MAX_KEPT));
        }
        Ok(self.kept.insert(|id| KeptExecution {
            id,
            owner: owner.id().to_string(),
            lines: Arc::new(Capture::new(KEEP_BYTES, 1)),
            presence: Presence::default(),
        }))
    }

    /// Forgets an admitted execution that did not start.
    pub fn forget(&self, execution: &KeptExecution) {
        self.kept.remove(execution.id);
    }

    /// Feeds `lines` into `execution` until they end, then keeps it for
    /// [`KEEP_GRACE`] without a connection; returns the first connection.
    pub fn run(self: &Arc<Self>, execution: &Arc<KeptExecution>, mut lines: mpsc::Receiver<OutputLine>) -> Attached {
        let first = execution.attach_at_start();
        let (this, execution) = (Arc::clone(self), Arc::clone(execution));
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                let Ok(mut text) = serde_json::to_vec(&line) else { continue };
                text.push(b'\n');
                execution.lines.push(Stream::Stdout, Bytes::from(text)).await;
            }
            execution.lines.close_stream();
            execution.presence.abandoned(KEEP_GRACE).await;
            this.kept.remove(execution.id);
        });
        first
    }

    /// Attaches `viewer` to execution `id` after `cursor`.
    ///
    /// # Errors
    /// [`CodeError::ExecutionNotFound`] for an id that is not a kept
    /// execution of `viewer`'s; the cursor's errors ([`KeptExecution::attach`]).
    pub fn attach(&self, id: &str, cursor: Option<&str>, viewer: &Viewer) -> Result<Attached, CodeError> {
        let execution = id
            .parse::<u64>()
            .ok()
            .and_then(|n| self.kept.find(n, viewer))
            .ok_or_else(|| CodeError::ExecutionNotFound(id.chars().take(64).collect()))?;
        let cursor = cursor.map(ExecutionCursor::parse).transpose()?;
        execution.attach(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdout(i: usize) -> OutputLine {
        OutputLine::Stdout { text: format!("{i}\n"), timestamp: "t".into() }
    }

    async fn drain(attached: &mut Attached) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Some(item) = attached.next().await {
            out.push(item);
        }
        out
    }

    #[test]
    fn cursors_parse_and_print() {
        let cursor = ExecutionCursor::parse(" 7:2:40 ").expect("a cursor");
        assert_eq!((cursor.execution, cursor.lines, cursor.bytes, cursor.to_string()), (7, 2, 40, "7:2:40".into()));
        for bad in ["", "7", "7:2", "7:2:40:1", "a:1:2", "7:-1:0"] {
            assert!(matches!(ExecutionCursor::parse(bad), Err(CodeError::BadCursor(_))), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_reattach_gets_the_rest_then_the_end_and_bad_cursors_are_refused() {
        let executions = Arc::new(Executions::default());
        let kept = executions.admit(&Viewer::admin()).expect("room");
        let (tx, rx) = mpsc::channel(4);
        let first = executions.run(&kept, rx);
        drop(first);
        for i in 0..3 {
            tx.send(stdout(i)).await.expect("send");
        }
        drop(tx);
        kept.lines.wait_beyond(u64::MAX).await;
        let id = kept.id();
        let line0 = serde_json::to_vec(&stdout(0)).expect("json").len() as u64 + 1;
        let cursor = format!("{id}:1:{line0}");
        let mut again = executions.attach(&id.to_string(), Some(&cursor), &Viewer::admin()).expect("attach");
        let got = drain(&mut again).await;
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(matches!(&got[0], Delivery::Line(b) if b.starts_with(br#"{"type":"stdout","text":"1\n""#)));
        assert_eq!(got[2], Delivery::End);
        let bad = |c: String| executions.attach(&id.to_string(), Some(&c), &Viewer::admin()).map(|_| ());
        assert!(
            matches!(bad(format!("{id}:9:0")), Err(CodeError::BadCursor(m)) if m.contains("past what it produced"))
        );
        assert!(matches!(bad(format!("{id}:1:{}", line0 + 1)), Err(CodeError::BadCursor(_))));
        assert!(matches!(bad(format!("{}:1:{line0}", id + 1)), Err(CodeError::BadCursor(_))));
        assert!(matches!(executions.attach("nope", None, &Viewer::admin()), Err(CodeError::ExecutionNotFound(_))));
    }

    #[tokio::test]
    async fn an_unattended_execution_runs_on_and_a_late_reader_gets_an_exact_gap() {
        let executions = Arc::new(Executions::default());
        let kept = executions.admit(&Viewer::admin()).expect("room");
        let (tx, rx) = mpsc::channel(4);
        drop(executions.run(&kept, rx));
        let line = OutputLine::Stdout { text: "x".repeat(1000), timestamp: "t".into() };
        let size = serde_json::to_vec(&line).expect("json").len() as u64 + 1;
        let total = 2 * KEEP_BYTES as u64 / size;
        for _ in 0..total {
            tx.send(line.clone()).await.expect("never held back without a reader");
        }
        drop(tx);
        kept.lines.wait_beyond(u64::MAX).await;
        let mut late = executions.attach(&kept.id().to_string(), None, &Viewer::admin()).expect("attach");
        let got = drain(&mut late).await;
        let Delivery::Gap(lost) = got[0] else { panic!("a gap first: {:?}", got[0]) };
        let held = got.iter().filter(|d| matches!(d, Delivery::Line(_))).count() as u64;
        assert_eq!((lost.events + held, lost.bytes), (total, lost.events * size));
        assert_eq!(got.last(), Some(&Delivery::End));
    }

    #[test]
    fn at_most_max_kept_and_ended_unattended_ones_make_room() {
        let executions = Executions::default();
        let kept: Vec<_> = (0..MAX_KEPT).map(|_| executions.admit(&Viewer::admin()).expect("room")).collect();
        assert!(matches!(executions.admit(&Viewer::admin()), Err(CodeError::TooManyExecutions(_))));
        kept[3].lines.close_stream();
        assert!(executions.admit(&Viewer::admin()).is_ok());
        assert!(executions.kept.find(kept[3].id(), &Viewer::admin()).is_none());
    }
}

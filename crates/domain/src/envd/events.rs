//! The event streams of a process, as `Start` and `Connect` send them:
//! `start`, the output still held, live output, then `end`, with exits
//! described as envd (Go's `ProcessState`) describes them. A stream that
//! lost output ends with a [`Delivery::Truncated`] marker instead of `end`
//! (the edge sends it as a Connect `data_loss` error).

use abx_wire::api::envd::process::{EndEvent, Output, ProcessEvent};
use futures_util::Stream;
use nix::sys::signal::Signal;
use std::collections::VecDeque;
use tokio::sync::watch;

use crate::process::capture::{Lost, Release, Subscription};
use crate::process::output::Stream as Pipe;
use crate::process::ExitStatus;
use crate::pty::Update;

/// The end event of an exit, as envd (Go's `ProcessState`) reports it.
pub fn end_event(status: ExitStatus) -> EndEvent {
    match status {
        ExitStatus::Exited(code) => EndEvent {
            exit_code: code,
            exited: true,
            status: format!("exit status {code}"),
            error: (code != 0).then(|| format!("exit status {code}")),
        },
        ExitStatus::Signaled(signal) => {
            let text = format!("signal: {}", signal_name(signal));
            EndEvent { exit_code: -1, exited: false, status: text.clone(), error: Some(text) }
        }
    }
}

/// Go's name of a signal (`killed`, `terminated`, ...).
fn signal_name(signal: i32) -> String {
    let name = match Signal::try_from(signal) {
        Ok(Signal::SIGKILL) => "killed",
        Ok(Signal::SIGTERM) => "terminated",
        Ok(Signal::SIGINT) => "interrupt",
        Ok(Signal::SIGHUP) => "hangup",
        Ok(Signal::SIGQUIT) => "quit",
        Ok(Signal::SIGABRT) => "aborted",
        Ok(Signal::SIGSEGV) => "segmentation fault",
        Ok(Signal::SIGPIPE) => "broken pipe",
        Ok(Signal::SIGBUS) => "bus error",
        Ok(Signal::SIGFPE) => "floating point exception",
        Ok(Signal::SIGUSR1) => "user defined signal 1",
        Ok(Signal::SIGUSR2) => "user defined signal 2",
        Ok(Signal::SIGALRM) => "alarm clock",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// What a process stream carries: an event, or the loss marker that ends
/// the stream in place of `end` when output did not reach it.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// An event to send.
    Event(ProcessEvent),
    /// Output was lost: what, why, and how the process ended. Sent last.
    Truncated(String),
}

/// Output of a process kept for replay, bytes.
pub const REPLAY_BYTES: usize = 4 * 1024 * 1024;

/// Most output bytes read from the capture at once (one batch of events).
const READ_BATCH: usize = 256 * 1024;

/// Why `lost` output did not reach a subscription, and how the process ended.
fn loss_report(lost: Lost, released: Option<Release>, end: &EndEvent) -> String {
    let why = match released {
        Some(release) => format!("this stream stopped holding the process back: {}", release.describe()),
        None => format!("it left the {} MiB replay buffer before this stream read it", REPLAY_BYTES >> 20),
    };
    format!(
        "{} bytes of output ({} events) were lost: {why}; the process ended with {}",
        lost.bytes, lost.events, end.status
    )
}

/// Output from the subscription (from the first event of the output), then
/// the end once the process ended and its output is drained; the end is
/// replaced by a [`Delivery::Truncated`] marker when anything was lost.
pub fn pipe_events(output: Subscription, end: watch::Receiver<Option<EndEvent>>) -> impl Stream<Item = Delivery> {
    let state = (output, end, VecDeque::new(), false);
    futures_util::stream::unfold(state, |(output, mut end, mut pending, done)| async move {
        if done {
            return None;
        }
        loop {
            if let Some(event) = pending.pop_front() {
                return Some((Delivery::Event(event), (output, end, pending, false)));
            }
            let finished = end.borrow_and_update().clone();
            let read = output.read(READ_BATCH);
            pending.extend(read.events.into_iter().map(|e| {
                let bytes = e.bytes.to_vec();
                ProcessEvent::Data(match e.stream {
                    Pipe::Stdout => Output::Stdout(bytes),
                    Pipe::Stderr => Output::Stderr(bytes),
                })
            }));
            if !pending.is_empty() {
                continue;
            }
            if let Some(event) = finished {
                let lost = output.lost();
                let last = if lost.is_none() {
                    Delivery::Event(ProcessEvent::End(event))
                } else {
                    Delivery::Truncated(loss_report(lost, output.released(), &event))
                };
                return Some((last, (output, end, pending, true)));
            }
            if read.open {
                tokio::select! {
                    () = output.wait() => {}
                    _ = end.changed() => {}
                }
            } else if end.changed().await.is_err() {
                // The output is complete and the end will never come (the registry is gone).
                return None;
            }
        }
    })
}

/// Why `skipped` bytes of a terminal's output did not reach a stream, and how it ended.
fn terminal_loss_report(skipped: u64, end: &EndEvent) -> String {
    format!(
        "{skipped} bytes of terminal output were lost: they left the terminal's scrollback before this \
         stream read them; the process ended with {}",
        end.status
    )
}

/// A terminal's scrollback, then live output, then the end; the end is
/// replaced by a [`Delivery::Truncated`] marker when output the stream
/// never read had already left the scrollback (a `Connect` to a terminal
/// that wrote more than its scrollback holds, or a reader lapped by it).
pub fn terminal_events(attachment: crate::pty::Attachment) -> impl Stream<Item = Delivery> {
    let lost = attachment.lost_before_attach();
    futures_util::stream::unfold(Some((attachment, lost)), |state| async move {
        let (mut attachment, mut lost) = state?;
        loop {
            match attachment.next().await {
                Update::Output { text, skipped, .. } => {
                    lost += skipped;
                    if !text.is_empty() {
                        let data = ProcessEvent::Data(Output::Pty(text.into_bytes()));
                        return Some((Delivery::Event(data), Some((attachment, lost))));
                    }
                }
                Update::Exited(exit) => {
                    let end = end_event(exit);
                    let last = if lost == 0 {
                        Delivery::Event(ProcessEvent::End(end))
                    } else {
                        Delivery::Truncated(terminal_loss_report(lost, &end))
                    };
                    return Some((last, None));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_read_like_go_process_states() {
        let ok = end_event(ExitStatus::Exited(0));
        assert_eq!((ok.exit_code, ok.exited, ok.status.as_str(), ok.error), (0, true, "exit status 0", None));
        let failed = end_event(ExitStatus::Exited(3));
        assert_eq!(failed.error.as_deref(), Some("exit status 3"));
        let killed = end_event(ExitStatus::Signaled(9));
        assert_eq!((killed.exit_code, killed.exited, killed.status.as_str()), (-1, false, "signal: killed"));
        assert_eq!(end_event(ExitStatus::Signaled(15)).status, "signal: terminated");
    }
}

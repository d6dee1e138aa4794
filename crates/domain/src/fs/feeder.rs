//! The blocking writer an upload body feeds: frames go through a channel
//! of one to a task on a blocking thread that writes them to an
//! [`AtomicFile`], each acknowledged once written, so a body is never held
//! in memory beyond the frame in flight. Streamed uploads ([`super::upload`])
//! and base64 bodies ([`super::b64`]) both feed one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::write::AtomicFile;
use super::FsError;

/// What travels to the writer: a frame of the body, or its end.
enum Chunk {
    Data(Bytes),
    End,
}

/// The blocking writer's task; it answers what `finish` returned.
pub(super) type Writer<T> = tokio::task::JoinHandle<Result<T, FsError>>;

/// The sending side of a writer: frames go in, and each is acknowledged once written.
pub(super) struct Feeder {
    frames: mpsc::Sender<Chunk>,
    written: mpsc::Receiver<()>,
    in_flight: bool,
}

impl Feeder {
    /// Hands `data` to the writer and waits until it is written, so the
    /// body's buffer is free again (and still in the CPU cache) for the
    /// next frame. `false` when the writer stopped.
    pub(super) async fn write(&mut self, data: Bytes) -> bool {
        self.write_ahead(data).await && self.settle().await
    }

    /// Hands `data` to the writer once the previous piece is written, and
    /// returns without waiting for this one: the caller prepares the next
    /// piece while the writer writes. `false` when the writer stopped.
    pub(super) async fn write_ahead(&mut self, data: Bytes) -> bool {
        if !self.settle().await || self.frames.send(Chunk::Data(data)).await.is_err() {
            return false;
        }
        self.in_flight = true;
        true
    }

    /// Waits until the piece in flight, if any, is written.
    async fn settle(&mut self) -> bool {
        !std::mem::take(&mut self.in_flight) || self.written.recv().await.is_some()
    }

    /// Tells the writer every byte arrived.
    pub(super) async fn end(&self) {
        let _ = self.frames.send(Chunk::End).await;
    }
}

/// Starts the blocking writer; `finish(file, outcome)` runs on it when the
/// body is over: `Ok(true)` when all of it arrived, `Ok(false)` when it was
/// abandoned, `Err` when writing failed.
pub(super) fn spawn_writer<T, F>(mut file: AtomicFile, progress: Arc<AtomicU64>, finish: F) -> (Feeder, Writer<T>)
where
    T: Send + 'static,
    F: FnOnce(AtomicFile, Result<bool, FsError>) -> Result<T, FsError> + Send + 'static,
{
    let (frames, mut rx) = mpsc::channel::<Chunk>(1);
    let (done, written) = mpsc::channel::<()>(1);
    let writer = tokio::task::spawn_blocking(move || {
        let mut outcome = Ok(false);
        while let Some(chunk) = rx.blocking_recv() {
            match chunk {
                Chunk::Data(data) => {
                    let result = file.write_all(&data);
                    drop(data);
                    if let Err(e) = result {
                        outcome = Err(e);
                        break;
                    }
                    progress.store(file.written(), Ordering::Relaxed);
                    let _ = done.blocking_send(());
                }
                Chunk::End => {
                    outcome = Ok(true);
                    break;
                }
            }
        }
        finish(file, outcome)
    });
    (Feeder { frames, written, in_flight: false }, writer)
}

//! Uploads: request bodies streamed into [`AtomicFile`]s through one
//! blocking writer each (`spawn_writer`, which the base64 upload of
//! [`super::b64`] feeds too), and resumable upload sessions.
//!
//! A body is read on the runtime and each frame, as hyper hands it over
//! (no copy; at most hyper's read buffer, about 400 KiB), goes to one
//! blocking writer, which acknowledges it once written: the next frame is
//! read only then, into the same buffer, still in the CPU cache. Memory
//! stays bounded and small whatever the file size, and a slow disk slows
//! the sender (TCP backpressure) instead of filling memory. The writer owns
//! the file until the end, so a client that disappears mid-body cannot
//! leave a half-written file in place: a plain upload is discarded, a
//! resumable one keeps what arrived for the next request to continue.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use tokio::sync::mpsc;

use super::safe::Resolved;
use super::write::{AtomicFile, Committed, WritePolicy, Writes};
use super::FsError;
use crate::policy::PathGuard;

/// A resumable upload untouched for this long is discarded.
pub const SESSION_TTL: Duration = Duration::from_secs(3600);
/// Resumable uploads in progress at once.
pub const MAX_SESSIONS: usize = 64;

/// Where a resumable upload stands after a request.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// Every byte arrived; the file is in place.
    Complete(Committed),
    /// More bytes are expected from `offset` on.
    Partial {
        /// Bytes received.
        offset: u64,
        /// Declared total.
        size: u64,
    },
}

struct Session {
    file: AtomicFile,
    size: u64,
    overwrite: bool,
    progress: Arc<AtomicU64>,
    touched: Instant,
}

enum Slot {
    Idle(Box<Session>),
    Busy { size: u64, progress: Arc<AtomicU64> },
}

/// The upload state of a server: resumable sessions, the shared state of
/// its writes, and what compressed bodies may inflate to.
#[derive(Default)]
pub struct Files {
    sessions: Mutex<HashMap<PathBuf, Slot>>,
    writes: Writes,
    inflate: super::inflate::Limits,
    watches: Arc<super::watch_runs::WatchRuns>,
}

impl Files {
    /// The resumable `files_watch` streams.
    pub fn watches(&self) -> &Arc<super::watch_runs::WatchRuns> {
        &self.watches
    }

    /// Upload state whose writes `fdatasync` before they are put in place when `sync_writes`.
    pub fn new(sync_writes: bool) -> Self {
        Files {
            sessions: Mutex::default(),
            writes: Writes::new(sync_writes),
            inflate: super::inflate::Limits::default(),
            watches: Arc::default(),
        }
    }

    /// The same, with these limits on compressed bodies.
    pub fn inflating(mut self, limits: super::inflate::Limits) -> Self {
        self.inflate = limits;
        self
    }

    /// What compressed upload bodies may inflate to.
    pub fn inflate_limits(&self) -> super::inflate::Limits {
        self.inflate
    }

    /// What this server's atomic writes share (durability, swept directories).
    pub fn writes(&self) -> &Writes {
        &self.writes
    }

    /// Writes `body` to `target` atomically (`len`: the declared length, if any).
    ///
    /// # Errors
    /// Policy refusals, [`FsError::TooLarge`], [`FsError::Interrupted`] when
    /// the body ends early, [`FsError::NoSpace`]; the target is untouched on error.
    pub async fn write_stream<S, E>(
        self: &Arc<Self>,
        guard: &PathGuard,
        target: &Resolved,
        policy: &WritePolicy,
        len: Option<u64>,
        body: S,
    ) -> Result<Committed, FsError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::error::Error + 'static,
    {
        policy.check_extension(&target.path)?;
        if let Some(len) = len {
            policy.check_size(len)?;
        }
        let file = self.open(guard, target, policy).await?;
        let overwrite = policy.overwrite;
        let progress = Arc::new(AtomicU64::new(0));
        let (tx, writer) = spawn_writer(file, Arc::clone(&progress), move |file, outcome| match outcome? {
            true => file.commit(overwrite),
            false => Err(FsError::Interrupted),
        });
        feed(body, tx, policy.max_bytes.unwrap_or(u64::MAX), policy.max_bytes, writer).await
    }

    /// Continues (or starts, at offset 0) the resumable upload of `target`
    /// with `body`, for a file of `size` bytes.
    ///
    /// # Errors
    /// [`FsError::OffsetMismatch`], [`FsError::UploadNotFound`],
    /// [`FsError::UploadBusy`], and the errors of [`Files::write_stream`].
    pub async fn resume_stream<S, E>(
        self: &Arc<Self>,
        guard: &PathGuard,
        target: &Resolved,
        policy: &WritePolicy,
        (offset, size): (u64, u64),
        body: S,
    ) -> Result<Progress, FsError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::error::Error + 'static,
    {
        policy.check_extension(&target.path)?;
        policy.check_size(size)?;
        let session = if offset == 0 {
            let file = self.open(guard, target, policy).await?;
            self.start(&target.path, file, size, policy.overwrite)?
        } else {
            self.take(&target.path, offset, size)?
        };
        let key = target.path.clone();
        let files = Arc::clone(self);
        let progress = Arc::clone(&session.progress);
        let (size, overwrite) = (session.size, session.overwrite);
        let (tx, writer) = spawn_writer(session.file, progress.clone(), move |file, outcome| {
            if let Err(e) = outcome {
                files.forget(&key);
                return Err(e);
            }
            if file.written() == size {
                files.forget(&key);
                return file.commit(overwrite).map(Progress::Complete);
            }
            let offset = file.written();
            files.put_back(key, Session { file, size, overwrite, progress, touched: Instant::now() });
            Ok(Progress::Partial { offset, size })
        });
        let room = size - offset;
        match feed(body, tx, room, None, writer).await {
            Err(FsError::TooLarge { .. }) => {
                Err(FsError::Invalid(format!("The body is longer than the {room} bytes left of the declared size")))
            }
            other => other,
        }
    }

    /// The state of the resumable upload of `path`.
    ///
    /// # Errors
    /// [`FsError::UploadNotFound`].
    pub fn status(&self, path: &Path) -> Result<(u64, u64), FsError> {
        let mut sessions = self.lock();
        prune(&mut sessions);
        match sessions.get(path) {
            Some(Slot::Idle(s)) => Ok((s.file.written(), s.size)),
            Some(Slot::Busy { size, progress }) => Ok((progress.load(Ordering::Relaxed), *size)),
            None => Err(FsError::UploadNotFound(path.to_path_buf())),
        }
    }

    /// Abandons the resumable upload of `path`.
    ///
    /// # Errors
    /// [`FsError::UploadNotFound`], [`FsError::UploadBusy`].
    pub fn cancel(&self, path: &Path) -> Result<(), FsError> {
        let mut sessions = self.lock();
        match sessions.remove(path) {
            Some(Slot::Idle(_)) => Ok(()),
            Some(busy @ Slot::Busy { .. }) => {
                sessions.insert(path.to_path_buf(), busy);
                Err(FsError::UploadBusy)
            }
            None => Err(FsError::UploadNotFound(path.to_path_buf())),
        }
    }

    async fn open(
        self: &Arc<Self>,
        guard: &PathGuard,
        target: &Resolved,
        policy: &WritePolicy,
    ) -> Result<AtomicFile, FsError> {
        let (guard, target, files, policy) = (guard.clone(), target.clone(), Arc::clone(self), policy.clone());
        super::blocking(move || AtomicFile::create_with(&guard, &target, &policy, &files.writes)).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Slot>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&self, path: &Path, file: AtomicFile, size: u64, overwrite: bool) -> Result<Session, FsError> {
        let mut sessions = self.lock();
        prune(&mut sessions);
        match sessions.get(path) {
            Some(Slot::Busy { .. }) => return Err(FsError::UploadBusy),
            Some(Slot::Idle(_)) => {}
            None if sessions.len() >= MAX_SESSIONS => {
                return Err(FsError::Invalid(format!("Too many uploads in progress (limit {MAX_SESSIONS})")))
            }
            None => {}
        }
        let progress = Arc::new(AtomicU64::new(0));
        sessions.insert(path.to_path_buf(), Slot::Busy { size, progress: Arc::clone(&progress) });
        Ok(Session { file, size, overwrite, progress, touched: Instant::now() })
    }

    fn take(&self, path: &Path, offset: u64, size: u64) -> Result<Session, FsError> {
        let mut sessions = self.lock();
        prune(&mut sessions);
        let session = match sessions.remove(path) {
            None => return Err(FsError::UploadNotFound(path.to_path_buf())),
            Some(busy @ Slot::Busy { .. }) => {
                sessions.insert(path.to_path_buf(), busy);
                return Err(FsError::UploadBusy);
            }
            Some(Slot::Idle(session)) => session,
        };
        let received = session.file.written();
        let error = if received != offset {
            Some(FsError::OffsetMismatch { received, requested: offset })
        } else if session.size != size {
            Some(FsError::Invalid(format!("The upload was started with size {}, not {size}", session.size)))
        } else {
            None
        };
        if let Some(error) = error {
            sessions.insert(path.to_path_buf(), Slot::Idle(session));
            return Err(error);
        }
        sessions.insert(path.to_path_buf(), Slot::Busy { size, progress: Arc::clone(&session.progress) });
        Ok(*session)
    }

    fn put_back(&self, path: PathBuf, session: Session) {
        self.lock().insert(path, Slot::Idle(Box::new(session)));
    }

    fn forget(&self, path: &Path) {
        self.lock().remove(path);
    }
}

fn prune(sessions: &mut HashMap<PathBuf, Slot>) {
    sessions.retain(|_, slot| match slot {
        Slot::Idle(s) => s.touched.elapsed() < SESSION_TTL,
        Slot::Busy { .. } => true,
    });
}

/// Reads `body` into the writer, at most `room` bytes; returns the writer's result.
async fn feed<S, E, T>(
    mut body: S,
    mut tx: Feeder,
    room: u64,
    limit: Option<u64>,
    writer: Writer<T>,
) -> Result<T, FsError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    let mut total = 0u64;
    let mut failure = None;
    loop {
        match body.next().await {
            Some(Ok(data)) => {
                total += data.len() as u64;
                if total > room {
                    failure = Some(FsError::TooLarge { size: None, limit: limit.unwrap_or(room) });
                    break;
                }
                if !data.is_empty() && !tx.write(data).await {
                    break;
                }
            }
            Some(Err(e)) => {
                failure = Some(FsError::from_body(&e));
                break;
            }
            None => {
                tx.end().await;
                break;
            }
        }
    }
    drop(tx);
    let written = writer.await?;
    match (failure, written) {
        // The writer only saw the body stop: what stopped it says more.
        (Some(error), Ok(_) | Err(FsError::Interrupted)) => Err(error),
        (_, written) => written,
    }
}

// The blocking writer a body feeds: frames go through a channel of one to a
// task on a blocking thread that writes them to an `AtomicFile`, each
// acknowledged once written, so a body is never held in memory beyond the
// frame in flight. Streamed uploads and base64 bodies (`super::b64`) both
// feed one.

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

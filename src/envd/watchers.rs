//! Directory watches in envd's vocabulary, from [`crate::fs::watch`].
//!
//! The inotify watch reports reconciled changes (`created`, `modified`,
//! `deleted`, a rename as `created` with its old path); they become envd's
//! events: `CREATE` (then `WRITE` for a new file with content, as inotify
//! reports a file written after it is created), `WRITE`, `REMOVE`, and
//! `RENAME` of the old name followed by `CREATE` of the new one. Names are
//! relative to the watched directory. A directory's own timestamp changes
//! (entries added or removed) are not `WRITE`s, as with inotify.
//!
//! [`Watchers`] keeps the polled watchers of `CreateWatcher`: each drains
//! its watch into a bounded queue (the oldest events go first when a
//! client does not poll), read and emptied by `GetWatcherEvents`. A watcher
//! nobody polled for [`IDLE_LIMIT`] is removed.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::entry;
use super::EnvdError;
use crate::api::envd::filesystem::{EventType, FilesystemEvent};
use crate::api::files::WatchEvent;
use crate::fs::safe::Resolved;
use crate::fs::{watch, FsError};
use crate::policy::PathGuard;

/// Events a polled watcher keeps between two polls.
pub const MAX_QUEUED: usize = 10_000;
/// Polled watchers alive at once.
pub const MAX_WATCHERS: usize = 64;
/// A polled watcher unpolled this long is removed.
pub const IDLE_LIMIT: Duration = Duration::from_secs(600);
/// How long a watch may last (the stream's deadline, if any, ends it sooner).
const WATCH_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a watch yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A change.
    Event(Box<FilesystemEvent>),
    /// The watch ended (`deleted`: the directory went away; `shutdown`).
    End(&'static str),
}

/// How a watch runs.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Subdirectories too.
    pub recursive: bool,
    /// Attach the entry to `CREATE` and `WRITE` events.
    pub include_entry: bool,
}

/// Starts watching the directory `target`. Blocking: call it on the blocking pool.
///
/// # Errors
/// [`EnvdError::NotFound`] for a missing directory, [`EnvdError::Invalid`] for a file.
pub fn start(
    guard: PathGuard,
    target: Resolved,
    options: WatchOptions,
    shutdown: CancellationToken,
    runtime: tokio::runtime::Handle,
) -> Result<mpsc::Receiver<Item>, EnvdError> {
    match crate::fs::list::stat_of(&guard, &target)? {
        None => return Err(EnvdError::NotFound(format!("path {} not found", target.path.display()))),
        Some(st) if !st.is_dir() => {
            return Err(EnvdError::Invalid(format!("path {} not a directory", target.path.display())))
        }
        Some(_) => {}
    }
    let watch_options =
        watch::Options { recursive: options.recursive, interval: Duration::ZERO, duration: WATCH_LIFETIME };
    let raw = target.path.display().to_string();
    let mut changes = watch::start(guard.clone(), target.clone(), &raw, watch_options, shutdown, runtime.clone())
        .map_err(|e| match e {
            FsError::NotFound(m) => EnvdError::NotFound(m),
            other => other.into(),
        })?;
    let (tx, rx) = mpsc::channel(256);
    runtime.spawn(async move {
        loop {
            // A subscriber that left ends the watch at once (dropping `changes`
            // stops the inotify watch), not at the next change.
            let output = tokio::select! {
                () = tx.closed() => return,
                output = changes.recv() => match output {
                    Some(output) => output,
                    None => break,
                },
            };
            let (guard, target) = (guard.clone(), target.clone());
            let items = tokio::task::spawn_blocking(move || translate(&guard, &target, output, options)).await;
            for item in items.unwrap_or_default() {
                let end = matches!(item, Item::End(_));
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
        }
        let _ = tx.send(Item::End("shutdown")).await;
    });
    Ok(rx)
}

/// envd's events for one change of the inotify watch.
fn translate(guard: &PathGuard, target: &Resolved, output: watch::Output, options: WatchOptions) -> Vec<Item> {
    let change = match output {
        watch::Output::End(reason) => return vec![Item::End(reason)],
        watch::Output::Change(change) => change,
    };
    let WatchEvent { kind, path, is_dir, old_path } = change;
    let path = Path::new(&path);
    let name = entry::relative_name(&target.path, path);
    let looked = || entry::entry(guard, &target.sibling(path.to_path_buf())).ok();
    let event = |kind: EventType, with_entry: bool| {
        let entry = (with_entry && options.include_entry).then(looked).flatten();
        Item::Event(Box::new(FilesystemEvent { name: name.clone(), kind, entry }))
    };
    match kind.as_str() {
        "created" => {
            let mut items = Vec::new();
            if let Some(old) = old_path.as_deref().map(Path::new).filter(|old| old.starts_with(&target.path)) {
                let old_name = entry::relative_name(&target.path, old);
                items.push(Item::Event(Box::new(FilesystemEvent {
                    name: old_name,
                    kind: EventType::Rename,
                    entry: None,
                })));
            }
            items.push(event(EventType::Create, true));
            let has_content = old_path.is_none() && !is_dir && looked().is_some_and(|e| e.size > 0);
            if has_content {
                items.push(event(EventType::Write, true));
            }
            items
        }
        "modified" if !is_dir => vec![event(EventType::Write, true)],
        "deleted" => vec![event(EventType::Remove, false)],
        _ => Vec::new(),
    }
}

struct Watcher {
    queue: Mutex<Queue>,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<FilesystemEvent>,
    polled: Option<Instant>,
    ended: bool,
}

/// The polled watchers of `CreateWatcher`.
pub struct Watchers {
    table: Mutex<HashMap<String, Arc<Watcher>>>,
    shutdown: CancellationToken,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Watchers {
    /// No watchers yet; `shutdown` ends them all.
    pub fn new(shutdown: CancellationToken) -> Self {
        Watchers { table: Mutex::new(HashMap::new()), shutdown }
    }

    /// Starts a polled watcher on `target`; returns its id. Blocking (see [`start`]).
    ///
    /// # Errors
    /// [`EnvdError::Exhausted`] past [`MAX_WATCHERS`]; the errors of [`start`].
    pub fn create(
        &self,
        guard: PathGuard,
        target: Resolved,
        options: WatchOptions,
        runtime: tokio::runtime::Handle,
    ) -> Result<String, EnvdError> {
        self.expire(Instant::now());
        if locked(&self.table).len() >= MAX_WATCHERS {
            return Err(EnvdError::Exhausted(format!("too many watchers (at most {MAX_WATCHERS})")));
        }
        let cancel = self.shutdown.child_token();
        let mut items = start(guard, target, options, cancel.clone(), runtime.clone())?;
        let watcher = Arc::new(Watcher { queue: Mutex::new(Queue::default()), cancel: cancel.clone() });
        let id = new_id();
        locked(&self.table).insert(id.clone(), Arc::clone(&watcher));
        runtime.spawn(async move {
            loop {
                let item = tokio::select! {
                    () = cancel.cancelled() => break,
                    item = items.recv() => item,
                };
                let mut queue = locked(&watcher.queue);
                match item {
                    Some(Item::Event(event)) => {
                        if queue.events.len() >= MAX_QUEUED {
                            queue.events.pop_front();
                        }
                        queue.events.push_back(*event);
                    }
                    Some(Item::End(_)) | None => {
                        queue.ended = true;
                        break;
                    }
                }
            }
        });
        Ok(id)
    }

    /// The events since the last call, oldest first.
    ///
    /// # Errors
    /// [`EnvdError::NotFound`] for an unknown (or removed, or expired) id.
    pub fn events(&self, id: &str) -> Result<Vec<FilesystemEvent>, EnvdError> {
        let watcher = locked(&self.table).get(id).cloned().ok_or_else(|| unknown(id))?;
        let mut queue = locked(&watcher.queue);
        queue.polled = Some(Instant::now());
        Ok(queue.events.drain(..).collect())
    }

    /// Stops and forgets the watcher `id`.
    ///
    /// # Errors
    /// [`EnvdError::NotFound`] for an unknown id.
    pub fn remove(&self, id: &str) -> Result<(), EnvdError> {
        let watcher = locked(&self.table).remove(id).ok_or_else(|| unknown(id))?;
        watcher.cancel.cancel();
        Ok(())
    }

    /// Removes watchers nobody polled for [`IDLE_LIMIT`] (counted from creation when never polled).
    fn expire(&self, now: Instant) {
        locked(&self.table).retain(|_, w| {
            let queue = locked(&w.queue);
            let keep = queue.polled.is_none_or(|t| now.duration_since(t) < IDLE_LIMIT);
            if !keep {
                w.cancel.cancel();
            }
            keep
        });
    }
}

fn unknown(id: &str) -> EnvdError {
    EnvdError::NotFound(format!("watcher with id {id} not found"))
}

/// A fresh watcher id.
fn new_id() -> String {
    crate::ids::random_hex(16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::paths::scratch;
    use crate::policy::Op;

    fn names(items: &[Item]) -> Vec<(String, EventType)> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Event(e) => Some((e.name.clone(), e.kind)),
                Item::End(_) => None,
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_become_envd_events_and_polled_watchers_queue_them() {
        let (_dir, guard, real) = scratch();
        let target = crate::fs::safe::resolve(&guard, ".", Op::Read, "").expect("resolve");
        std::fs::write(real.join("f"), b"data").expect("write");
        let created = WatchEvent {
            kind: "created".into(),
            path: real.join("f").display().to_string(),
            is_dir: false,
            old_path: None,
        };
        let options = WatchOptions { recursive: true, include_entry: true };
        let items = translate(&guard, &target, watch::Output::Change(created), options);
        assert_eq!(names(&items), [("f".to_string(), EventType::Create), ("f".to_string(), EventType::Write)]);
        assert!(matches!(&items[0], Item::Event(e) if e.entry.as_ref().is_some_and(|e| e.size == 4)));
        let renamed = WatchEvent {
            kind: "created".into(),
            path: real.join("g").display().to_string(),
            is_dir: false,
            old_path: Some(real.join("f").display().to_string()),
        };
        let items = translate(&guard, &target, watch::Output::Change(renamed), options);
        assert_eq!(names(&items), [("f".to_string(), EventType::Rename), ("g".to_string(), EventType::Create)]);
        let dir_touched =
            WatchEvent { kind: "modified".into(), path: real.display().to_string(), is_dir: true, old_path: None };
        assert!(translate(&guard, &target, watch::Output::Change(dir_touched), options).is_empty());

        let watchers = Watchers::new(CancellationToken::new());
        let handle = tokio::runtime::Handle::current();
        let id = {
            let (guard, target) = (guard.clone(), target.clone());
            let watchers = &watchers;
            tokio::task::block_in_place(|| watchers.create(guard, target, options, handle))
        }
        .expect("create");
        std::fs::create_dir(real.join("sub")).expect("mkdir");
        let polled = async {
            let mut seen = Vec::new();
            while !seen.iter().any(|e: &FilesystemEvent| e.name == "sub" && e.kind == EventType::Create) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                seen.extend(watchers.events(&id).expect("events"));
            }
        };
        tokio::time::timeout(Duration::from_secs(10), polled).await.expect("the event is queued");
        watchers.remove(&id).expect("remove");
        assert!(matches!(watchers.events(&id), Err(EnvdError::NotFound(_))));
    }
}

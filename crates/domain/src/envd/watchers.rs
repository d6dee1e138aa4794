//! Directory watches in envd's vocabulary, from [`crate::fs::watch`].
//!
//! The inotify watch reports reconciled changes (`created`, `modified`,
//! `attributes`, `deleted`, a rename as `created` with its old path); they
//! become envd's events: a new file is `CREATE`, `CHMOD`, then `WRITE` when
//! it has content (what envd reports for a file uploaded through `/files`:
//! created, given to its user, written), a new directory `CREATE`; then
//! `WRITE`, `CHMOD` (permission bits alone changed), `REMOVE`, and `RENAME`
//! of the old name followed by `CREATE` of the new one. Names are relative
//! to the watched directory. A directory's own timestamp changes (entries
//! added or removed) are not `WRITE`s, as with inotify. Streams
//! (`WatchDir`) send each change as soon as it is read, without batching.
//!
//! [`Watchers`] keeps the polled watchers of `CreateWatcher`: each works its
//! changes out when it is polled, right after the daemon's inotify instance
//! has handed over what the kernel queued, so a change made before
//! `GetWatcherEvents` (a write that returned) is in its answer. Between two
//! polls the kernel's events wait in a bounded queue (past it, the next poll
//! rescans and reports the differences). A watcher holds at most
//! [`MAX_QUEUED`] events for its poller: when one poll works out more, the
//! oldest go, and that poll answers `data_loss` with their exact count
//! instead of the events; the next poll returns the held ones. A watcher
//! nobody polled for [`IDLE_LIMIT`] is removed.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use abx_wire::api::envd::filesystem::{EventType, FilesystemEvent};
use abx_wire::api::files::WatchEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::entry;
use super::EnvdError;
use crate::fs::safe::Resolved;
use crate::fs::watch;
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
    checked_dir(&guard, &target)?;
    let raw = target.path.display().to_string();
    let mut changes =
        watch::start(guard.clone(), target.clone(), &raw, watch_options(options), shutdown, runtime.clone())?;
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

/// Refuses a missing directory or a file.
fn checked_dir(guard: &PathGuard, target: &Resolved) -> Result<(), EnvdError> {
    match crate::fs::list::stat_of(guard, target)? {
        None => Err(EnvdError::NotFound(format!("path {} not found", target.path.display()))),
        Some(st) if !st.is_dir() => Err(EnvdError::Invalid(format!("path {} not a directory", target.path.display()))),
        Some(_) => Ok(()),
    }
}

fn watch_options(options: WatchOptions) -> watch::Options {
    watch::Options {
        recursive: options.recursive,
        interval: Duration::ZERO,
        duration: WATCH_LIFETIME,
        batch: Duration::ZERO,
        attributes: true,
    }
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
            if old_path.is_none() && !is_dir {
                items.push(event(EventType::Chmod, false));
                if looked().is_some_and(|e| e.size > 0) {
                    items.push(event(EventType::Write, true));
                }
            }
            items
        }
        "modified" if !is_dir => vec![event(EventType::Write, true)],
        "attributes" => vec![event(EventType::Chmod, false)],
        "deleted" => vec![event(EventType::Remove, false)],
        _ => Vec::new(),
    }
}

struct Watcher {
    queue: Mutex<Queue>,
}

struct Queue {
    watch: watch::Polled,
    guard: PathGuard,
    target: Resolved,
    options: WatchOptions,
    events: VecDeque<FilesystemEvent>,
    /// Events dropped from the front of `events` since the last poll.
    lost: u64,
    polled: Option<Instant>,
    ended: bool,
}

impl Queue {
    /// Works out the changes since the last poll and queues their events.
    fn fill(&mut self) {
        if self.ended {
            return;
        }
        let outputs = self.watch.poll();
        // A rename is the old name's `RENAME` and the new one's `CREATE` (as envd), not also a `REMOVE`.
        let renamed: Vec<String> = outputs
            .iter()
            .filter_map(|o| match o {
                watch::Output::Change(c) if c.kind == "created" => c.old_path.clone(),
                _ => None,
            })
            .collect();
        for output in outputs {
            if matches!(&output, watch::Output::Change(c) if c.kind == "deleted" && renamed.contains(&c.path)) {
                continue;
            }
            for item in translate(&self.guard, &self.target, output, self.options) {
                match item {
                    Item::Event(event) => {
                        if self.events.len() >= MAX_QUEUED {
                            self.events.pop_front();
                            self.lost += 1;
                        }
                        self.events.push_back(*event);
                    }
                    Item::End(_) => self.ended = true,
                }
            }
        }
    }
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

    /// Starts a polled watcher on `target`; returns its id. Blocking.
    ///
    /// # Errors
    /// [`EnvdError::Exhausted`] past [`MAX_WATCHERS`]; the errors of [`start`].
    pub fn create(&self, guard: PathGuard, target: Resolved, options: WatchOptions) -> Result<String, EnvdError> {
        let now = Instant::now();
        self.expire(now);
        if self.shutdown.is_cancelled() {
            return Err(EnvdError::FailedPrecondition("the server is shutting down".into()));
        }
        if locked(&self.table).len() >= MAX_WATCHERS {
            return Err(EnvdError::Exhausted(format!("too many watchers (at most {MAX_WATCHERS})")));
        }
        checked_dir(&guard, &target)?;
        let raw = target.path.display().to_string();
        let polled = watch::Polled::start(guard.clone(), target.clone(), &raw, watch_options(options))?;
        let queue = Queue {
            watch: polled,
            guard,
            target,
            options,
            events: VecDeque::new(),
            lost: 0,
            polled: Some(now),
            ended: false,
        };
        let id = new_id();
        locked(&self.table).insert(id.clone(), Arc::new(Watcher { queue: Mutex::new(queue) }));
        Ok(id)
    }

    /// The events since the last call, oldest first: every change made
    /// before this call is in it. Blocking (it reads the file system).
    ///
    /// # Errors
    /// [`EnvdError::NotFound`] for an unknown (or removed, or expired) id;
    /// [`EnvdError::DataLoss`] with the count when more than [`MAX_QUEUED`]
    /// events came at once and the oldest were dropped (the next call
    /// returns the [`MAX_QUEUED`] newest).
    pub fn events(&self, id: &str) -> Result<Vec<FilesystemEvent>, EnvdError> {
        let watcher = locked(&self.table).get(id).cloned().ok_or_else(|| unknown(id))?;
        let mut queue = locked(&watcher.queue);
        queue.polled = Some(Instant::now());
        queue.fill();
        let lost = std::mem::take(&mut queue.lost);
        if lost > 0 {
            return Err(EnvdError::DataLoss(format!(
                "{lost} events of watcher {id} were lost: more than {MAX_QUEUED} changes came between two \
                 polls and the oldest were dropped; the next GetWatcherEvents returns the {} newest",
                queue.events.len()
            )));
        }
        Ok(queue.events.drain(..).collect())
    }

    /// Stops and forgets the watcher `id` (its inotify watches go with it).
    ///
    /// # Errors
    /// [`EnvdError::NotFound`] for an unknown id.
    pub fn remove(&self, id: &str) -> Result<(), EnvdError> {
        locked(&self.table).remove(id).map(drop).ok_or_else(|| unknown(id))
    }

    /// Removes watchers nobody polled for [`IDLE_LIMIT`].
    fn expire(&self, now: Instant) {
        locked(&self.table).retain(|_, w| locked(&w.queue).polled.is_none_or(|t| now.duration_since(t) < IDLE_LIMIT));
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
        assert_eq!(
            names(&items),
            [
                ("f".to_string(), EventType::Create),
                ("f".to_string(), EventType::Chmod),
                ("f".to_string(), EventType::Write)
            ]
        );
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

        let chmod = WatchEvent {
            kind: "attributes".into(),
            path: real.join("g").display().to_string(),
            is_dir: false,
            old_path: None,
        };
        assert_eq!(
            names(&translate(&guard, &target, watch::Output::Change(chmod), options)),
            [("g".to_string(), EventType::Chmod)]
        );
    }

    #[test]
    fn a_polled_watcher_sees_every_change_made_before_the_poll() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, guard, real) = scratch();
        let target = crate::fs::safe::resolve(&guard, ".", Op::Read, "").expect("resolve");
        std::fs::write(real.join("old"), b"1").expect("write");
        let watchers = Watchers::new(CancellationToken::new());
        let options = WatchOptions { recursive: true, include_entry: false };
        let id = watchers.create(guard.clone(), target.clone(), options).expect("create");
        assert!(watchers.events(&id).expect("events").is_empty());
        std::fs::create_dir(real.join("sub")).expect("mkdir");
        std::fs::write(real.join("sub/new"), b"data").expect("write");
        std::fs::write(real.join("old"), b"22").expect("write");
        std::fs::set_permissions(real.join("old"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // No waiting: the poll itself reads what the kernel queued.
        let seen = names(
            &watchers.events(&id).expect("events").into_iter().map(|e| Item::Event(Box::new(e))).collect::<Vec<_>>(),
        );
        let expected = [
            ("sub", EventType::Create),
            ("sub/new", EventType::Create),
            ("sub/new", EventType::Chmod),
            ("sub/new", EventType::Write),
            ("old", EventType::Write),
        ];
        for (name, kind) in expected {
            assert!(seen.contains(&(name.to_string(), kind)), "{name} {kind:?} in {seen:?}");
        }
        std::fs::set_permissions(real.join("old"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let seen: Vec<(String, EventType)> =
            watchers.events(&id).expect("events").into_iter().map(|e| (e.name, e.kind)).collect();
        assert_eq!(seen, [("old".to_string(), EventType::Chmod)]);
        watchers.remove(&id).expect("remove");
        assert!(matches!(watchers.events(&id), Err(EnvdError::NotFound(_))));
    }
}

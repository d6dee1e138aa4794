//! What the browser's event loop, its page operations and its network path
//! share: the page's lifecycle as the event loop saw it, its attached
//! targets, and the requests the URL policy refused.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use crate::policy::guards::UrlRefusal;

/// Blocked requests remembered for `navigate`'s answer.
const MAX_BLOCKED: usize = 32;
/// Loaders whose lifecycle is remembered.
const MAX_LOADERS: usize = 8;

/// A request the policy refused.
#[derive(Debug, Clone)]
pub struct Blocked {
    /// Its URL.
    pub url: String,
    /// `Document`, `Image`, `XHR`, ...
    pub resource_type: String,
    /// The refusal and its rule.
    pub refusal: UrlRefusal,
}

/// What the event loop learned, read by the page operations.
#[derive(Debug, Default)]
pub struct PageState {
    /// Lifecycle events seen per loader of the main frame.
    pub lifecycle: HashMap<String, HashSet<String>>,
    loaders: VecDeque<String>,
    /// HTTP status of the main document per loader.
    pub status: HashMap<String, u16>,
    /// Requests refused since the last navigation began.
    pub blocked: Vec<Blocked>,
    /// Sessions of attached targets, by target id.
    pub(super) sessions: HashMap<String, String>,
    /// Whether the page's renderer crashed.
    pub crashed: bool,
    /// The identity of the latest call on the page: the audit log names it
    /// for the requests its page makes.
    pub actor: String,
}

/// State shared by the event loop and the operations.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<PageState>,
    /// Woken on every lifecycle event, attach and crash.
    pub changed: Notify,
}

impl Shared {
    /// Locks the state.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, PageState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PageState {
    /// Records lifecycle event `name` of `loader`, keeping the newest [`MAX_LOADERS`] loaders.
    pub(super) fn record(&mut self, loader: String, name: String) {
        if !self.lifecycle.contains_key(&loader) {
            self.loaders.push_back(loader.clone());
            while self.loaders.len() > MAX_LOADERS {
                if let Some(old) = self.loaders.pop_front() {
                    self.lifecycle.remove(&old);
                    self.status.remove(&old);
                }
            }
        }
        self.lifecycle.entry(loader).or_default().insert(name);
    }

    /// Remembers a refused request (the first [`MAX_BLOCKED`] per navigation).
    pub(super) fn block(&mut self, blocked: Blocked) {
        if self.blocked.len() < MAX_BLOCKED {
            self.blocked.push(blocked);
        }
    }
}

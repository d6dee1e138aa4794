//! The headless browser behind the `browser` group: Debian's Chromium,
//! driven over the Chrome DevTools Protocol, with every request it makes
//! held to the URL policy.
//!
//! - [`Browser`]: the service the handlers call. The browser starts on the
//!   first call that needs it (never at server start), runs one operation
//!   at a time on one shared page (as the reference's), is closed after
//!   [`BrowserSettings::idle_timeout`] without calls, and is stopped with
//!   the server. A browser found dead (crashed, killed) is torn down and
//!   the call that found it gets [`BrowserError::Crashed`] (503): its page
//!   is gone, so a silent retry could click or type into a blank page. The
//!   next call starts a fresh browser.
//! - [`launch`]: the program, its flags and profile, its process group.
//! - [`cdp`]: the WebSocket connection; [`protocol`]: the typed commands and events.
//! - [`instance`]: one live browser, its event loop and request interception.
//! - [`egress`]: the network path every connection of the browser goes
//!   through (an HTTP proxy the edge provides).
//! - [`verdict`]: the URL policy's verdicts, names resolved, refusals recorded;
//!   [`shared`]: what the event loop, the operations and the proxy share.
//! - [`page`]: what each endpoint does to the page; [`console`]: the bounded console log.
//!
//! No axum here; the HTTP edge is `http::browser`.

pub mod cdp;
pub mod console;
pub mod egress;
pub mod instance;
pub mod launch;
pub mod page;
pub mod protocol;
pub mod shared;
pub mod verdict;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use abx_wire::api::Fault;

use self::cdp::CdpError;
use self::console::Console;
use self::egress::Egress;
use self::instance::Instance;
use self::shared::Blocked;
use crate::environment::ChildEnv;
use crate::policy::guards::{UrlPolicy, UrlRefusal};

/// Default idle time after which the browser is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How the browser is run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BrowserSettings {
    /// The program (a path, or a name looked up on `PATH`); `None`: the first
    /// of [`launch::DEFAULT_PROGRAMS`] on `PATH`.
    pub program: Option<String>,
    /// Close the browser after this long without calls (`None`: never).
    pub idle_timeout: Option<Duration>,
}

/// Why a browser call failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// No browser program (503).
    #[error("Chromium is not installed ('{program}' not found). Install it with: apt-get install -y chromium (or set ABX_BROWSER_PATH)")]
    NotInstalled {
        /// What was looked for.
        program: String,
    },
    /// The browser could not be started (503).
    #[error("The browser could not start: {0}")]
    Start(String),
    /// The browser died; it starts again on the next call (503).
    #[error("{0}; a new browser starts on the next call")]
    Crashed(String),
    /// The URL policy refused the page or one of its redirects (403).
    #[error("Blocked {url}: {refusal}", url = .0.url, refusal = .0.refusal.denial)]
    Blocked(Box<Blocked>),
    /// The URL given to `navigate` is refused (400 or 403).
    #[error("{}", .0.denial)]
    Refused(UrlRefusal),
    /// No element matches the selector (404).
    #[error("Selector not found: {0}")]
    SelectorNotFound(String),
    /// No visible element matched within the timeout (404, `TimeoutError`).
    #[error("Selector not found: {selector} (waited {} ms)", waited.as_millis())]
    SelectorTimeout {
        /// The selector.
        selector: String,
        /// How long it was waited for.
        waited: Duration,
    },
    /// An operation ran out of time (504, `TimeoutError`).
    #[error("{0}")]
    Timeout(String),
    /// The page could not be loaded (502).
    #[error("{0}")]
    Navigation(String),
    /// The script threw, or its value is not JSON (400).
    #[error("{0}")]
    Script(String),
    /// Bad input (400).
    #[error("{0}")]
    Invalid(String),
    /// A result over its bound (413).
    #[error("The result is larger than {limit} bytes")]
    TooLarge {
        /// The bound.
        limit: u64,
    },
    /// The browser answered unexpectedly (500; details logged).
    #[error("browser protocol error: {0}")]
    Protocol(String),
}

impl BrowserError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            BrowserError::NotInstalled { .. } | BrowserError::Start(_) => Fault::BrowserUnavailable,
            BrowserError::Crashed(_) => Fault::BrowserCrashed,
            BrowserError::Blocked(blocked) => blocked.refusal.denial.fault(),
            BrowserError::Refused(refusal) => refusal.denial.fault(),
            BrowserError::SelectorNotFound(_) => Fault::SelectorNotFound,
            BrowserError::SelectorTimeout { .. } => Fault::SelectorTimeout,
            BrowserError::Timeout(_) => Fault::BrowserTimeout,
            BrowserError::Navigation(_) => Fault::NavigationFailed,
            BrowserError::Script(_) => Fault::ScriptError,
            BrowserError::Invalid(_) => Fault::BadRequest,
            BrowserError::TooLarge { .. } => Fault::PayloadTooLarge,
            BrowserError::Protocol(_) => Fault::Internal,
        }
    }
}

impl From<CdpError> for BrowserError {
    fn from(err: CdpError) -> Self {
        match err {
            CdpError::Closed => BrowserError::Crashed("The browser connection was lost".into()),
            CdpError::Connect(detail) => BrowserError::Start(detail),
            other => BrowserError::Protocol(other.to_string()),
        }
    }
}

#[derive(Default)]
struct Slot {
    instance: Option<Arc<Instance>>,
    last_used: Option<Instant>,
    generation: u64,
}

/// The browser service; see the module documentation.
pub struct Browser {
    settings: BrowserSettings,
    env: Arc<ChildEnv>,
    policy: Arc<UrlPolicy>,
    egress: Arc<dyn Egress>,
    console: Arc<Console>,
    slot: tokio::sync::Mutex<Slot>,
    this: Weak<Browser>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Browser {
    /// A browser service that starts nothing until its first call.
    pub fn new(settings: BrowserSettings, env: Arc<ChildEnv>, policy: UrlPolicy, egress: Arc<dyn Egress>) -> Arc<Self> {
        Arc::new_cyclic(|this| Browser {
            settings,
            env,
            policy: Arc::new(policy),
            egress,
            console: Arc::default(),
            slot: tokio::sync::Mutex::default(),
            this: this.clone(),
        })
    }

    /// The URL policy every request of the browser is held to.
    pub fn policy(&self) -> &UrlPolicy {
        &self.policy
    }

    /// Decides the URL given to `navigate` before the browser is involved:
    /// the reference's syntax checks and the policy, its host name resolved.
    ///
    /// # Errors
    /// [`BrowserError::Refused`].
    pub async fn admit(&self, url: &str) -> Result<(), BrowserError> {
        let host = self.policy.check_requested(url).map_err(BrowserError::Refused)?;
        verdict::decide_host(&self.policy, host).await.map_err(BrowserError::Refused)
    }

    /// The console messages collected so far, emptying the buffer (starts nothing).
    pub fn console(&self) -> Vec<console::ConsoleEntry> {
        self.console.take()
    }

    /// Runs `op` on the shared page for identity `actor` (the audit log
    /// names it for what the page requests), starting the browser if none
    /// runs; one operation at a time.
    ///
    /// # Errors
    /// [`BrowserError::NotInstalled`], [`BrowserError::Start`],
    /// [`BrowserError::Crashed`] (found dead now), and `op`'s errors.
    pub async fn run<T, F, Fut>(&self, actor: &str, op: F) -> Result<T, BrowserError>
    where
        F: FnOnce(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, BrowserError>>,
    {
        let mut slot = self.slot.lock().await;
        let instance = match &slot.instance {
            Some(instance) => match instance.death().await {
                None => Arc::clone(instance),
                Some(reason) => {
                    tracing::warn!(reason, "the browser is gone");
                    Self::teardown(&mut slot).await;
                    return Err(BrowserError::Crashed(reason));
                }
            },
            None => self.start(&mut slot).await?,
        };
        actor.clone_into(&mut instance.shared.lock().actor);
        let result = match op(Arc::clone(&instance)).await {
            // Say why, when the browser died under the call.
            Err(BrowserError::Crashed(lost)) => Err(BrowserError::Crashed(instance.death().await.unwrap_or(lost))),
            other => other,
        };
        slot.last_used = Some(Instant::now());
        if matches!(result, Err(BrowserError::Crashed(_))) {
            Self::teardown(&mut slot).await;
        }
        result
    }

    async fn start(&self, slot: &mut Slot) -> Result<Arc<Instance>, BrowserError> {
        let path_var = self.env.get("PATH");
        let program: PathBuf = launch::find_program(self.settings.program.as_deref(), path_var.as_deref())?;
        let instance = Arc::new(
            Instance::start(&program, &self.env, Arc::clone(&self.policy), &*self.egress, Arc::clone(&self.console))
                .await?,
        );
        slot.instance = Some(Arc::clone(&instance));
        slot.generation += 1;
        if let Some(idle) = self.settings.idle_timeout {
            tokio::spawn(close_when_idle(self.this.clone(), slot.generation, idle));
        }
        Ok(instance)
    }

    async fn teardown(slot: &mut Slot) {
        if let Some(instance) = slot.instance.take() {
            instance.stop().await;
        }
    }

    /// Stops the browser, if one runs (server shutdown).
    pub async fn shutdown(&self) {
        let mut slot = self.slot.lock().await;
        Self::teardown(&mut slot).await;
    }

    /// Whether a browser is running now.
    pub async fn running(&self) -> bool {
        self.slot.lock().await.instance.is_some()
    }
}

/// Closes the browser of `generation` once it has been unused for `idle`.
async fn close_when_idle(browser: Weak<Browser>, generation: u64, idle: Duration) {
    let mut wait = idle;
    loop {
        tokio::time::sleep(wait).await;
        let Some(browser) = browser.upgrade() else { return };
        let mut slot = browser.slot.lock().await;
        if slot.generation != generation || slot.instance.is_none() {
            return;
        }
        let unused = slot.last_used.map_or(idle, |t| t.elapsed());
        if unused >= idle {
            tracing::info!(idle_seconds = idle.as_secs_f64(), "closing the idle browser");
            Browser::teardown(&mut slot).await;
            return;
        }
        wait = idle - unused;
    }
}

//! One live browser: its process, its CDP connection, the shared page, and
//! the event loop that holds every request to the URL policy.
//!
//! At start the browser session auto-attaches to every target, paused
//! (`waitForDebuggerOnStart`). Each attached page or frame gets request
//! interception (`Fetch.enable` for every URL) and the same auto-attach for
//! its own children before it is released, so no target, popup or
//! out-of-process frame makes a request the policy did not see. Each paused
//! request is decided on its own task (host names are resolved first) and
//! continued or failed with `BlockedByClient`: the page sees a network error.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::cdp::{Cdp, Event};
use super::console::Console;
use super::launch::{self, Launched};
use super::protocol as p;
use super::proxy::Proxy;
use super::BrowserError;
use crate::environment::ChildEnv;
use crate::policy::guards::{Host, UrlPolicy, UrlRefusal};

/// Blocked requests remembered for `navigate`'s answer.
const MAX_BLOCKED: usize = 32;
/// Loaders whose lifecycle is remembered.
const MAX_LOADERS: usize = 8;
/// How long a host name may take to resolve before the request is refused.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a browser whose connection closed gets to report its exit.
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long the new page may take to be attached.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

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
    sessions: HashMap<String, String>,
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

/// A running browser with its page.
#[derive(Debug)]
pub struct Instance {
    job: crate::process::Job,
    ws_url: String,
    process: tokio::sync::Mutex<Launched>,
    /// The connection.
    pub cdp: Cdp,
    /// The shared page's flat session.
    pub session: String,
    /// The shared page's target (and main frame) id.
    pub target: String,
    /// What the event loop learned.
    pub shared: Arc<Shared>,
    /// The network path of its every connection; stops with the instance.
    _proxy: Proxy,
}

impl Instance {
    /// Starts Chromium and opens the shared page.
    ///
    /// # Errors
    /// [`BrowserError::Start`] and the protocol errors of the first commands.
    pub async fn start(
        program: &std::path::Path,
        env: &ChildEnv,
        policy: Arc<UrlPolicy>,
        console: Arc<Console>,
    ) -> Result<Instance, BrowserError> {
        let shared = Arc::new(Shared::default());
        let proxy = Proxy::start(Arc::clone(&policy), Arc::clone(&shared))
            .await
            .map_err(|e| BrowserError::Start(format!("cannot open the browser's network path: {e}")))?;
        let mut process = launch::launch(program, env, proxy.addr()).await?;
        match Self::open(&process, policy, console, Arc::clone(&shared)).await {
            Ok((cdp, session, target)) => Ok(Instance {
                job: process.job.clone(),
                ws_url: process.ws_url.clone(),
                process: tokio::sync::Mutex::new(process),
                cdp,
                session,
                target,
                shared,
                _proxy: proxy,
            }),
            Err(e) => {
                process.stop().await;
                Err(e)
            }
        }
    }

    async fn open(
        process: &Launched,
        policy: Arc<UrlPolicy>,
        console: Arc<Console>,
        shared: Arc<Shared>,
    ) -> Result<(Cdp, String, String), BrowserError> {
        let (cdp, events) = Cdp::connect(&process.ws_url).await.map_err(|e| BrowserError::Start(e.to_string()))?;
        let page_target = Arc::new(Mutex::new(String::new()));
        tokio::spawn(event_loop(cdp.clone(), events, policy, console, Arc::clone(&shared), Arc::clone(&page_target)));
        cdp.call(None, &p::SetAutoAttach::PAUSED).await?;
        // A download (a `blob:` one too) would write a file nobody bounds: none is written.
        cdp.call(None, &p::DownloadBehavior { behavior: "deny" }).await?;
        let target = cdp.call(None, &p::CreateTarget { url: "about:blank".into() }).await?.target_id;
        *page_target.lock().unwrap_or_else(PoisonError::into_inner) = target.clone();
        let session = tokio::time::timeout(ATTACH_TIMEOUT, attached(&shared, &target))
            .await
            .map_err(|_| BrowserError::Start("the page was not attached".into()))?;
        let s = Some(session.as_str());
        cdp.call(s, &p::PageEnable {}).await?;
        cdp.call(s, &p::LifecycleEvents { enabled: true }).await?;
        cdp.call(s, &p::RuntimeEnable {}).await?;
        cdp.call(s, &p::NetworkEnable {}).await?;
        cdp.call(s, &p::InspectorEnable {}).await?;
        let (width, height) = launch::VIEWPORT;
        cdp.call(s, &p::DeviceMetrics { width, height, device_scale_factor: 1.0, mobile: false }).await?;
        Ok((cdp, session, target))
    }

    /// Whether the browser, its connection or its page is gone.
    pub fn gone(&self) -> bool {
        self.job.status().is_some() || self.cdp.closed().is_cancelled() || self.shared.lock().crashed
    }

    /// Why the browser is gone (`None`: it is not), waiting a moment for the
    /// exit status of a browser whose connection just closed.
    pub async fn death(&self) -> Option<String> {
        if !self.gone() {
            return None;
        }
        if !self.cdp.closed().is_cancelled() && self.job.status().is_none() {
            return Some("The page crashed".into());
        }
        let status = match self.job.status() {
            Some(status) => Some(status),
            None => tokio::time::timeout(EXIT_WAIT, self.job.exited()).await.ok(),
        };
        Some(match status {
            Some(status) => match status.signal() {
                Some(signal) => format!("The browser was killed by signal {signal}"),
                None => format!("The browser exited with status {}", status.code()),
            },
            None => "The browser connection was lost".into(),
        })
    }

    /// The browser's DevTools address.
    pub fn ws_url(&self) -> &str {
        &self.ws_url
    }

    /// Ends the browser and every process it started (again: nothing).
    pub async fn stop(&self) {
        self.cdp.close();
        self.process.lock().await.stop().await;
        tracing::info!("browser stopped");
    }
}

/// Waits until `target` is attached; its session.
async fn attached(shared: &Shared, target: &str) -> String {
    loop {
        let notified = shared.changed.notified();
        if let Some(session) = shared.lock().sessions.get(target) {
            return session.clone();
        }
        notified.await;
    }
}

async fn event_loop(
    cdp: Cdp,
    mut events: mpsc::Receiver<Event>,
    policy: Arc<UrlPolicy>,
    console: Arc<Console>,
    shared: Arc<Shared>,
    page_target: Arc<Mutex<String>>,
) {
    let page = || page_target.lock().unwrap_or_else(PoisonError::into_inner).clone();
    while let Some(event) = events.recv().await {
        match event.method.as_str() {
            "Fetch.requestPaused" => {
                let session = event.session.clone();
                if let Ok(paused) = event.decode::<p::RequestPaused>() {
                    tokio::spawn(decide(cdp.clone(), session, paused, Arc::clone(&policy), Arc::clone(&shared)));
                }
            }
            "Target.attachedToTarget" => {
                if let Ok(attached) = event.decode::<p::AttachedToTarget>() {
                    let mut state = shared.lock();
                    state.sessions.insert(attached.target_info.target_id.clone(), attached.session_id.clone());
                    drop(state);
                    shared.changed.notify_waiters();
                    tokio::spawn(prepare(cdp.clone(), attached));
                }
            }
            "Target.detachedFromTarget" => {
                if let Ok(detached) = event.decode::<p::DetachedFromTarget>() {
                    shared.lock().sessions.retain(|_, session| *session != detached.session_id);
                }
            }
            "Runtime.consoleAPICalled" => {
                if let Ok(call) = event.decode::<p::ConsoleCalled>() {
                    console.push(&call);
                }
            }
            "Page.lifecycleEvent" => {
                if let Ok(lifecycle) = event.decode::<p::LifecycleEvent>() {
                    if lifecycle.frame_id == page() {
                        shared.lock().record(lifecycle.loader_id, lifecycle.name);
                        shared.changed.notify_waiters();
                    }
                }
            }
            "Network.responseReceived" => {
                if let Ok(received) = event.decode::<p::ResponseReceived>() {
                    if received.kind == "Document" && received.frame_id == page() {
                        shared.lock().status.insert(received.loader_id, received.response.status);
                    }
                }
            }
            "Inspector.targetCrashed" => {
                let mut state = shared.lock();
                if event.session.is_some() && state.sessions.get(&page()) == event.session.as_ref() {
                    state.crashed = true;
                }
                drop(state);
                shared.changed.notify_waiters();
            }
            _ => {}
        }
    }
    // The connection is gone: wake every waiter so it notices.
    shared.changed.notify_waiters();
}

impl PageState {
    fn record(&mut self, loader: String, name: String) {
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

/// Sets up a newly attached target before it runs: interception and
/// auto-attach for pages and frames, interception for workers.
async fn prepare(cdp: Cdp, attached: p::AttachedToTarget) {
    let session = Some(attached.session_id.as_str());
    let kind = attached.target_info.kind.as_str();
    if matches!(kind, "page" | "iframe" | "worker" | "shared_worker" | "service_worker") {
        if let Err(e) = cdp.call(session, &p::FetchEnable::all()).await {
            tracing::debug!(kind, error = %e, "no request interception for a target");
        }
    }
    if matches!(kind, "page" | "iframe") {
        let _ = cdp.call(session, &p::SetAutoAttach::PAUSED).await;
    }
    if attached.waiting_for_debugger {
        let _ = cdp.call(session, &p::RunIfWaiting {}).await;
    }
}

/// Decides one paused request and lets it go or fails it.
async fn decide(
    cdp: Cdp,
    session: Option<String>,
    paused: p::RequestPaused,
    policy: Arc<UrlPolicy>,
    shared: Arc<Shared>,
) {
    let verdict = check(&policy, &paused.request.url).await;
    let request_id = paused.request_id;
    let sent = match verdict {
        Ok(()) => cdp.call(session.as_deref(), &p::ContinueRequest { request_id }).await.map(drop),
        Err(refusal) => {
            let blocked = Blocked { url: paused.request.url, resource_type: paused.resource_type, refusal };
            refused(&shared, &policy, &paused.request.method, blocked);
            let fail = p::FailRequest { request_id, error_reason: "BlockedByClient" };
            cdp.call(session.as_deref(), &fail).await.map(drop)
        }
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, "paused request not released");
    }
}

/// Writes a refused request to the audit log (unless the rule's audit is
/// `off`) and to the info log, and remembers it for `navigate`'s answer.
pub(super) fn refused(shared: &Shared, policy: &UrlPolicy, method: &str, blocked: Blocked) {
    let (url, rule) = (blocked.url.as_str(), blocked.refusal.rule.as_str());
    if policy.audits() {
        let denial = &blocked.refusal.denial;
        let identity = shared.lock().actor.clone();
        tracing::info!(
            target: "audit",
            port = "browser",
            endpoint = "browser_navigate",
            identity,
            method,
            decision = "deny",
            status = denial.status(),
            code = denial.code(),
            rule,
            url,
        );
    }
    tracing::info!(url, rule, resource = blocked.resource_type, "browser request blocked");
    shared.lock().block(blocked);
}

/// The policy's verdict on `url`, resolving its host name first.
///
/// # Errors
/// The refusal and its rule.
pub async fn check(policy: &UrlPolicy, url: &str) -> Result<(), UrlRefusal> {
    decide_host(policy, policy.check(url)?).await
}

/// Decides `host`: a name by the addresses it resolves to.
///
/// # Errors
/// The refusal and its rule.
pub async fn decide_host(policy: &UrlPolicy, host: Host) -> Result<(), UrlRefusal> {
    resolve(policy, host).await.map(drop)
}

/// The addresses `host` stands for, each decided: the address written in
/// the URL, or every address its name resolves to (none when it does not
/// resolve: it reaches nothing, and the browser reports the failure).
///
/// # Errors
/// The refusal and its rule.
pub async fn resolve(policy: &UrlPolicy, host: Host) -> Result<Vec<IpAddr>, UrlRefusal> {
    match host {
        Host::None => Ok(Vec::new()),
        Host::Address(ip) => Ok(vec![ip]),
        Host::Name(name, port) => {
            let addresses: Vec<IpAddr> =
                match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name.as_str(), port))).await {
                    Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                    _ => Vec::new(),
                };
            policy.check_addresses(&name, &addresses)?;
            Ok(addresses)
        }
    }
}

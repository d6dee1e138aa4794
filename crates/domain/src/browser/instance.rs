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

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

use super::cdp::{Cdp, Event};
use super::console::Console;
use super::egress::{Egress, EgressPath};
use super::launch::{self, Launched};
use super::protocol as p;
use super::shared::{Blocked, Shared};
use super::verdict::{check, refused};
use super::BrowserError;
use crate::environment::ChildEnv;
use crate::policy::guards::UrlPolicy;

/// How long a browser whose connection closed gets to report its exit.
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long the new page may take to be attached.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

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
    _egress: Box<dyn EgressPath>,
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
        egress: &dyn Egress,
        console: Arc<Console>,
    ) -> Result<Instance, BrowserError> {
        let shared = Arc::new(Shared::default());
        let egress = egress
            .open(Arc::clone(&policy), Arc::clone(&shared))
            .await
            .map_err(|e| BrowserError::Start(format!("cannot open the browser's network path: {e}")))?;
        let mut process = launch::launch(program, env, egress.addr()).await?;
        match Self::open(&process, policy, console, Arc::clone(&shared)).await {
            Ok((cdp, session, target)) => Ok(Instance {
                job: process.job.clone(),
                ws_url: process.ws_url.clone(),
                process: tokio::sync::Mutex::new(process),
                cdp,
                session,
                target,
                shared,
                _egress: egress,
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

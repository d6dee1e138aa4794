//! Webhooks: endpoints that receive signed session lifecycle events.
//!
//! - [`registry`]: the endpoints of every owner, persisted under the state directory.
//! - [`admission`]: which URLs may be registered.
//! - [`signing`]: `whsec_` secrets and Standard Webhooks signatures.
//! - [`delivery`]: one signed POST through the policy's URL guard.
//! - [`watch`]: a session's events into `agent.session.*` events.
//!
//! Events never wait for a receiver: [`Webhooks::emit`] puts one delivery
//! per subscribed endpoint on a bounded queue ([`QUEUE_CAPACITY`]; when it
//! is full the event is dropped and logged), and a dispatcher runs at most
//! [`IN_FLIGHT`] deliveries at once, each retried with exponential backoff
//! ([`Retry`]) after no answer, `408`, `429` or a `5xx`. The outcome of each
//! delivery is logged (the reference shows it only in the log and in the
//! answer of `POST .../test`).

pub mod admission;
pub mod delivery;
pub mod registry;
pub mod signing;
pub mod tally;
pub mod watch;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use self::delivery::{Deliverer, DeliveryError, Event};
use self::registry::{EndpointFields, Registry, WebhookEndpoint};
use self::tally::Deliveries;
use self::tally::Tally;
use super::error::AgentError;
use super::settings::AgentsConfig;

/// The event types this server sends (the reference's; it never sends
/// `agent.session.action_required`).
pub const EVENT_TYPES: &[&str] =
    &["agent.session.created", "agent.session.in_progress", "agent.session.idle", "agent.session.failed"];
/// Deliveries waiting for a slot, at most.
pub const QUEUE_CAPACITY: usize = 1024;
/// Deliveries running at once, at most (retry waits included).
pub const IN_FLIGHT: usize = 16;

/// How often and how patiently a delivery is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all.
    pub attempts: u32,
    /// The wait after the first failed attempt; each next wait doubles.
    pub first_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { attempts: 4, first_delay: Duration::from_millis(500) }
    }
}

/// One event for one endpoint.
#[derive(Debug)]
struct Job {
    endpoint_id: String,
    url: String,
    secret: String,
    event_type: &'static str,
    msg_id: String,
    payload: Arc<Vec<u8>>,
}

/// The webhooks of the daemon; see the module documentation.
#[derive(Debug)]
pub struct Webhooks {
    registry: Registry,
    deliverer: Option<Deliverer>,
    queue: mpsc::Sender<Job>,
    /// Sessions a watcher follows (one each).
    watched: Mutex<HashSet<String>>,
    allow_http: bool,
    allow_private: bool,
    /// Endpoints one owner may register.
    max_per_owner: usize,
    /// How deliveries ended.
    tally: Arc<Tally>,
}

impl Webhooks {
    /// Loads the endpoints kept under `state_dir` (memory only when `None`)
    /// and starts the dispatcher, which stops with `shutdown`.
    pub fn start(config: &AgentsConfig, state_dir: Option<&Path>, shutdown: CancellationToken) -> Arc<Self> {
        let registry = Registry::load(state_dir.map(registry::file_in).as_deref());
        let deliverer = match Deliverer::new(config.allow_private_urls) {
            Ok(deliverer) => Some(deliverer),
            Err(e) => {
                tracing::error!(error = %e, "agents: webhook deliveries are off: no HTTP client");
                None
            }
        };
        let (queue, rx) = mpsc::channel(QUEUE_CAPACITY);
        let tally = Arc::new(Tally::default());
        if let Some(deliverer) = deliverer.clone() {
            tokio::spawn(dispatch(rx, deliverer, Retry::default(), Arc::clone(&tally), shutdown));
        }
        Arc::new(Webhooks {
            registry,
            deliverer,
            queue,
            watched: Mutex::new(HashSet::new()),
            allow_http: config.webhook_allow_http,
            allow_private: config.allow_private_urls,
            max_per_owner: config.quotas.webhooks,
            tally,
        })
    }

    /// How deliveries have ended so far.
    pub fn outcomes(&self) -> Deliveries {
        self.tally.read()
    }

    /// Admits `url` as an endpoint's URL under this server's settings.
    ///
    /// # Errors
    /// 400 naming the problem.
    pub fn admit(&self, url: &str) -> Result<(), AgentError> {
        admission::check_url(url, self.allow_http, self.allow_private)
    }

    /// Registers an endpoint of `owner`; its secret is in the answer (and only there).
    ///
    /// # Errors
    /// 400 for a URL [`admission`] refuses; [`AgentError::QuotaExceeded`]
    /// when `owner` has its quota of endpoints.
    pub fn create(&self, owner: &str, fields: EndpointFields) -> Result<WebhookEndpoint, AgentError> {
        self.admit(fields.url.as_deref().unwrap_or_default())?;
        let secret = signing::new_secret().map_err(|e| AgentError::internal("no randomness for a secret", e))?;
        let limit = self.max_per_owner;
        self.registry.create(owner, fields, secret, limit).ok_or(AgentError::QuotaExceeded {
            quota: "agents_max_webhooks",
            limit: limit as u64,
            what: "webhook endpoints",
        })
    }

    /// Endpoint `id` of `owner`.
    ///
    /// # Errors
    /// 404 for an unknown or foreign id.
    pub fn get(&self, owner: &str, id: &str) -> Result<WebhookEndpoint, AgentError> {
        self.registry.get(owner, id).ok_or_else(|| missing(id))
    }

    /// `owner`'s endpoints, oldest first.
    pub fn list(&self, owner: &str) -> Vec<WebhookEndpoint> {
        self.registry.list(owner)
    }

    /// Changes endpoint `id` of `owner`.
    ///
    /// # Errors
    /// 404 for an unknown id; 400 for a URL [`admission`] refuses.
    pub fn update(&self, owner: &str, id: &str, fields: EndpointFields) -> Result<WebhookEndpoint, AgentError> {
        if let Some(url) = &fields.url {
            self.admit(url)?;
        }
        self.registry.update(owner, id, fields, None).ok_or_else(|| missing(id))
    }

    /// Gives endpoint `id` of `owner` a new secret (the old one stops signing at once).
    ///
    /// # Errors
    /// 404 for an unknown id.
    pub fn rotate(&self, owner: &str, id: &str) -> Result<WebhookEndpoint, AgentError> {
        let secret = signing::new_secret().map_err(|e| AgentError::internal("no randomness for a secret", e))?;
        self.registry.update(owner, id, EndpointFields::default(), Some(secret)).ok_or_else(|| missing(id))
    }

    /// Removes endpoint `id` of `owner`.
    ///
    /// # Errors
    /// 404 for an unknown id.
    pub fn delete(&self, owner: &str, id: &str) -> Result<WebhookEndpoint, AgentError> {
        self.registry.delete(owner, id).ok_or_else(|| missing(id))
    }

    /// Sends one `event_type` event about a made-up session to `endpoint`
    /// now, once: the receiver's status.
    ///
    /// # Errors
    /// Why the receiver gave no answer.
    pub async fn test(&self, endpoint: &WebhookEndpoint, event_type: &'static str) -> Result<u16, DeliveryError> {
        let Some(deliverer) = &self.deliverer else { return Err(DeliveryError::Unreachable) };
        let event = Event::new(event_type, "agsess_test", None);
        let payload = serde_json::to_vec(&event).map_err(|_| DeliveryError::Unreachable)?;
        deliverer.send(&endpoint.url, &endpoint.secret, &event.id, &payload).await
    }

    /// Whether `owner` has an endpoint (a session of theirs is worth watching).
    pub fn any(&self, owner: &str) -> bool {
        self.registry.any(owner)
    }

    /// Queues `event_type` about a session of `owner` for each endpoint of
    /// theirs that subscribed; never waits (a full queue drops it, logged).
    pub fn emit(&self, owner: &str, event_type: &'static str, session_id: &str, environment_id: Option<&str>) {
        for endpoint in self.registry.list(owner) {
            if !endpoint.event_types.iter().any(|t| t == event_type) {
                continue;
            }
            let event = Event::new(event_type, session_id, environment_id.map(str::to_string));
            let Ok(payload) = serde_json::to_vec(&event) else { continue };
            let job = Job {
                endpoint_id: endpoint.id,
                url: endpoint.url,
                secret: endpoint.secret,
                event_type,
                msg_id: event.id,
                payload: Arc::new(payload),
            };
            match self.queue.try_send(job) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(job)) => {
                    self.tally.dropped();
                    tracing::warn!(
                        endpoint = %job.endpoint_id, event = %job.msg_id, event_type,
                        "agents: webhook delivery queue is full; event dropped"
                    );
                }
                Err(mpsc::error::TrySendError::Closed(job)) => {
                    self.tally.dropped();
                    tracing::warn!(
                        endpoint = %job.endpoint_id, event = %job.msg_id, event_type,
                        "agents: webhook deliveries are off; event dropped"
                    );
                }
            }
        }
    }
}

fn missing(id: &str) -> AgentError {
    AgentError::not_found("webhook endpoint", id, "webhook_endpoint_id")
}

/// Runs queued deliveries, at most [`IN_FLIGHT`] at once.
async fn dispatch(
    mut rx: mpsc::Receiver<Job>,
    deliverer: Deliverer,
    retry: Retry,
    tally: Arc<Tally>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit { Ok(p) => p, Err(_) => return },
            () = shutdown.cancelled() => return,
        };
        let job = tokio::select! {
            job = rx.recv() => match job { Some(job) => job, None => return },
            () = shutdown.cancelled() => return,
        };
        let (deliverer, tally) = (deliverer.clone(), Arc::clone(&tally));
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = deliver(&deliverer, &job, retry, &tally) => {}
                () = shutdown.cancelled() => {}
            }
            drop(permit);
        });
    }
}

/// Whether a receiver's status is worth another attempt.
fn retryable(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// Delivers one job, retrying with backoff; logs the outcome.
async fn deliver(deliverer: &Deliverer, job: &Job, retry: Retry, tally: &Tally) {
    let (mut delay, attempts) = (retry.first_delay, retry.attempts.max(1));
    for attempt in 1..=attempts {
        if attempt > 1 {
            tally.retried();
        }
        let outcome = deliverer.send(&job.url, &job.secret, &job.msg_id, &job.payload).await;
        let again = match outcome {
            Ok(status) if (200..300).contains(&status) => {
                tally.delivered();
                tracing::info!(endpoint = %job.endpoint_id, event = %job.msg_id, event_type = job.event_type, status, attempt, "agents: webhook delivered");
                return;
            }
            Ok(status) => retryable(status),
            Err(DeliveryError::Private) => false,
            Err(_) => true,
        };
        let result = outcome.map_or_else(|e| e.to_string(), |s| format!("HTTP {s}"));
        if !again || attempt == attempts {
            tally.failed();
            tracing::warn!(endpoint = %job.endpoint_id, event = %job.msg_id, event_type = job.event_type, %result, attempt, "agents: webhook not delivered");
            return;
        }
        tracing::debug!(endpoint = %job.endpoint_id, event = %job.msg_id, %result, attempt, "agents: webhook delivery will be retried");
        tokio::time::sleep(delay).await;
        delay = delay.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn emitting_never_waits_even_past_the_queue_bound() {
        let config = AgentsConfig { allow_private_urls: true, webhook_allow_http: true, ..AgentsConfig::default() };
        let shutdown = CancellationToken::new();
        let hooks = Webhooks::start(&config, None, shutdown.clone());
        // Connections are accepted by the kernel and never answered.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", dead.local_addr().expect("addr"));
        let fields = EndpointFields { url: Some(url), event_types: Some(vec![EVENT_TYPES[2].to_string()]), name: None };
        hooks.create("a", fields).expect("registered");
        let started = std::time::Instant::now();
        for _ in 0..(QUEUE_CAPACITY + IN_FLIGHT + 100) {
            hooks.emit("a", EVENT_TYPES[2], "agsess_1", None);
        }
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(hooks.queue.capacity(), 0, "the queue is full: the rest were dropped, not buffered");
        hooks.emit("b", EVENT_TYPES[2], "agsess_2", None);
        shutdown.cancel();
    }
}

//! One delivery attempt: the event POSTed as compact JSON, signed
//! ([`signing::sign`]) with fresh `webhook-timestamp`, to a destination the
//! policy's URL guard admits ([`UrlPolicy`]): an address written in the URL
//! is decided before connecting, a host name by the addresses it resolves to
//! (the guarded resolver below decides them and the connection uses exactly
//! those, so a name cannot resolve one way for the check and another for
//! the connection). Redirects are never followed (a `3xx` is the
//! receiver's answer); proxies from the environment are not used; each
//! attempt is bounded by [`ATTEMPT_TIMEOUT`].

use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::signing;
use crate::policy::guards::{Host, UrlPolicy};

/// How long one attempt may take, connection included (the reference's 5 s).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The `User-Agent` of deliveries (the reference's).
const USER_AGENT: &str = "agent-sandbox-agents-local";

/// The event envelope the official SDK unwraps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// `evt_<24 hex>`, also the `webhook-id` header.
    pub id: String,
    /// `event`.
    pub object: &'static str,
    /// When it happened (seconds).
    pub created_at: i64,
    /// One of [`super::EVENT_TYPES`].
    #[serde(rename = "type")]
    pub event_type: &'static str,
    /// The session it is about.
    pub data: EventData,
}

/// The `data` of an event: the session it is about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventData {
    /// The session id.
    pub id: String,
    /// Always `self_hosted`.
    pub environment_type: &'static str,
    /// The environment the session is bound to.
    pub environment_id: Option<String>,
}

impl Event {
    /// A new event of `event_type` about session `session_id`.
    pub fn new(event_type: &'static str, session_id: &str, environment_id: Option<String>) -> Self {
        Event {
            id: format!("evt_{}", crate::ids::random_hex(12)),
            object: "event",
            created_at: crate::agents::turn::now() as i64,
            event_type,
            data: EventData { id: session_id.to_string(), environment_type: "self_hosted", environment_id },
        }
    }
}

/// Why an attempt got no HTTP answer (the reference's messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The host name does not resolve.
    #[error("the webhook host does not resolve")]
    Unresolved,
    /// The destination is a private, loopback or link-local address.
    #[error("the webhook host resolves to a private address")]
    Private,
    /// No answer: refused, reset, timed out, or not a URL we can send to.
    #[error("the webhook receiver could not be reached")]
    Unreachable,
}

/// Sends events; one client (and its connection pool) for every delivery.
#[derive(Debug, Clone)]
pub struct Deliverer {
    client: reqwest::Client,
    policy: Arc<UrlPolicy>,
}

impl Deliverer {
    /// A deliverer that refuses private destinations unless `allow_private`.
    ///
    /// # Errors
    /// The HTTP client cannot be built (its TLS roots cannot be loaded).
    pub fn new(allow_private: bool) -> Result<Self, reqwest::Error> {
        let policy = Arc::new(UrlPolicy::new(&[], &[], allow_private.then_some(false)));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(ATTEMPT_TIMEOUT)
            .user_agent(USER_AGENT)
            .dns_resolver(Arc::new(GuardedResolver { policy: Arc::clone(&policy) }))
            .build()?;
        Ok(Deliverer { client, policy })
    }

    /// Signs `payload` (the event `msg_id`, serialised) with `secret` and
    /// POSTs it to `url`: the receiver's status, or why there is none.
    ///
    /// # Errors
    /// [`DeliveryError`].
    pub async fn send(&self, url: &str, secret: &str, msg_id: &str, payload: &[u8]) -> Result<u16, DeliveryError> {
        literal_verdict(&self.policy, url)?;
        let timestamp = crate::agents::turn::now() as i64;
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signing::sign(secret, msg_id, timestamp, payload))
            .body(payload.to_vec());
        match request.send().await {
            Ok(response) => Ok(response.status().as_u16()),
            Err(e) => Err(cause_of(&e)),
        }
    }
}

/// `url`'s host as `policy` sees it written: an address it refuses, or no host, is refused.
fn literal_verdict(policy: &UrlPolicy, url: &str) -> Result<Host, DeliveryError> {
    match policy.check(url) {
        Ok(Host::None) => Err(DeliveryError::Unreachable),
        Ok(host) => Ok(host),
        Err(refusal) if refusal.rule == "private_address" => Err(DeliveryError::Private),
        Err(_) => Err(DeliveryError::Unreachable),
    }
}

/// The addresses `host` resolves to, when `policy` admits every one of
/// them: the one check of a name, made when it is used (deliveries and
/// vault credentials), not only as it was written.
///
/// # Errors
/// [`DeliveryError::Unresolved`], [`DeliveryError::Private`].
pub async fn resolve_admitted(policy: &UrlPolicy, host: &str) -> Result<Vec<SocketAddr>, DeliveryError> {
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host, 0)).await {
        Ok(addrs) => addrs.collect(),
        Err(_) => return Err(DeliveryError::Unresolved),
    };
    if addrs.is_empty() {
        return Err(DeliveryError::Unresolved);
    }
    let ips: Vec<_> = addrs.iter().map(SocketAddr::ip).collect();
    if policy.check_addresses(host, &ips).is_err() {
        return Err(DeliveryError::Private);
    }
    Ok(addrs)
}

/// Whether `url` may be connected to under `policy` now: its host as
/// written, then, for a name, every address it resolves to.
///
/// # Errors
/// [`DeliveryError`]: why not.
pub async fn admit_destination(policy: &UrlPolicy, url: &str) -> Result<(), DeliveryError> {
    match literal_verdict(policy, url)? {
        Host::Name(name, _) => resolve_admitted(policy, &name).await.map(drop),
        _ => Ok(()),
    }
}

/// The guard's verdict carried through the HTTP client's error chain.
fn cause_of(err: &reqwest::Error) -> DeliveryError {
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<DeliveryError>() {
            return *found;
        }
        source = e.source();
    }
    DeliveryError::Unreachable
}

/// Resolves host names for the client and refuses private addresses
/// (unless the policy allows them), so the connection goes only to
/// addresses the guard admitted.
#[derive(Debug)]
struct GuardedResolver {
    policy: Arc<UrlPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            match resolve_admitted(&policy, name.as_str()).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Err(refused) => Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve as _;

    #[tokio::test]
    async fn private_destinations_are_refused_before_any_connection() {
        let deliverer = Deliverer::new(false).expect("client");
        for url in ["http://127.0.0.1:9/", "http://localhost:9/", "http://[::1]:9/", "http://169.254.169.254/"] {
            assert_eq!(deliverer.send(url, "whsec_x", "evt_1", b"{}").await, Err(DeliveryError::Private), "{url}");
        }
        assert_eq!(
            deliverer.send("http://nowhere.invalid/", "whsec_x", "evt_1", b"{}").await,
            Err(DeliveryError::Unresolved),
            "the resolver's verdict comes through the client's error chain"
        );
        let name = "localhost".parse().expect("name");
        let refused = GuardedResolver { policy: Arc::clone(&deliverer.policy) }.resolve(name).await;
        let err = refused.err().expect("refused");
        assert_eq!(err.downcast_ref::<DeliveryError>(), Some(&DeliveryError::Private));
    }

    #[tokio::test]
    async fn allowed_private_destinations_are_reached_and_a_closed_port_is_unreachable() {
        let deliverer = Deliverer::new(true).expect("client");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        for scheme in ["http", "https"] {
            let url = format!("{scheme}://127.0.0.1:{port}/");
            assert_eq!(deliverer.send(&url, "whsec_x", "evt_1", b"{}").await, Err(DeliveryError::Unreachable));
        }
        // A plain-HTTP server behind an https URL: the TLS handshake fails, as no answer.
        let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("https://{}/", plain.local_addr().expect("addr"));
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            if let Ok((mut conn, _)) = plain.accept().await {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
            }
        });
        assert_eq!(deliverer.send(&url, "whsec_x", "evt_1", b"{}").await, Err(DeliveryError::Unreachable));
    }

    #[test]
    fn events_serialise_in_the_reference_order() {
        let event = Event::new("agent.session.idle", "agsess_1", None);
        let text = serde_json::to_string(&event).expect("json");
        assert!(text.starts_with(r#"{"id":"evt_"#), "{text}");
        assert!(text.contains(r#""object":"event","created_at":"#));
        assert!(text.ends_with(
            r#""type":"agent.session.idle","data":{"id":"agsess_1","environment_type":"self_hosted","environment_id":null}}"#
        ));
    }
}

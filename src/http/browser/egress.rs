//! The browser's network path: a forward proxy of the daemon's own, on
//! loopback, through which Chromium makes every connection.
//!
//! It is the domain's [`Egress`] (`abx_domain::browser::egress`), made by
//! [`ProxyEgress`]. Request interception (`abx_domain::browser::instance`) decides the requests CDP
//! shows it, but not all of them: WebSockets, `sendBeacon`, `keepalive`
//! fetches, prefetches and pings from the first `about:blank` page, and the
//! bare TCP connections of preconnect never pause. Chromium is started with
//! this proxy for every scheme and no bypass (not even loopback), so each of
//! those is decided here, connection by connection, before a byte reaches
//! its destination:
//!
//! - an absolute-form request (`GET http://host/path`) is decided by its
//!   whole URL, then forwarded on a connection of its own;
//! - a `CONNECT` tunnel (HTTPS, and WebSockets of either scheme) is answered
//!   at once, and decided by what the browser sends first: a plain HTTP
//!   request (a `ws://` handshake) by its whole URL, a TLS hello by the
//!   origin ([`UrlPolicy::check_origin`]), anything else refused.
//!
//! Host names are resolved here and every address checked; the connection
//! goes to an address that was checked, so a name that resolves elsewhere
//! a moment later (DNS rebinding) reaches nothing new. A refusal is written
//! to the audit log and listed in `navigate`'s `blocked`; the browser sees
//! a failed connection (`403` for an absolute-form request). No addresses
//! beyond what the policy allows are contacted, so preconnects scan nothing.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use abx_domain::browser::egress::{Egress, EgressPath, OpenPath};
use abx_domain::browser::shared::{Blocked, Shared};
use abx_domain::browser::verdict::{refused, resolve};
use abx_domain::policy::guards::{Host, UrlPolicy, UrlRefusal};

/// Connections the proxy serves at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 512;
/// How long a connection to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the browser may take to send a tunnel's first request.
const OPENING_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest first request of a plain tunnel (its request line and headers).
const MAX_OPENING: usize = 16 * 1024;
/// TLS's record type of a handshake: the first byte of a client hello.
const TLS_HANDSHAKE: u8 = 0x16;

type Body = BoxBody<Bytes, hyper::Error>;

/// The running proxy; dropping it stops it and every connection it serves.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    stop: CancellationToken,
}

/// What every connection of the proxy shares.
struct Context {
    policy: Arc<UrlPolicy>,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and serves until dropped.
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn start(policy: Arc<UrlPolicy>, shared: Arc<Shared>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let context = Arc::new(Context { policy, shared, stop: stop.clone() });
        tokio::spawn(accept(listener, context));
        Ok(Proxy { addr, stop })
    }
}

impl EgressPath for Proxy {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The daemon's [`Egress`]: a [`Proxy`] for each browser.
#[derive(Debug, Default)]
pub struct ProxyEgress;

impl Egress for ProxyEgress {
    fn open(&self, policy: Arc<UrlPolicy>, shared: Arc<Shared>) -> OpenPath {
        Box::pin(async move { Ok(Box::new(Proxy::start(policy, shared).await?) as Box<dyn EgressPath>) })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, context: Arc<Context>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            () = context.stop.cancelled() => return,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            () = context.stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: let connections end first.
                    tracing::debug!(error = %e, "browser proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let context = Arc::clone(&context);
        tokio::spawn(async move {
            let _permit = permit;
            let stop = context.stop.clone();
            tokio::select! {
                () = serve(stream, context) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// Serves one connection of the browser: each request on it is decided on its own.
async fn serve(stream: TcpStream, context: Arc<Context>) {
    let service = hyper::service::service_fn(move |request| {
        let context = Arc::clone(&context);
        async move { Ok::<_, Infallible>(handle(request, context).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "browser proxy: connection ended");
    }
}

async fn handle(request: Request<Incoming>, context: Arc<Context>) -> Response<Body> {
    if request.method() == Method::CONNECT {
        tunnel(request, context)
    } else {
        forward(request, &context).await
    }
}

/// `CONNECT host:port`: answered at once; decided by what goes through it first.
fn tunnel(request: Request<Incoming>, context: Arc<Context>) -> Response<Body> {
    let Some((host, port)) = authority(request.uri()) else {
        return answer(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    tokio::spawn(async move {
        match hyper::upgrade::on(request).await {
            Ok(upgraded) => relay(TokioIo::new(upgraded), &host, port, &context).await,
            Err(e) => tracing::debug!(error = %e, "browser proxy: tunnel not opened"),
        }
    });
    Response::new(empty())
}

/// What a tunnel carries, from its first bytes.
#[derive(Debug, PartialEq, Eq)]
enum Opening {
    /// A TLS client hello: only the origin can be decided.
    Tls,
    /// A plain HTTP request: its path, and whether it asks for a WebSocket.
    Http { path: String, websocket: bool },
    /// Neither.
    Unknown,
}

async fn relay<S>(mut client: S, host: &str, port: u16, context: &Context)
where
    S: AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut opening = Vec::with_capacity(1024);
    let Ok(Ok(kind)) = tokio::time::timeout(OPENING_TIMEOUT, read_opening(&mut client, &mut opening)).await else {
        return;
    };
    let authority = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    let (decided, url, resource) = match kind {
        Opening::Tls => {
            let url = format!("https://{authority}:{port}/");
            (context.policy.check_origin(&authority, port), url, "Other")
        }
        Opening::Http { path, websocket } => {
            let scheme = if websocket { "ws" } else { "http" };
            let url = normalized(&format!("{scheme}://{authority}:{port}{path}"));
            (context.policy.check(&url), url, if websocket { "WebSocket" } else { "Other" })
        }
        Opening::Unknown => (Err(UrlRefusal::unknown_protocol()), format!("tcp://{authority}:{port}"), "Other"),
    };
    let addresses = match decided {
        Ok(host) => destinations(&context.policy, host, port).await,
        Err(refusal) => Err(refusal),
    };
    let addresses = match addresses {
        Ok(addresses) => addresses,
        Err(refusal) => return context.refuse("CONNECT", url, resource, refusal),
    };
    let Some(mut upstream) = connect(&addresses).await else { return };
    if upstream.write_all(&opening).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// Reads the tunnel's first bytes into `buffer`: one byte for TLS, else a
/// whole HTTP request head (at most [`MAX_OPENING`]).
async fn read_opening<S: AsyncRead + Unpin>(client: &mut S, buffer: &mut Vec<u8>) -> std::io::Result<Opening> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if buffer[0] == TLS_HANDSHAKE {
            return Ok(Opening::Tls);
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(buffer) {
            Ok(httparse::Status::Complete(_)) => {
                let path = request.path.unwrap_or("/").to_string();
                let websocket = request.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("upgrade")
                        && std::str::from_utf8(h.value).is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
                });
                return Ok(if path.starts_with('/') { Opening::Http { path, websocket } } else { Opening::Unknown });
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_OPENING => {}
            _ => return Ok(Opening::Unknown),
        }
    }
}

/// An absolute-form request (`GET http://host/path`): decided by its whole
/// URL and forwarded on a connection of its own.
async fn forward(mut request: Request<Incoming>, context: &Context) -> Response<Body> {
    let uri = request.uri().clone();
    let method = request.method().as_str().to_string();
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return answer(StatusCode::BAD_REQUEST, "a proxy request needs an absolute http URL");
    }
    let url = normalized(&uri.to_string());
    let port = uri.port_u16().unwrap_or(80);
    let decided = match context.policy.check(&url) {
        Ok(host) => destinations(&context.policy, host, port).await,
        Err(refusal) => Err(refusal),
    };
    let addresses = match decided {
        Ok(addresses) => addresses,
        Err(refusal) => {
            let message = format!("Blocked by the sandbox's URL policy: {}", refusal.denial);
            context.refuse(&method, url, "Other", refusal);
            return answer(StatusCode::FORBIDDEN, &message);
        }
    };
    let Some(upstream) = connect(&addresses).await else {
        return answer(StatusCode::BAD_GATEWAY, "the destination cannot be reached");
    };
    let (mut sender, connection) = match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
        Ok(pair) => pair,
        Err(_) => return answer(StatusCode::BAD_GATEWAY, "the destination cannot be reached"),
    };
    let stop = context.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = connection => {}
            () = stop.cancelled() => {}
        }
    });
    let origin_form = uri.path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = origin_form.parse().unwrap_or_else(|_| Uri::from_static("/"));
    strip_hop_by_hop(request.headers_mut());
    match sender.send_request(request).await {
        Ok(mut response) => {
            strip_hop_by_hop(response.headers_mut());
            response.map(BodyExt::boxed)
        }
        Err(e) => {
            tracing::debug!(error = %e, "browser proxy: forwarded request failed");
            answer(StatusCode::BAD_GATEWAY, "the destination closed the connection")
        }
    }
}

impl Context {
    fn refuse(&self, method: &str, url: String, resource: &str, refusal: UrlRefusal) {
        refused(&self.shared, &self.policy, method, Blocked { url, resource_type: resource.into(), refusal });
    }
}

/// The addresses `host` may be reached at: the written address, or every
/// address its name resolves to, each checked.
async fn destinations(policy: &UrlPolicy, host: Host, port: u16) -> Result<Vec<SocketAddr>, UrlRefusal> {
    let addresses: Vec<IpAddr> = match host {
        Host::Address(ip) => vec![ip],
        Host::Name(..) => resolve(policy, host).await?,
        Host::None => Vec::new(),
    };
    Ok(addresses.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
}

/// Connects to the first address that answers.
async fn connect(addresses: &[SocketAddr]) -> Option<TcpStream> {
    for address in addresses {
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            let _ = stream.set_nodelay(true);
            return Some(stream);
        }
    }
    None
}

/// `host` and `port` of a `CONNECT` target.
fn authority(uri: &Uri) -> Option<(String, u16)> {
    let authority = uri.authority()?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), authority.port_u16()?))
}

/// A URL as the browser (and the patterns) spell it: the default port left out.
fn normalized(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| url.to_string(), String::from)
}

/// Removes the headers that describe one hop, and those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("proxy-connection");
    headers.remove("keep-alive");
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

fn answer(status: StatusCode, message: &str) -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::from(message.to_string())).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn openings_tell_tls_websockets_and_plain_requests_apart() {
        let read = |bytes: &'static [u8]| async move {
            let mut buffer = Vec::new();
            read_opening(&mut &bytes[..], &mut buffer).await.map(|kind| (kind, buffer.len()))
        };
        assert_eq!(read(b"\x16\x03\x01\x02\x00").await.expect("tls").0, Opening::Tls);
        let ws = b"GET /chat?x=1 HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n\r\nrest";
        let (kind, kept) = read(ws).await.expect("ws");
        assert_eq!(kind, Opening::Http { path: "/chat?x=1".into(), websocket: true });
        assert_eq!(kept, ws.len(), "everything read is sent on");
        let plain = read(b"POST /beacon HTTP/1.1\r\nHost: a\r\n\r\n").await.expect("http").0;
        assert_eq!(plain, Opening::Http { path: "/beacon".into(), websocket: false });
        assert_eq!(read(b"SSH-2.0-x\r\n\r\n").await.expect("other").0, Opening::Unknown);
        assert_eq!(read(b"GET http://x/ HTTP/1.1\r\n\r\n").await.expect("absolute").0, Opening::Unknown);
        assert!(read(b"GET / HTTP/1.1\r\nHost").await.is_err(), "closed before the head ended");
    }

    fn context(policy: UrlPolicy) -> Context {
        Context { policy: Arc::new(policy), shared: Arc::default(), stop: CancellationToken::new() }
    }

    #[tokio::test]
    async fn a_tunnel_reaches_its_destination_only_when_the_policy_allows() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        upstream.set_nonblocking(true).expect("nonblocking");
        let port = upstream.local_addr().expect("addr").port();
        let hello = b"\x16\x03\x01hello";

        let denied = context(UrlPolicy::new(&[], &[format!("*127.0.0.1:{port}*")], Some(false)));
        let (mut browser, tunnel) = tokio::io::duplex(4096);
        browser.write_all(hello).await.expect("write");
        relay(tunnel, "127.0.0.1", port, &denied).await;
        let refused = denied.shared.lock().blocked.clone();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].url, format!("https://127.0.0.1:{port}/"));
        assert_eq!(refused[0].refusal.rule, format!("url_deny:*127.0.0.1:{port}*"));
        let nothing = upstream.accept().map(drop).expect_err("no connection was made");
        assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);

        let allowed = context(UrlPolicy::new(&[], &[], Some(false)));
        let (mut browser, tunnel) = tokio::io::duplex(4096);
        let relayed = tokio::spawn(async move { relay(tunnel, "127.0.0.1", port, &allowed).await });
        browser.write_all(hello).await.expect("write");
        upstream.set_nonblocking(false).expect("blocking");
        let (mut stream, _) =
            tokio::task::spawn_blocking(move || upstream.accept()).await.expect("join").expect("accept");
        let mut received = vec![0u8; hello.len()];
        std::io::Read::read_exact(&mut stream, &mut received).expect("read");
        assert_eq!(received, hello, "the opening bytes are sent on");
        std::io::Write::write_all(&mut stream, b"back").expect("write");
        let mut back = [0u8; 4];
        browser.read_exact(&mut back).await.expect("read");
        assert_eq!(&back, b"back");
        drop(stream);
        drop(browser);
        relayed.await.expect("relay ends with its connections");
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("accept", "*/*"),
        ] {
            headers.insert(HeaderName::from_static(name), value.parse().expect("value"));
        }
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(HeaderName::as_str).collect::<Vec<_>>(), ["accept"]);
    }

    #[test]
    fn connect_targets_and_urls() {
        assert_eq!(authority(&"example.com:443".parse().expect("uri")), Some(("example.com".into(), 443)));
        assert_eq!(authority(&"[::1]:8080".parse().expect("uri")), Some(("::1".into(), 8080)));
        assert_eq!(normalized("ws://127.0.0.1:80/x"), "ws://127.0.0.1/x");
        assert_eq!(normalized("http://a:8080/b?c"), "http://a:8080/b?c");
    }
}

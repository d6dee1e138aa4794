//! The browser's network path, as the domain sees it: an HTTP forward
//! proxy, on loopback, through which Chromium makes every connection
//! (`--proxy-server`, no bypass), deciding each one by the URL policy.
//!
//! The proxy itself speaks HTTP, so it is the edge's (`http::browser::egress`,
//! on hyper); the browser service is given one at construction and opens a
//! path for each browser it starts. What the proxy refuses it records in the
//! instance's [`Shared`] through [`super::verdict::refused`], as request
//! interception does.

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use super::shared::Shared;
use crate::policy::guards::UrlPolicy;

/// A future that opens one path.
pub type OpenPath = Pin<Box<dyn Future<Output = std::io::Result<Box<dyn EgressPath>>> + Send>>;

/// What opens a network path for each browser.
pub trait Egress: Send + Sync + Debug {
    /// Opens a path held to `policy`, recording its refusals in `shared`.
    fn open(&self, policy: Arc<UrlPolicy>, shared: Arc<Shared>) -> OpenPath;
}

/// One open path; dropping it closes it and every connection it serves.
pub trait EgressPath: Send + Sync + Debug {
    /// The address Chromium's `--proxy-server` names.
    fn addr(&self) -> SocketAddr;
}

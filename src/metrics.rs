//! The daemon's Prometheus metrics, fed by the pipeline of every port and
//! exposed by `GET /metrics` on the API port (the OpenMetrics text format,
//! which Prometheus scrapes), through the `prometheus-client` crate.
//!
//! - `abx_requests_total{port, endpoint, status}`: decided calls.
//! - `abx_request_duration_seconds{port, endpoint}`: time to the answer's head.
//! - `abx_request_bytes_total`, `abx_response_bytes_total{port, endpoint}`: body bytes.
//! - `abx_processes`, `abx_terminals`, `abx_code_contexts`, `abx_watches`:
//!   live resources, read when scraped.
//! - `abx_webhook_deliveries_total{outcome}`: how the agents group's webhook
//!   deliveries ended (`delivered`, `failed`, `retried` attempts, `dropped`),
//!   read when scraped.
//!
//! No HTTP here: the pipeline records, the handler renders [`Metrics::render`].

use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use abx_wire::endpoints::{Endpoint, ENDPOINTS};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use abx_domain::agents::webhooks::tally::Deliveries;

/// The labels of a decided call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Call {
    port: &'static str,
    endpoint: &'static str,
    status: u16,
}

/// The labels of an endpoint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    port: &'static str,
    endpoint: &'static str,
}

/// Upper bounds of the latency buckets, seconds: 0.5 ms to about 30 s.
const LATENCY_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The labels of a webhook delivery's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// Live resources, read when the metrics are scraped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Live {
    /// Processes started by any port and still running.
    pub processes: u64,
    /// Terminal sessions (the API's and envd's).
    pub terminals: u64,
    /// Code contexts.
    pub code_contexts: u64,
    /// File-system watches.
    pub watches: u64,
    /// Webhook deliveries so far.
    pub webhooks: Deliveries,
}

/// Statuses whose counters each endpoint keeps at hand (others are looked up in the family).
const COMMON_STATUSES: [u16; 8] = [200, 204, 206, 400, 401, 403, 404, 429];

/// One endpoint's metrics, looked up once (its family entries).
struct RouteMetrics {
    latency: Histogram,
    bytes_in: Counter,
    bytes_out: Counter,
    statuses: [OnceLock<Counter>; COMMON_STATUSES.len()],
}

/// Every metric of the daemon.
pub struct Metrics {
    registry: Registry,
    requests: Family<Call, Counter>,
    /// Per endpoint of the table (by index), created on its first call.
    routes: Vec<OnceLock<RouteMetrics>>,
    latency: Family<Route, Histogram, fn() -> Histogram>,
    bytes_in: Family<Route, Counter>,
    bytes_out: Family<Route, Counter>,
    processes: Gauge<i64, AtomicI64>,
    terminals: Gauge<i64, AtomicI64>,
    code_contexts: Gauge<i64, AtomicI64>,
    watches: Gauge<i64, AtomicI64>,
    webhook_deliveries: Family<Outcome, Counter>,
}

type AtomicI64 = std::sync::atomic::AtomicI64;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("abx");
        let requests = Family::<Call, Counter>::default();
        let latency =
            Family::<Route, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let bytes_in = Family::<Route, Counter>::default();
        let bytes_out = Family::<Route, Counter>::default();
        registry.register("requests", "Calls decided by the pipeline, by port, endpoint and status", requests.clone());
        registry.register("request_duration_seconds", "Time from the request to the answer's head", latency.clone());
        registry.register("request_bytes", "Request body bytes read", bytes_in.clone());
        registry.register("response_bytes", "Response body bytes sent", bytes_out.clone());
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::<i64, AtomicI64>::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let processes = gauge(&mut registry, "processes", "Processes started by any port and still running");
        let terminals = gauge(&mut registry, "terminals", "Live terminal sessions (API and envd)");
        let code_contexts = gauge(&mut registry, "code_contexts", "Live code contexts");
        let watches = gauge(&mut registry, "watches", "Live file-system watches");
        let webhook_deliveries = Family::<Outcome, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries of the agents group, by outcome",
            webhook_deliveries.clone(),
        );
        let routes = ENDPOINTS.iter().map(|_| OnceLock::new()).collect();
        Metrics {
            registry,
            requests,
            routes,
            latency,
            bytes_in,
            bytes_out,
            processes,
            terminals,
            code_contexts,
            watches,
            webhook_deliveries,
        }
    }

    /// The latency and byte metrics of `endpoint`, created on first use.
    fn route(&self, endpoint: &'static Endpoint) -> Option<&RouteMetrics> {
        let slot = self.routes.get(abx_domain::policy::index_of(endpoint))?;
        Some(slot.get_or_init(|| {
            let route = Route { port: endpoint.port.as_str(), endpoint: endpoint.id };
            RouteMetrics {
                latency: self.latency.get_or_create(&route).clone(),
                bytes_in: self.bytes_in.get_or_create(&route).clone(),
                bytes_out: self.bytes_out.get_or_create(&route).clone(),
                statuses: Default::default(),
            }
        }))
    }

    /// Records a decided call's head: its status and how long it took.
    pub fn answered(&self, endpoint: &'static Endpoint, status: u16, seconds: f64) {
        let call = || Call { port: endpoint.port.as_str(), endpoint: endpoint.id, status };
        let Some(route) = self.route(endpoint) else {
            self.requests.get_or_create(&call()).inc();
            return;
        };
        match COMMON_STATUSES.iter().position(|s| *s == status) {
            Some(i) => route.statuses[i].get_or_init(|| self.requests.get_or_create(&call()).clone()).inc(),
            None => self.requests.get_or_create(&call()).inc(),
        };
        route.latency.observe(seconds);
    }

    /// Records a call's body bytes, once its answer has been sent.
    pub fn transferred(&self, endpoint: &'static Endpoint, read: u64, sent: u64) {
        if let Some(route) = self.route(endpoint) {
            route.bytes_in.inc_by(read);
            route.bytes_out.inc_by(sent);
        }
    }

    /// The text exposition of every metric, with `live` as the gauges' values.
    pub fn render(&self, live: Live) -> String {
        let set = |gauge: &Gauge<i64, AtomicI64>, value: u64| gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        set(&self.processes, live.processes);
        set(&self.terminals, live.terminals);
        set(&self.code_contexts, live.code_contexts);
        set(&self.watches, live.watches);
        let Deliveries { delivered, failed, retried, dropped } = live.webhooks;
        for (outcome, total) in
            [("delivered", delivered), ("failed", failed), ("retried", retried), ("dropped", dropped)]
        {
            // The counts only grow: the counter catches up with the reading.
            let counter = self.webhook_deliveries.get_or_create(&Outcome { outcome });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            tracing::error!("cannot encode the metrics");
        }
        text
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter of request body bytes shared between the body and the pipeline.
pub type ByteMeter = std::sync::Arc<AtomicU64>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_bytes_and_live_resources_are_exposed() {
        let metrics = Metrics::new();
        let find = |id| abx_wire::endpoints::find(id).expect("endpoint");
        metrics.answered(find("envd_stat"), 200, 0.002);
        metrics.answered(find("envd_stat"), 200, 0.003);
        metrics.answered(find("shell"), 404, 0.001);
        metrics.transferred(find("files_content_write"), 1000, 20);
        let webhooks = Deliveries { delivered: 5, failed: 1, retried: 2, dropped: 0 };
        let text = metrics.render(Live { processes: 3, terminals: 1, code_contexts: 2, watches: 0, webhooks });
        assert!(text.contains(r#"abx_requests_total{port="envd",endpoint="envd_stat",status="200"} 2"#), "{text}");
        assert!(text.contains(r#"abx_requests_total{port="api",endpoint="shell",status="404"} 1"#), "{text}");
        assert!(text.contains(r#"abx_request_duration_seconds_count{port="envd",endpoint="envd_stat"} 2"#), "{text}");
        assert!(text.contains(r#"abx_request_bytes_total{port="api",endpoint="files_content_write"} 1000"#), "{text}");
        assert!(text.contains("abx_processes 3") && text.contains("abx_code_contexts 2"), "{text}");
        assert!(text.contains(r#"abx_webhook_deliveries_total{outcome="delivered"} 5"#), "{text}");
        assert!(text.contains(r#"abx_webhook_deliveries_total{outcome="dropped"} 0"#), "{text}");
        let later = Deliveries { delivered: 7, ..webhooks };
        let text = metrics.render(Live { webhooks: later, ..Live::default() });
        assert!(text.contains(r#"abx_webhook_deliveries_total{outcome="delivered"} 7"#), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}

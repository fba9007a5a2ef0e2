//! What the server counts, exposed at `/metrics` in the Prometheus/OpenMetrics text format
//! (`prometheus-client`, the Prometheus project's Rust client).
//!
//! Counters and histograms are updated where things happen (a reply sent, a forward pass run,
//! a connection refused); gauges that the engine and the connection table already know (queue
//! depth, open connections) are read when the page is scraped, so they cannot drift.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels: the boundary a request started from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FromLabel {
    /// Boundary name (`input`, `block5`, …).
    pub from: String,
}

/// Labels: why something was refused (an error code's name, or a connection refusal).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `busy`, `rate_limited`, `shape_mismatch`, `connections`, `origin`, `unauthorized`, …
    pub reason: String,
}

/// Labels: requests a forward pass carried.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabel {
    /// 1 to the model's batch limit.
    pub batch: u8,
}

/// The language model's batching counters, shared with its batching thread
/// ([`crate::llm_batch`]).
#[derive(Clone, Debug, Default)]
pub struct LlmBatchCounters {
    /// Batches run.
    pub batches: Counter,
    /// Conversation steps (frames) run in them.
    pub steps: Counter,
    /// Hidden-state rows in them.
    pub rows: Counter,
}

/// The server's metrics and the registry that renders them.
pub struct Metrics {
    /// The language model's batches.
    pub llm_batches: LlmBatchCounters,
    registry: Registry,
    requests: Family<FromLabel, Counter>,
    request_seconds: Family<FromLabel, Histogram>,
    refusals: Family<ReasonLabel, Counter>,
    passes: Family<BatchLabel, Counter>,
    pass_seconds: Histogram,
    bytes_in: Counter,
    bytes_out: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    sessions: Counter,
    queue_depth: Gauge,
    connections: Gauge,
    draining: Gauge,
}

/// Latency buckets in seconds: 1 ms to 5 s (a block11 tail takes ~2 ms, a busy queue seconds).
fn latency_buckets() -> impl Iterator<Item = f64> {
    [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0].into_iter()
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered under the `split` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("split");
        let requests = Family::<FromLabel, Counter>::default();
        let request_seconds = Family::<FromLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(latency_buckets())) as fn() -> Histogram,
        );
        let refusals = Family::<ReasonLabel, Counter>::default();
        let passes = Family::<BatchLabel, Counter>::default();
        let pass_seconds = Histogram::new(latency_buckets());
        let (bytes_in, bytes_out) = (Counter::default(), Counter::default());
        let (cache_hits, cache_misses) = (Counter::default(), Counter::default());
        let sessions = Counter::default();
        let (queue_depth, connections, draining) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "requests",
            "Requests answered with a result, by the boundary they started from",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Server time per answered request (decode, queue and compute), by boundary",
            request_seconds.clone(),
        );
        registry.register(
            "refusals",
            "Requests and connections refused, by reason (the error code sent, or why a \
             WebSocket was not opened)",
            refusals.clone(),
        );
        registry.register(
            "forward_passes",
            "Forward passes run, by how many requests each carried (dynamic batching)",
            passes.clone(),
        );
        registry.register(
            "forward_pass_duration_seconds",
            "Compute time of one forward pass",
            pass_seconds.clone(),
        );
        registry.register("received_bytes", "Request frame bytes received", bytes_in.clone());
        registry.register("sent_bytes", "Reply frame bytes sent", bytes_out.clone());
        registry.register(
            "cache_hits",
            "Requests answered from the result cache",
            cache_hits.clone(),
        );
        registry.register(
            "cache_misses",
            "Requests the result cache could not answer",
            cache_misses.clone(),
        );
        registry.register("sessions", "WebSocket sessions opened", sessions.clone());
        registry.register(
            "queue_depth",
            "Requests waiting for a model worker now",
            queue_depth.clone(),
        );
        registry.register("connections", "Open WebSockets now", connections.clone());
        let llm_batches = LlmBatchCounters::default();
        registry.register(
            "llm_batches",
            "Batches of language-model steps run (each conversation's frames batched with the \
             others waiting)",
            llm_batches.batches.clone(),
        );
        registry.register(
            "llm_batched_steps",
            "Conversation steps (frames) run in those batches",
            llm_batches.steps.clone(),
        );
        registry.register(
            "llm_batched_rows",
            "Hidden-state rows (positions) run in those batches",
            llm_batches.rows.clone(),
        );
        registry.register(
            "draining",
            "1 while the server is shutting down and closing its sessions",
            draining.clone(),
        );
        Self {
            llm_batches,
            registry,
            requests,
            request_seconds,
            refusals,
            passes,
            pass_seconds,
            bytes_in,
            bytes_out,
            cache_hits,
            cache_misses,
            sessions,
            queue_depth,
            connections,
            draining,
        }
    }

    /// A request from `from` answered after `seconds` of server time.
    pub fn answered(&self, from: &str, seconds: f64, cached: bool) {
        let label = FromLabel { from: from.to_owned() };
        self.requests.get_or_create(&label).inc();
        self.request_seconds.get_or_create(&label).observe(seconds);
        if cached {
            self.cache_hits.inc()
        } else {
            self.cache_misses.inc()
        };
    }

    /// Something refused, for `reason`.
    pub fn refused(&self, reason: &str) {
        self.refusals.get_or_create(&ReasonLabel { reason: reason.to_owned() }).inc();
    }

    /// A forward pass of `batch` requests that took `seconds`.
    pub fn forward_pass(&self, batch: usize, seconds: f64) {
        let batch = batch.min(usize::from(u8::MAX)) as u8;
        self.passes.get_or_create(&BatchLabel { batch }).inc();
        self.pass_seconds.observe(seconds);
    }

    /// A frame of `n` bytes received.
    pub fn received(&self, n: usize) {
        self.bytes_in.inc_by(n as u64);
    }

    /// A frame of `n` bytes sent.
    pub fn sent(&self, n: usize) {
        self.bytes_out.inc_by(n as u64);
    }

    /// A WebSocket session opened.
    pub fn session_opened(&self) {
        self.sessions.inc();
    }

    /// The page, with the gauges set from what the server knows now.
    pub fn render(&self, queue_depth: usize, connections: usize, draining: bool) -> String {
        self.queue_depth.set(queue_depth as i64);
        self.connections.set(connections as i64);
        self.draining.set(i64::from(draining));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}

/// The `Content-Type` of [`Metrics::render`]'s page.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_counts_what_was_recorded() {
        let m = Metrics::new();
        m.answered("block5", 0.004, false);
        m.answered("block5", 0.003, true);
        m.refused("busy");
        m.forward_pass(3, 0.01);
        m.received(100);
        let page = m.render(2, 5, false);
        assert!(page.contains("split_requests_total{from=\"block5\"} 2"), "{page}");
        assert!(page.contains("split_refusals_total{reason=\"busy\"} 1"), "{page}");
        assert!(page.contains("split_forward_passes_total{batch=\"3\"} 1"), "{page}");
        assert!(page.contains("split_cache_hits_total 1"), "{page}");
        assert!(page.contains("split_received_bytes_total 100"), "{page}");
        assert!(page.contains("split_queue_depth 2"), "{page}");
        assert!(page.contains("split_connections 5"), "{page}");
        assert!(page.ends_with("# EOF\n"), "{page}");
    }
}

//! The worker's metrics and health, served at `--metrics-addr` on the
//! same hardened listener as the server's (`tally_telemetry::http_listener`):
//!
//! - `/metrics`: OpenMetrics text (`tally_worker_*`, `process_*`,
//!   `tally_build_info`);
//! - `/livez`: 200 while the process answers;
//! - `/healthz`: 200 with a JSON body (jobs in flight, batches created, rows
//!   sent, provider errors by code, the last successful poll and tally call),
//!   503 once shutdown began (no new work is taken).
//!
//! Provider errors are labelled by a bounded set of codes ([`error_code`]),
//! every one created at zero, so a first 429 shows in `increase()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;

type F64Gauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndLabels {
    pub end: &'static str,
}

/// The provider error codes counted on their own; any other status is
/// counted under its class (`4xx`, `5xx`, `other`).
pub const ERROR_CODES: [&str; 14] = [
    "400",
    "401",
    "403",
    "404",
    "408",
    "429",
    "500",
    "502",
    "503",
    "504",
    "4xx",
    "5xx",
    "other",
    "unreachable",
];

/// How a job task ended, as `tally_worker_jobs_finished_total` labels it.
pub const JOB_ENDS: [&str; 6] = [
    "reconciled",
    "released",
    "cached",
    "left_for_adoption",
    "lost",
    "failed",
];

/// The label of an HTTP status (`None`: no answer at all).
pub fn error_code(status: Option<u16>) -> &'static str {
    let Some(status) = status else {
        return "unreachable";
    };
    let own = status.to_string();
    if let Some(code) = ERROR_CODES.iter().find(|c| **c == own) {
        return code;
    }
    match status {
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// Provider errors by code; cheap to clone (shared counters).
#[derive(Clone, Debug, Default)]
pub struct ProviderErrors(Family<CodeLabels, Counter>);

/// The provider a worker runs rows at, and the API it speaks there.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
    api: String,
}

impl ProviderErrors {
    /// Counts one failed provider call (`None`: no answer).
    pub fn count(&self, status: Option<u16>) {
        self.0
            .get_or_create(&CodeLabels {
                code: error_code(status),
            })
            .inc();
    }

    fn get(&self, code: &'static str) -> u64 {
        self.0.get_or_create(&CodeLabels { code }).get()
    }
}

/// The worker's metric families.
#[derive(Clone)]
pub struct WorkerMetrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    jobs_in_flight: Gauge,
    batches_created: Counter,
    rows_sent: Counter,
    jobs_adopted: Counter,
    jobs_finished: Family<EndLabels, Counter>,
    batch_stats_mismatches: Counter,
    online_reported: Counter,
    online_released: Counter,
    create_search_pages: Counter,
    create_searches_flagged: Counter,
    create_searches_unresolved: Gauge,
    probe_batches: Counter,
    provider_errors: ProviderErrors,
    provider_info: Family<ProviderLabels, Gauge>,
    last_poll: F64Gauge,
    last_tally: F64Gauge,
    stopping: AtomicBool,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let mut inner = Inner {
            registry: Registry::default(),
            jobs_in_flight: Gauge::default(),
            batches_created: Counter::default(),
            rows_sent: Counter::default(),
            jobs_adopted: Counter::default(),
            jobs_finished: Family::default(),
            batch_stats_mismatches: Counter::default(),
            online_reported: Counter::default(),
            online_released: Counter::default(),
            create_search_pages: Counter::default(),
            create_searches_flagged: Counter::default(),
            create_searches_unresolved: Gauge::default(),
            probe_batches: Counter::default(),
            provider_errors: ProviderErrors::default(),
            provider_info: Family::default(),
            last_poll: F64Gauge::default(),
            last_tally: F64Gauge::default(),
            stopping: AtomicBool::new(false),
        };
        let r = &mut inner.registry;
        r.register(
            "tally_worker_jobs_in_flight",
            "job tasks running in this worker (claimed or adopted, not yet ended)",
            inner.jobs_in_flight.clone(),
        );
        r.register(
            "tally_worker_batches_created",
            "provider batches this worker created",
            inner.batches_created.clone(),
        );
        r.register(
            "tally_worker_rows_sent",
            "rows sent to the provider in the batches this worker created",
            inner.rows_sent.clone(),
        );
        r.register(
            "tally_worker_jobs_adopted",
            "jobs of other (dead) workers this worker adopted",
            inner.jobs_adopted.clone(),
        );
        r.register(
            "tally_worker_jobs_finished",
            "job tasks ended, by how (reconciled, released, left_for_adoption, lost, failed)",
            inner.jobs_finished.clone(),
        );
        r.register(
            "tally_worker_batch_stats_mismatches",
            "ended batches whose batchStats (successful + failed requests) did not match the lines found in their output",
            inner.batch_stats_mismatches.clone(),
        );
        r.register(
            "tally_worker_online_calls_reported",
            "synchronous calls whose outcome this worker reported (answered, refused for the row, or answer lost: each an attempt)",
            inner.online_reported.clone(),
        );
        r.register(
            "tally_worker_online_calls_released",
            "rows of synchronous calls given back unattempted (shed, or never connected)",
            inner.online_released.clone(),
        );
        r.register(
            "tally_worker_create_search_pages",
            "pages of the provider's batch list read by searches for lost creates",
            inner.create_search_pages.clone(),
        );
        r.register(
            "tally_worker_create_searches_flagged",
            "searches for lost creates that could not prove the batch made or never made within their bound (reported; their rows wait)",
            inner.create_searches_flagged.clone(),
        );
        r.register(
            "tally_worker_create_searches_unresolved",
            "searches for lost creates past their bound and still running: their jobs' rows are held until the batch is found or proven never made",
            inner.create_searches_unresolved.clone(),
        );
        r.register(
            "tally_worker_probe_batches",
            "one-request probe batches made as witnesses for searches",
            inner.probe_batches.clone(),
        );
        r.register(
            "tally_worker_provider_errors",
            "failed provider HTTP calls by status code (unreachable: no answer)",
            inner.provider_errors.0.clone(),
        );
        r.register(
            "tally_worker_provider_info",
            "the provider this worker runs rows at and the API it speaks there (always 1; join on the instance)",
            inner.provider_info.clone(),
        );
        r.register(
            "tally_worker_last_successful_poll_timestamp_seconds",
            "Unix time of the last batch poll the provider answered (0: none yet)",
            inner.last_poll.clone(),
        );
        r.register(
            "tally_worker_last_tally_contact_timestamp_seconds",
            "Unix time of the last claim or adoption call tally answered (0: none yet)",
            inner.last_tally.clone(),
        );
        tally_telemetry::register_build_info(r, env!("CARGO_PKG_VERSION"));
        for code in ERROR_CODES {
            let _ = inner.provider_errors.get(code);
        }
        for end in JOB_ENDS {
            let _ = inner.jobs_finished.get_or_create(&EndLabels { end });
        }
        Self(Arc::new(inner))
    }

    /// Counts a wave of synchronous calls: outcomes reported, rows given
    /// back unattempted.
    pub fn online_calls(&self, reported: &[tally_proto::v1::RowOutcome], released: usize) {
        self.0.online_reported.inc_by(reported.len() as u64);
        self.0.online_released.inc_by(released as u64);
    }

    /// Says which provider this worker runs rows at
    /// (`tally_worker_provider_info`).
    pub fn set_provider(&self, provider: &str, api: &str) {
        self.0
            .provider_info
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
                api: api.to_owned(),
            })
            .set(1);
    }

    /// The counters the provider client adds its failures to.
    pub fn provider_errors(&self) -> ProviderErrors {
        self.0.provider_errors.clone()
    }

    /// Counts a running job task until the guard is dropped.
    pub fn job_started(&self) -> InFlight {
        self.0.jobs_in_flight.inc();
        InFlight(self.clone())
    }

    pub fn job_adopted(&self) {
        self.0.jobs_adopted.inc();
    }

    pub fn job_finished(&self, end: &'static str) {
        self.0.jobs_finished.get_or_create(&EndLabels { end }).inc();
    }

    pub fn batch_created(&self, rows: u64) {
        self.0.batches_created.inc();
        self.0.rows_sent.inc_by(rows);
    }

    /// A search read one page of the batch list.
    pub fn create_search_page(&self) {
        self.0.create_search_pages.inc();
    }

    /// A search went past its bound (counted once per search).
    pub fn create_search_flagged(&self) {
        self.0.create_searches_flagged.inc();
        self.0.create_searches_unresolved.inc();
    }

    /// A search past its bound ended (resolved, or left for adoption).
    pub fn create_search_resolved(&self) {
        self.0.create_searches_unresolved.dec();
    }

    pub fn probe_made(&self) {
        self.0.probe_batches.inc();
    }

    pub fn batch_stats_mismatch(&self) {
        self.0.batch_stats_mismatches.inc();
    }

    pub fn polled(&self) {
        self.0.last_poll.set(unix_now());
    }

    pub fn tally_answered(&self) {
        self.0.last_tally.set(unix_now());
    }

    /// Shutdown began: `/healthz` answers 503 from now on.
    pub fn stopping(&self) {
        self.0.stopping.store(true, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        tally_telemetry::render(&self.0.registry)
    }

    /// `/healthz`'s body, and whether the worker is taking work.
    pub fn health(&self) -> (bool, serde_json::Value) {
        let i = &self.0;
        let ok = !i.stopping.load(Ordering::Relaxed);
        let time = |v: f64| (v > 0.0).then_some(v);
        let errors: serde_json::Map<String, serde_json::Value> = ERROR_CODES
            .iter()
            .map(|c| (*c, i.provider_errors.get(c)))
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.to_string(), n.into()))
            .collect();
        let body = json!({
            "status": if ok { "ok" } else { "stopping" },
            "jobs_in_flight": i.jobs_in_flight.get(),
            "batches_created": i.batches_created.get(),
            "rows_sent": i.rows_sent.get(),
            "jobs_adopted": i.jobs_adopted.get(),
            "provider_errors": errors,
            "last_successful_poll_unix": time(i.last_poll.get()),
            "last_tally_contact_unix": time(i.last_tally.get()),
        });
        (ok, body)
    }

    /// The routes served at `--metrics-addr`.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/metrics", axum::routing::get(metrics))
            .route("/livez", axum::routing::get(|| async { "ok\n" }))
            .route("/healthz", axum::routing::get(healthz))
            .with_state(self.clone())
    }
}

async fn metrics(State(m): State<WorkerMetrics>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, tally_telemetry::CONTENT_TYPE)],
        m.render(),
    )
}

async fn healthz(State(m): State<WorkerMetrics>) -> impl IntoResponse {
    let (ok, body) = m.health();
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

/// A job task in flight; dropping it (the task ended, or panicked) counts
/// it out.
pub struct InFlight(WorkerMetrics);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.jobs_in_flight.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_telemetry::exposition;

    /// Every provider error code and job end is exported at zero before the
    /// first failure, so alerts on `increase()` see the first one.
    #[test]
    fn label_sets_start_at_zero() {
        let m = WorkerMetrics::new();
        let s = exposition::parse(&m.render()).unwrap();
        for code in ERROR_CODES {
            assert_eq!(
                s.sample("tally_worker_provider_errors_total", &[("code", code)]),
                Some(0.0),
                "{code}"
            );
        }
        for end in JOB_ENDS {
            assert_eq!(
                s.sample("tally_worker_jobs_finished_total", &[("end", end)]),
                Some(0.0),
                "{end}"
            );
        }
        assert_eq!(
            s.family("tally_build").map(|f| f.kind.as_str()),
            Some("info")
        );
    }

    /// Codes outside the known set fold into their class: the label's
    /// values stay bounded whatever the provider answers.
    #[test]
    fn codes_are_bounded() {
        assert_eq!(error_code(Some(429)), "429");
        assert_eq!(error_code(Some(418)), "4xx");
        assert_eq!(error_code(Some(599)), "5xx");
        assert_eq!(error_code(Some(302)), "other");
        assert_eq!(error_code(None), "unreachable");
    }

    /// The gauge counts tasks in flight until their guard drops; health
    /// reports the counts and turns 503 once shutdown began.
    #[test]
    fn health_reports_counts_and_stopping() {
        let m = WorkerMetrics::new();
        let a = m.job_started();
        let b = m.job_started();
        drop(a);
        m.batch_created(250);
        m.provider_errors().count(Some(429));
        m.provider_errors().count(None);
        let (ok, body) = m.health();
        assert!(ok);
        assert_eq!(body["jobs_in_flight"], 1);
        assert_eq!(body["rows_sent"], 250);
        assert_eq!(body["provider_errors"]["429"], 1);
        assert_eq!(body["provider_errors"]["unreachable"], 1);
        assert!(body["provider_errors"].get("500").is_none());
        assert!(body["last_successful_poll_unix"].is_null());
        m.polled();
        assert!(m.health().1["last_successful_poll_unix"].as_f64().unwrap() > 0.0);
        drop(b);
        m.stopping();
        let (ok, body) = m.health();
        assert!(!ok);
        assert_eq!(body["status"], "stopping");
        assert_eq!(body["jobs_in_flight"], 0);
    }
}

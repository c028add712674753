//! Every metric the server exports, as typed `prometheus-client` families
//! in one registry, rendered at `/metrics` in the OpenMetrics text format.
//!
//! Counters are registered without their `_total` suffix (the encoder adds
//! it), so `rows_enrolled` is scraped as `tally_rows_enrolled_total`. Label
//! sets that are known in advance (codes, reasons, verdicts, rules, and each
//! ledger once it is seen: [`Metrics::ledger_seen`]) are created at zero, so
//! the first increment shows in `increase()`.
//!
//! The families are grouped by who writes them: the request layers, the
//! ledger handlers, the background tasks (backlog refresher, sweeper,
//! vacuum, alerts), and collectors read at scrape time (pool, process).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tally_core::job::JobState;
use tally_core::status::RowStatus;
use tally_store::Store;

/// Upper bounds of the duration buckets, in seconds (the default
/// `--request-timeout` is 30s).
pub const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds of the batch turnaround buckets, in seconds: a second (the
/// emulator) to two days (the provider's 48-hour expiry, and some).
pub const TURNAROUND_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
    43200.0, 86400.0, 172_800.0,
];

/// Row statuses a report answers, as `tally_rows_reported_total` labels them.
pub const REPORT_STATUSES: [&str; 5] =
    ["SUCCEEDED", "RETRYABLE", "PERMANENT", "STALE", "DUPLICATE"];

/// The calls timed by `tally_ledger_call_duration_seconds`.
pub const CALLS: [&str; 3] = ["claim", "report", "enroll"];

type F64Gauge = Gauge<f64, AtomicU64>;
type F64Counter = Counter<f64, AtomicU64>;

/// The kinds of tokens `tally_tokens_total` counts.
pub const TOKEN_KINDS: [&str; 4] = ["input", "output", "thinking", "cached"];

macro_rules! labels {
    ($name:ident { $($field:ident : $ty:ty),* }) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name { $(pub $field: $ty),* }
    };
}

labels!(RpcLabels { service: &'static str, method: &'static str, code: &'static str });
labels!(MethodLabels { service: &'static str, method: &'static str });
labels!(LedgerLabels { ledger: String });
labels!(LedgerStatus { ledger: String, status: &'static str });
labels!(VerdictLabels { ledger: String, verdict: &'static str, rule: String });
labels!(JobLabels { ledger: String, state: &'static str });
labels!(PausedLabels { ledger: String, reason: &'static str });
labels!(TokenLabels { ledger: String, model: String, kind: &'static str });
labels!(ModelLabels {
    ledger: String,
    model: String
});
labels!(SpendLabels { ledger: String, kind: &'static str });
labels!(ProviderModel { model: String });
labels!(GoldenLabels { ledger: String, model: String, result: &'static str });
labels!(SpendTokenLabels { ledger: String, measure: &'static str, kind: &'static str });
labels!(CallLabels { call: &'static str });
labels!(ReasonLabels { reason: &'static str });
labels!(OutcomeLabels { outcome: &'static str });
labels!(EventLabels { verdict: &'static str, reason: &'static str });
labels!(ResultLabels { result: &'static str });
labels!(TableLabels { table: &'static str });
labels!(ConsumerLabels {
    ledger: String,
    consumer: String
});
labels!(ConsumerEvent { ledger: String, consumer: String, event: &'static str });
labels!(TurnaroundLabels {
    provider: String,
    model: String
});

impl LedgerLabels {
    pub fn of(ledger: &str) -> Self {
        Self {
            ledger: ledger.to_string(),
        }
    }
}

/// The metric families. Cheap to clone (each family is an `Arc`).
#[derive(Clone)]
pub struct Families {
    // Request layers.
    pub grpc_requests: Family<RpcLabels, Counter>,
    pub grpc_duration: Family<MethodLabels, Histogram>,
    pub rpc_refused: Family<ReasonLabels, Counter>,
    // Ledger handlers.
    pub rows_enrolled: Family<LedgerLabels, Counter>,
    pub rows_claimed: Family<LedgerLabels, Counter>,
    pub rows_reported: Family<LedgerStatus, Counter>,
    pub row_verdicts: Family<VerdictLabels, Counter>,
    pub call_duration: Family<CallLabels, Histogram>,
    pub tokens: Family<TokenLabels, Counter>,
    pub estimated_cost: Family<ModelLabels, F64Counter>,
    pub unpriced_reports: Family<ModelLabels, Counter>,
    pub jobs_adopted: Counter,
    pub pool_acquire: Histogram,
    // The result cache.
    pub cache_hits: Family<LedgerLabels, Counter>,
    pub cache_misses: Family<LedgerLabels, Counter>,
    pub cache_saved: Family<LedgerLabels, F64Counter>,
    pub cache_entries: Gauge,
    pub cache_bytes: Gauge,
    // Operations and webhooks.
    pub webhook_requests: Family<OutcomeLabels, Counter>,
    pub operation_events: Family<EventLabels, Counter>,
    pub operation_cas_conflicts: Counter,
    // Background tasks.
    pub database_up: Gauge,
    pub watch_streams: Gauge,
    pub alert_deliveries: Family<ResultLabels, Counter>,
    pub queue_dead_entries: Gauge,
    pub queue_vacuums: Counter,
    pub table_analyzes: Family<TableLabels, Counter>,
    pub rows_released: Counter,
    pub rows_rescued: Counter,
    pub jobs_abandoned: Counter,
    // The purger of deleted ledgers.
    pub purged_entries: Family<TableLabels, Counter>,
    pub ledgers_purged: Counter,
    // The backlog refresher.
    pub ledger_rows: Family<LedgerStatus, Gauge>,
    pub ledger_rows_held: Family<LedgerLabels, Gauge>,
    pub jobs_create_unresolved: Family<LedgerLabels, Gauge>,
    pub oldest_runnable_age: Family<LedgerLabels, F64Gauge>,
    pub jobs_open: Family<JobLabels, Gauge>,
    pub ledger_paused: Family<PausedLabels, Gauge>,
    pub ledger_spend_usd: Family<SpendLabels, F64Gauge>,
    pub ledger_spend_tokens: Family<SpendTokenLabels, Gauge>,
    pub backlog_refreshed: F64Gauge,
    // The provider's quotas (tally_core::quota), per model.
    pub provider_batches: Family<ProviderModel, Gauge>,
    pub provider_enqueued_tokens: Family<ProviderModel, Gauge>,
    pub provider_enqueued_tokens_limit: Family<ProviderModel, Gauge>,
    pub provider_max_batches: Gauge,
    pub model_cooldown: Family<ProviderModel, F64Gauge>,
    // Golden rows.
    pub golden_results: Family<GoldenLabels, Counter>,
    // Batches: submission to reconciliation.
    pub batch_turnaround: Family<TurnaroundLabels, Histogram>,
    // Delivery: results handed to consumers (handlers and the webhook
    // sender), and each consumer's lag (the backlog refresher).
    pub consumer_results: Family<ConsumerEvent, Counter>,
    pub consumer_lag_rows: Family<ConsumerLabels, Gauge>,
    pub consumer_lag_seconds: Family<ConsumerLabels, F64Gauge>,
    pub consumer_in_flight: Family<ConsumerLabels, Gauge>,
    pub consumer_dead_letters: Family<ConsumerLabels, Gauge>,
    pub webhook_posts: Family<ResultLabels, Counter>,
}

/// What `tally_consumer_results_total` counts per consumer.
pub const CONSUMER_EVENTS: [&str; 5] = [
    "delivered",
    "redelivered",
    "acked",
    "requeued",
    "dead_lettered",
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

fn turnaround_histogram() -> Histogram {
    Histogram::new(TURNAROUND_BUCKETS.iter().copied())
}

/// The label sets of a ledger's series whose other labels are open (a
/// rule, a model): what [`Metrics::forget_ledger`] removes, since a family
/// cannot be listed.
#[derive(Default)]
struct LedgerSeries {
    verdicts: HashSet<VerdictLabels>,
    tokens: HashSet<TokenLabels>,
    models: HashSet<ModelLabels>,
    golden: HashSet<GoldenLabels>,
    consumers: HashSet<String>,
}

/// Ledgers forgotten (deleted) lately, so that a backlog refresh that read
/// a ledger before its delete does not bring its series back.
#[derive(Default)]
struct Forgotten {
    /// Counts the forgets.
    generation: u64,
    /// Each ledger forgotten, with the generation its forget made.
    at: HashMap<String, u64>,
}

struct Inner {
    registry: Registry,
    families: Families,
    /// Ledgers whose label sets were created at zero.
    seen: Mutex<HashSet<String>>,
    forgotten: Mutex<Forgotten>,
    /// Each ledger's open-ended label sets.
    series: Mutex<HashMap<String, LedgerSeries>>,
    /// The registered families, name and type.
    listed: Vec<(&'static str, &'static str)>,
}

/// Registers a family and remembers its name and type: a registry cannot
/// list its families, and renders a family only once it has a series.
fn register(
    r: &mut Registry,
    listed: &mut Vec<(&'static str, &'static str)>,
    name: &'static str,
    help: &str,
    metric: impl prometheus_client::registry::Metric,
) {
    let kind = match metric.metric_type() {
        prometheus_client::metrics::MetricType::Counter => "counter",
        prometheus_client::metrics::MetricType::Gauge => "gauge",
        prometheus_client::metrics::MetricType::Histogram => "histogram",
        prometheus_client::metrics::MetricType::Info => "info",
        prometheus_client::metrics::MetricType::Unknown => "unknown",
    };
    listed.push((name, kind));
    r.register(name, help, metric);
}

/// The server's metrics: the families, and the registry that renders them.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::ops::Deref for Metrics {
    type Target = Families;
    fn deref(&self) -> &Families {
        &self.0.families
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The families without the pool collector (for tests of one layer).
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Every family, and the pool's connections read from `store` at each
    /// scrape.
    pub fn with_store(store: Store) -> Self {
        Self::build(Some(store))
    }

    fn build(store: Option<Store>) -> Self {
        let families = Families {
            grpc_requests: Default::default(),
            grpc_duration: Family::new_with_constructor(histogram),
            rpc_refused: Default::default(),
            rows_enrolled: Default::default(),
            rows_claimed: Default::default(),
            rows_reported: Default::default(),
            row_verdicts: Default::default(),
            call_duration: Family::new_with_constructor(histogram),
            tokens: Default::default(),
            estimated_cost: Default::default(),
            unpriced_reports: Default::default(),
            jobs_adopted: Default::default(),
            pool_acquire: histogram(),
            cache_hits: Default::default(),
            cache_misses: Default::default(),
            cache_saved: Default::default(),
            cache_entries: Default::default(),
            cache_bytes: Default::default(),
            webhook_requests: Default::default(),
            operation_events: Default::default(),
            operation_cas_conflicts: Default::default(),
            database_up: Default::default(),
            watch_streams: Default::default(),
            alert_deliveries: Default::default(),
            queue_dead_entries: Default::default(),
            queue_vacuums: Default::default(),
            table_analyzes: Default::default(),
            rows_released: Default::default(),
            rows_rescued: Default::default(),
            jobs_abandoned: Default::default(),
            purged_entries: Default::default(),
            ledgers_purged: Default::default(),
            ledger_rows: Default::default(),
            ledger_rows_held: Default::default(),
            jobs_create_unresolved: Default::default(),
            oldest_runnable_age: Default::default(),
            jobs_open: Default::default(),
            ledger_paused: Default::default(),
            ledger_spend_usd: Default::default(),
            ledger_spend_tokens: Default::default(),
            backlog_refreshed: Default::default(),
            provider_batches: Default::default(),
            provider_enqueued_tokens: Default::default(),
            provider_enqueued_tokens_limit: Default::default(),
            provider_max_batches: Default::default(),
            model_cooldown: Default::default(),
            golden_results: Default::default(),
            batch_turnaround: Family::new_with_constructor(turnaround_histogram),
            consumer_results: Default::default(),
            consumer_lag_rows: Default::default(),
            consumer_lag_seconds: Default::default(),
            consumer_in_flight: Default::default(),
            consumer_dead_letters: Default::default(),
            webhook_posts: Default::default(),
        };
        let mut r = Registry::default();
        let mut listed = Vec::new();
        let f = &families;
        register(
            &mut r,
            &mut listed,
            "tally_grpc_requests",
            "gRPC calls by service, method and status code (streams counted when they start; health and reflection not counted)",
            f.grpc_requests.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_grpc_request_duration_seconds",
            "gRPC call duration in seconds (streams: time to the response headers)",
            f.grpc_duration.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rpc_refused",
            "calls refused by the auth and limits layers, by reason",
            f.rpc_refused.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rows_enrolled",
            "newly enrolled rows by ledger",
            f.rows_enrolled.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rows_claimed",
            "rows handed out by ClaimRows, by ledger",
            f.rows_claimed.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_result_cache_hits",
            "rows settled from the result cache, by ledger",
            f.cache_hits.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_result_cache_misses",
            "result cache lookups that found no answer (sent to the provider), by ledger",
            f.cache_misses.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_result_cache_saved_usd",
            "what the answers served from the result cache cost when first answered, by ledger",
            f.cache_saved.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_result_cache_entries",
            "answers the result cache holds (refreshed by the maintenance task)",
            f.cache_entries.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_result_cache_bytes",
            "bytes of requests and answers the result cache holds",
            f.cache_bytes.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rows_reported",
            "reported rows by ledger and verdict",
            f.rows_reported.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_row_verdicts",
            "ReportOutcomes verdicts by ledger, verdict and the rule that decided it",
            f.row_verdicts.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_call_duration_seconds",
            "time in the store of ClaimRows, ReportOutcomes and EnrollRows, in seconds",
            f.call_duration.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_tokens",
            "tokens of reported attempts (verdicts SUCCEEDED, RETRYABLE, PERMANENT), by ledger, the claim's model and kind (input, output, thinking, cached)",
            f.tokens.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_estimated_cost_usd",
            "estimated cost in USD of reported attempts, from the ledger's price of the model, by ledger and model",
            f.estimated_cost.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_unpriced_reports",
            "ReportOutcomes calls with usage for a model the ledger has no price for (their cost is not in tally_estimated_cost_usd_total)",
            f.unpriced_reports.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_jobs_adopted",
            "jobs adopted by a worker after their owner's lease expired",
            f.jobs_adopted.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_db_pool_acquire_duration_seconds",
            "time a probe waited for a pool connection, sampled every few seconds (how long statements queue for a connection)",
            f.pool_acquire.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_webhook_requests",
            "webhook deliveries by outcome (accepted, unparseable, unauthorized, malformed, too_large, unavailable, error)",
            f.webhook_requests.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_operation_events",
            "operation events ingested, by verdict and drop reason",
            f.operation_events.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_operation_cas_conflicts",
            "operation writes that lost the compare-and-swap and were decided again",
            f.operation_cas_conflicts.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_database_up",
            "1 while the database answers",
            f.database_up.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_watch_streams",
            "open WatchJobs streams",
            f.watch_streams.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_alert_deliveries",
            "alert delivery tries by result",
            f.alert_deliveries.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_queue_dead_entries",
            "dead tuples in the runnable queue",
            f.queue_dead_entries.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_queue_vacuums",
            "vacuums of the runnable queue",
            f.queue_vacuums.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_table_analyzes",
            "ANALYZEs of a fast-growing table whose statistics went stale, by this replica",
            f.table_analyzes.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rows_released",
            "rows of abandoned (PREPARING) jobs put back without an attempt by this replica's sweeper",
            f.rows_released.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_rows_rescued",
            "rows of expired claims (lease expiries) rescued by this replica's sweeper, each counted as an infra attempt",
            f.rows_rescued.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_jobs_abandoned",
            "PREPARING jobs abandoned because their claim's lease expired, by this replica's sweeper",
            f.jobs_abandoned.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_purged_entries",
            "entries of deleted ledgers removed by this replica, by table",
            f.purged_entries.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledgers_purged",
            "deleted ledgers whose purge this replica finished",
            f.ledgers_purged.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_rows",
            "rows by ledger and stored status: the planner's estimate (extended statistics, refreshed by ANALYZE); held rows keep their stored status here",
            f.ledger_rows.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_rows_held",
            "rows held by active claims (shown RUNNING), by ledger",
            f.ledger_rows_held.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_oldest_runnable_age_seconds",
            "age of the oldest claimable row (ready_time in the past), by ledger; 0 when none",
            f.oldest_runnable_age.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_paused",
            "1 for each paused ledger, with the reason it was paused for (absent while active)",
            f.ledger_paused.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_spend_usd",
            "a capped ledger's spend in USD: kind spent (reported usage), reserved (estimates of rows claims hold) or cap (absent without a dollar limit)",
            f.ledger_spend_usd.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_ledger_spend_tokens",
            "a capped ledger's spend in tokens by measure (input, output) and kind (spent, reserved, cap; cap absent without that limit)",
            f.ledger_spend_tokens.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_provider_batches_in_flight",
            "jobs made and not yet finished at the provider, by model (what admission counts against --provider-max-batches, all models together)",
            f.provider_batches.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_provider_enqueued_tokens",
            "estimated input tokens of the jobs in flight at the provider, by model (admission's count)",
            f.provider_enqueued_tokens.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_provider_enqueued_tokens_limit",
            "the enqueued-token limit of a model with jobs in flight (--provider-enqueued-tokens; 0: none)",
            f.provider_enqueued_tokens_limit.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_provider_max_batches",
            "the limit of batches at the provider at once (--provider-max-batches; 0: none)",
            f.provider_max_batches.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_model_cooldown_seconds",
            "seconds left of a model's shared cool-down after a 429 at create (absent when none runs)",
            f.model_cooldown.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_golden_results",
            "golden rows' answers recorded, by ledger, model alias and result (match, mismatch)",
            f.golden_results.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_batch_turnaround_seconds",
            "seconds from a batch's submission (MarkSubmitted) to its job's reconciliation (FinishJob), by provider and model; once per job, whatever its final state",
            f.batch_turnaround.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_consumer_results",
            "results of consumers by ledger, consumer and event (delivered: handed out the first time; redelivered; acked; requeued by a nack; dead_lettered)",
            f.consumer_results.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_consumer_lag_rows",
            "results of the ledger after the consumer's acknowledged position, by ledger and consumer",
            f.consumer_lag_rows.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_consumer_lag_seconds",
            "age of the oldest result not yet acknowledged by the consumer, by ledger and consumer (0: none)",
            f.consumer_lag_seconds.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_consumer_in_flight",
            "results handed out to the consumer and not acknowledged, by ledger and consumer",
            f.consumer_in_flight.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_consumer_dead_letters",
            "the consumer's dead letters, by ledger and consumer",
            f.consumer_dead_letters.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_webhook_posts",
            "POSTs of webhook consumers by this replica, by result (accepted: a 2xx; failed)",
            f.webhook_posts.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_jobs_create_unresolved",
            "open jobs whose lost create cannot be resolved within its search's bound (the rows held; look for the batch at the provider), by ledger",
            f.jobs_create_unresolved.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_jobs_open",
            "jobs not yet ended, by ledger and state",
            f.jobs_open.clone(),
        );
        register(
            &mut r,
            &mut listed,
            "tally_backlog_refresh_time_seconds",
            "Unix time of the last successful backlog refresh",
            f.backlog_refreshed.clone(),
        );
        if let Some(store) = store {
            r.register_collector(Box::new(PoolCollector(store)));
        }
        tally_telemetry::register_build_info(&mut r, env!("CARGO_PKG_VERSION"));
        let metrics = Self(Arc::new(Inner {
            registry: r,
            families,
            seen: Mutex::new(HashSet::new()),
            forgotten: Mutex::new(Forgotten::default()),
            series: Mutex::new(HashMap::new()),
            listed,
        }));
        metrics.preinit();
        metrics
    }

    /// Zeros for the label sets known before any call.
    fn preinit(&self) {
        for call in CALLS {
            let _ = self.call_duration.get_or_create(&CallLabels { call });
        }
    }

    /// Creates a ledger's label sets at zero, once per ledger: its row
    /// counters by verdict, and PERMANENT and RETRYABLE by each built-in
    /// rule that can give them.
    pub fn ledger_seen(&self, ledger: &str) {
        {
            let mut seen = self.0.seen.lock().unwrap_or_else(|p| p.into_inner());
            // The usual case, a ledger seen before, allocates nothing.
            if seen.contains(ledger) || seen.len() >= MAX_LEDGERS_PREINIT {
                return;
            }
            seen.insert(ledger.to_string());
        }
        let l = LedgerLabels::of(ledger);
        let _ = self.rows_enrolled.get_or_create(&l);
        let _ = self.rows_claimed.get_or_create(&l);
        for status in REPORT_STATUSES {
            let _ = self.rows_reported.get_or_create(&LedgerStatus {
                ledger: ledger.to_string(),
                status,
            });
        }
        self.count_verdicts(
            VerdictLabels {
                ledger: ledger.to_string(),
                verdict: "SUCCEEDED",
                rule: "success".into(),
            },
            0,
        );
        for (verdict, rule) in tally_core::classify::Rule::reported_verdicts() {
            self.count_verdicts(
                VerdictLabels {
                    ledger: ledger.to_string(),
                    verdict,
                    rule,
                },
                0,
            );
        }
    }

    fn track(&self, ledger: &str, add: impl FnOnce(&mut LedgerSeries)) {
        let mut series = self.0.series.lock().unwrap_or_else(|p| p.into_inner());
        add(series.entry(ledger.to_string()).or_default());
    }

    /// Adds `n` to a ledger's verdict counter (created at zero for `n` 0).
    pub fn count_verdicts(&self, labels: VerdictLabels, n: u64) {
        self.row_verdicts.get_or_create(&labels).inc_by(n);
        self.track(&labels.ledger.clone(), |s| {
            s.verdicts.insert(labels);
        });
    }

    pub fn count_tokens(&self, labels: TokenLabels, n: u64) {
        self.tokens.get_or_create(&labels).inc_by(n);
        self.track(&labels.ledger.clone(), |s| {
            s.tokens.insert(labels);
        });
    }

    pub fn count_cost(&self, labels: ModelLabels, usd: f64) {
        self.estimated_cost.get_or_create(&labels).inc_by(usd);
        self.track(&labels.ledger.clone(), |s| {
            s.models.insert(labels);
        });
    }

    pub fn count_unpriced(&self, labels: ModelLabels) {
        self.unpriced_reports.get_or_create(&labels).inc();
        self.track(&labels.ledger.clone(), |s| {
            s.models.insert(labels);
        });
    }

    fn forgotten(&self) -> std::sync::MutexGuard<'_, Forgotten> {
        self.0.forgotten.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A mark taken before reading what will be published (the backlog):
    /// [`Metrics::forgotten_since`] then tells which ledgers were deleted
    /// after it.
    pub fn forget_mark(&self) -> u64 {
        self.forgotten().generation
    }

    /// Whether `ledger` was forgotten after `mark`: what was read about it
    /// before is stale, and publishing it would bring its series back.
    pub fn forgotten_since(&self, ledger: &str, mark: u64) -> bool {
        self.forgotten().at.get(ledger).is_some_and(|g| *g > mark)
    }

    /// Drops the forgets at or before `mark` (no read still to publish
    /// began before them), so the record stays as small as the deletes
    /// between two refreshes.
    pub fn prune_forgotten(&self, mark: u64) {
        self.forgotten().at.retain(|_, g| *g > mark);
    }

    /// Removes every series of a deleted ledger (its counters and its
    /// backlog gauges), so that a ledger made again under its name starts
    /// from nothing instead of adding to the old one's counts. Called when
    /// the ledger is deleted through this replica, when this replica's
    /// refresher sees it DELETING, and when its purge finishes here.
    pub fn forget_ledger(&self, ledger: &str) {
        {
            let mut f = self.forgotten();
            f.generation += 1;
            let generation = f.generation;
            f.at.insert(ledger.to_string(), generation);
        }
        self.0
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(ledger);
        let series = self
            .0
            .series
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(ledger)
            .unwrap_or_default();
        for l in &series.verdicts {
            self.row_verdicts.remove(l);
        }
        for l in &series.tokens {
            self.tokens.remove(l);
        }
        for l in &series.models {
            self.estimated_cost.remove(l);
            self.unpriced_reports.remove(l);
        }
        for l in &series.golden {
            self.golden_results.remove(l);
        }
        for consumer in &series.consumers {
            self.remove_consumer(ledger, consumer);
        }
        let l = LedgerLabels::of(ledger);
        self.rows_enrolled.remove(&l);
        self.rows_claimed.remove(&l);
        self.cache_hits.remove(&l);
        self.cache_misses.remove(&l);
        self.cache_saved.remove(&l);
        self.ledger_rows_held.remove(&l);
        self.jobs_create_unresolved.remove(&l);
        self.oldest_runnable_age.remove(&l);
        let named = || ledger.to_string();
        for status in REPORT_STATUSES {
            self.rows_reported.remove(&LedgerStatus {
                ledger: named(),
                status,
            });
        }
        for status in tally_core::status::RowStatus::ALL {
            self.ledger_rows.remove(&LedgerStatus {
                ledger: named(),
                status: status_label(status),
            });
        }
        for state in tally_core::job::JobState::ALL {
            self.jobs_open.remove(&JobLabels {
                ledger: named(),
                state: job_state_label(state),
            });
        }
        for reason in tally_core::pause::PauseReason::ALL {
            self.ledger_paused.remove(&PausedLabels {
                ledger: named(),
                reason: reason.as_str(),
            });
        }
        for kind in ["spent", "reserved", "cap"] {
            self.ledger_spend_usd.remove(&SpendLabels {
                ledger: named(),
                kind,
            });
            for measure in ["input", "output"] {
                self.ledger_spend_tokens.remove(&SpendTokenLabels {
                    ledger: named(),
                    measure,
                    kind,
                });
            }
        }
    }

    /// Creates a consumer's counters at zero (once it is seen: made, or
    /// in a backlog refresh), so a first dead letter shows in `increase()`.
    pub fn consumer_seen(&self, ledger: &str, consumer: &str) {
        let mut fresh = false;
        self.track(ledger, |s| fresh = s.consumers.insert(consumer.to_string()));
        if fresh {
            for event in CONSUMER_EVENTS {
                self.consumer_count(ledger, consumer, event, 0);
            }
        }
    }

    /// Adds `n` to one of a consumer's counters ([`CONSUMER_EVENTS`]).
    pub fn consumer_count(&self, ledger: &str, consumer: &str, event: &'static str, n: u64) {
        self.consumer_results
            .get_or_create(&ConsumerEvent {
                ledger: ledger.to_string(),
                consumer: consumer.to_string(),
                event,
            })
            .inc_by(n);
    }

    /// Counts what one receive handed out and dead-lettered.
    pub fn consumer_received(
        &self,
        ledger: &str,
        consumer: &str,
        got: &tally_store::consumers::Received,
    ) {
        self.consumer_seen(ledger, consumer);
        let again = got.deliveries.iter().filter(|d| d.deliveries > 1).count() as u64;
        let first = got.deliveries.len() as u64 - again;
        self.consumer_count(ledger, consumer, "delivered", first);
        self.consumer_count(ledger, consumer, "redelivered", again);
        self.consumer_count(ledger, consumer, "dead_lettered", got.dead_lettered as u64);
    }

    /// Removes a deleted consumer's series.
    pub fn forget_consumer(&self, ledger: &str, consumer: &str) {
        self.track(ledger, |s| {
            s.consumers.remove(consumer);
        });
        self.remove_consumer(ledger, consumer);
    }

    fn remove_consumer(&self, ledger: &str, consumer: &str) {
        for event in CONSUMER_EVENTS {
            self.consumer_results.remove(&ConsumerEvent {
                ledger: ledger.to_string(),
                consumer: consumer.to_string(),
                event,
            });
        }
        let l = ConsumerLabels {
            ledger: ledger.to_string(),
            consumer: consumer.to_string(),
        };
        self.consumer_lag_rows.remove(&l);
        self.consumer_lag_seconds.remove(&l);
        self.consumer_in_flight.remove(&l);
        self.consumer_dead_letters.remove(&l);
    }

    /// Observes a batch's turnaround, from its submission to its job's
    /// reconciliation, under its model and the provider it routes to
    /// (`tally_core::provider`).
    pub fn batch_finished(&self, model: &str, seconds: f64) {
        self.batch_turnaround
            .get_or_create(&TurnaroundLabels {
                provider: tally_core::provider::provider_of(model).to_string(),
                model: model.to_string(),
            })
            .observe(seconds.max(0.0));
    }

    /// Counts a golden report's answers (both results created, so a first
    /// mismatch shows in `increase()`).
    pub fn golden_recorded(&self, ledger: &str, model: &str, matched: usize, mismatched: usize) {
        for (result, n) in [("match", matched), ("mismatch", mismatched)] {
            let labels = GoldenLabels {
                ledger: ledger.to_string(),
                model: model.to_string(),
                result,
            };
            self.golden_results.get_or_create(&labels).inc_by(n as u64);
            self.track(ledger, |s| {
                s.golden.insert(labels);
            });
        }
    }

    /// Every family registered here, with its type, whether or not it has
    /// series yet (the collectors' families, read at each scrape, are not
    /// in it: they always render).
    pub fn registered(&self) -> &[(&'static str, &'static str)] {
        &self.0.listed
    }

    /// The OpenMetrics text of every family.
    pub fn render(&self) -> String {
        tally_telemetry::render(&self.0.registry)
    }
}

/// Ledgers given zero series up front; past this, a ledger's series appear
/// at its first increment (bounds the memory a flood of ledgers takes).
pub const MAX_LEDGERS_PREINIT: usize = 10_000;

/// The pool's connections, read at each scrape (no database call).
struct PoolCollector(Store);

impl std::fmt::Debug for PoolCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolCollector")
    }
}

impl Collector for PoolCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let pool = self.0.pool();
        let size = i64::from(pool.size());
        let idle = i64::try_from(pool.num_idle()).unwrap_or(i64::MAX);
        let in_use = ConstGauge::new((size - idle).max(0));
        in_use.encode(e.encode_descriptor(
            "tally_db_pool_connections_in_use",
            "pool connections lent out",
            None,
            in_use.metric_type(),
        )?)?;
        let idle = ConstGauge::new(idle);
        idle.encode(e.encode_descriptor(
            "tally_db_pool_connections_idle",
            "pool connections open and idle",
            None,
            idle.metric_type(),
        )?)?;
        let max = ConstGauge::new(i64::from(pool.options().get_max_connections()));
        max.encode(e.encode_descriptor(
            "tally_db_pool_connections_max",
            "most connections the pool opens",
            None,
            max.metric_type(),
        )?)?;
        Ok(())
    }
}

/// A row status as the metrics label it (as the API names it).
pub const fn status_label(s: RowStatus) -> &'static str {
    match s {
        RowStatus::Pending => "PENDING",
        RowStatus::Running => "RUNNING",
        RowStatus::Retryable => "RETRYABLE",
        RowStatus::Succeeded => "SUCCEEDED",
        RowStatus::Permanent => "PERMANENT",
        RowStatus::Blocked => "BLOCKED",
    }
}

/// A job state as the metrics label it (as the API names it).
pub const fn job_state_label(s: JobState) -> &'static str {
    match s {
        JobState::Preparing => "PREPARING",
        JobState::Creating => "CREATING",
        JobState::Submitted => "SUBMITTED",
        JobState::Running => "RUNNING",
        JobState::Succeeded => "SUCCEEDED",
        JobState::Failed => "FAILED",
        JobState::Cancelled => "CANCELLED",
        JobState::Expired => "EXPIRED",
        JobState::Reconciled => "RECONCILED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_telemetry::exposition::parse;

    /// Counters render with `_total`, and the HELP and TYPE lines name the
    /// family. (prometheus-client 0.24 does not escape label values; every
    /// value here is a fixed string or a validated id of `[a-z0-9_-]`.)
    #[test]
    fn renders_the_text_format() {
        let m = Metrics::new();
        m.rows_enrolled
            .get_or_create(&LedgerLabels::of("ledger-1"))
            .inc_by(2);
        m.database_up.set(1);
        let text = m.render();
        let s = parse(&text).unwrap();
        assert_eq!(s.family("tally_rows_enrolled").unwrap().kind, "counter");
        assert_eq!(
            s.sample("tally_rows_enrolled_total", &[("ledger", "ledger-1")]),
            Some(2.0)
        );
        assert_eq!(s.sample("tally_database_up", &[]), Some(1.0));
    }

    /// A ledger seen once has every report status and known rule at zero,
    /// so the first PERMANENT report shows in `increase()`.
    #[test]
    fn a_seen_ledger_has_its_series_at_zero() {
        let m = Metrics::new();
        m.ledger_seen("l");
        m.ledger_seen("l");
        let s = parse(&m.render()).unwrap();
        for status in REPORT_STATUSES {
            assert_eq!(
                s.sample(
                    "tally_rows_reported_total",
                    &[("ledger", "l"), ("status", status)]
                ),
                Some(0.0),
                "{status}"
            );
        }
        assert_eq!(
            s.sample(
                "tally_row_verdicts_total",
                &[
                    ("ledger", "l"),
                    ("verdict", "PERMANENT"),
                    ("rule", "http_permanent")
                ]
            ),
            Some(0.0)
        );
        assert_eq!(
            s.sample("tally_rows_enrolled_total", &[("ledger", "l")]),
            Some(0.0)
        );
    }

    /// Forgetting a ledger removes each of its series, the open-ended ones
    /// (rules, models) included, and only its own.
    #[test]
    fn a_forgotten_ledger_has_no_series_left() {
        let m = Metrics::new();
        for ledger in ["gone", "kept"] {
            m.ledger_seen(ledger);
            m.count_verdicts(
                VerdictLabels {
                    ledger: ledger.into(),
                    verdict: "PERMANENT",
                    rule: "override:mine".into(),
                },
                3,
            );
            let model = ModelLabels {
                ledger: ledger.into(),
                model: "gemini-x".into(),
            };
            m.count_tokens(
                TokenLabels {
                    ledger: ledger.into(),
                    model: "gemini-x".into(),
                    kind: "input",
                },
                5,
            );
            m.count_cost(model.clone(), 0.5);
            m.count_unpriced(model);
            m.golden_recorded(ledger, "gemini-x", 1, 1);
            m.ledger_paused
                .get_or_create(&PausedLabels {
                    ledger: ledger.into(),
                    reason: "quota",
                })
                .set(1);
        }
        m.forget_ledger("gone");
        let s = parse(&m.render()).unwrap();
        let of = |ledger: &str| {
            s.samples
                .iter()
                .filter(|x| x.labels.get("ledger").map(String::as_str) == Some(ledger))
                .map(|x| x.name.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert!(of("gone").is_empty(), "{:?}", of("gone"));
        let kept = of("kept");
        for name in [
            "tally_row_verdicts_total",
            "tally_tokens_total",
            "tally_estimated_cost_usd_total",
            "tally_unpriced_reports_total",
            "tally_golden_results_total",
            "tally_ledger_paused",
            "tally_rows_enrolled_total",
        ] {
            assert!(kept.contains(name), "{name}: {kept:?}");
        }
        // Seen again (a new ledger under the name): at zero again.
        m.ledger_seen("gone");
        let s = parse(&m.render()).unwrap();
        assert_eq!(
            s.sample("tally_rows_enrolled_total", &[("ledger", "gone")]),
            Some(0.0)
        );
    }

    /// Histograms render cumulative buckets with the shared bounds.
    #[test]
    fn histograms_have_cumulative_buckets() {
        let m = Metrics::new();
        let h = m.call_duration.get_or_create(&CallLabels { call: "claim" });
        for v in [0.0005, 0.02, 3.0] {
            h.observe(v);
        }
        drop(h);
        let s = parse(&m.render()).unwrap();
        let bucket = |le| {
            s.sample(
                "tally_ledger_call_duration_seconds_bucket",
                &[("call", "claim"), ("le", le)],
            )
        };
        assert_eq!(bucket("0.001"), Some(1.0));
        assert_eq!(bucket("0.025"), Some(2.0));
        assert_eq!(bucket("+Inf"), Some(3.0));
        assert_eq!(
            s.sample(
                "tally_ledger_call_duration_seconds_count",
                &[("call", "report")]
            ),
            Some(0.0)
        );
    }
}

//! One provider job is one trace (issue 20, item 2): the worker's job span
//! and the server's span of every call the job makes (ClaimRows, CreateJob,
//! MarkCreating, MarkSubmitted, ReportOutcomes, FinishJob) and the store's
//! statement groups under them share a trace id, joined over gRPC metadata
//! (`traceparent`) and not by sharing a process: the server's RPC spans
//! have a *remote* parent.
//!
//! The server, the emulator and the worker run in this process with the
//! same exporter as `--otlp-endpoint` installs, exporting to memory. With
//! `TALLY_TRACE_OUT=path`, the spans are also written there as JSON lines.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_trace:: -- --nocapture`.

use crate::common;

use common::{API_KEY, World, list_jobs, worker_args};
use gemini_emulator::FaultPlan;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::collections::{HashMap, HashSet};
use tally_proto::v1 as pb;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

const LEDGER: &str = "traced";
const ROWS: usize = 8;

fn write_out(spans: &[SpanData]) {
    let Ok(path) = std::env::var("TALLY_TRACE_OUT") else {
        return;
    };
    let mut out = String::new();
    for s in spans {
        let attributes: serde_json::Map<String, serde_json::Value> = s
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string().into()))
            .collect();
        let line = serde_json::json!({
            "trace_id": s.span_context.trace_id().to_string(),
            "span_id": s.span_context.span_id().to_string(),
            "parent_span_id": s.parent_span_id.to_string(),
            "parent_is_remote": s.parent_span_is_remote,
            "name": s.name,
            "kind": format!("{:?}", s.span_kind),
            "service": s.instrumentation_scope.name(),
            "duration_us": s.end_time.duration_since(s.start_time).map_or(0, |d| d.as_micros()),
            "attributes": attributes,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(&path, out).expect("write TALLY_TRACE_OUT");
    println!("{} spans written to {path}", spans.len());
}

/// Invariant: each job's trace holds the worker's job span and the
/// server's spans of the job's calls, parented across the wire.
// One thread, so the scoped subscriber below sees every task of this test
// (and none of the other tests sharing this process).
#[tokio::test(flavor = "current_thread")]
async fn one_job_is_one_trace_across_worker_and_server() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    // The filter and layer `--otlp-endpoint` installs, on the default log
    // filter.
    let filter = tally_telemetry::traces::trace_filter(tracing_subscriber::EnvFilter::new(
        "info,sqlx=warn,h2=warn,tower=warn",
    ));
    let _subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(tally_telemetry::traces::otel_layer(&provider, "e2e"))
        .set_default();

    let w = World::start(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    let args = worker_args(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "tracer",
        &[
            "--exit-when-idle",
            "--claim-size",
            "4",
            "--max-rows-per-batch",
            "4",
        ],
    );
    let report = tally_worker::run_until(
        args,
        tally_worker::ApiKey::new(API_KEY.into()),
        std::future::pending(),
    )
    .await
    .expect("the worker finishes the ledger");
    let jobs = list_jobs(&w.c, LEDGER).await;
    w.stop().await;
    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    write_out(&spans);
    println!("{report:?}; {} jobs; {} spans", jobs.len(), spans.len());
    assert_eq!(jobs.len(), ROWS / 4);

    // The worker's job spans that got rows (a claim that found nothing is
    // a span too, without a `claim` attribute).
    let job_spans: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "job" && s.attributes.iter().any(|kv| kv.key.as_str() == "claim"))
        .collect();
    assert_eq!(job_spans.len(), jobs.len(), "one job span per job");
    let by_trace: HashMap<TraceId, Vec<&SpanData>> =
        spans.iter().fold(HashMap::new(), |mut m, s| {
            m.entry(s.span_context.trace_id()).or_default().push(s);
            m
        });
    for job in &job_spans {
        let trace = &by_trace[&job.span_context.trace_id()];
        let names: HashSet<&str> = trace.iter().map(|s| s.name.as_ref()).collect();
        for rpc in [
            "tally.v1.LedgerService/ClaimRows",
            "tally.v1.JobService/CreateJob",
            "tally.v1.JobService/MarkCreating",
            "tally.v1.JobService/MarkSubmitted",
            "tally.v1.LedgerService/ReportOutcomes",
            "tally.v1.JobService/FinishJob",
        ] {
            assert!(names.contains(rpc), "{rpc} in the job's trace: {names:?}");
        }
        for group in ["store.claim_rows", "store.report", "store.finish_job"] {
            assert!(names.contains(group), "{group} in the job's trace");
        }
        let job_id: SpanId = job.span_context.span_id();
        for s in trace.iter().filter(|s| s.span_kind == SpanKind::Server) {
            assert_eq!(s.parent_span_id, job_id, "{} is a child of the job", s.name);
            assert!(s.parent_span_is_remote, "{} joined over the wire", s.name);
        }
        let store_under_rpc = trace
            .iter()
            .filter(|s| s.name.starts_with("store."))
            .all(|s| {
                trace
                    .iter()
                    .any(|p| p.span_context.span_id() == s.parent_span_id)
            });
        assert!(store_under_rpc, "store spans hang under the server's spans");
    }
    // Different jobs are different traces.
    let traces: HashSet<TraceId> = job_spans
        .iter()
        .map(|s| s.span_context.trace_id())
        .collect();
    assert_eq!(traces.len(), job_spans.len());
}

//! What an on-call sees while a ledger runs (issue 20, item 1): the
//! worker's `/metrics` and `/healthz` in the middle of a run and at its end,
//! and the server's token, cost and pool families, checked against what
//! tally itself recorded.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_metrics:: -- --nocapture`.

use crate::common;

use common::{API_KEY, World, list_jobs, summary, until, worker_args};
use gemini_emulator::faults::{RateLimit, SharedSections};
use gemini_emulator::{FaultPlan, Timing};
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_telemetry::exposition::{self, Scrape};

const LEDGER: &str = "observed";
const ROWS: usize = 12;

async fn get(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("the listener answers");
    (r.status().as_u16(), r.text().await.expect("a body"))
}

async fn scrape(addr: impl std::fmt::Display) -> Scrape {
    let (status, text) = get(&format!("http://{addr}/metrics")).await;
    assert_eq!(status, 200);
    exposition::parse(&text).expect("the text format parses")
}

/// Invariants: mid-run, `/healthz` and `/metrics` show the batches in
/// flight and the rows sent; at the end the worker's counters agree with
/// tally's record (every row sent once, one created batch per made job,
/// every made job reconciled and each job a 429 refused released, none in
/// flight, the two 429s the provider gave counted under their code), and the server's `tally_tokens_total` equals the
/// ledger summary's usage, token for token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_and_server_metrics_agree_with_the_ledger() {
    let faults = FaultPlan {
        shared: SharedSections {
            rate_limit: Some(RateLimit {
                times: 2,
                retry_after_secs: 0,
                retry_after_header: false,
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    // Batches that stay RUNNING for a while, so the run has a middle.
    let timing = Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_secs(2),
    };
    let w = World::start_with(LEDGER, ROWS, faults, pb::AttemptBudgets::default(), timing).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let args = worker_args(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "observed-worker",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let worker = tokio::spawn(tally_worker::run_serving(
        args,
        tally_worker::ApiKey::new(API_KEY.into()),
        async move { stopped.cancelled().await },
        Some(listener),
    ));

    // The middle of the run: a batch is out at the provider.
    let health_url = format!("http://{addr}/healthz");
    until(Duration::from_secs(60), "a batch in flight", || async {
        let (_, body) = get(&health_url).await;
        let h: serde_json::Value = serde_json::from_str(&body).unwrap();
        h["jobs_in_flight"].as_i64() > Some(0) && h["rows_sent"].as_u64() > Some(0)
    })
    .await;
    let (status, body) = get(&health_url).await;
    println!("mid-run /healthz {status}: {body}");
    assert_eq!(status, 200);
    let mid = scrape(addr).await;
    assert!(mid.sample("tally_worker_jobs_in_flight", &[]).unwrap() >= 1.0);
    assert!(mid.sample("tally_worker_rows_sent_total", &[]).unwrap() >= 1.0);
    assert_eq!(get(&format!("http://{addr}/livez")).await.0, 200);

    until(Duration::from_secs(120), "every row succeeded", || async {
        summary(&w.c, LEDGER).await.succeeded == ROWS as i64
    })
    .await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    // A 429 at create closes its job unmade (rows back, no attempt).
    let created = jobs.iter().filter(|j| !j.batch.is_empty()).count();
    let unmade = jobs.len() - created;
    until(Duration::from_secs(60), "every job task ended", || async {
        let s = scrape(addr).await;
        let ended = |end| s.sample("tally_worker_jobs_finished_total", &[("end", end)]);
        s.sample("tally_worker_jobs_in_flight", &[]) == Some(0.0)
            && ended("reconciled") == Some(created as f64)
            // Also released: claims whose CreateJob met the cool-down.
            && ended("released").unwrap_or(0.0) >= unmade as f64
    })
    .await;
    let end = scrape(addr).await;
    assert_eq!(unmade, 2, "each of the two 429s closed its job unmade");
    assert_eq!(
        end.sample("tally_worker_rows_sent_total", &[]),
        Some(ROWS as f64),
        "every row sent once"
    );
    assert_eq!(
        end.sample("tally_worker_batches_created_total", &[]),
        Some(created as f64)
    );
    assert_eq!(
        end.sample("tally_worker_provider_errors_total", &[("code", "429")]),
        Some(2.0),
        "the provider's two 429s at create"
    );
    assert_eq!(
        end.sample("tally_worker_provider_errors_total", &[("code", "500")]),
        Some(0.0)
    );
    assert!(
        end.sample("tally_worker_last_successful_poll_timestamp_seconds", &[])
            .unwrap()
            > 0.0
    );
    assert!(end.family("tally_build").is_some());
    assert!(end.sample("process_resident_memory_bytes", &[]).unwrap() > 0.0);

    // The server: tokens by ledger, model and kind, as the summary sums them.
    let s = summary(&w.c, LEDGER).await;
    let usage = s.usage.expect("usage");
    let server = scrape(w.stack.server.metrics_addr).await;
    let tokens = |kind| {
        server.sum(
            "tally_tokens_total",
            &[
                ("ledger", LEDGER),
                ("model", "gemini-2.5-flash"),
                ("kind", kind),
            ],
        )
    };
    assert!(usage.input_tokens > 0, "the emulator reports usage");
    assert_eq!(tokens("input"), usage.input_tokens as f64);
    assert_eq!(tokens("output"), usage.output_tokens as f64);
    assert_eq!(tokens("thinking"), usage.thinking_tokens as f64);
    // No price in this ledger's policy: reports are counted as unpriced,
    // not as free.
    assert!(
        server.sum("tally_unpriced_reports_total", &[("ledger", LEDGER)]) >= 1.0,
        "unpriced reports counted"
    );
    assert_eq!(
        server.sum("tally_estimated_cost_usd_total", &[("ledger", LEDGER)]),
        0.0
    );
    assert!(
        server.sum("tally_db_pool_acquire_duration_seconds_count", &[]) >= 1.0,
        "the pool probe ran"
    );
    assert_eq!(server.sample("tally_jobs_adopted_total", &[]), Some(0.0));
    for name in [
        "tally_worker_jobs_in_flight",
        "tally_worker_rows_sent_total",
        "tally_worker_provider_errors_total",
        "tally_worker_jobs_finished_total",
        "tally_worker_last_tally_contact_timestamp_seconds",
    ] {
        assert!(end.names().contains(name), "{name} exported");
    }

    stop.cancel();
    let report = worker.await.unwrap().expect("the worker stops cleanly");
    println!("{report:?}");
    w.stop().await;
}

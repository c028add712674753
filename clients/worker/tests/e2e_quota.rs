//! The provider's enqueued-token quota, shared by every worker (issue 18,
//! item 3): four worker processes against an emulator whose quota holds
//! about two batches at once. A create over the quota is answered 429; the
//! worker gives the rows back (no attempt) and tally puts the model in a
//! cool-down (the 429's RetryInfo, 1 s here) during which every worker's
//! CreateJob is refused by tally instead of reaching the provider.
//!
//! The bound: the provider sees at most `max_active_jobs` (4) creates per
//! cool-down window (those already past CreateJob when it began), so the
//! 429s are at most 4 × (the run's seconds + 1).
//!
//! Run: `cargo test -p tally-worker --test e2e_quota -- --nocapture`.

mod common;

use common::{World, exits_ok, list_jobs, summary};
use gemini_emulator::faults::EnqueuedTokens;
use gemini_emulator::{FaultPlan, Timing};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

const LEDGER: &str = "quota";
const ROWS: usize = 40;

/// Invariants: every row succeeds with exactly one attempt (none spent on
/// a 429); the provider's 429s stay within the bound above; jobs refused
/// by the provider were never made (no batch, rows released).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_share_the_providers_quota() {
    let faults = FaultPlan {
        // "Summarize document N in one line." is about 9 tokens: a batch
        // of 4 about 36, so 80 holds two batches.
        enqueued_tokens: Some(EnqueuedTokens {
            limit: 80,
            retry_after_secs: 1,
        }),
        ..Default::default()
    };
    let timing = Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_millis(800),
    };
    let w = World::start_with(LEDGER, ROWS, faults, pb::AttemptBudgets::default(), timing).await;
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            w.worker(
                LEDGER,
                &format!("q{i}"),
                &[
                    "--exit-when-idle",
                    "--claim-size",
                    "4",
                    "--max-rows-per-batch",
                    "4",
                ],
            )
        })
        .collect();
    for (i, worker) in workers.into_iter().enumerate() {
        exits_ok(worker, &format!("worker q{i}")).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let s = summary(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    let jobs = list_jobs(&w.c, LEDGER).await;
    let refused = jobs.iter().filter(|j| j.batch.is_empty()).count();
    println!(
        "{secs:.1}s: {} batches, {} creates answered 429, {} jobs never made; attempts {} for {ROWS} rows",
        stats.batches_created, stats.create_rejections, refused, s.attempts_total
    );
    assert_eq!(s.succeeded, ROWS as i64, "every row succeeds");
    assert_eq!(
        s.attempts_total, ROWS as i64,
        "one attempt a row: none was spent on a 429"
    );
    assert!(stats.create_rejections >= 1, "the quota was reached");
    let bound = 4.0 * (secs.ceil() + 1.0);
    assert!(
        (stats.create_rejections as f64) <= bound,
        "429s {} within 4 per cool-down window ({bound})",
        stats.create_rejections
    );
    assert_eq!(
        refused as u64, stats.create_rejections,
        "each 429 closed its job unmade"
    );
    w.stop().await;
}

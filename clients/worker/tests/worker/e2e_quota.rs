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
//! With admission (`--provider-enqueued-tokens` set no higher than the
//! provider's limit), tally refuses the creates that would not fit before
//! they reach the provider: no 429 at all.
//!
//! A refusal no wait fixes (a daily quota used up, billing) pauses the
//! ledger with its reason instead; resuming after the fix finishes it.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_quota:: -- --nocapture`.

use crate::common;

use common::{World, exits_ok, list_jobs, resume, summary, until};
use gemini_emulator::faults::{Billing, DailyQuota, EnqueuedTokens};
use gemini_emulator::{FaultPlan, Timing};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_telemetry::exposition;

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
    let w = World::start_configured(
        LEDGER,
        ROWS,
        faults,
        pb::AttemptBudgets::default(),
        timing,
        // Token admission off: the provider's limit is met only at the
        // provider.
        |args| args.provider.provider_enqueued_tokens = vec!["0".into()],
    )
    .await;
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

fn quota_timing() -> Timing {
    Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_millis(800),
    }
}

fn four_workers(w: &World) -> Vec<tokio::process::Child> {
    (0..4)
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
        .collect()
}

/// Invariants: with tally's enqueued-token limit at or under the
/// provider's (in tally's estimate, 4 bytes a token of payload and prompt,
/// which is above the provider's count), the provider never answers a
/// create 429: tally refused the creates that would not fit
/// (RESOURCE_EXHAUSTED PROVIDER_QUOTA, counted on /metrics) and the
/// workers waited its RetryInfo; every row succeeds with one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admission_keeps_creates_under_the_providers_quota() {
    // The provider: 80 tokens enqueued per model (two batches of four
    // rows, 9 tokens a row in its count). tally: 110 in its estimate (a
    // row is 55 bytes of payload and template, ~14 tokens: two batches).
    let faults = FaultPlan {
        enqueued_tokens: Some(EnqueuedTokens {
            limit: 80,
            retry_after_secs: 1,
        }),
        ..Default::default()
    };
    let w = World::start_configured(
        LEDGER,
        ROWS,
        faults,
        pb::AttemptBudgets::default(),
        quota_timing(),
        |args| {
            args.provider.provider_enqueued_tokens = vec!["gemini-2.5-flash=110".into()];
        },
    )
    .await;
    let started = Instant::now();
    for (i, worker) in four_workers(&w).into_iter().enumerate() {
        exits_ok(worker, &format!("worker q{i}")).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let s = summary(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    let text = reqwest::get(format!("http://{}/metrics", w.stack.server.metrics_addr))
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("a body");
    let scrape = exposition::parse(&text).expect("the text format parses");
    let admissions_refused = scrape.sum(
        "tally_grpc_requests_total",
        &[("method", "CreateJob"), ("code", "RESOURCE_EXHAUSTED")],
    );
    println!(
        "{secs:.1}s: {} batches, {} creates answered 429 by the provider, {admissions_refused} refused by tally's admission; attempts {} for {ROWS} rows",
        stats.batches_created, stats.create_rejections, s.attempts_total
    );
    assert_eq!(s.succeeded, ROWS as i64, "every row succeeds");
    assert_eq!(s.attempts_total, ROWS as i64, "one attempt a row");
    assert_eq!(
        stats.create_rejections, 0,
        "no create reached the provider over its quota"
    );
    assert!(
        admissions_refused >= 1.0,
        "tally's admission held creates back"
    );
    w.stop().await;
}

/// Runs one in-process worker on a world whose provider refuses with
/// `faults` until they are lifted. Invariants: the ledger pauses with
/// `reason` and the provider's message; no row spent an attempt on the
/// refusal (only the `made` batches' rows were attempted, once each); the
/// provider saw at most `max_active_jobs` (4) refused creates (the jobs
/// already past CreateJob when the pause came); after the refusal is
/// lifted and the ledger resumed, every row succeeds.
pub(crate) async fn a_lasting_refusal_pauses(
    faults: FaultPlan,
    reason: pb::LedgerPauseReason,
    made: u64,
) {
    let w = World::start_with(
        LEDGER,
        ROWS,
        faults,
        pb::AttemptBudgets::default(),
        quota_timing(),
    )
    .await;
    let worker = w.worker_in_process(
        LEDGER,
        "refused",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );
    until(Duration::from_secs(60), "the ledger pauses", || async {
        summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    until(Duration::from_secs(60), "the jobs out finish", || async {
        let s = summary(&w.c, LEDGER).await;
        s.active_jobs == 0 && s.running == 0
    })
    .await;
    let s = summary(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    let pause = s.pause.clone().expect("a pause");
    println!(
        "paused ({}): {:?} by {}; {} creates refused, {} batches made",
        pause.reason, pause.message, pause.actor, stats.create_rejections, stats.batches_created
    );
    assert_eq!(pause.reason, reason as i32);
    assert!(
        pause.message.contains("the provider refused the batch: "),
        "{}",
        pause.message
    );
    assert_eq!(stats.batches_created, made);
    assert!(
        (1..=4).contains(&stats.create_rejections),
        "refused creates {}",
        stats.create_rejections
    );
    let sent = (made * 4) as i64;
    assert_eq!(s.attempts_total, sent, "no attempt spent on a refusal");
    assert_eq!(s.succeeded, sent);
    assert_eq!(s.pending, ROWS as i64 - sent, "the rest wait, unattempted");

    // The refusal is lifted (billing fixed, a new day): resume, and the
    // same worker finishes.
    w.emulator.set_faults(FaultPlan::default()).unwrap();
    resume(&w.c, LEDGER).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while summary(&w.c, LEDGER).await.succeeded != ROWS as i64 {
        if Instant::now() > deadline {
            let jobs: Vec<_> = list_jobs(&w.c, LEDGER)
                .await
                .into_iter()
                .map(|j| (j.state(), j.final_state(), j.end_time.is_some(), j.error))
                .collect();
            panic!(
                "every row succeeds within 120s after the resume: {:?}; jobs {jobs:?}; worker finished: {}",
                summary(&w.c, LEDGER).await,
                worker.is_finished()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(summary(&w.c, LEDGER).await.attempts_total, ROWS as i64);
    worker.stop().await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn billing_refused_with_403_pauses_the_ledger() {
    let faults = FaultPlan {
        billing: Some(Billing { code: 403 }),
        ..Default::default()
    };
    a_lasting_refusal_pauses(faults, pb::LedgerPauseReason::Billing, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn billing_refused_with_400_failed_precondition_pauses_the_ledger() {
    let faults = FaultPlan {
        billing: Some(Billing { code: 400 }),
        ..Default::default()
    };
    a_lasting_refusal_pauses(faults, pb::LedgerPauseReason::Billing, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_used_up_daily_quota_pauses_the_ledger() {
    let faults = FaultPlan {
        daily_quota: Some(DailyQuota {
            creates: 2,
            retry_after_secs: 30,
            quota_id: "GenerateRequestsPerDayPerProjectPerModel".into(),
        }),
        ..Default::default()
    };
    a_lasting_refusal_pauses(faults, pb::LedgerPauseReason::Quota, 2).await;
}

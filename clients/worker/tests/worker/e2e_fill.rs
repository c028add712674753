//! Batches that fill, under the ledger's default `batch_fill` (10 minutes'
//! bound, 5 s quiet): the transient failures of four batches go back as
//! one retry batch, not one per batch or per poll; rows enrolled in twenty
//! calls a second apart go out as one batch. Batches are counted at the
//! emulator: at a real provider each is a turnaround.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_fill:: -- --nocapture`.

use std::time::Duration;

use crate::common;

use common::{World, all_rows, enroll_documents, exits_ok, test_policy, until};
use gemini_emulator::{FaultPlan, RowFault, RowMatch, RowRule, Timing};
use tally_proto::v1 as pb;

/// The tests' ledger policy with the default batch fill.
fn default_fill() -> pb::LedgerPolicy {
    pb::LedgerPolicy {
        batch_fill: None,
        ..test_policy("gemini-2.5-flash", pb::AttemptBudgets::default())
    }
}

fn timing() -> Timing {
    Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_millis(300),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_failures_of_four_batches_go_back_as_one() {
    const LEDGER: &str = "fill-retries";
    // Rows 03, 07, 13, 17, … fail once (503): two in each batch of ten.
    let faults = FaultPlan {
        rows: vec![RowRule {
            matcher: RowMatch {
                key_regex: Some("^row-[0-3][37]$".into()),
                ..Default::default()
            },
            fault: RowFault::Transient {
                code: 503,
                times: 1,
            },
        }],
        ..Default::default()
    };
    let w = World::start_policy(LEDGER, 40, faults, timing(), default_fill(), |_| {}).await;
    let worker = w.worker(
        LEDGER,
        "filler",
        &[
            "--claim-size",
            "10",
            "--max-rows-per-batch",
            "10",
            "--exit-when-idle",
        ],
    );
    exits_ok(worker, "the worker").await;
    let rows = all_rows(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        let failed_once = ["3", "7"].iter().any(|d| r.key.ends_with(d));
        let sent = stats.submission_count(&r.key);
        assert_eq!(
            sent,
            if failed_once { 2 } else { 1 },
            "{} sent {sent} times",
            r.key
        );
    }
    assert_eq!(
        stats.batches_created, 5,
        "four batches of ten, then their eight failures as one"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rows_enrolled_a_second_apart_share_one_batch() {
    const LEDGER: &str = "fill-arriving";
    let w = World::start_policy(
        LEDGER,
        0,
        FaultPlan::default(),
        timing(),
        default_fill(),
        |_| {},
    )
    .await;
    let worker = w.worker(LEDGER, "filler", &[]);
    // The calls a second apart are the workload, not a wait for anything.
    // Each call's start and end are kept: on a loaded machine one call can
    // take seconds, and a gap as long as the quiet window rightly lets the
    // batch go.
    let quiet = tally_core::fill::BatchFill::default().quiet;
    let mut calls = Vec::new();
    for i in 0..20 {
        let start = std::time::Instant::now();
        enroll_documents(&w.c, LEDGER, &format!("call-{i:02}-"), 1, "").await;
        calls.push((start, std::time::Instant::now()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The most two consecutive enrollments can be apart is from the start
    // of one call to the end of the next; only such a gap of `quiet` or
    // more may end a batch early.
    let quiet_gaps = calls
        .windows(2)
        .filter(|p| p[1].1 - p[0].0 >= quiet)
        .count() as u64;
    until(Duration::from_secs(60), "every row succeeded", || async {
        let rows = all_rows(&w.c, LEDGER).await;
        rows.len() == 20 && rows.iter().all(|r| r.status() == pb::RowStatus::Succeeded)
    })
    .await;
    // Invariant: a batch goes only once enrollment has been quiet for the
    // ledger's `quiet`: one batch, plus one per gap that long (none where
    // the calls came a second apart as asked).
    let batches = w.emulator.stats().batches_created;
    assert!(
        batches <= 1 + quiet_gaps,
        "{batches} batches for 20 calls a second apart ({quiet_gaps} gaps of {quiet:?} or more)"
    );
    drop(worker);
    w.stop().await;
}

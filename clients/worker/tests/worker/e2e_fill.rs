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
    for i in 0..20 {
        enroll_documents(&w.c, LEDGER, &format!("call-{i:02}-"), 1, "").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    until(Duration::from_secs(60), "every row succeeded", || async {
        let rows = all_rows(&w.c, LEDGER).await;
        rows.len() == 20 && rows.iter().all(|r| r.status() == pb::RowStatus::Succeeded)
    })
    .await;
    assert_eq!(
        w.emulator.stats().batches_created,
        1,
        "one batch for 20 calls"
    );
    drop(worker);
    w.stop().await;
}

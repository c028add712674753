//! A batch that FAILED part-way with a responses file: the rows it answered
//! are reported from it (never sent again), the rest go back with
//! `job_failed` and succeed in a later batch.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_partial:: -- --nocapture`.

use crate::common;

use common::{World, all_rows, exits_ok, first_job, list_jobs};
use gemini_emulator::FaultPlan;
use tally_proto::v1 as pb;

const LEDGER: &str = "partial";
const ROWS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_batchs_partial_output_is_reported_and_only_the_rest_resent() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "jobs": [{"match": {"nth": 1}, "fault": {"kind": "failed", "message": "quota", "partial": true}}],
    }))
    .unwrap();
    let w = World::start(LEDGER, ROWS, faults, pb::AttemptBudgets::default()).await;
    // One job for all rows, so the failed batch holds every row.
    let worker = w.worker(
        LEDGER,
        "worker",
        &["--exit-when-idle", "--claim-size", "10", "--max-jobs", "1"],
    );
    exits_ok(worker, "the worker").await;

    let jobs = list_jobs(&w.c, LEDGER).await;
    let failed = first_job(&jobs);
    assert_eq!(failed.final_state(), pb::JobState::Failed, "{failed:?}");
    let counts = failed.counts.unwrap_or_default();
    assert_eq!(counts.succeeded, 5, "half answered before the batch failed");
    let stats = w.emulator.stats();
    // Invariant: no row is sent again after it was answered.
    assert_eq!(stats.resubmitted_after_success(), Vec::<String>::new());
    let mut sent_once = 0;
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        let sent = stats.submission_count(&r.key);
        assert_eq!(sent, attempts, "{}", r.key);
        if sent == 1 {
            sent_once += 1;
        }
    }
    assert_eq!(sent_once, 5, "the answered half was sent once");
    w.stop().await;
}

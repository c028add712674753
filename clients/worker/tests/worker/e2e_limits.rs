//! A worker whose chunks are larger than the server takes in one call
//! (`--max-rows-per-report` above the server's `--max-rows-per-call`): the
//! server's refusal names its limit and the worker reports in chunks of it,
//! instead of failing every report and getting its rows back by lease.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_limits:: -- --nocapture`.

use crate::common;

use common::{World, all_rows, enroll_documents, exits_ok, list_jobs};
use gemini_emulator::FaultPlan;
use tally_proto::v1 as pb;

const LEDGER: &str = "limits";
/// More rows than the test server's 100 per call, in one claim and batch.
const ROWS: usize = 250;

// Invariant: a report refused for its size writes nothing and is sent again
// in smaller chunks, so every row is answered by its one batch: one send,
// one attempt, SUCCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reports_larger_than_the_server_takes_are_split_not_lost() {
    let w = World::start(
        LEDGER,
        0,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    enroll_documents(&w.c, LEDGER, "row-", ROWS, "").await;
    let worker = w.worker(
        LEDGER,
        "worker",
        &[
            "--exit-when-idle",
            "--claim-size",
            "250",
            "--max-rows-per-batch",
            "250",
            "--max-rows-per-report",
            "1000",
        ],
    );
    exits_ok(worker, "the worker").await;

    let jobs = list_jobs(&w.c, LEDGER).await;
    assert_eq!(jobs.len(), 1, "one claim, one job: {jobs:?}");
    let stats = w.emulator.stats();
    assert_eq!(stats.batches_created, 1);
    let rows = all_rows(&w.c, LEDGER).await;
    assert_eq!(rows.len(), ROWS);
    for r in rows {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        assert_eq!(r.attempts.as_ref().map_or(0, |a| a.total), 1, "{}", r.key);
        assert_eq!(stats.submission_count(&r.key), 1, "{}", r.key);
    }
    w.stop().await;
}

//! Batches that never end on their own: one stuck PENDING past the
//! worker's `--batch-deadline` is cancelled and followed until the provider
//! says it ended (CANCELLED), then read and finished like any other; one
//! deleted at the provider (every GET answers 404 for `--gone-after`)
//! finishes its job FAILED.
//! Either way the rows come back (an infra attempt each) and succeed in a
//! later batch: nothing waits forever, and every send is an attempt.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_stuck:: -- --nocapture`.

use crate::common;

use std::time::{Duration, Instant};

use common::{API_KEY, World, all_rows, exits_ok, first_job, list_jobs};
use gemini_emulator::{FaultPlan, Outcome, Timing};
use tally_proto::v1 as pb;

const LEDGER: &str = "stuck";
const ROWS: usize = 10;

/// The first batch never leaves PENDING on its own.
fn first_batch_stuck() -> FaultPlan {
    serde_json::from_value(serde_json::json!({
        "jobs": [{"match": {"nth": 1}, "fault": {"kind": "stays_pending"}, "times": 1}],
    }))
    .unwrap()
}

async fn check_rows_succeeded_and_sends_are_attempts(w: &World) {
    let stats = w.emulator.stats();
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        assert_eq!(
            attempts, 2,
            "{}: the stuck batch's attempt, then success",
            r.key
        );
        assert_eq!(stats.submission_count(&r.key), attempts, "{}", r.key);
    }
}

/// Stuck PENDING past the deadline: cancelled at the provider, followed
/// until it is CANCELLED there, the job finished CANCELLED with the reason,
/// the rows retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_past_its_deadline_is_cancelled_and_followed_to_its_end() {
    let w = World::start(
        LEDGER,
        ROWS,
        first_batch_stuck(),
        pb::AttemptBudgets::default(),
    )
    .await;
    let worker = w.worker(
        LEDGER,
        "worker",
        &["--exit-when-idle", "--batch-deadline", "2s"],
    );
    exits_ok(worker, "the worker").await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    let stuck = first_job(&jobs);
    assert_eq!(stuck.state(), pb::JobState::Reconciled);
    assert_eq!(stuck.final_state(), pb::JobState::Cancelled, "{stuck:?}");
    assert!(stuck.error.contains("batch-deadline"), "{}", stuck.error);
    let stats = w.emulator.stats();
    assert!(
        stats.submissions["row-00"]
            .iter()
            .any(|s| s.outcome == Outcome::JobCancelled),
        "the stuck batch was cancelled at the provider: {:?}",
        stats.submissions["row-00"]
    );
    check_rows_succeeded_and_sends_are_attempts(&w).await;
    w.stop().await;
}

/// Deleted at the provider while it waits: once every poll answered 404
/// for `--gone-after`, the job finishes FAILED, and the rows are retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_deleted_at_the_provider_fails_its_job() {
    let w = World::start(
        LEDGER,
        ROWS,
        first_batch_stuck(),
        pb::AttemptBudgets::default(),
    )
    .await;
    let worker = w.worker(
        LEDGER,
        "worker",
        &["--exit-when-idle", "--gone-after", "1s"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let batch = loop {
        if let Some(j) = list_jobs(&w.c, LEDGER)
            .await
            .into_iter()
            .find(|j| !j.batch.is_empty())
        {
            break j.batch;
        }
        assert!(Instant::now() < deadline, "no job was submitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let deleted = reqwest::Client::new()
        .delete(format!("{}/v1beta/{batch}", w.emulator.base_url()))
        .header("x-goog-api-key", API_KEY)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    exits_ok(worker, "the worker").await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    let gone = jobs.iter().find(|j| j.batch == batch).expect("the job");
    assert_eq!(gone.final_state(), pb::JobState::Failed, "{gone:?}");
    assert!(gone.error.contains("404"), "{}", gone.error);
    // The rows were sent in the deleted batch and once more after it: each
    // send is an attempt.
    check_rows_succeeded_and_sends_are_attempts(&w).await;
    w.stop().await;
}

/// A 404 is not proof that a batch is gone (a key of another project, or a
/// replica that has not seen the batch, answers the same): a batch whose
/// GETs answer 404 a few times and then find it again is followed to its
/// end as usual, every row succeeding in its one and only batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_few_404s_do_not_fail_a_job() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "get_not_found": {"times": 3},
    }))
    .unwrap();
    // Batches run long enough (4s) for the 1s poller to GET them more than
    // three times before they end.
    let timing = Timing {
        pending: Duration::from_millis(2000),
        running: Duration::from_millis(2000),
    };
    let w = World::start_with(LEDGER, ROWS, faults, pb::AttemptBudgets::default(), timing).await;
    let worker = w.worker(LEDGER, "worker", &["--exit-when-idle"]);
    exits_ok(worker, "the worker").await;
    let stats = w.emulator.stats();
    assert_eq!(stats.gets_not_found, 3, "the fault fired");
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        assert_eq!(r.attempts.as_ref().map_or(0, |a| a.total), 1, "{}", r.key);
        assert_eq!(stats.submission_count(&r.key), 1, "{}", r.key);
    }
    let jobs = list_jobs(&w.c, LEDGER).await;
    assert!(
        jobs.iter()
            .all(|j| j.final_state() == pb::JobState::Succeeded),
        "{jobs:?}"
    );
    w.stop().await;
}

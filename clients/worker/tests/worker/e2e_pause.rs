//! Pausing a ledger while its worker has a batch at the provider: that
//! batch runs to its end and is reconciled, no new job is made while the
//! ledger is paused (the worker says so once, not on every poll), and after
//! the resume the rest of the rows finish; every row is sent exactly once.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_pause:: -- --nocapture`.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{World, all_rows, assert_no_orphan_batch, list_jobs, resume, summary, worker_command};
use gemini_emulator::{FaultPlan, Timing};
use tally_proto::v1 as pb;
use tokio::io::AsyncReadExt;

const LEDGER: &str = "pause";
const ROWS: usize = 10;
const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `check` every 100 ms until it answers something, for at most
/// [`DEADLINE`].
async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_lets_the_batch_at_the_provider_finish_and_starts_nothing_until_resumed() {
    // Batches stay at the provider for 3 s: long enough to pause during one.
    let timing = Timing {
        pending: Duration::from_secs(1),
        running: Duration::from_secs(2),
    };
    let w = World::start_with(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
        timing,
    )
    .await;
    // One job of 4 rows at a time; its log (stdout) is read as it comes.
    let mut worker = worker_command(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "worker",
        &["--exit-when-idle", "--claim-size", "4", "--max-jobs", "1"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("spawn tally-worker");
    let mut out = worker.stdout.take().expect("the worker's stdout");
    let log = tokio::spawn(async move {
        let mut text = String::new();
        out.read_to_string(&mut text).await.map(|_| text)
    });

    // The first job reaches the provider.
    let first = until("a job submitted", || async {
        list_jobs(&w.c, LEDGER)
            .await
            .into_iter()
            .find(|j| !j.batch.is_empty())
    })
    .await;
    assert!(first.end_time.is_none(), "still at the provider: {first:?}");

    let paused =
        w.c.ledgers
            .clone()
            .pause_ledger(pb::PauseLedgerRequest {
                name: format!("ledgers/{LEDGER}"),
                message: "e2e: pause during a batch".into(),
                etag: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(paused.state(), pb::LedgerState::Paused);

    // Invariant: the batch already at the provider runs to its end and is
    // reconciled while the ledger is paused.
    let reconciled = until("the first job reconciled", || async {
        list_jobs(&w.c, LEDGER)
            .await
            .into_iter()
            .find(|j| j.name == first.name && j.state() == pb::JobState::Reconciled)
    })
    .await;
    assert_eq!(reconciled.final_state(), pb::JobState::Succeeded);

    // Invariant: nothing new starts while paused. The worker's loop polls
    // every second; over three seconds it claims (and gets the paused
    // answer) several times, and no job or batch is made.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    assert_eq!(jobs.len(), 1, "no job made while paused: {jobs:?}");
    assert_eq!(w.emulator.stats().batches_created, 1);
    let s = summary(&w.c, LEDGER).await;
    assert_eq!(s.state(), pb::LedgerState::Paused);
    assert_eq!(
        (s.succeeded, s.pending, s.running, s.active_jobs),
        (4, 6, 0, 0),
        "{}",
        s.summary_line
    );
    assert!(s.summary_line.starts_with("PAUSED reason=operator "));

    resume(&w.c, LEDGER).await;

    // Invariant: after the resume the rest finishes, and the worker (which
    // waited while the paused ledger still had rows) exits when idle.
    let status = tokio::time::timeout(Duration::from_secs(120), worker.wait())
        .await
        .expect("the worker finishes within 120s after the resume")
        .expect("worker reaped");
    assert!(status.success(), "the worker exits 0: {status:?}");
    let worker_log = log.await.unwrap().unwrap();

    let jobs = list_jobs(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    assert_no_orphan_batch(&jobs, &stats);
    assert!(jobs.iter().all(|j| j.state() == pb::JobState::Reconciled));
    // Invariant: every row was sent exactly once and succeeded with one
    // attempt (a pause spends none).
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        assert_eq!(stats.submission_count(&r.key), 1, "{} sent once", r.key);
        assert_eq!(r.attempts.map_or(0, |a| a.total), 1, "{}", r.key);
    }
    let s = summary(&w.c, LEDGER).await;
    assert_eq!(s.state(), pb::LedgerState::Active);
    // Invariant: the worker said once that the ledger was paused and once
    // that it was resumed, however many polls saw it paused.
    assert_eq!(
        worker_log.matches("ledger paused").count(),
        1,
        "worker log:\n{worker_log}"
    );
    assert_eq!(
        worker_log.matches("ledger resumed").count(),
        1,
        "worker log:\n{worker_log}"
    );
    w.stop().await;
}

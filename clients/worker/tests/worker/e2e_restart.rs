//! A worker killed (-9) with batches at the provider and started again is
//! back on its batches at once, under the ledger's default lease (30
//! minutes): under the same name it takes over what its earlier process
//! held; under another name on the same host it shows the earlier process
//! gone. A second worker of the same name that still runs is fenced. In
//! every case each row is sent to the provider once and ends SUCCEEDED.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_restart:: -- --nocapture`.

use std::time::Duration;

use crate::common;

use common::{
    World, all_rows, exits_ok, list_jobs, submitted_job_of, until, worker_command_leased,
};
use gemini_emulator::{FaultPlan, Timing};
use tally_proto::v1 as pb;
use tokio::process::Child;

const LEDGER: &str = "restart";
const ROWS: usize = 20;
/// Far below the 30-minute lease: adoption must not wait for it.
const BACK_WITHIN: Duration = Duration::from_secs(10);

async fn world() -> World {
    let timing = Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_secs(2),
    };
    World::start_with(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
        timing,
    )
    .await
}

/// A worker under the ledger's own lease, ten rows a batch. A job killed
/// while its create was in flight is searched for at the provider over the
/// lookup window: the emulator lists batches at once, so a short window.
fn worker(w: &World, name: &str, extra: &[&str]) -> Child {
    let mut args = vec![
        "--claim-size",
        "10",
        "--max-rows-per-batch",
        "10",
        "--create-lookup-window",
        "4s",
        "--provider-clock-skew",
        "0s",
    ];
    args.extend_from_slice(extra);
    worker_command_leased(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        name,
        None,
        &args,
    )
    .spawn()
    .expect("spawn tally-worker")
}

/// Starts `first`, kills it -9 once it has a batch at the provider, and
/// returns that job.
async fn killed_at_the_provider(w: &World, first: &str) -> pb::Job {
    let mut a = worker(w, first, &[]);
    let job = submitted_job_of(&w.c, LEDGER, first).await;
    a.kill().await.expect("kill -9");
    job
}

/// `job` is adopted by `by` within [`BACK_WITHIN`].
async fn adopted_soon(w: &World, job: &pb::Job, by: &str) {
    until(
        BACK_WITHIN,
        &format!("{} adopted by {by}", job.job_id),
        || async {
            list_jobs(&w.c, LEDGER)
                .await
                .iter()
                .any(|j| j.name == job.name && j.owner == by && j.adoptions >= 1)
        },
    )
    .await;
}

/// Each row SUCCEEDED, sent to the provider once.
async fn each_row_sent_once(w: &World) {
    let rows = all_rows(&w.c, LEDGER).await;
    assert_eq!(rows.len(), ROWS);
    let stats = w.emulator.stats();
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(stats.submission_count(&r.key), 1, "{} sent once", r.key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_under_its_name_it_takes_its_batches_back_at_once() {
    let w = world().await;
    let job = killed_at_the_provider(&w, "restart-a").await;
    let again = worker(&w, "restart-a", &["--exit-when-idle"]);
    adopted_soon(&w, &job, "restart-a").await;
    exits_ok(again, "the restarted worker").await;
    each_row_sent_once(&w).await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_under_another_name_it_shows_the_old_process_gone() {
    let w = world().await;
    let job = killed_at_the_provider(&w, "restart-a").await;
    let other = worker(&w, "restart-b", &["--exit-when-idle"]);
    adopted_soon(&w, &job, "restart-b").await;
    exits_ok(other, "the second worker").await;
    each_row_sent_once(&w).await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_worker_of_the_same_name_is_fenced_and_nothing_is_sent_twice() {
    let w = world().await;
    let mut alive = worker(&w, "restart-a", &["--exit-when-idle"]);
    let job = submitted_job_of(&w.c, LEDGER, "restart-a").await;
    let twin = worker(&w, "restart-a", &["--exit-when-idle"]);
    until(BACK_WITHIN, "the twin took the job over", || async {
        list_jobs(&w.c, LEDGER)
            .await
            .iter()
            .any(|j| j.name == job.name && j.adoptions >= 1)
    })
    .await;
    exits_ok(twin, "the twin").await;
    // The fenced one ends too (its lost jobs are another's now); how it
    // exits is not what this test is about.
    let _ = tokio::time::timeout(Duration::from_secs(120), alive.wait()).await;
    each_row_sent_once(&w).await;
    w.stop().await;
}

//! Files the provider will not take or give. An input refused for its MIME
//! type is sent as text/plain. A finished batch whose output cannot be
//! downloaded: for a while (403/404 right after the batch finished) the
//! worker waits and then reconciles normally; for longer than
//! `--output-wait` the job fails with that reason and its rows are retried
//! under the infra budget, so nothing is adopted forever.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_output:: -- --nocapture`.

use crate::common;

use common::{World, all_rows, exits_ok, list_jobs};
use gemini_emulator::FaultPlan;
use tally_proto::v1 as pb;

const LEDGER: &str = "output";
const ROWS: usize = 10;

fn plan(times: u32, code: u16) -> FaultPlan {
    serde_json::from_value(serde_json::json!({
        "output_unavailable": {"times": times, "code": code},
    }))
    .unwrap()
}

async fn run_worker(w: &World) {
    let worker = w.worker(
        LEDGER,
        "worker",
        &["--exit-when-idle", "--output-wait", "3s"],
    );
    exits_ok(worker, "the worker").await;
}

/// Not downloadable twice, then it is: the rows succeed, each sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_output_not_downloadable_yet_is_waited_for() {
    let w = World::start(LEDGER, ROWS, plan(2, 404), pb::AttemptBudgets::default()).await;
    run_worker(&w).await;
    let stats = w.emulator.stats();
    assert_eq!(stats.downloads_refused, 2);
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        assert_eq!(stats.submission_count(&r.key), 1, "{}", r.key);
    }
    w.stop().await;
}

/// Never downloadable (403): each job fails with the reason after the
/// wait; its rows are retried (an infra attempt each, one send each) until
/// the infra budget ends them PERMANENT. Nothing loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_output_never_downloadable_fails_the_job_with_its_reason() {
    let budgets = pb::AttemptBudgets {
        provider: 4,
        content: 1,
        infra: 2,
    };
    let w = World::start(LEDGER, ROWS, plan(u32::MAX, 403), budgets).await;
    run_worker(&w).await;
    let stats = w.emulator.stats();
    let jobs = list_jobs(&w.c, LEDGER).await;
    assert!(!jobs.is_empty());
    for j in &jobs {
        assert_eq!(j.state(), pb::JobState::Reconciled, "{j:?}");
        assert_eq!(j.final_state(), pb::JobState::Failed, "{j:?}");
        assert!(j.error.contains("not downloadable"), "{}", j.error);
    }
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Permanent, "{}", r.key);
        assert_eq!(r.rule, "infra_attempts_exhausted", "{}", r.key);
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        assert_eq!(stats.submission_count(&r.key), attempts, "{}", r.key);
    }
    w.stop().await;
}

/// `application/jsonl` refused at finalize (a 200 with a 400 body): the
/// worker uploads as `text/plain` instead of releasing and re-uploading
/// forever; every row succeeds, sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_jsonl_mime_type_falls_back_to_text_plain() {
    let faults: FaultPlan =
        serde_json::from_value(serde_json::json!({"mime_refusal": {"times": 1}})).unwrap();
    let w = World::start(LEDGER, ROWS, faults, pb::AttemptBudgets::default()).await;
    run_worker(&w).await;
    let stats = w.emulator.stats();
    assert_eq!(stats.mime_refusals, 1);
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Succeeded, "{}", r.key);
        assert_eq!(stats.submission_count(&r.key), 1, "{}", r.key);
    }
    w.stop().await;
}

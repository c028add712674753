//! Refusals never loop (issue 29, items 3 and 4): every refused create is a
//! wait (a cool-down, a smaller batch), a fix (a smaller batch; a row too
//! large alone is PERMANENT) or a stop (the ledger pauses with the
//! provider's words). On 13bf183 a 404 or 400 at create gave the rows back
//! and the worker claimed, rendered, uploaded and created them again at
//! once, forever; a batch larger than the enqueued-token quota was refused
//! with 429 forever.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_refusals:: -- --nocapture`.

use crate::common::{self, World, exits_ok, list_jobs, summary};
use crate::e2e_quota::a_lasting_refusal_pauses;

use gemini_emulator::faults::EnqueuedTokens;
use gemini_emulator::{CreateRefusal, FaultPlan, Timing};
use std::time::Duration;
use tally_proto::v1 as pb;

fn refusal(code: u16, status: &str, message: &str) -> FaultPlan {
    FaultPlan {
        create_refusal: Some(CreateRefusal {
            code,
            status: Some(status.into()),
            message: Some(message.into()),
            times: None,
        }),
        ..Default::default()
    }
}

/// A model the provider does not batch: the first create's 404 pauses the
/// ledger (reason MODEL, the provider's words), no row spends an attempt,
/// and at most the jobs already past CreateJob met the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_model_pauses_the_ledger_with_the_providers_words() {
    let faults = refusal(
        404,
        "NOT_FOUND",
        "models/gemini-2.5-flash is not found for API version v1beta, or is not supported for batchGenerateContent.",
    );
    a_lasting_refusal_pauses(faults, pb::LedgerPauseReason::Model, 0).await;
}

/// Any other refusal (a bad key, a bad request) stops too (reason
/// REFUSED).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_request_pauses_the_ledger() {
    let faults = refusal(
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials.",
    );
    a_lasting_refusal_pauses(faults, pb::LedgerPauseReason::Refused, 0).await;
}

/// A provider whose enqueued-token quota (120 tokens) is far below what
/// tally admits (its default, 3,000,000): the first batch (30 rows, about
/// 300 tokens) is refused with 429, and each refusal halves the next
/// batch until they fit; every row succeeds with one attempt, and the
/// creates refused are few (a handful, not a loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_over_the_quota_is_split_until_it_fits() {
    const ROWS: usize = 30;
    let faults = FaultPlan {
        enqueued_tokens: Some(EnqueuedTokens {
            limit: 120,
            retry_after_secs: 1,
        }),
        ..Default::default()
    };
    let timing = Timing {
        pending: Duration::from_millis(100),
        running: Duration::from_millis(200),
    };
    let w = World::start_with("split", ROWS, faults, pb::AttemptBudgets::default(), timing).await;
    let worker = w.worker(
        "split",
        "splitter",
        &["--exit-when-idle", "--max-jobs", "1"],
    );
    exits_ok(worker, "the worker").await;
    let s = summary(&w.c, "split").await;
    let stats = w.emulator.stats();
    let jobs = list_jobs(&w.c, "split").await;
    println!(
        "{} rows: {} creates refused, {} batches made, {} jobs",
        ROWS,
        stats.create_rejections,
        stats.batches_created,
        jobs.len()
    );
    assert_eq!(s.succeeded, ROWS as i64);
    assert_eq!(s.attempts_total, ROWS as i64, "no attempt spent on a 429");
    for key in stats.submissions.keys() {
        assert_eq!(stats.submission_count(key), 1, "{key} sent once");
    }
    assert!(
        (1..=8).contains(&stats.create_rejections),
        "a few halvings, not a loop: {}",
        stats.create_rejections
    );
    common::assert_no_orphan_batch(&jobs, &stats);
    w.stop().await;
}

/// A provider that refuses every create as too large (413): batches halve
/// down to one row, and a row refused alone is PERMANENT with the
/// provider's words; nothing is sent, nothing loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_too_large_alone_is_permanent() {
    const ROWS: usize = 4;
    let faults = refusal(
        413,
        "RESOURCE_EXHAUSTED",
        "Request payload size exceeds the limit: 20971520 bytes.",
    );
    let w = World::start("large", ROWS, faults, pb::AttemptBudgets::default()).await;
    let worker = w.worker(
        "large",
        "splitter",
        &["--exit-when-idle", "--max-jobs", "1"],
    );
    exits_ok(worker, "the worker").await;
    let s = summary(&w.c, "large").await;
    let stats = w.emulator.stats();
    println!(
        "{} rows: {} creates refused, {} batches made",
        ROWS, stats.create_rejections, stats.batches_created
    );
    assert_eq!(s.permanent, ROWS as i64);
    assert_eq!(stats.batches_created, 0);
    // 4 rows: a batch of 4, of 2 (twice over), then one per row: at most
    // 4 + 2 + 1 refusals.
    assert!(
        stats.create_rejections <= 7,
        "bounded: {}",
        stats.create_rejections
    );
    for r in common::all_rows(&w.c, "large").await {
        assert_eq!(r.status(), pb::RowStatus::Permanent, "{}", r.key);
        assert!(r.last_error.contains("too large"), "{}", r.last_error);
    }
    w.stop().await;
}

/// A 429 that never names a delay (no RetryInfo), for good (issue 51,
/// item 1): the worker waits `--refusal-cooldown` (1 s), doubling with each
/// refusal in a row, and the seventh in a row pauses the ledger (QUOTA)
/// with the provider's words instead of creating once a cool-down for
/// ever. Invariants (one job at a time): the ledger pauses; the provider
/// saw exactly the seven refused creates; no row spent an attempt; nothing
/// was made. (With more jobs out, each wait's end lets each of them meet
/// the refusal once: still bounded, counted as that wait's in `waits.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refusal_naming_no_delay_backs_off_then_pauses() {
    const LEDGER: &str = "no-delay";
    const ROWS: usize = 20;
    let faults = refusal(
        429,
        "RESOURCE_EXHAUSTED",
        "Resource has been exhausted (e.g. check quota).",
    );
    let w = World::start(LEDGER, ROWS, faults, pb::AttemptBudgets::default()).await;
    let worker = w.worker_in_process(
        LEDGER,
        "no-delay",
        &[
            "--claim-size",
            "4",
            "--max-jobs",
            "1",
            "--refusal-cooldown",
            "1s",
        ],
    );
    let (s, pause) = common::paused(&w, LEDGER, Duration::from_secs(180)).await;
    let stats = w.emulator.stats();
    println!(
        "paused ({}): {:?}; {} creates refused",
        pause.reason, pause.message, stats.create_rejections
    );
    assert_eq!(pause.reason, pb::LedgerPauseReason::Quota as i32);
    assert!(
        pause.message.contains("Resource has been exhausted")
            && pause.message.contains("7 refusals in a row named no delay"),
        "{}",
        pause.message
    );
    assert_eq!(
        stats.create_rejections, 7,
        "six waits then a pause, not a loop"
    );
    assert_eq!(stats.batches_created, 0);
    assert_eq!(s.attempts_total, 0, "no attempt spent on a refusal");
    assert_eq!(s.pending, ROWS as i64, "every row waits, unattempted");
    let _ = worker.stop().await;
    w.stop().await;
}

/// A base URL that answers 404 to every call (a wrong path): issue 51's
/// "823 jobs in 10 s" at Gemini. Invariants: the first refused create
/// pauses the ledger with the provider's words (its 404; REFUSED, not
/// MODEL: the 404 names no model), only the jobs
/// already out when the pause came met it, no row spent an attempt, and
/// no batch was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_base_url_that_answers_404_pauses_instead_of_looping() {
    const LEDGER: &str = "wrong-url";
    const ROWS: usize = 20;
    let w = World::start(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    let wrong = format!("{}/wrong/path", w.emulator.base_url());
    let mut worker = common::spawn_worker(
        &w.stack.grpc,
        &wrong,
        LEDGER,
        "wrong-url",
        &["--claim-size", "4"],
    );
    let (s, pause) = common::paused(&w, LEDGER, Duration::from_secs(60)).await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    println!(
        "paused ({}): {:?}; {} jobs",
        pause.reason,
        pause.message,
        jobs.len()
    );
    assert!(pause.message.contains("404"), "{}", pause.message);
    assert_eq!(
        pause.reason,
        pb::LedgerPauseReason::Refused as i32,
        "a wrong URL, not the model"
    );
    assert!(
        (1..=4).contains(&jobs.len()),
        "only the jobs out when the pause came: {}",
        jobs.len()
    );
    assert_eq!(s.attempts_total, 0, "no attempt spent on a wrong URL");
    // A claim the pause met (no job made) gives its rows back as it ends.
    common::until(Duration::from_secs(30), "every row waits", || async {
        summary(&w.c, LEDGER).await.pending == ROWS as i64
    })
    .await;
    assert_eq!(summary(&w.c, LEDGER).await.attempts_total, 0);
    assert_eq!(w.emulator.stats().batches_created, 0);
    worker.kill().await.ok();
    w.stop().await;
}

/// A key revoked after its batch was sent (issue 51: get, list and
/// download refusals were only logged, so the ledger never paused). A
/// worker holding the right key is killed once its batch is out; one
/// whose key the provider refuses adopts the job. Invariants: its refused
/// poll or download pauses the ledger (REFUSED, the provider's words)
/// while the job keeps its rows: none is failed, released or sent again;
/// a worker with the right key then adopts the job (a paused ledger still
/// finishes the work already out) and every row SUCCEEDED, sent once,
/// one attempt each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_revoked_after_submission_pauses_and_sends_nothing_twice() {
    const LEDGER: &str = "revoked";
    const ROWS: usize = 10;
    let w = World::start(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    let base = w.emulator.base_url();
    let claim_all = ["--claim-size", "10"];
    let mut first = common::spawn_worker(&w.stack.grpc, &base, LEDGER, "first", &claim_all);
    let job = common::submitted_job_of(&w.c, LEDGER, "first").await;
    first.kill().await.expect("kill -9 the first worker");

    let key = std::env::temp_dir().join(format!("tally-revoked-key-{}", std::process::id()));
    std::fs::write(&key, "a-revoked-key").unwrap();
    let key_arg = key.display().to_string();
    let mut revoked = common::spawn_worker(
        &w.stack.grpc,
        &base,
        LEDGER,
        "revoked",
        &["--gemini-api-key-file", key_arg.as_str()],
    );
    common::until(Duration::from_secs(60), "the ledger pauses", || async {
        summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    let s = summary(&w.c, LEDGER).await;
    let pause = s.pause.clone().expect("a pause");
    println!("paused ({}): {:?}", pause.reason, pause.message);
    assert_eq!(pause.reason, pb::LedgerPauseReason::Refused as i32);
    assert!(
        pause.message.contains("was refused") && pause.message.contains("API key not valid"),
        "the provider's words: {}",
        pause.message
    );
    let held = list_jobs(&w.c, LEDGER).await;
    assert_eq!(held.len(), 1, "no other job made: {held:?}");
    assert!(held[0].end_time.is_none(), "the job keeps its rows");
    assert_eq!(s.succeeded + s.retryable + s.permanent, 0, "no row settled");
    revoked.kill().await.expect("kill");

    let right = common::spawn_worker(
        &w.stack.grpc,
        &base,
        LEDGER,
        "right-key",
        &["--exit-when-idle"],
    );
    exits_ok(right, "the worker with the right key").await;
    let s = summary(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    assert_eq!(s.succeeded, ROWS as i64, "every row answered");
    assert_eq!(s.attempts_total, ROWS as i64, "one attempt each");
    for r in common::all_rows(&w.c, LEDGER).await {
        assert_eq!(stats.submission_count(&r.key), 1, "{} sent once", r.key);
    }
    assert_eq!(stats.batches_created, 1, "the one batch: {}", job.batch);
    std::fs::remove_file(&key).ok();
    w.stop().await;
}

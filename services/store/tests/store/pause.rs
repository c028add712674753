//! Pausing and resuming ledgers against a real PostgreSQL, one database per
//! test. Each test names the invariant it checks.

use crate::common;

use common::*;
use tally_core::job::{FinalState, JobState};
use tally_core::pause::PauseReason;
use tally_core::status::RowStatus;
use tally_pg::TestDb;
use tally_store::pause::PauseLedger;
use tally_store::purge::DeleteLedger;
use tally_store::types::{FinishRequest, JobEventKind, LedgerRecord, Verdict};
use tally_store::{ConnectOptions, Store, StoreError};

fn operator_pause<'a>(ledger: &'a str, etag: Option<i64>) -> PauseLedger<'a> {
    PauseLedger {
        ledger,
        reason: PauseReason::Operator,
        message: "provider incident",
        actor: "ops",
        etag,
    }
}

async fn ledger_with_rows(store: &Store, ledger: &str, keys: &[&str]) -> LedgerRecord {
    let record = store.create_ledger(ledger, &fast_policy()).await.unwrap();
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    store.enroll(ledger, &rows).await.unwrap();
    record
}

fn assert_paused(e: StoreError) {
    match e {
        StoreError::LedgerPaused { name, pause } => {
            assert_eq!(name, "ledgers/l");
            assert_eq!(pause.reason, PauseReason::Operator);
            assert_eq!(pause.actor, "ops");
            assert_eq!(pause.message, "provider incident");
        }
        other => panic!("expected LEDGER_PAUSED, got {other:?}"),
    }
}

/// A paused ledger hands out no claims (its runnable rows stay queued and
/// unattempted), with or without a request id; a resume hands them out
/// again.
#[tokio::test]
async fn a_paused_ledger_hands_out_no_claims_until_resumed() {
    let env = env().await;
    let s = &env.store;
    ledger_with_rows(s, "l", &["a", "b", "c"]).await;
    let paused = s.pause_ledger(&operator_pause("l", None)).await.unwrap();
    let p = paused.pause.as_ref().expect("paused");
    assert_eq!((p.reason, p.actor.as_str()), (PauseReason::Operator, "ops"));

    assert_paused(s.claim_rows("l", &claim_req(10)).await.unwrap_err());
    let mut with_id = claim_req(10);
    with_id.request_id = Some("retry-1".into());
    assert_paused(s.claim_rows("l", &with_id).await.unwrap_err());
    let sum = s.summarize("l").await.unwrap();
    assert_eq!((sum.counts.pending, sum.counts.running), (3, 0));
    assert_eq!(sum.attempts_total, 0);
    assert_queue_consistent(s).await;

    let resumed = s.resume_ledger("l", None, "ops").await.unwrap();
    assert!(resumed.pause.is_none());
    let g = claim(s, "l", 10)
        .await
        .expect("claims again after the resume");
    assert_eq!(g.rows.len(), 3);
    assert_queue_consistent(s).await;
}

/// The pause is read from the database by the claim itself, not from a
/// replica's cache: a second store (another server replica) that has just
/// read the ledger as ACTIVE hands out nothing once the pause is committed,
/// and claims again at once after the resume.
#[tokio::test]
async fn a_pause_through_one_replica_stops_claims_on_another_at_once() {
    let db = TestDb::new().await;
    let a = Store::connect(&ConnectOptions::new(db.url()))
        .await
        .unwrap();
    a.migrate().await.unwrap();
    let b = Store::connect(&ConnectOptions::new(db.url()))
        .await
        .unwrap();
    ledger_with_rows(&a, "l", &["a", "b"]).await;
    // B caches the ledger as active.
    assert!(b.get_ledger("l").await.unwrap().pause.is_none());

    a.pause_ledger(&operator_pause("l", None)).await.unwrap();
    assert_paused(b.claim_rows("l", &claim_req(1)).await.unwrap_err());

    a.resume_ledger("l", None, "ops").await.unwrap();
    let g = claim(&b, "l", 1)
        .await
        .expect("B claims right after the resume");
    assert_eq!(g.rows.len(), 1);
}

/// Work already out when a ledger is paused runs to its end: a live claim
/// is extended and its report accepted; a job made before the pause is
/// submitted and finished. A claim not yet made into a job cannot become
/// one (LEDGER_PAUSED) and is released without spending an attempt.
#[tokio::test]
async fn work_already_out_finishes_while_paused_and_no_new_job_is_made() {
    let env = env().await;
    let s = &env.store;
    ledger_with_rows(s, "l", &["a", "b", "c", "d"]).await;
    let reported = claim(s, "l", 1).await.expect("a claim to report");
    let with_job = claim(s, "l", 1).await.expect("a claim with a job");
    let job = s
        .create_job("l", with_job.claim.token, "worker")
        .await
        .unwrap();
    let unsent = claim(s, "l", 1).await.expect("a claim not yet a job");

    s.pause_ledger(&operator_pause("l", None)).await.unwrap();

    // The live claim: extended, reported.
    s.extend_claim("l", reported.claim.token, None)
        .await
        .unwrap();
    let key = reported.rows[0].key.clone();
    let r = s
        .report("l", reported.claim.token, &[success(&key, 10)], "worker")
        .await
        .unwrap();
    assert_eq!(r.verdicts[0].verdict, Verdict::Succeeded);

    // The job made before the pause: submitted, finished, its row settled.
    s.mark_submitted(
        "l",
        &job.public_id,
        with_job.claim.token,
        "batches/x",
        "files/x",
        "worker",
    )
    .await
    .unwrap();
    let job_key = with_job.rows[0].key.clone();
    s.report(
        "l",
        with_job.claim.token,
        &[success(&job_key, 10)],
        "worker",
    )
    .await
    .unwrap();
    let finished = s
        .finish_job(
            "l",
            &job.public_id,
            with_job.claim.token,
            &FinishRequest {
                final_state: FinalState::Succeeded,
                output_file: "files/out".into(),
                error: String::new(),
                not_run: Vec::new(),
            },
            "worker",
        )
        .await
        .unwrap();
    assert_eq!(finished.state, JobState::Reconciled);

    // The claim made before the pause cannot become a job; released, its
    // row is untouched by attempts.
    assert_paused(
        s.create_job("l", unsent.claim.token, "worker")
            .await
            .unwrap_err(),
    );
    let (released, _) = s
        .release_claim("l", unsent.claim.token, None, "worker")
        .await
        .unwrap();
    assert_eq!(released, 1);
    let given_back = s.get_row("l", &unsent.rows[0].key).await.unwrap();
    assert_eq!(
        (given_back.status, given_back.total),
        (RowStatus::Pending, 0)
    );

    // Enrolling still works; nothing more is claimed.
    s.enroll("l", &[row("e", &[])]).await.unwrap();
    assert!(s.claim_rows("l", &claim_req(10)).await.is_err());
    let sum = s.summarize("l").await.unwrap();
    assert_eq!(
        (sum.counts.succeeded, sum.counts.pending, sum.counts.running),
        (2, 3, 0)
    );
    assert_queue_consistent(s).await;
}

/// Pause and resume are idempotent: a second pause keeps the first one's
/// reason, actor and time and changes nothing (same etag, no event); a
/// resume of an active ledger changes nothing either.
#[tokio::test]
async fn pause_and_resume_are_idempotent() {
    let env = env().await;
    let s = &env.store;
    let created = ledger_with_rows(s, "l", &["a"]).await;
    let active = s.resume_ledger("l", None, "ops").await.unwrap();
    assert_eq!(active.etag, created.etag);

    let first = s.pause_ledger(&operator_pause("l", None)).await.unwrap();
    assert_eq!(first.etag, created.etag + 1);
    let again = s
        .pause_ledger(&PauseLedger {
            ledger: "l",
            reason: PauseReason::SpendCap,
            message: "another reason",
            actor: "someone-else",
            etag: None,
        })
        .await
        .unwrap();
    assert_eq!(again.etag, first.etag);
    assert_eq!(again.pause, first.pause);

    let events = s.job_events_after(None, 0, 100).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [JobEventKind::LedgerPaused]);
}

/// A stale etag is ABORTED and writes nothing; the current etag works.
#[tokio::test]
async fn a_stale_etag_is_aborted_and_changes_nothing() {
    let env = env().await;
    let s = &env.store;
    let created = ledger_with_rows(s, "l", &["a"]).await;
    let stale = Some(created.etag - 1);
    assert!(matches!(
        s.pause_ledger(&operator_pause("l", stale)).await,
        Err(StoreError::Aborted(_))
    ));
    assert!(s.get_ledger("l").await.unwrap().pause.is_none());
    assert!(s.job_events_after(None, 0, 100).await.unwrap().is_empty());

    let paused = s
        .pause_ledger(&operator_pause("l", Some(created.etag)))
        .await
        .unwrap();
    assert!(matches!(
        s.resume_ledger("l", Some(created.etag), "ops").await,
        Err(StoreError::Aborted(_))
    ));
    assert!(s.get_ledger("l").await.unwrap().pause.is_some());
    s.resume_ledger("l", Some(paused.etag), "ops")
        .await
        .unwrap();
}

/// A ledger being deleted cannot be paused or resumed (NOT_FOUND, as for
/// every other work call), and an unknown ledger neither.
#[tokio::test]
async fn a_deleting_or_unknown_ledger_is_not_found() {
    let env = env().await;
    let s = &env.store;
    ledger_with_rows(s, "l", &["a"]).await;
    s.delete_ledger(&DeleteLedger {
        ledger: "l",
        force: false,
        etag: None,
        content_etag: None,
        actor: "ops",
    })
    .await
    .unwrap();
    for e in [
        s.pause_ledger(&operator_pause("l", None))
            .await
            .unwrap_err(),
        s.resume_ledger("l", None, "ops").await.unwrap_err(),
        s.resume_ledger("nope", None, "ops").await.unwrap_err(),
    ] {
        assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    }
}

/// Pauses and resumes are in the job event log, in order with the jobs'
/// events, with the ledger and the pause; a ledger's watchers see them and
/// another ledger's do not.
#[tokio::test]
async fn pauses_and_resumes_are_job_events_in_sequence() {
    let env = env().await;
    let s = &env.store;
    ledger_with_rows(s, "l", &["a", "b"]).await;
    ledger_with_rows(s, "other", &["x"]).await;
    let g = claim(s, "l", 1).await.unwrap();
    s.create_job("l", g.claim.token, "worker").await.unwrap();
    s.pause_ledger(&operator_pause("l", None)).await.unwrap();
    s.resume_ledger("l", None, "ops-2").await.unwrap();

    let l = s.ledger_id("l").await.unwrap();
    let mine = s.job_events_after(Some(l), 0, 100).await.unwrap();
    let kinds: Vec<_> = mine.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            JobEventKind::Created,
            JobEventKind::LedgerPaused,
            JobEventKind::LedgerResumed
        ]
    );
    assert!(mine.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(mine.iter().all(|e| e.ledger == "l"));
    assert!(mine[0].job.is_some() && mine[1].job.is_none() && mine[2].job.is_none());
    let p = mine[1].pause.as_ref().expect("the pause");
    assert_eq!(
        (p.reason, p.message.as_str(), p.actor.as_str()),
        (PauseReason::Operator, "provider incident", "ops")
    );
    assert_eq!(mine[2].actor, "ops-2");
    assert!(mine[2].pause.is_none());

    let other = s.ledger_id("other").await.unwrap();
    assert!(
        s.job_events_after(Some(other), 0, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

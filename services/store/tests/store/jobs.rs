//! Jobs, adoption, locks, the job event log and alert crossings against a
//! real PostgreSQL, one database per test. Each test names the invariant it
//! checks. Leases are expired by moving `expire_time` into the past on the
//! database clock; nothing sleeps.

use crate::common;

use tally_store::types::NotCreated;

use common::*;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;
use tally_core::alert::AlertKind;
use tally_core::job::{FinalState, JobState};
use tally_core::policy::Policy;
use tally_core::status::RowStatus;
use tally_store::event_log::{Log, Wake};
use tally_store::types::{
    ClaimGrant, FinishRequest, JobEventKind, JobRecord, RedriveTarget, RowFilter, Verdict,
};
use tally_store::{Store, StoreError};
use uuid::Uuid;

async fn ledger_with(env: &Env, name: &str, policy: Policy) {
    env.store.create_ledger(name, &policy).await.unwrap();
}

async fn enroll_keys(env: &Env, ledger: &str, keys: &[&str]) {
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    env.store.enroll(ledger, &rows).await.unwrap();
}

fn keys_of(g: &ClaimGrant) -> Vec<String> {
    let mut k: Vec<String> = g.rows.iter().map(|r| r.key.clone()).collect();
    k.sort();
    k
}

async fn new_job(env: &Env, ledger: &str, max_rows: i64) -> (ClaimGrant, JobRecord) {
    let g = claim(&env.store, ledger, max_rows)
        .await
        .expect("rows to claim");
    let job = env
        .store
        .create_job(ledger, g.claim.token, "worker-a")
        .await
        .unwrap();
    (g, job)
}

/// A ledger `l` of `keys`, and one job of them whose create was attempted
/// (CREATING, input file `files/in`).
async fn creating_job(env: &Env, keys: &[&str]) -> (ClaimGrant, JobRecord) {
    ledger_with(env, "l", fast_policy()).await;
    enroll_keys(env, "l", keys).await;
    let (g, job) = new_job(env, "l", 10).await;
    mark_creating(env, &g, &job).await.unwrap();
    (g, job)
}

/// MarkCreating of `job` under `g`'s claim, input file `files/in`.
async fn mark_creating(
    env: &Env,
    g: &ClaimGrant,
    job: &JobRecord,
) -> Result<JobRecord, StoreError> {
    env.store
        .mark_creating(
            "l",
            &job.public_id,
            g.claim.token,
            "files/in",
            &Default::default(),
            "w",
        )
        .await
}

fn precondition_reason(e: &StoreError) -> &'static str {
    match e {
        StoreError::FailedPrecondition { reason, .. } => reason,
        other => panic!("expected FAILED_PRECONDITION, got {other:?}"),
    }
}

fn finish(state: FinalState) -> FinishRequest {
    FinishRequest {
        final_state: state,
        output_file: String::new(),
        error: String::new(),
        not_run: Vec::new(),
    }
}

/// (claim token, actor, rule) of every attempt of a row, oldest first.
async fn attempts_of(
    store: &Store,
    ledger: &str,
    key: &str,
) -> Vec<(Option<Uuid>, String, String)> {
    store
        .get_row(ledger, key)
        .await
        .unwrap()
        .history
        .into_iter()
        .map(|a| (a.claim, a.actor, a.rule))
        .collect()
}

async fn kinds(store: &Store, job: &JobRecord) -> Vec<JobEventKind> {
    store
        .job_events_after(None, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.job.as_ref().is_some_and(|j| j.id == job.id))
        .map(|e| e.kind)
        .collect()
}

/// A job holds exactly its claim's rows (rows and claim point at it), and
/// CreateJob for the same claim again answers the same job.
#[tokio::test]
async fn a_job_holds_its_claims_rows_and_creating_it_again_answers_the_same_job() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let (g, job) = new_job(&env, "l", 2).await;
    assert_eq!(job.state, JobState::Preparing);
    assert_eq!((job.counts.rows, job.unreported), (2, 2));
    assert_eq!(job.owner, "test-worker");
    assert_eq!(job.claim, g.claim.token);
    assert!(job.lease_expire_time.is_some());

    let again = env
        .store
        .create_job("l", g.claim.token, "worker-a")
        .await
        .unwrap();
    assert_eq!(again.public_id, job.public_id);

    let filter = RowFilter {
        job: Some(job.public_id.clone()),
        ..RowFilter::default()
    };
    let rows = env
        .store
        .list_rows("l", &filter, None, 100, None)
        .await
        .unwrap()
        .rows;
    let mut held: Vec<_> = rows.into_iter().map(|r| r.key).collect();
    held.sort();
    assert_eq!(held, keys_of(&g));
    let claim = env
        .store
        .extend_claim("l", g.claim.token, None)
        .await
        .unwrap();
    assert_eq!(claim.job.as_deref(), Some(job.public_id.as_str()));
    assert_eq!(kinds(&env.store, &job).await, [JobEventKind::Created]);
    assert_eq!(
        env.store.get_job("l", &job.public_id).await.unwrap().id,
        job.id
    );
}

/// The ledger's max_active_jobs holds under concurrency: of many CreateJob
/// calls racing, exactly the limit succeed; the rest are RESOURCE_EXHAUSTED
/// with a retry delay. Closing a job frees a place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_never_exceed_max_active_jobs() {
    let env = env().await;
    let policy = Policy {
        max_active_jobs: 2,
        ..fast_policy()
    };
    ledger_with(&env, "l", policy).await;
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    enroll_keys(&env, "l", &refs).await;
    let mut grants = Vec::new();
    while let Some(g) = claim(&env.store, "l", 1).await {
        grants.push(g);
    }
    assert_eq!(grants.len(), 8);
    let mut tasks = Vec::new();
    for g in &grants {
        let store = env.store.clone();
        let token = g.claim.token;
        tasks.push(tokio::spawn(async move {
            store.create_job("l", token, "w").await
        }));
    }
    let mut made = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(job) => made.push(job),
            Err(StoreError::ResourceExhausted {
                retry_after_secs, ..
            }) => {
                assert!(retry_after_secs > 0);
                refused += 1;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!((made.len(), refused), (2, 6));

    let open = &made[0];
    env.store
        .finish_job(
            "l",
            &open.public_id,
            open.claim,
            &finish(FinalState::Failed),
            "w",
        )
        .await
        .unwrap();
    let waiting = grants
        .iter()
        .find(|g| made.iter().all(|j| j.claim != g.claim.token))
        .unwrap();
    env.store
        .create_job("l", waiting.claim.token, "w")
        .await
        .unwrap();
}

/// MarkSubmitted records the batch once: the same values again change
/// nothing; other values, or another claim than the job's, are refused.
#[tokio::test]
async fn mark_submitted_records_the_batch_once() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b"]).await;
    let (g, job) = new_job(&env, "l", 1).await;
    let (other, _) = new_job(&env, "l", 1).await;
    let t = g.claim.token;

    let s = env
        .store
        .mark_submitted("l", &job.public_id, t, "batches/b1", "files/in1", "w")
        .await
        .unwrap();
    assert_eq!(s.state, JobState::Submitted);
    assert_eq!(s.batch.as_deref(), Some("batches/b1"));
    assert!(s.submit_time.is_some());

    let same = env
        .store
        .mark_submitted("l", &job.public_id, t, "batches/b1", "files/in1", "w")
        .await
        .unwrap();
    assert_eq!(same.update_time, s.update_time);

    for (batch, file) in [("batches/b2", "files/in1"), ("batches/b1", "files/in2")] {
        let e = env
            .store
            .mark_submitted("l", &job.public_id, t, batch, file, "w")
            .await
            .unwrap_err();
        assert_eq!(precondition_reason(&e), "JOB_ALREADY_SUBMITTED");
    }
    let e = env
        .store
        .mark_submitted(
            "l",
            &job.public_id,
            other.claim.token,
            "batches/b1",
            "files/in1",
            "w",
        )
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "NOT_JOB_CLAIM");
    assert_eq!(
        kinds(&env.store, &job).await,
        [JobEventKind::Created, JobEventKind::StateChanged]
    );
}

/// The heart of adoption: worker A submits a job and dies. Its rows are not
/// rescued (they are at the provider) and nobody can claim them; worker B
/// adopts the job with a new claim; A's late reports are STALE; every row
/// ends with exactly one attempt, each made under the claim that reported
/// it, and no row was ever resubmitted (no third claim ever held one).
#[tokio::test]
async fn an_adopted_job_is_reported_exactly_once_and_never_resubmitted() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let (a, job) = new_job(&env, "l", 10).await;
    env.store
        .mark_submitted(
            "l",
            &job.public_id,
            a.claim.token,
            "batches/x",
            "files/x",
            "w",
        )
        .await
        .unwrap();
    env.store
        .report("l", a.claim.token, &[success("a", 10)], "worker-a")
        .await
        .unwrap();
    expire(&env.store, &a).await;

    // The sweeper leaves a submitted job's claim alone, and nothing is
    // claimable.
    let r = env.store.rescue_expired(None).await.unwrap();
    assert_eq!((r.rows, r.abandoned_jobs), (0, 0));
    assert!(claim(&env.store, "l", 10).await.is_none());
    assert_eq!(
        env.store.get_row("l", "b").await.unwrap().status,
        RowStatus::Running
    );

    let adopted = env
        .store
        .adopt_jobs("l", "worker-b", 10, None, "worker-b")
        .await
        .unwrap();
    assert_eq!(adopted.adopted.len(), 1);
    assert_eq!(adopted.released_jobs, 0);
    let b = &adopted.adopted[0];
    assert_eq!(b.keys, ["b", "c"]);
    assert_eq!(b.job.public_id, job.public_id);
    assert_eq!(b.job.adoptions, 1);
    assert_eq!(b.job.owner, "worker-b");
    assert_eq!(b.job.batch.as_deref(), Some("batches/x"));
    assert_eq!(b.job.claim, b.claim.token);
    assert_eq!(b.claim.held, 2);
    assert_ne!(b.claim.token, a.claim.token);
    // Adoption is not repeated while B's lease runs.
    let none = env
        .store
        .adopt_jobs("l", "worker-c", 10, None, "worker-c")
        .await
        .unwrap();
    assert!(none.adopted.is_empty());

    let late = env
        .store
        .report(
            "l",
            a.claim.token,
            &[success("a", 1), success("b", 1)],
            "worker-a",
        )
        .await
        .unwrap();
    let verdicts: Vec<_> = late.verdicts.iter().map(|v| v.verdict).collect();
    assert_eq!(verdicts, [Verdict::Duplicate, Verdict::Stale]);
    let e = env
        .store
        .finish_job(
            "l",
            &job.public_id,
            a.claim.token,
            &finish(FinalState::Succeeded),
            "worker-a",
        )
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "NOT_JOB_CLAIM");

    let ok = env
        .store
        .report(
            "l",
            b.claim.token,
            &[success("b", 1), success("c", 1)],
            "worker-b",
        )
        .await
        .unwrap();
    assert_eq!(ok.held, 0);
    let done = env
        .store
        .finish_job(
            "l",
            &job.public_id,
            b.claim.token,
            &finish(FinalState::Succeeded),
            "worker-b",
        )
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Reconciled);
    assert_eq!(done.summary(), "done=3 retryable=0 permanent=0 missing=0");

    assert_eq!(
        attempts_of(&env.store, "l", "a").await,
        [(Some(a.claim.token), "worker-a".into(), "success".into())]
    );
    for key in ["b", "c"] {
        assert_eq!(
            attempts_of(&env.store, "l", key).await,
            [(Some(b.claim.token), "worker-b".into(), "success".into())]
        );
    }
    let claims: Vec<Uuid> = sqlx::query_scalar("SELECT token FROM claims ORDER BY create_time")
        .fetch_all(env.store.pool())
        .await
        .unwrap();
    assert_eq!(claims, [a.claim.token, b.claim.token]);
    assert_eq!(
        kinds(&env.store, &job).await,
        [
            JobEventKind::Created,
            JobEventKind::StateChanged,
            JobEventKind::Progress,
            JobEventKind::Adopted,
            JobEventKind::Progress,
            JobEventKind::StateChanged,
        ]
    );
    assert_queue_consistent(&env.store).await;
}

/// A job whose owner died while PREPARING never sent its rows: they go back
/// to runnable without an attempt, the job is CANCELLED with the reason,
/// and the dead owner's late MarkSubmitted is refused (it must cancel the
/// batch it made).
#[tokio::test]
async fn a_job_killed_while_preparing_frees_its_rows_without_an_attempt() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    expire(&env.store, &g).await;

    let r = env
        .store
        .adopt_jobs("l", "worker-b", 10, None, "worker-b")
        .await
        .unwrap();
    assert_eq!((r.adopted.len(), r.released_jobs), (0, 1));
    let j = env.store.get_job("l", &job.public_id).await.unwrap();
    assert_eq!(j.state, JobState::Cancelled);
    assert!(j.is_closed());
    assert!(j.error.contains("lease expired"), "{}", j.error);
    for key in ["a", "b"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!((row.status, row.total), (RowStatus::Pending, 0));
        assert!(row.history.is_empty());
    }
    let e = env
        .store
        .mark_submitted("l", &job.public_id, g.claim.token, "batches/late", "f", "w")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_CLOSED");
    let again = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(keys_of(&again), ["a", "b"]);
    assert_eq!(again.rows[0].total, 0);
    assert_queue_consistent(&env.store).await;
}

/// Once a create may have reached the provider (CREATING), the job's rows
/// are never released unworked: not by ReleaseClaim, not by the sweeper
/// when the owner dies. The job is adopted instead, and only MarkSubmitted
/// (the batch was found) or MarkNotCreated (it was searched for and not
/// found) resolves it; the latter gives the rows back without an attempt.
#[tokio::test]
async fn a_creating_job_is_adopted_and_resolved_never_released() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c", "d"]).await;

    // Owner A: MarkCreating, then dies. The create may have happened.
    let (ga, ja) = new_job(&env, "l", 2).await;
    let creating = env
        .store
        .mark_creating(
            "l",
            &ja.public_id,
            ga.claim.token,
            "files/in-a",
            &Default::default(),
            "worker-a",
        )
        .await
        .unwrap();
    assert_eq!(creating.state, JobState::Creating);
    assert_eq!(creating.input_file, "files/in-a");
    let attempted = creating.create_attempt_time.expect("attempt time recorded");
    let again = env
        .store
        .mark_creating(
            "l",
            &ja.public_id,
            ga.claim.token,
            "files/in-a",
            &Default::default(),
            "worker-a",
        )
        .await
        .unwrap();
    // A retry changes nothing but the attempt time, which never goes back
    // (it counts from the last call: one made before any create is sent).
    assert_eq!(
        (again.state, again.input_file.as_str()),
        (JobState::Creating, "files/in-a")
    );
    assert!(again.create_attempt_time >= Some(attempted));
    let e = env
        .store
        .release_claim("l", ga.claim.token, None, "worker-a")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_CREATE_UNRESOLVED");
    expire(&env.store, &ga).await;
    let swept = env.store.rescue_expired(None).await.unwrap();
    assert_eq!((swept.abandoned_jobs, swept.released_rows), (0, 0));
    assert!(claim(&env.store, "l", 10).await.is_some_and(|g| {
        // Only the two rows A never held are claimable.
        keys_of(&g).iter().all(|k| !keys_of(&ga).contains(k))
    }));

    // Worker B adopts it, still CREATING, with a new claim on the same rows.
    let r = env
        .store
        .adopt_jobs("l", "worker-b", 10, None, "worker-b")
        .await
        .unwrap();
    let adopted = r
        .adopted
        .iter()
        .find(|a| a.job.public_id == ja.public_id)
        .expect("the CREATING job is adopted");
    assert_eq!(adopted.job.state, JobState::Creating);
    let mut held = adopted.keys.clone();
    held.sort();
    assert_eq!(held, keys_of(&ga));
    let token_b = adopted.claim.token;
    let e = env
        .store
        .finish_job(
            "l",
            &ja.public_id,
            token_b,
            &finish(FinalState::Failed),
            "worker-b",
        )
        .await
        .unwrap_err();
    assert_eq!(
        precondition_reason(&e),
        "JOB_CREATE_UNRESOLVED",
        "failing would resend"
    );

    // B searched and found nothing: the rows go back, no attempt counted.
    let closed = env
        .store
        .mark_not_created(
            "l",
            &ja.public_id,
            token_b,
            &NotCreated {
                reason: "not listed",
                ..Default::default()
            },
            "worker-b",
        )
        .await
        .unwrap();
    assert_eq!(closed.state, JobState::Cancelled);
    assert!(closed.is_closed());
    assert!(closed.error.contains("never created"), "{}", closed.error);
    for key in keys_of(&ga) {
        let row = env.store.get_row("l", &key).await.unwrap();
        assert_eq!((row.status, row.total), (RowStatus::Pending, 0), "{key}");
    }
    let repeat = env
        .store
        .mark_not_created(
            "l",
            &ja.public_id,
            token_b,
            &NotCreated {
                reason: "not listed",
                ..Default::default()
            },
            "worker-b",
        )
        .await
        .unwrap();
    assert_eq!(repeat.state, JobState::Cancelled);
    assert_queue_consistent(&env.store).await;
}

/// Invariant: a refusal's pause commits with the job it closes, so it is
/// never older than a resume that came after the close. Seen from outside
/// (a worker, an operator), the ledger is paused as soon as the job is
/// closed, and the same MarkNotCreated repeated (an answer lost and
/// retried) after the operator resumed changes nothing. Until the pause had
/// its own transaction after the close, the repeat (or a resume between the
/// two) left the ledger paused again by a refusal the operator had dealt
/// with.
#[tokio::test]
async fn a_refusals_pause_commits_with_the_close_and_a_repeat_does_not_pause_again() {
    use tally_core::pause::PauseReason;
    let env = env().await;
    let (g, job) = creating_job(&env, &["a", "b"]).await;
    let t = g.claim.token;
    let refused = NotCreated {
        reason: "the provider answered 403: billing is not enabled",
        pause: Some(PauseReason::Billing),
        ..Default::default()
    };
    let closed = env
        .store
        .mark_not_created("l", &job.public_id, t, &refused, "w")
        .await
        .unwrap();
    assert_eq!(closed.state, JobState::Cancelled);
    let pause = env
        .store
        .get_ledger("l")
        .await
        .unwrap()
        .pause
        .expect("paused with the close");
    assert_eq!(pause.reason, PauseReason::Billing);
    assert!(
        pause.message.contains("billing is not enabled"),
        "{}",
        pause.message
    );

    let resumed = env.store.resume_ledger("l", None, "ops").await.unwrap();
    assert!(resumed.pause.is_none());
    let repeat = env
        .store
        .mark_not_created("l", &job.public_id, t, &refused, "w")
        .await
        .unwrap();
    assert_eq!(repeat.state, JobState::Cancelled);
    let after = env.store.get_ledger("l").await.unwrap().pause;
    assert!(
        after.is_none(),
        "a repeated refusal, older than the resume, pauses nothing: {after:?}"
    );
    for key in ["a", "b"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!((row.status, row.total), (RowStatus::Pending, 0), "{key}");
    }
    assert!(
        claim(&env.store, "l", 10).await.is_some(),
        "claimable again"
    );
    assert_queue_consistent(&env.store).await;
}

/// Invariant: a job never stays behind its batch. The batch's first event
/// can be ingested while the MarkSubmitted that links job and batch is
/// still open: the ingest creates the operation and finds no job, and
/// MarkSubmitted finds no operation to catch up with. Here a transaction
/// holds the link uncommitted (as MarkSubmitted does) while the
/// `completed` webhook is ingested, then commits. The next poll of the
/// batch (the same state, so dropped as stale) moves the job to SUCCEEDED;
/// until it did, the job stayed SUBMITTED for good and its rows were held
/// until the batch deadline.
#[tokio::test]
async fn a_first_event_that_races_mark_submitted_moves_the_job_at_the_next_poll() {
    use tally_core::operation::{OpEvent, OpState};
    use tally_store::operations::{EventSource, IncomingEvent};
    let env = env().await;
    let (_, job) = creating_job(&env, &["a", "b"]).await;
    let event = |source, event_id: Option<&str>| IncomingEvent {
        operation: "batches/batch_r".into(),
        source,
        event_id: event_id.map(Into::into),
        raw_state: "completed".into(),
        event: OpEvent {
            state: OpState::Succeeded,
            update_time: Some(1_000_000),
        },
        output_file: Some("file-out".into()),
        error_code: None,
        error_message: None,
    };

    let mut submitting = env.store.pool().begin().await.unwrap();
    sqlx::query(
        "UPDATE jobs SET batch = 'batches/batch_r', state = $2, submit_time = now()
         WHERE public_id = $1",
    )
    .bind(&job.public_id)
    .bind(JobState::Submitted.code())
    .execute(&mut *submitting)
    .await
    .unwrap();
    let first = env
        .store
        .ingest_event(&event(EventSource::Webhook, Some("wh_1")))
        .await
        .unwrap();
    assert!(first.decision.is_applied());
    assert_eq!(first.job, None, "the link is not committed yet");
    submitting.commit().await.unwrap();
    assert_eq!(
        env.store.get_job("l", &job.public_id).await.unwrap().state,
        JobState::Submitted,
        "behind its batch, which is completed"
    );

    let poll = env
        .store
        .ingest_event(&event(EventSource::Poller, None))
        .await
        .unwrap();
    assert!(!poll.decision.is_applied(), "the same state: dropped");
    let moved = poll.job.expect("the poll catches the job up");
    assert_eq!(
        (moved.from, moved.to),
        (JobState::Submitted, JobState::Succeeded)
    );
    assert_eq!(
        env.store.get_job("l", &job.public_id).await.unwrap().state,
        JobState::Succeeded
    );
    // Caught up once: a further poll or webhook moves nothing.
    let again = env
        .store
        .ingest_event(&event(EventSource::Webhook, Some("wh_1")))
        .await
        .unwrap();
    assert_eq!(again.job, None);
}

/// A CREATING job whose batch is found is recorded from CREATING as from
/// PREPARING, and then behaves as any submitted job.
#[tokio::test]
async fn a_creating_job_whose_batch_is_found_is_submitted() {
    let env = env().await;
    let (g, job) = creating_job(&env, &["a"]).await;
    let j = env
        .store
        .mark_submitted(
            "l",
            &job.public_id,
            g.claim.token,
            "batches/b1",
            "files/in",
            "w",
        )
        .await
        .unwrap();
    assert_eq!(
        (j.state, j.batch.as_deref()),
        (JobState::Submitted, Some("batches/b1"))
    );
    let e = env
        .store
        .mark_not_created(
            "l",
            &job.public_id,
            g.claim.token,
            &NotCreated {
                reason: "x",
                ..Default::default()
            },
            "w",
        )
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_ALREADY_SUBMITTED");
    let e = mark_creating(&env, &g, &job).await.unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_ALREADY_SUBMITTED");
}

/// The background sweeper treats a PREPARING job's expired claim the same
/// way: rows released, no attempt, job closed (and no longer active).
#[tokio::test]
async fn the_sweeper_abandons_preparing_jobs_without_counting_an_attempt() {
    let env = env().await;
    let policy = Policy {
        max_active_jobs: 1,
        ..fast_policy()
    };
    ledger_with(&env, "l", policy).await;
    enroll_keys(&env, "l", &["a"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    expire(&env.store, &g).await;
    let r = env.store.rescue_expired(None).await.unwrap();
    assert_eq!((r.rows, r.abandoned_jobs, r.released_rows), (0, 1, 1));
    assert_eq!(
        env.store.get_job("l", &job.public_id).await.unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(env.store.summarize("l").await.unwrap().active_jobs, 0);
    // The place is free again.
    new_job(&env, "l", 10).await;
}

/// Ledger `l` with rows a, b, c in one job submitted as `batches/{batch}`,
/// `a` reported a success: the environment, the job and its claim token.
async fn submitted_abc_with_a_reported(batch: &str) -> (Env, JobRecord, Uuid) {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    let t = g.claim.token;
    env.store
        .mark_submitted(
            "l",
            &job.public_id,
            t,
            &format!("batches/{batch}"),
            &format!("files/{batch}"),
            "w",
        )
        .await
        .unwrap();
    env.store
        .report("l", t, &[success("a", 1)], "w")
        .await
        .unwrap();
    (env, job, t)
}

/// An expired batch whose provider names the rows that never ran (OpenAI's
/// `batch_expired` lines): those rows go back PENDING with no attempt; the
/// job's other unreported rows are failed by the batch (`job_failed`, an
/// infra attempt each), as without the list.
#[tokio::test]
async fn rows_that_never_ran_come_back_without_an_attempt() {
    let (env, job, t) = submitted_abc_with_a_reported("x").await;
    let req = FinishRequest {
        final_state: FinalState::Expired,
        output_file: String::new(),
        error: "the batch ended expired".into(),
        not_run: vec!["b".into(), "not-in-the-job".into()],
    };
    let done = env
        .store
        .finish_job("l", &job.public_id, t, &req, "w")
        .await
        .unwrap();
    assert_eq!(done.final_state, Some(FinalState::Expired));
    let b = env.store.get_row("l", "b").await.unwrap();
    assert_eq!((b.status, b.total), (RowStatus::Pending, 0), "{b:?}");
    let c = env.store.get_row("l", "c").await.unwrap();
    assert_eq!(
        (c.status, c.rule.as_str()),
        (RowStatus::Retryable, "job_failed")
    );
    assert_eq!(c.total, 1);
    assert_eq!(
        env.store.get_row("l", "a").await.unwrap().status,
        RowStatus::Succeeded
    );
}

/// A job that failed as a whole turns the rows it still holds RETRYABLE
/// with rule `job_failed`, an infra attempt each; rows reported before are
/// untouched. Counts and summary are fixed, and repeating the finish is a
/// no-op while a different one is refused.
/// The rows it was made with stay `in_job` once a later job carries them.
#[tokio::test]
async fn a_failed_job_turns_its_unreported_rows_retryable() {
    let (env, job, t) = submitted_abc_with_a_reported("f").await;
    let req = FinishRequest {
        final_state: FinalState::Failed,
        output_file: String::new(),
        error: "batch failed: quota".into(),
        not_run: Vec::new(),
    };
    let done = env
        .store
        .finish_job("l", &job.public_id, t, &req, "w")
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Reconciled);
    assert_eq!(done.final_state, Some(FinalState::Failed));
    assert_eq!(done.error, "batch failed: quota");
    assert_eq!(done.unreported, 0);
    assert_eq!(done.summary(), "done=1 retryable=2 permanent=0 missing=0");
    for key in ["b", "c"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!(row.status, RowStatus::Retryable);
        assert_eq!(row.rule, "job_failed");
        assert_eq!((row.failures.infra, row.total), (1, 1));
        assert_eq!(row.history[0].job.as_deref(), Some(job.public_id.as_str()));
        assert_eq!(row.history[0].batch.as_deref(), Some("batches/f"));
        assert!(row.last_error.contains("quota"), "{}", row.last_error);
    }
    assert_eq!(
        env.store.get_row("l", "a").await.unwrap().status,
        RowStatus::Succeeded
    );
    let same = env
        .store
        .finish_job("l", &job.public_id, t, &req, "w")
        .await
        .unwrap();
    assert_eq!(same.update_time, done.update_time);
    let e = env
        .store
        .finish_job("l", &job.public_id, t, &finish(FinalState::Succeeded), "w")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_CLOSED");
    // Its rows are claimable again.
    let again = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(keys_of(&again), ["b", "c"]);
    // Once b and c are in a second job, the first is their latest job no
    // more, but they stay among the rows it was made with (`in_job`).
    let second = env
        .store
        .create_job("l", again.claim.token, "w")
        .await
        .unwrap();
    let keys = |filter: RowFilter| {
        let store = env.store.clone();
        async move {
            let rows = store.list_rows("l", &filter, None, 100, None).await;
            let mut keys: Vec<String> = rows.unwrap().rows.into_iter().map(|r| r.key).collect();
            keys.sort();
            keys
        }
    };
    let in_job = |id: &str| RowFilter {
        in_job: Some(id.to_string()),
        ..RowFilter::default()
    };
    let latest = |id: &str| RowFilter {
        job: Some(id.to_string()),
        ..RowFilter::default()
    };
    assert_eq!(keys(in_job(&job.public_id)).await, ["a", "b", "c"]);
    assert_eq!(keys(latest(&job.public_id)).await, ["a"]);
    assert_eq!(keys(in_job(&second.public_id)).await, ["b", "c"]);
    assert_eq!(keys(latest(&second.public_id)).await, ["b", "c"]);
    assert!(keys(in_job("no-such-job")).await.is_empty());
    assert_queue_consistent(&env.store).await;
}

/// After a successful batch, rows the output did not contain come back
/// RETRYABLE with rule `missing_from_output` (a provider attempt), and the
/// job's counts say how many were missing.
#[tokio::test]
async fn rows_missing_from_a_successful_batch_come_back_retryable() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c", "d"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    let t = g.claim.token;
    env.store
        .mark_submitted("l", &job.public_id, t, "batches/m", "files/m", "w")
        .await
        .unwrap();
    env.store
        .report(
            "l",
            t,
            &[success("a", 1), success("b", 1), failure("c", 400)],
            "w",
        )
        .await
        .unwrap();
    let req = FinishRequest {
        final_state: FinalState::Succeeded,
        output_file: "files/out".into(),
        error: String::new(),
        not_run: Vec::new(),
    };
    let done = env
        .store
        .finish_job("l", &job.public_id, t, &req, "w")
        .await
        .unwrap();
    assert_eq!(done.summary(), "done=2 retryable=1 permanent=1 missing=1");
    assert_eq!(done.output_file, "files/out");
    let d = env.store.get_row("l", "d").await.unwrap();
    assert_eq!(
        (d.status, d.rule.as_str(), d.failures.provider),
        (RowStatus::Retryable, "missing_from_output", 1)
    );
    let e = env.store.extend_claim("l", t, None).await.unwrap_err();
    assert_eq!(precondition_reason(&e), "CLAIM_DONE");
}

/// FinishJob is fenced by a live claim: after the lease ran out the owner
/// must adopt the job again before it may close it.
#[tokio::test]
async fn finishing_needs_the_jobs_live_claim() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    env.store
        .mark_submitted("l", &job.public_id, g.claim.token, "batches/e", "f", "w")
        .await
        .unwrap();
    expire(&env.store, &g).await;
    let e = env
        .store
        .finish_job(
            "l",
            &job.public_id,
            g.claim.token,
            &finish(FinalState::Succeeded),
            "w",
        )
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "CLAIM_EXPIRED");
    let r = env.store.adopt_jobs("l", "", 1, None, "w").await.unwrap();
    assert_eq!(r.adopted[0].job.owner, "w");
    env.store
        .finish_job(
            "l",
            &job.public_id,
            r.adopted[0].claim.token,
            &finish(FinalState::Expired),
            "w",
        )
        .await
        .unwrap();
    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(
        (a.status, a.rule.as_str()),
        (RowStatus::Retryable, "job_failed")
    );
}

/// Rows of a submitted job cannot be released (the provider has them);
/// releasing every row of a PREPARING job closes it as CANCELLED.
#[tokio::test]
async fn releasing_rows_of_jobs() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b"]).await;
    let (g1, j1) = new_job(&env, "l", 1).await;
    let (g2, j2) = new_job(&env, "l", 1).await;
    env.store
        .mark_submitted("l", &j1.public_id, g1.claim.token, "batches/r", "f", "w")
        .await
        .unwrap();
    let e = env
        .store
        .release_claim("l", g1.claim.token, None, "w")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_SUBMITTED");
    let (n, c) = env
        .store
        .release_claim("l", g2.claim.token, None, "w")
        .await
        .unwrap();
    assert_eq!((n, c.held), (1, 0));
    let j2 = env.store.get_job("l", &j2.public_id).await.unwrap();
    assert_eq!(j2.state, JobState::Cancelled);
    assert!(j2.is_closed());
    let key = &g2.rows[0].key;
    let row = env.store.get_row("l", key).await.unwrap();
    assert_eq!((row.status, row.total), (RowStatus::Pending, 0));
}

/// Locks: refused (with the holder and expiry, no token) before the TTL,
/// taken over after it; renew and release only with the current owner's
/// token; of several concurrent acquirers exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_are_taken_over_only_after_their_ttl() {
    let env = env().await;
    let s = &env.store;
    let ttl = Duration::from_secs(60);
    let a = s.acquire_lock("nightly", "run-a", ttl).await.unwrap();
    assert!(a.acquired);
    let a_token = a.lock.token.unwrap();

    let b = s.acquire_lock("nightly", "run-b", ttl).await.unwrap();
    assert!(!b.acquired);
    assert_eq!(b.lock.owner, "run-a");
    assert_eq!(b.lock.token, None);
    assert_eq!(b.lock.expire_time, a.lock.expire_time);

    let renewed = s.renew_lock("nightly", a_token, ttl).await.unwrap();
    assert!(renewed.expire_time >= a.lock.expire_time);
    sqlx::query("UPDATE locks SET expire_time = now() - interval '1 second'")
        .execute(s.pool())
        .await
        .unwrap();

    let b = s.acquire_lock("nightly", "run-b", ttl).await.unwrap();
    assert!(b.acquired);
    assert_eq!(b.lock.owner, "run-b");
    let b_token = b.lock.token.unwrap();
    assert!(matches!(
        s.renew_lock("nightly", a_token, ttl).await,
        Err(StoreError::PermissionDenied(_))
    ));
    assert!(matches!(
        s.release_lock("nightly", a_token).await,
        Err(StoreError::PermissionDenied(_))
    ));
    assert!(matches!(
        s.renew_lock("other", a_token, ttl).await,
        Err(StoreError::NotFound { .. })
    ));
    s.release_lock("nightly", b_token).await.unwrap();
    s.release_lock("nightly", b_token).await.unwrap();

    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = s.clone();
        tasks.push(tokio::spawn(async move {
            store
                .acquire_lock("race", &format!("r{i}"), ttl)
                .await
                .unwrap()
                .acquired
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1);
}

/// Gap safety of the event log: while many transactions append events
/// concurrently, a reader that repeatedly asks for `seq > last` sees every
/// event exactly once and in increasing order, i.e. no event ever commits
/// behind one a reader has already passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_following_the_log_sees_every_event_once_in_order() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    let keys: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    enroll_keys(&env, "l", &refs).await;
    let policy = Policy {
        max_active_jobs: 1000,
        ..fast_policy()
    };
    let current = env.store.get_ledger("l").await.unwrap();
    env.store
        .update_ledger("l", &policy, current.etag)
        .await
        .unwrap();

    let stop = tokio_util_stop();
    let reader = {
        let store = env.store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut seen = Vec::new();
            loop {
                let done = stop.load(std::sync::atomic::Ordering::SeqCst);
                let page = store.job_events_after(None, last, 7).await.unwrap();
                for e in &page {
                    assert!(e.seq > last);
                    last = e.seq;
                    seen.push(e.seq);
                }
                if done && page.is_empty() {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut writers = Vec::new();
    for _ in 0..6 {
        let store = env.store.clone();
        writers.push(tokio::spawn(async move {
            while let Some(g) = claim(&store, "l", 2).await {
                let job = store.create_job("l", g.claim.token, "w").await.unwrap();
                let batch = format!("batches/{}", job.public_id);
                store
                    .mark_submitted("l", &job.public_id, g.claim.token, &batch, "f", "w")
                    .await
                    .unwrap();
                for r in &g.rows {
                    store
                        .report("l", g.claim.token, &[success(&r.key, 1)], "w")
                        .await
                        .unwrap();
                }
                store
                    .finish_job(
                        "l",
                        &job.public_id,
                        g.claim.token,
                        &finish(FinalState::Succeeded),
                        "w",
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.await.unwrap();
    let stored: Vec<i64> = sqlx::query_scalar("SELECT seq FROM job_events ORDER BY seq")
        .fetch_all(env.store.pool())
        .await
        .unwrap();
    // 30 jobs: created, submitted, 2 progress, reconciled.
    assert_eq!(stored.len(), 150);
    assert_eq!(seen, stored);
}

fn tokio_util_stop() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

/// Events are read per ledger or for all, resume strictly after a given
/// sequence number, and carry the job as it was at the time.
#[tokio::test]
async fn events_resume_after_a_sequence_and_snapshot_the_job() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    ledger_with(&env, "m", fast_policy()).await;
    enroll_keys(&env, "l", &["a"]).await;
    enroll_keys(&env, "m", &["z"]).await;
    let (g, job) = new_job(&env, "l", 1).await;
    new_job(&env, "m", 1).await;
    env.store
        .mark_submitted("l", &job.public_id, g.claim.token, "batches/s", "f", "w")
        .await
        .unwrap();
    let l = env.store.ledger_id("l").await.unwrap();
    let all = env.store.job_events_after(None, 0, 100).await.unwrap();
    assert_eq!(all.len(), 3);
    let mine = env.store.job_events_after(Some(l), 0, 100).await.unwrap();
    assert_eq!(mine.len(), 2);
    assert_eq!(mine[0].kind, JobEventKind::Created);
    let first = mine[0].job.as_ref().expect("a job event");
    assert_eq!(first.state, JobState::Preparing);
    assert_eq!(first.batch, None);
    assert_eq!(mine[0].actor, "worker-a");
    let second = mine[1].job.as_ref().expect("a job event");
    assert_eq!(second.state, JobState::Submitted);
    assert_eq!(second.batch.as_deref(), Some("batches/s"));
    let after = env
        .store
        .job_events_after(Some(l), mine[0].seq, 100)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].seq, mine[1].seq);
    assert_eq!(env.store.last_job_event().await.unwrap(), all[2].seq);
    assert!(matches!(
        env.store.ledger_id("nope").await,
        Err(StoreError::NotFound { .. })
    ));
}

/// A committed job event wakes a listening connection (the cross-replica
/// hint), naming the job event log.
#[tokio::test]
async fn a_committed_event_wakes_a_listener() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a"]).await;
    let mut listener = env.store.listen().await.unwrap();
    new_job(&env, "l", 1).await;
    let wake = tokio::time::timeout(Duration::from_secs(10), listener.next())
        .await
        .expect("a notification within 10s")
        .unwrap();
    assert_eq!(wake, Wake::Appended(Log::Jobs));
}

/// A crossing of the review threshold is recorded, and its alert queued,
/// exactly once even when several evaluators race; no more alerts while it
/// stays above (until a day has passed); falling below re-arms it and the
/// next crossing alerts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_threshold_crossing_queues_exactly_one_alert() {
    let env = env().await;
    let policy = Policy {
        review_threshold: 2,
        alert_url: "http://127.0.0.1:9/alerts".into(),
        ..fast_policy()
    };
    ledger_with(&env, "l", policy).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let ledger = env.store.alerting_ledgers().await.unwrap();
    assert_eq!(ledger.len(), 1);
    let ledger = &ledger[0];

    async fn race(store: &Store, ledger: &tally_store::types::LedgerRecord) -> Vec<AlertKind> {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let store = store.clone();
            let ledger = ledger.clone();
            tasks.push(tokio::spawn(async move {
                store.evaluate_alert(&ledger).await.unwrap()
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.extend(t.await.unwrap());
        }
        out
    }

    let g = claim(&env.store, "l", 3).await.unwrap();
    env.store
        .report("l", g.claim.token, &[failure("a", 400)], "w")
        .await
        .unwrap();
    assert!(race(&env.store, ledger).await.is_empty());
    env.store
        .report("l", g.claim.token, &[failure("b", 400)], "w")
        .await
        .unwrap();
    assert_eq!(race(&env.store, ledger).await, [AlertKind::Crossed]);
    assert!(race(&env.store, ledger).await.is_empty());

    let queued = env
        .store
        .lease_alerts(10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&queued[0].body).unwrap();
    assert_eq!(body["permanent"], 2);
    assert_eq!(body["permanent_by_rule"]["http_permanent"], 2);
    let examples: BTreeSet<String> = body["example_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(examples, BTreeSet::from(["a".to_string(), "b".to_string()]));
    env.store.alert_delivered(queued[0].id).await.unwrap();

    // A day later, one reminder.
    sqlx::query("UPDATE ledger_alerts SET last_alert_time = now() - interval '25 hours'")
        .execute(env.store.pool())
        .await
        .unwrap();
    assert_eq!(race(&env.store, ledger).await, [AlertKind::Reminder]);

    // Below, re-armed; above again, a new crossing.
    env.store
        .redrive(
            "l",
            &RedriveTarget::Keys(vec!["a".into()]),
            false,
            false,
            "op",
            "",
        )
        .await
        .unwrap();
    assert!(race(&env.store, ledger).await.is_empty());
    let g2 = claim(&env.store, "l", 3).await.unwrap();
    env.store
        .report("l", g2.claim.token, &[failure("a", 400)], "w")
        .await
        .unwrap();
    assert_eq!(race(&env.store, ledger).await, [AlertKind::Crossed]);
    let ids: HashSet<String> = sqlx::query_scalar("SELECT msg_id FROM alert_outbox")
        .fetch_all(env.store.pool())
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(ids.len(), 3);
}

/// Delivery bookkeeping: a leased alert is not leased again until its lease
/// runs out; a failure is retried after its delay; a given-up alert stays.
#[tokio::test]
async fn the_alert_outbox_leases_retries_and_gives_up() {
    let env = env().await;
    let policy = Policy {
        review_threshold: 1,
        alert_url: "http://127.0.0.1:9/alerts".into(),
        ..fast_policy()
    };
    ledger_with(&env, "l", policy).await;
    enroll_keys(&env, "l", &["a"]).await;
    let g = claim(&env.store, "l", 1).await.unwrap();
    env.store
        .report("l", g.claim.token, &[failure("a", 400)], "w")
        .await
        .unwrap();
    let ledger = env.store.get_ledger("l").await.unwrap();
    assert_eq!(
        env.store.evaluate_alert(&ledger).await.unwrap(),
        Some(AlertKind::Crossed)
    );
    let lease = Duration::from_secs(60);
    let first = env.store.lease_alerts(10, lease).await.unwrap();
    assert_eq!((first.len(), first[0].tries), (1, 1));
    assert!(env.store.lease_alerts(10, lease).await.unwrap().is_empty());
    env.store
        .alert_failed(first[0].id, "503", Some(Duration::ZERO))
        .await
        .unwrap();
    let second = env.store.lease_alerts(10, lease).await.unwrap();
    assert_eq!(second[0].tries, 2);
    assert_eq!(second[0].msg_id, first[0].msg_id);
    env.store
        .alert_failed(second[0].id, "503", None)
        .await
        .unwrap();
    assert!(env.store.lease_alerts(10, lease).await.unwrap().is_empty());
}

/// The provider's word moves a job only forward, in the caller's
/// transaction: RUNNING, then FAILED records the batch's error and fails no
/// row (the rows wait for the owner, who reads the batch first), a later
/// different terminal is ignored, and the owner's FinishJob settles the
/// unreported rows (`job_failed`). Jobs never submitted or already closed
/// do not move.
#[tokio::test]
async fn the_provider_moves_a_submitted_job_forward_only() {
    use tally_core::job::JobEvent;
    use tally_store::operations::follow_provider;

    async fn follow(
        store: &Store,
        batch: &str,
        event: JobEvent,
    ) -> Option<tally_store::operations::ProviderMove> {
        let mut tx = store.pool().begin().await.unwrap();
        let moved = follow_provider(&mut tx, batch, event, "quota exceeded", "system")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        moved
    }

    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    let t = g.claim.token;
    assert!(
        follow(&env.store, "batches/p", JobEvent::ProviderRunning)
            .await
            .is_none()
    );
    env.store
        .mark_submitted("l", &job.public_id, t, "batches/p", "f", "w")
        .await
        .unwrap();
    env.store
        .report("l", t, &[success("a", 1)], "w")
        .await
        .unwrap();

    let m = follow(&env.store, "batches/p", JobEvent::ProviderRunning)
        .await
        .unwrap();
    assert_eq!((m.from, m.to), (JobState::Submitted, JobState::Running));
    assert!(
        follow(&env.store, "batches/p", JobEvent::ProviderRunning)
            .await
            .is_none()
    );
    let m = follow(
        &env.store,
        "batches/p",
        JobEvent::ProviderFinished(FinalState::Failed),
    )
    .await
    .unwrap();
    assert_eq!(m.to, JobState::Failed);
    for key in ["b", "c"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!(row.status, RowStatus::Running, "{key} waits for the owner");
    }
    assert!(
        follow(
            &env.store,
            "batches/p",
            JobEvent::ProviderFinished(FinalState::Succeeded)
        )
        .await
        .is_none()
    );
    let j = env.store.get_job("l", &job.public_id).await.unwrap();
    assert_eq!(
        (j.state, j.is_closed(), j.unreported),
        (JobState::Failed, false, 2)
    );
    assert_eq!(j.error, "quota exceeded");

    let done = env
        .store
        .finish_job("l", &job.public_id, t, &finish(FinalState::Failed), "w")
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Reconciled);
    assert_eq!(done.summary(), "done=1 retryable=2 permanent=0 missing=0");
    for key in ["b", "c"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!(
            (row.status, row.rule.as_str(), row.total),
            (RowStatus::Retryable, "job_failed", 1)
        );
    }
    assert!(
        follow(
            &env.store,
            "batches/p",
            JobEvent::ProviderFinished(FinalState::Failed)
        )
        .await
        .is_none()
    );
    assert_eq!(
        kinds(&env.store, &done).await,
        [
            JobEventKind::Created,
            JobEventKind::StateChanged,
            JobEventKind::Progress,
            JobEventKind::StateChanged,
            JobEventKind::StateChanged,
            JobEventKind::StateChanged,
        ]
    );
    assert_queue_consistent(&env.store).await;
}

/// Invariant: a batch name carries one job: recording it for a second job
/// is FAILED_PRECONDITION BATCH_IN_USE (the unique key's SQLSTATE decoded
/// by the error module), and the second job stays unsubmitted.
#[tokio::test]
async fn one_batch_name_is_one_job() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    s.enroll("l", &[row("a", &[]), row("b", &[])])
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for _ in 0..2 {
        let g = claim(s, "l", 1).await.unwrap();
        let j = s.create_job("l", g.claim.token, "w").await.unwrap();
        jobs.push((j.public_id, g.claim.token));
    }
    s.mark_submitted("l", &jobs[0].0, jobs[0].1, "batches/same", "files/1", "w")
        .await
        .unwrap();
    let e = s
        .mark_submitted("l", &jobs[1].0, jobs[1].1, "batches/same", "files/2", "w")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "BATCH_IN_USE");
    let second = s.get_job("l", &jobs[1].0).await.unwrap();
    assert!(second.batch.is_none());
}

/// Invariants: a batch the provider reported FAILED before running any
/// request (an OpenAI validation failure) gives its rows back with no
/// attempt — after its owner reported the row at fault — cools the model
/// down, and closes the job CANCELLED; a batch that may still run, or
/// answered, can never be taken back this way.
#[tokio::test]
async fn a_batch_refused_before_it_ran_returns_its_rows_unattempted() {
    use tally_core::operation::{OpEvent, OpState};
    use tally_store::operations::{EventSource, IncomingEvent};
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b", "c"]).await;
    let (g, job) = new_job(&env, "l", 10).await;
    let t = g.claim.token;
    env.store
        .mark_submitted("l", &job.public_id, t, "batches/batch_v", "file-v", "w")
        .await
        .unwrap();
    let refused = NotCreated {
        reason: "token_limit_exceeded: Enqueued token limit reached",
        cooldown: Some(Duration::from_secs(30)),
        batch_refused: true,
        ..Default::default()
    };
    let e = env
        .store
        .mark_not_created("l", &job.public_id, t, &refused, "w")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_NOT_FAILED", "still SUBMITTED");
    let failed = IncomingEvent {
        operation: "batches/batch_v".into(),
        source: EventSource::Poller,
        event_id: None,
        raw_state: "failed".into(),
        event: OpEvent {
            state: OpState::Failed,
            update_time: Some(1),
        },
        output_file: None,
        error_code: Some("token_limit_exceeded".into()),
        error_message: None,
    };
    env.store.ingest_event(&failed).await.unwrap();
    env.store
        .report("l", t, &[failure("c", 400)], "w")
        .await
        .unwrap();
    let done = env
        .store
        .mark_not_created("l", &job.public_id, t, &refused, "w")
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Cancelled);
    assert!(
        done.error.contains("refused the batch before running it"),
        "{}",
        done.error
    );
    for key in ["a", "b"] {
        let row = env.store.get_row("l", key).await.unwrap();
        assert_eq!(row.status, RowStatus::Pending, "{key}");
        assert_eq!(row.total, 0, "{key}: no attempt counted");
    }
    assert_eq!(
        env.store.get_row("l", "c").await.unwrap().status,
        RowStatus::Permanent
    );
    // The model cools down for the account: no job of it for now.
    let again = claim(&env.store, "l", 10).await.unwrap();
    let e = env
        .store
        .create_job("l", again.claim.token, "w")
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::ResourceExhausted { .. }), "{e:?}");
    assert_queue_consistent(&env.store).await;
}

/// Invariant (issue 51): a create the provider refused unmade and the
/// worker sends again records its new attempt first, so a search for a
/// lost answer counts from the last send: MarkCreating again on a CREATING
/// job moves its attempt time to now while the claim is live, and is
/// refused (nothing moved) once the claim has lapsed.
#[tokio::test]
async fn marking_creating_again_moves_the_attempt_to_the_last_send() {
    let env = env().await;
    let (g, job) = creating_job(&env, &["a", "b"]).await;
    let pool = env.store.pool();
    sqlx::query("UPDATE jobs SET create_attempt_time = now() - interval '10 minutes'")
        .execute(pool)
        .await
        .unwrap();
    let again = mark_creating(&env, &g, &job).await.unwrap();
    let moved = again.create_attempt_time.expect("an attempt time");
    assert!(
        chrono::Utc::now() - moved < chrono::Duration::seconds(30),
        "moved to now: {moved}"
    );
    assert_eq!(again.state, JobState::Creating);
    sqlx::query("UPDATE jobs SET create_attempt_time = now() - interval '10 minutes'")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE claims SET expire_time = now() - interval '1 second'")
        .execute(pool)
        .await
        .unwrap();
    assert!(
        mark_creating(&env, &g, &job).await.is_err(),
        "a lapsed claim sends nothing again"
    );
    let kept: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT create_attempt_time FROM jobs WHERE id = $1")
            .bind(job.id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert!(
        chrono::Utc::now() - kept > chrono::Duration::minutes(9),
        "not moved"
    );
}

/// Invariant (issue 51): a lost create the search cannot resolve is shown
/// on its job, only for a CREATING job under its own claim; the first
/// time is kept; the backlog counts it; ending the search (the batch
/// recorded) clears it.
#[tokio::test]
async fn an_unresolved_create_is_shown_until_the_search_ends() {
    let env = env().await;
    ledger_with(&env, "l", fast_policy()).await;
    enroll_keys(&env, "l", &["a", "b"]).await;
    let (g, job) = new_job(&env, "l", 1).await;
    let s = &env.store;
    let e = s
        .flag_create_unresolved("l", &job.public_id, g.claim.token, "why")
        .await
        .unwrap_err();
    assert_eq!(precondition_reason(&e), "JOB_NOT_CREATING", "PREPARING");
    mark_creating(&env, &g, &job).await.unwrap();
    let e = s
        .flag_create_unresolved("l", &job.public_id, Uuid::now_v7(), "why")
        .await
        .unwrap_err();
    assert!(
        !matches!(e, StoreError::Internal(_)),
        "another claim is refused: {e:?}"
    );
    let first = s
        .flag_create_unresolved("l", &job.public_id, g.claim.token, "list too long")
        .await
        .unwrap();
    assert_eq!(first.create_unresolved.as_deref(), Some("list too long"));
    let since = first.create_unresolved_time.expect("since when");
    let again = s
        .flag_create_unresolved("l", &job.public_id, g.claim.token, "last probe made")
        .await
        .unwrap();
    assert_eq!(again.create_unresolved.as_deref(), Some("last probe made"));
    assert_eq!(
        again.create_unresolved_time,
        Some(since),
        "the first time kept"
    );
    let b = s.backlog().await.unwrap();
    let l = b.ledgers.iter().find(|l| l.name == "l").unwrap();
    assert_eq!(l.create_unresolved, 1);
    let found = s
        .mark_submitted(
            "l",
            &job.public_id,
            g.claim.token,
            "batches/x",
            "files/in",
            "w",
        )
        .await
        .unwrap();
    assert_eq!(found.create_unresolved, None);
    assert_eq!(found.create_unresolved_time, None);
    let b = s.backlog().await.unwrap();
    let l = b.ledgers.iter().find(|l| l.name == "l").unwrap();
    assert_eq!(l.create_unresolved, 0);
}

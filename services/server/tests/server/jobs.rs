//! JobService through gRPC against real servers: in-process servers on port
//! 0 and, for the cross-replica test, a second `tally-server` process on the
//! same database. Each test states the invariant it checks. Leases and lock
//! TTLs are expired by moving their expiry into the past on the database
//! clock; waits are polls with deadlines, never sleeps that a race could
//! outrun.

use axum::http::{HeaderMap, StatusCode};
use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally_core::webhook::{self, Secret};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{self, Running};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

const DEADLINE: Duration = Duration::from_secs(20);

use crate::process;
use process::spawn_server_process;

pub(crate) type Jobs = JobServiceClient<Channel>;
pub(crate) type Ledgers = LedgerServiceClient<Channel>;

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the server")
}

pub(crate) async fn clients(addr: SocketAddr) -> (Ledgers, Jobs) {
    let ch = channel(addr).await;
    (
        LedgerServiceClient::new(ch.clone()),
        JobServiceClient::new(ch),
    )
}

pub(crate) async fn serve(db: &TestDb) -> Running {
    server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts")
}

pub(crate) fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

pub(crate) async fn create_ledger(l: &mut Ledgers, id: &str, policy: pb::LedgerPolicy) {
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: id.into(),
        policy: Some(policy),
    })
    .await
    .unwrap();
}

pub(crate) fn fast_policy() -> pb::LedgerPolicy {
    pb::LedgerPolicy {
        backoff: Some(pb::Backoff {
            initial: Some(secs(0)),
            max: Some(secs(0)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) async fn enroll(l: &mut Ledgers, ledger: &str, keys: &[&str]) {
    let rows = keys
        .iter()
        .map(|k| pb::RowInput {
            key: k.to_string(),
            payload: format!("{{\"text\": \"{k}\"}}"),
            ..Default::default()
        })
        .collect();
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: format!("ledgers/{ledger}"),
        rows,
    })
    .await
    .unwrap();
}

pub(crate) async fn claim(
    l: &mut Ledgers,
    ledger: &str,
    worker: &str,
    max: i32,
) -> pb::ClaimRowsResponse {
    l.claim_rows(pb::ClaimRowsRequest {
        parent: format!("ledgers/{ledger}"),
        max_rows: max,
        worker: worker.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

pub(crate) fn ok(key: &str) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(pb::row_outcome::Outcome::Result("{\"ok\": true}".into())),
        usage: None,
        ..Default::default()
    }
}

fn bad_request(key: &str) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: pb::FailureKind::ProviderError as i32,
            http_code: 400,
            message: "invalid argument".into(),
            ..Default::default()
        })),
        usage: None,
        ..Default::default()
    }
}

pub(crate) async fn report(
    l: &mut Ledgers,
    claim: &str,
    outcomes: Vec<pb::RowOutcome>,
) -> pb::ReportOutcomesResponse {
    l.report_outcomes(pb::ReportOutcomesRequest {
        claim: claim.into(),
        outcomes,
        claim_next: None,
    })
    .await
    .unwrap()
    .into_inner()
}

pub(crate) async fn create_job(j: &mut Jobs, claim: &str) -> Result<pb::Job, Status> {
    j.create_job(pb::CreateJobRequest {
        claim: claim.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

pub(crate) async fn mark_submitted(
    j: &mut Jobs,
    job: &pb::Job,
    claim: &str,
    batch: &str,
) -> Result<pb::Job, Status> {
    j.mark_submitted(pb::MarkSubmittedRequest {
        name: job.name.clone(),
        claim: claim.into(),
        batch: batch.into(),
        input_file: "files/input-1".into(),
    })
    .await
    .map(|r| r.into_inner())
}

pub(crate) async fn finish(
    j: &mut Jobs,
    job: &pb::Job,
    claim: &str,
    state: pb::JobState,
) -> pb::Job {
    j.finish_job(pb::FinishJobRequest {
        name: job.name.clone(),
        claim: claim.into(),
        final_state: state as i32,
        output_file: String::new(),
        error: String::new(),
        not_run: Vec::new(),
    })
    .await
    .unwrap()
    .into_inner()
}

pub(crate) async fn get_row(l: &mut Ledgers, ledger: &str, key: &str) -> pb::Row {
    l.get_row(pb::GetRowRequest {
        name: format!("ledgers/{ledger}/rows/{key}"),
    })
    .await
    .unwrap()
    .into_inner()
}

/// The claim id inside a claim name.
fn token_of(claim: &str) -> uuid::Uuid {
    claim.rsplit('/').next().unwrap().parse().unwrap()
}

async fn expire_claim(r: &Running, claim: &str) {
    sqlx::query("UPDATE claims SET expire_time = now() - interval '1 second' WHERE token = $1")
        .bind(token_of(claim))
        .execute(r.store.pool())
        .await
        .unwrap();
}

pub(crate) fn reason(s: &Status) -> String {
    s.get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

/// Polls `f` until it answers `Some`, or panics after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two workers, one killed after MarkSubmitted: the other adopts the job,
/// each row is reported exactly once (one attempt, under the claim that
/// reported it), no row is resubmitted (nobody can claim them meanwhile),
/// and the dead worker's late report changes nothing.
#[tokio::test]
async fn two_workers_one_killed_after_submission_the_other_adopts() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "nightly", fast_policy()).await;
    enroll(&mut l, "nightly", &["r1", "r2", "r3", "r4", "r5"]).await;

    // Worker A: claim, job, submit, one report, then it dies.
    let a = claim(&mut l, "nightly", "worker-a", 10).await;
    let a_claim = a.claim.unwrap().name;
    let job = create_job(&mut j, &a_claim).await.unwrap();
    assert_eq!(job.state, pb::JobState::Preparing as i32);
    let job = mark_submitted(&mut j, &job, &a_claim, "batches/nightly-1")
        .await
        .unwrap();
    assert_eq!(job.state, pb::JobState::Submitted as i32);
    assert_eq!(job.operation, "operations/batches/nightly-1");
    report(&mut l, &a_claim, vec![ok("r1"), ok("r2")]).await;
    expire_claim(&r, &a_claim).await;

    // Nothing of the job is claimable, even after the sweeper ran.
    r.store.rescue_expired(None).await.unwrap();
    assert!(
        claim(&mut l, "nightly", "worker-c", 10)
            .await
            .claim
            .is_none()
    );

    // Worker B adopts.
    let adopted = j
        .adopt_jobs(pb::AdoptJobsRequest {
            parent: "ledgers/nightly".into(),
            worker: "worker-b".into(),
            max_jobs: 5,
            lease: Some(secs(600)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(adopted.jobs.len(), 1);
    assert_eq!(adopted.released_jobs, 0);
    let b = &adopted.jobs[0];
    let b_claim = b.claim.as_ref().unwrap().name.clone();
    assert_ne!(b_claim, a_claim);
    assert_eq!(b.keys, ["r3", "r4", "r5"]);
    let b_job = b.job.as_ref().unwrap();
    assert_eq!((b_job.adoptions, b_job.owner.as_str()), (1, "worker-b"));
    assert_eq!(b_job.batch, "batches/nightly-1");
    assert_eq!(b_job.claim, b_claim);

    // The dead worker's late report is STALE; B reports; B closes the job.
    let late = report(&mut l, &a_claim, vec![ok("r3")]).await;
    assert_eq!(late.stale, 1);
    let done = report(&mut l, &b_claim, vec![ok("r3"), ok("r4"), ok("r5")]).await;
    assert_eq!(done.succeeded, 3);
    let closed = finish(&mut j, b_job, &b_claim, pb::JobState::Succeeded).await;
    assert_eq!(closed.state, pb::JobState::Reconciled as i32);
    assert_eq!(closed.final_state, pb::JobState::Succeeded as i32);
    assert_eq!(closed.summary, "done=5 retryable=0 permanent=0 missing=0");

    for (key, by) in [
        ("r1", &a_claim),
        ("r2", &a_claim),
        ("r3", &b_claim),
        ("r4", &b_claim),
        ("r5", &b_claim),
    ] {
        let row = get_row(&mut l, "nightly", key).await;
        assert_eq!(row.status, pb::RowStatus::Succeeded as i32);
        assert_eq!(row.history.len(), 1, "{key} was attempted more than once");
        assert_eq!(&row.history[0].claim, by, "{key}");
        assert_eq!(row.history[0].batch, "batches/nightly-1");
    }
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM claims")
        .fetch_one(r.store.pool())
        .await
        .unwrap();
    assert_eq!(claims, 2, "no third claim ever held a row of the job");
    r.stop().await.unwrap();
}

/// A job whose owner died while PREPARING frees its rows without counting
/// an attempt, and is closed as CANCELLED with the reason.
#[tokio::test]
async fn a_job_killed_while_preparing_frees_its_rows_without_an_attempt() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "p", fast_policy()).await;
    enroll(&mut l, "p", &["a", "b"]).await;
    let c = claim(&mut l, "p", "w", 10).await.claim.unwrap().name;
    let job = create_job(&mut j, &c).await.unwrap();
    expire_claim(&r, &c).await;
    let adopted = j
        .adopt_jobs(pb::AdoptJobsRequest {
            parent: "ledgers/p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((adopted.jobs.len(), adopted.released_jobs), (0, 1));
    let job = j
        .get_job(pb::GetJobRequest { name: job.name })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(job.state, pb::JobState::Cancelled as i32);
    assert!(job.end_time.is_some());
    assert!(!job.error.is_empty());
    for key in ["a", "b"] {
        let row = get_row(&mut l, "p", key).await;
        assert_eq!(row.status, pb::RowStatus::Pending as i32);
        assert_eq!(row.attempts.unwrap().total, 0);
        assert!(row.history.is_empty());
    }
    r.stop().await.unwrap();
}

/// A failed job's unreported rows come back RETRYABLE (`job_failed`); a
/// successful job's rows missing from its output come back RETRYABLE
/// (`missing_from_output`); counts and summaries say so.
#[tokio::test]
async fn failed_and_missing_rows_come_back_retryable() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "f", fast_policy()).await;
    enroll(&mut l, "f", &["a", "b"]).await;

    let c1 = claim(&mut l, "f", "w", 1).await.claim.unwrap().name;
    let j1 = create_job(&mut j, &c1).await.unwrap();
    mark_submitted(&mut j, &j1, &c1, "batches/f1")
        .await
        .unwrap();
    let failed = finish(&mut j, &j1, &c1, pb::JobState::Failed).await;
    assert_eq!(failed.summary, "done=0 retryable=1 permanent=0 missing=0");
    let c2 = claim(&mut l, "f", "w", 1).await.claim.unwrap().name;
    let j2 = create_job(&mut j, &c2).await.unwrap();
    mark_submitted(&mut j, &j2, &c2, "batches/f2")
        .await
        .unwrap();
    let succeeded = finish(&mut j, &j2, &c2, pb::JobState::Succeeded).await;
    assert_eq!(
        succeeded.summary,
        "done=0 retryable=1 permanent=0 missing=1"
    );
    assert_eq!(succeeded.counts.unwrap().missing, 1);

    let rows = l
        .list_rows(pb::ListRowsRequest {
            parent: "ledgers/f".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .rows;
    let rules: BTreeSet<(String, i32)> = rows.iter().map(|r| (r.rule.clone(), r.status)).collect();
    let retryable = pb::RowStatus::Retryable as i32;
    assert_eq!(
        rules,
        BTreeSet::from([
            ("job_failed".to_string(), retryable),
            ("missing_from_output".to_string(), retryable)
        ])
    );
    let listed = j
        .list_jobs(pb::ListJobsRequest {
            parent: "ledgers/f".into(),
            states: vec![pb::JobState::Reconciled as i32],
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.jobs[0].name, j2.name, "newest first");
    let next = j
        .list_jobs(pb::ListJobsRequest {
            parent: "ledgers/f".into(),
            states: vec![pb::JobState::Reconciled as i32],
            page_size: 1,
            page_token: listed.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.jobs[0].name, j1.name);
    r.stop().await.unwrap();
}

/// MarkSubmitted: the same values again are a no-op, different values are
/// FAILED_PRECONDITION (with an ErrorInfo reason). CreateJob beyond the
/// ledger's max_active_jobs is RESOURCE_EXHAUSTED with a RetryInfo, and
/// CreateJob for the same claim again answers the same job.
#[tokio::test]
async fn submission_conflicts_and_the_job_limit_answer_their_codes() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    let policy = pb::LedgerPolicy {
        max_active_jobs: 1,
        ..fast_policy()
    };
    create_ledger(&mut l, "m", policy).await;
    enroll(&mut l, "m", &["a", "b"]).await;
    let c1 = claim(&mut l, "m", "w", 1).await.claim.unwrap().name;
    let job = create_job(&mut j, &c1).await.unwrap();
    assert_eq!(create_job(&mut j, &c1).await.unwrap().name, job.name);

    let first = mark_submitted(&mut j, &job, &c1, "batches/m1")
        .await
        .unwrap();
    let again = mark_submitted(&mut j, &job, &c1, "batches/m1")
        .await
        .unwrap();
    assert_eq!(again.update_time, first.update_time);
    let e = mark_submitted(&mut j, &job, &c1, "batches/other")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(reason(&e), "JOB_ALREADY_SUBMITTED");

    let c2 = claim(&mut l, "m", "w", 1).await.claim.unwrap().name;
    let e = create_job(&mut j, &c2).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    let retry = e
        .get_error_details()
        .retry_info()
        .cloned()
        .expect("RetryInfo");
    assert!(retry.retry_delay.unwrap() > Duration::ZERO);

    let e = create_job(&mut j, "ledgers/m/claims/not-a-uuid")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    r.stop().await.unwrap();
}

/// Locks: a second acquirer is refused with the holder and expiry (no
/// token) before the TTL and takes the lock over after it; renewing or
/// releasing with a wrong token is PERMISSION_DENIED with an ErrorInfo.
#[tokio::test]
async fn locks_take_over_after_their_ttl_and_refuse_strangers() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (_, mut j) = clients(r.grpc_addr).await;
    let acquire = |owner: &str| pb::AcquireLockRequest {
        name: "locks/nightly:reviews".into(),
        owner: owner.into(),
        ttl: Some(secs(300)),
    };
    let a = j.acquire_lock(acquire("run-a")).await.unwrap().into_inner();
    assert!(a.acquired);
    let a_lock = a.lock.unwrap();
    assert!(!a_lock.token.is_empty());

    let b = j.acquire_lock(acquire("run-b")).await.unwrap().into_inner();
    assert!(!b.acquired);
    let held = b.lock.unwrap();
    assert_eq!((held.owner.as_str(), held.token.as_str()), ("run-a", ""));
    assert_eq!(held.expire_time, a_lock.expire_time);

    sqlx::query("UPDATE locks SET expire_time = now() - interval '1 second'")
        .execute(r.store.pool())
        .await
        .unwrap();
    let b = j.acquire_lock(acquire("run-b")).await.unwrap().into_inner();
    assert!(b.acquired);
    let b_token = b.lock.unwrap().token;

    let e = j
        .renew_lock(pb::RenewLockRequest {
            name: "locks/nightly:reviews".into(),
            token: a_lock.token.clone(),
            ttl: Some(secs(300)),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::PermissionDenied, "NOT_OWNER")
    );
    let e = j
        .release_lock(pb::ReleaseLockRequest {
            name: "locks/nightly:reviews".into(),
            token: a_lock.token,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::PermissionDenied, "NOT_OWNER")
    );
    j.renew_lock(pb::RenewLockRequest {
        name: "locks/nightly:reviews".into(),
        token: b_token.clone(),
        ttl: Some(secs(60)),
    })
    .await
    .unwrap();
    j.release_lock(pb::ReleaseLockRequest {
        name: "locks/nightly:reviews".into(),
        token: b_token,
    })
    .await
    .unwrap();
    let e = j
        .acquire_lock(pb::AcquireLockRequest {
            ttl: None,
            ..acquire("x")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    r.stop().await.unwrap();
}

async fn watch(j: &mut Jobs, parent: &str, after: i64) -> tonic::Streaming<pb::JobEvent> {
    j.watch_jobs(pb::WatchJobsRequest {
        parent: parent.into(),
        after_sequence: after,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn next_event(s: &mut tonic::Streaming<pb::JobEvent>) -> pb::JobEvent {
    tokio::time::timeout(DEADLINE, s.message())
        .await
        .expect("an event before the deadline")
        .expect("a healthy stream")
        .expect("the stream is open")
}

/// Makes a job from a fresh claim and submits it: two events.
async fn job_with_events(l: &mut Ledgers, j: &mut Jobs, ledger: &str, batch: &str) -> pb::Job {
    let c = claim(l, ledger, "w", 1).await.claim.unwrap().name;
    let job = create_job(j, &c).await.unwrap();
    mark_submitted(j, &job, &c, batch).await.unwrap()
}

async fn stored_sequences(r: &Running) -> Vec<i64> {
    sqlx::query_scalar("SELECT seq FROM job_events ORDER BY seq")
        .fetch_all(r.store.pool())
        .await
        .unwrap()
}

/// A watcher that disconnects and resumes from its last sequence number
/// sees every event exactly once, including those written while it was
/// away; `0` starts from now, `-1` from the first stored event, and a
/// ledger's watcher sees only that ledger's jobs.
#[tokio::test]
async fn a_watcher_that_resumes_sees_every_event_exactly_once() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "w", fast_policy()).await;
    create_ledger(&mut l, "other", fast_policy()).await;
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    enroll(&mut l, "w", &refs).await;
    enroll(&mut l, "other", &["x"]).await;
    let policy = pb::LedgerPolicy {
        max_active_jobs: 100,
        ..Default::default()
    };
    l.update_ledger(pb::UpdateLedgerRequest {
        ledger: Some(pb::Ledger {
            name: "ledgers/w".into(),
            policy: Some(policy),
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["policy.max_active_jobs".into()],
        }),
    })
    .await
    .unwrap();

    // Written before anyone watches: only `-1` sees it.
    job_with_events(&mut l, &mut j, "w", "batches/w0").await;
    let mut from_now = watch(&mut j, "ledgers/w", 0).await;
    let mut seen: Vec<i64> = Vec::new();
    let mut watcher = watch(&mut j, "ledgers/w", -1).await;
    for _ in 0..2 {
        seen.push(next_event(&mut watcher).await.sequence);
    }
    job_with_events(&mut l, &mut j, "w", "batches/w1").await;
    job_with_events(&mut l, &mut j, "other", "batches/o1").await;
    let e = next_event(&mut watcher).await;
    assert_eq!(e.r#type, pb::JobEventType::Created as i32);
    seen.push(e.sequence);
    let first_new = next_event(&mut from_now).await;
    assert_eq!(
        first_new.sequence, e.sequence,
        "0 starts after what was stored"
    );
    drop(watcher);

    // Written while the watcher is away.
    job_with_events(&mut l, &mut j, "w", "batches/w2").await;
    job_with_events(&mut l, &mut j, "w", "batches/w3").await;
    let mut watcher = watch(&mut j, "ledgers/w", *seen.last().unwrap()).await;
    job_with_events(&mut l, &mut j, "w", "batches/w4").await;
    let ledger_w: i64 = sqlx::query_scalar("SELECT id FROM ledgers WHERE name = 'w'")
        .fetch_one(r.store.pool())
        .await
        .unwrap();
    let expected: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM job_events WHERE ledger_id = $1 ORDER BY seq")
            .bind(ledger_w)
            .fetch_all(r.store.pool())
            .await
            .unwrap();
    assert_eq!(expected.len(), 10);
    while seen.len() < expected.len() {
        let e = next_event(&mut watcher).await;
        assert!(e.job.unwrap().name.starts_with("ledgers/w/"));
        seen.push(e.sequence);
    }
    assert_eq!(seen, expected, "every event once, in order");
    let all = stored_sequences(&r).await;
    assert_eq!(all.len(), 12);
    r.stop().await.unwrap();
}

/// With two server processes on one database, an event committed through
/// one reaches a watcher connected to the other. The other's poll fallback
/// is set to an hour, so only the cross-process NOTIFY can deliver it in
/// time.
#[tokio::test]
async fn an_event_written_through_one_process_reaches_a_watcher_on_another() {
    let db = TestDb::new().await;
    let here = serve(&db).await;
    let (there, mut child) = spawn_server_process(&db, &["--watch-poll-interval", "1h"]).await;
    let (mut l, mut j) = clients(here.grpc_addr).await;
    let (_, mut j_there) = clients(there).await;
    create_ledger(&mut l, "x", fast_policy()).await;
    enroll(&mut l, "x", &["a"]).await;

    let mut watcher = watch(&mut j_there, "ledgers/-", 0).await;
    // The stream is established once the server has answered headers; a
    // first event proves the path end to end.
    let c = claim(&mut l, "x", "w", 1).await.claim.unwrap().name;
    let job = create_job(&mut j, &c).await.unwrap();
    let e = next_event(&mut watcher).await;
    assert_eq!(e.r#type, pb::JobEventType::Created as i32);
    assert_eq!(e.job.unwrap().name, job.name);
    assert_eq!(e.actor, "anonymous");
    mark_submitted(&mut j, &job, &c, "batches/x1")
        .await
        .unwrap();
    let e = next_event(&mut watcher).await;
    assert_eq!(e.r#type, pb::JobEventType::StateChanged as i32);
    assert_eq!(e.job.unwrap().state, pb::JobState::Submitted as i32);

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    here.stop().await.unwrap();
}

#[derive(Default)]
struct Received {
    /// (webhook-id, answered status) of every delivery, in order.
    deliveries: Vec<(String, u16)>,
    /// Bodies of acknowledged deliveries.
    accepted: Vec<serde_json::Value>,
    failures_left: usize,
}

/// An alert receiver on 127.0.0.1:0 that verifies every delivery and fails
/// the first `fail_first` with 503.
async fn alert_receiver(secret: Secret, fail_first: usize) -> (SocketAddr, Arc<Mutex<Received>>) {
    let state = Arc::new(Mutex::new(Received {
        failures_left: fail_first,
        ..Received::default()
    }));
    let shared = state.clone();
    let app = axum::Router::new().route(
        "/alerts",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let shared = shared.clone();
            let secret = secret.clone();
            async move {
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let (id, ts, sig) = (
                    h("webhook-id"),
                    h("webhook-timestamp"),
                    h("webhook-signature"),
                );
                let verified = webhook::verify(
                    &[secret],
                    webhook::Headers {
                        id: id.as_deref(),
                        timestamp: ts.as_deref(),
                        signature: sig.as_deref(),
                    },
                    &body,
                    chrono::Utc::now().timestamp(),
                    webhook::DEFAULT_TOLERANCE_SECS,
                );
                let mut s = shared.lock().unwrap();
                let status = if verified.is_err() {
                    StatusCode::UNAUTHORIZED
                } else if s.failures_left > 0 {
                    s.failures_left -= 1;
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    s.accepted.push(serde_json::from_slice(&body).unwrap());
                    StatusCode::OK
                };
                s.deliveries.push((id.unwrap_or_default(), status.as_u16()));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, state)
}

/// With two server instances evaluating and delivering, the alert receiver
/// gets exactly one correctly signed alert per threshold crossing: the
/// crossing is recorded once (one outbox row), a failed delivery is retried
/// under the same webhook-id, and after a re-arm the next crossing sends a
/// new one.
#[tokio::test]
async fn two_replicas_send_one_signed_alert_per_crossing() {
    let secret = Secret::from_bytes(vec![42; 32]).unwrap();
    let (receiver, got) = alert_receiver(secret.clone(), 1).await;
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.alert_secret = Some(secret);
    args.alert_interval = Duration::from_millis(50);
    // The receiver listens on loopback, which alerts may reach only with
    // --alerts-allow-private-hosts.
    args.alerts_allow_private_hosts = true;
    let one = server::start(args.clone()).await.unwrap();
    let two = server::start(args).await.unwrap();
    let (mut l, _) = clients(one.grpc_addr).await;
    let policy = pb::LedgerPolicy {
        review_threshold: 2,
        alert_url: format!("http://{receiver}/alerts"),
        ..fast_policy()
    };
    create_ledger(&mut l, "a", policy).await;
    enroll(&mut l, "a", &["k1", "k2", "k3"]).await;
    let c = claim(&mut l, "a", "w", 3).await.claim.unwrap().name;
    report(&mut l, &c, vec![bad_request("k1"), bad_request("k2")]).await;

    let first = eventually("the first alert", || {
        let got = got.clone();
        async move { got.lock().unwrap().accepted.first().cloned() }
    })
    .await;
    assert_eq!(first["ledger"], "ledgers/a");
    assert_eq!(first["reason"], "threshold_crossed");
    assert_eq!(first["permanent"], 2);
    assert_eq!(first["permanent_by_rule"]["http_permanent"], 2);
    // Recorded once: one outbox row, delivered.
    let pool = one.store.pool();
    let rows: Vec<(String, bool)> = eventually("the delivery to be recorded", || async {
        let rows: Vec<(String, bool)> =
            sqlx::query_as("SELECT msg_id, sent_time IS NOT NULL FROM alert_outbox")
                .fetch_all(pool)
                .await
                .unwrap();
        rows.iter().all(|r| r.1).then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 1);
    {
        let s = got.lock().unwrap();
        let ids: HashSet<&String> = s.deliveries.iter().map(|(id, _)| id).collect();
        assert_eq!(
            ids,
            HashSet::from([&rows[0].0]),
            "retries keep the webhook-id"
        );
        let statuses: Vec<u16> = s.deliveries.iter().map(|(_, st)| *st).collect();
        assert_eq!(statuses, [503, 200]);
    }

    // Re-arm below the threshold, cross again: a second, new alert.
    l.redrive_rows(pb::RedriveRowsRequest {
        parent: "ledgers/a".into(),
        target: Some(pb::redrive_rows_request::Target::Keys(pb::RowKeys {
            keys: vec!["k1".into()],
        })),
        ..Default::default()
    })
    .await
    .unwrap();
    eventually("the re-arm", || async {
        let above: bool = sqlx::query_scalar("SELECT above FROM ledger_alerts")
            .fetch_one(pool)
            .await
            .unwrap();
        (!above).then_some(())
    })
    .await;
    let again = claim(&mut l, "a", "w", 3).await;
    let keys: Vec<&str> = again.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["k1"]);
    let c = again.claim.unwrap().name;
    report(&mut l, &c, vec![bad_request("k1")]).await;
    let second = eventually("the second alert", || {
        let got = got.clone();
        async move { got.lock().unwrap().accepted.get(1).cloned() }
    })
    .await;
    assert_eq!(second["reason"], "threshold_crossed");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM alert_outbox")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(rows, 2, "one alert per crossing");
    {
        let s = got.lock().unwrap();
        assert!(
            s.deliveries.iter().all(|(_, st)| *st != 401),
            "every delivery verifies"
        );
        assert_eq!(s.accepted.len(), 2);
    }
    let tries = |result| {
        let labels = tally_server::metrics::ResultLabels { result };
        one.metrics.alert_deliveries.get_or_create(&labels).get()
            + two.metrics.alert_deliveries.get_or_create(&labels).get()
    };
    // The receiver answered before the sender counted: poll.
    eventually("both deliveries to be counted", || async {
        (tries("delivered") == 2).then_some(())
    })
    .await;
    assert_eq!(tries("retry"), 1);
    one.stop().await.unwrap();
    two.stop().await.unwrap();
}

/// Graceful shutdown does not wait on open WatchJobs streams: with a long
/// grace period, stopping the server with a stream open completes within a
/// few seconds and the stream ends cleanly.
#[tokio::test]
async fn shutdown_with_an_open_watch_stream_completes_promptly() {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.shutdown_grace = Duration::from_secs(120);
    let r = server::start(args).await.unwrap();
    let (_, mut j) = clients(r.grpc_addr).await;
    let mut stream = watch(&mut j, "ledgers/-", 0).await;
    eventually("the stream to be counted", || async {
        (r.metrics.watch_streams.get() == 1).then_some(())
    })
    .await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), r.stop())
        .await
        .expect("shutdown within 10s")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None)), "a clean end, got {end:?}");
}

/// Invariants: MarkNotCreated with a provider refusal no wait fixes pauses
/// the job's ledger with that reason, the provider's words and the caller;
/// the rows go back with no attempt; a bad refusal value, or a refusal
/// with no reason, is INVALID_ARGUMENT naming the field and writes nothing;
/// a refusal or cool-down for a job that never attempted its create is
/// FAILED_PRECONDITION and writes nothing.
#[tokio::test]
async fn a_lasting_provider_refusal_pauses_the_ledger() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "q", fast_policy()).await;
    enroll(&mut l, "q", &["a", "b"]).await;
    let c = claim(&mut l, "q", "w", 10).await.claim.unwrap().name;
    let job = create_job(&mut j, &c).await.unwrap();
    let req = |refusal: i32, reason: &str| pb::MarkNotCreatedRequest {
        name: job.name.clone(),
        claim: c.clone(),
        reason: reason.into(),
        provider_cooldown: None,
        provider_refusal: refusal,
        ..Default::default()
    };
    for (bad, field) in [
        (req(9, "403"), "provider_refusal"),
        (req(pb::ProviderRefusal::Billing as i32, " "), "reason"),
    ] {
        let e = j.mark_not_created(bad).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        let details = e.get_details_bad_request().expect("field violations");
        assert_eq!(details.field_violations[0].field, field);
    }
    let ledger = |l: &mut Ledgers| {
        let mut l = l.clone();
        async move {
            l.get_ledger(pb::GetLedgerRequest {
                name: "ledgers/q".into(),
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    assert_eq!(ledger(&mut l).await.state, pb::LedgerState::Active as i32);

    // Only a job that attempted its create speaks for the provider: from a
    // PREPARING job a refusal (or a cool-down) is FAILED_PRECONDITION and
    // changes nothing.
    let billing = || {
        req(
            pb::ProviderRefusal::Billing as i32,
            "gemini answered 403: billing disabled",
        )
    };
    let e = j.mark_not_created(billing()).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        tally_client::error_reason(&e).as_deref(),
        Some("JOB_NOT_CREATING")
    );
    let mut cooling = req(0, "429");
    cooling.provider_cooldown = Some(prost_types::Duration {
        seconds: 3600,
        nanos: 0,
    });
    let e = j.mark_not_created(cooling).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(ledger(&mut l).await.state, pb::LedgerState::Active as i32);
    j.mark_creating(pb::MarkCreatingRequest {
        name: job.name.clone(),
        claim: c.clone(),
        input_file: "files/input-1".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    let job = j.mark_not_created(billing()).await.unwrap().into_inner();
    assert!(job.end_time.is_some());
    let got = ledger(&mut l).await;
    assert_eq!(got.state, pb::LedgerState::Paused as i32);
    let pause = got.pause.expect("a pause");
    assert_eq!(pause.reason, pb::LedgerPauseReason::Billing as i32);
    assert!(
        pause.message.contains("billing disabled"),
        "{}",
        pause.message
    );
    for key in ["a", "b"] {
        let row = get_row(&mut l, "q", key).await;
        assert_eq!(row.status, pb::RowStatus::Pending as i32);
        assert_eq!(row.attempts.unwrap().total, 0);
    }
    r.stop().await.unwrap();
}

/// Invariants: SetGoldenRows refuses every bad field by name and writes
/// nothing (GetGoldenRows stays NOT_FOUND); a good set reads back as set,
/// with its defaults.
#[tokio::test]
async fn golden_rows_are_checked_field_by_field() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "g", fast_policy()).await;
    let row = |key: &str, payload: &str, expected: &str, fields: &[&str]| pb::GoldenRow {
        key: key.into(),
        payload: payload.into(),
        prompt: None,
        expected: expected.into(),
        fields: fields.iter().map(|f| f.to_string()).collect(),
    };
    let bad = pb::GoldenSet {
        name: "ledgers/g/golden".into(),
        rows: vec![
            row("a", r#"{"t": 1}"#, r#"{"label": "x"}"#, &["label"]),
            row("a", "[1]", "{not json", &[]),
            row("b", r#"{"t": 1}"#, r#"{"label": "x"}"#, &["/score"]),
            pb::GoldenRow {
                prompt: Some(pb::PromptRef {
                    name: "nope".into(),
                    version: "".into(),
                }),
                ..row("c d", r#"{"t": 1}"#, "1", &[])
            },
        ],
        window: 5000,
        max_mismatch_fraction: 1.5,
        ..Default::default()
    };
    let e = l
        .set_golden_rows(pb::SetGoldenRowsRequest { golden: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let fields: BTreeSet<String> = e
        .get_details_bad_request()
        .expect("field violations")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    for f in [
        "golden.rows[0].fields",
        "golden.rows[1].key",
        "golden.rows[1].payload",
        "golden.rows[1].expected",
        "golden.rows[2].fields",
        "golden.rows[3].key",
        "golden.rows[3].prompt",
        "golden.window",
        "golden.max_mismatch_fraction",
    ] {
        assert!(fields.contains(f), "{f} missing from {fields:?}");
    }
    let get = |l: &mut Ledgers, name: &str| {
        let mut l = l.clone();
        let name = name.to_string();
        async move { l.get_golden_rows(pb::GetGoldenRowsRequest { name }).await }
    };
    assert_eq!(
        get(&mut l, "ledgers/g/golden").await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        get(&mut l, "ledgers/g").await.unwrap_err().code(),
        Code::InvalidArgument
    );

    let good = pb::GoldenSet {
        name: "ledgers/g/golden".into(),
        rows: vec![row(
            "a",
            r#"{"t": 1}"#,
            r#"{"label": "x", "n": 2}"#,
            &["/label"],
        )],
        ..Default::default()
    };
    l.set_golden_rows(pb::SetGoldenRowsRequest { golden: Some(good) })
        .await
        .unwrap();
    let got = get(&mut l, "ledgers/g/golden").await.unwrap().into_inner();
    assert_eq!(got.rows.len(), 1);
    assert_eq!(got.rows[0].fields, ["/label"]);
    assert_eq!((got.every_nth_job, got.window), (10, 20));
    assert_eq!(got.max_mismatch_fraction, 0.2);
    assert_eq!(got.drift.unwrap().results, 0);
    r.stop().await.unwrap();
}

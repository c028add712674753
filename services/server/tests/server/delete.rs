//! DeleteLedger through gRPC against real servers on port 0: status codes,
//! force, the deleting ledger's invisibility to every work RPC, its name
//! held while the purge runs, the background purge, and its resumption by
//! a server started after the one that took the delete stopped. Each test
//! states the invariant it checks; waits are polls with deadlines.

use std::time::{Duration, Instant};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{self, Running};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

const DEADLINE: Duration = Duration::from_secs(30);

type Ledgers = LedgerServiceClient<Channel>;
type Jobs = JobServiceClient<Channel>;

async fn serve(db: &TestDb, configure: impl FnOnce(&mut ServeArgs)) -> Running {
    let mut args = ServeArgs::for_tests(db.url().to_string());
    configure(&mut args);
    server::start(args).await.expect("server starts")
}

async fn clients(r: &Running) -> (Ledgers, Jobs) {
    let ch = Channel::from_shared(format!("http://{}", r.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (
        LedgerServiceClient::new(ch.clone()),
        JobServiceClient::new(ch),
    )
}

async fn ledger_with_rows(l: &mut Ledgers, id: &str, rows: usize) {
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: id.into(),
        policy: None,
    })
    .await
    .unwrap();
    let rows: Vec<pb::RowInput> = (0..rows)
        .map(|i| pb::RowInput {
            key: format!("k{i:05}"),
            payload: format!("{{\"n\": {i}}}"),
            ..Default::default()
        })
        .collect();
    for chunk in rows.chunks(5000) {
        l.enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{id}"),
            rows: chunk.to_vec(),
        })
        .await
        .unwrap();
    }
}

async fn claim(l: &mut Ledgers, id: &str, n: i32) -> pb::ClaimRowsResponse {
    l.claim_rows(pb::ClaimRowsRequest {
        parent: format!("ledgers/{id}"),
        max_rows: n,
        worker: "w".into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

fn delete(id: &str, force: bool) -> pb::DeleteLedgerRequest {
    pb::DeleteLedgerRequest {
        name: format!("ledgers/{id}"),
        force,
        etag: String::new(),
        content_etag: String::new(),
    }
}

fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, Status>) -> Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

async fn get(l: &mut Ledgers, id: &str) -> Result<pb::Ledger, Status> {
    l.get_ledger(pb::GetLedgerRequest {
        name: format!("ledgers/{id}"),
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Polls GetLedger until `done` says so (or the deadline passes).
async fn until(
    l: &mut Ledgers,
    id: &str,
    what: &str,
    done: impl Fn(&Result<pb::Ledger, Status>) -> bool,
) {
    let start = Instant::now();
    loop {
        let r = get(l, id).await;
        if done(&r) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: still {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn summary(l: &mut Ledgers, id: &str) -> pb::LedgerSummary {
    l.summarize_ledger(pb::SummarizeLedgerRequest {
        name: format!("ledgers/{id}"),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

// Invariant: a delete of a ledger with a live claim and an open job is
// refused with FAILED_PRECONDITION (LEDGER_ACTIVE, with the counts) and
// writes nothing; a bad name or etag is INVALID_ARGUMENT, an unknown
// ledger NOT_FOUND, a stale etag ABORTED; with force the ledger is DELETING
// at once, its claim expired and job abandoned, every work RPC on it
// answers NOT_FOUND (late reports included), lists leave it out unless
// asked, and CreateLedger with its id is ALREADY_EXISTS while the name is
// held; another ledger is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_force_and_invisibility() {
    let db = TestDb::new().await;
    // The name stays held for an hour after the contents are gone.
    let running = serve(&db, |a| a.purge.purge_settle = Duration::from_secs(3600)).await;
    let (mut l, mut j) = clients(&running).await;
    ledger_with_rows(&mut l, "busy", 50).await;
    ledger_with_rows(&mut l, "other", 50).await;
    let other_before = summary(&mut l, "other").await;
    let c = claim(&mut l, "busy", 10).await;
    let held = claim(&mut l, "busy", 5).await;
    let claim_name = c.claim.clone().unwrap().name;
    j.create_job(pb::CreateJobRequest {
        claim: claim_name.clone(),
        ..Default::default()
    })
    .await
    .unwrap();

    assert_eq!(
        code(l.delete_ledger(delete("nope", false)).await),
        Code::NotFound
    );
    let mut bad = delete("busy", false);
    bad.name = "ledgers/Bad_Id".into();
    assert_eq!(code(l.delete_ledger(bad).await), Code::InvalidArgument);
    let mut bad = delete("busy", true);
    bad.etag = "not-a-number".into();
    assert_eq!(code(l.delete_ledger(bad).await), Code::InvalidArgument);

    let refused = l.delete_ledger(delete("busy", false)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    let info = refused.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.reason, "LEDGER_ACTIVE");
    assert_eq!(info.metadata["live_claims"], "2");
    assert_eq!(info.metadata["open_jobs"], "1");
    let ledger = get(&mut l, "busy").await.unwrap();
    assert_eq!(ledger.state, pb::LedgerState::Active as i32);
    assert!(ledger.delete_time.is_none());

    let mut stale = delete("busy", true);
    stale.etag = (ledger.etag.parse::<i64>().unwrap() + 1).to_string();
    assert_eq!(code(l.delete_ledger(stale).await), Code::Aborted);

    let mut forced = delete("busy", true);
    forced.etag = ledger.etag.clone();
    let deleted = l.delete_ledger(forced).await.unwrap().into_inner();
    assert_eq!(deleted.state, pb::LedgerState::Deleting as i32);
    assert!(deleted.delete_time.is_some());
    let purge = deleted.purge.unwrap();
    assert_eq!(
        (
            purge.forced,
            purge.rows_total,
            purge.claims_expired,
            purge.jobs_abandoned
        ),
        (true, None, 2, 1)
    );

    // Every work RPC: NOT_FOUND.
    let parent = "ledgers/busy".to_string();
    let row = pb::RowInput {
        key: "new".into(),
        payload: "{}".into(),
        ..Default::default()
    };
    let codes = [
        (
            "EnrollRows",
            code(
                l.enroll_rows(pb::EnrollRowsRequest {
                    parent: parent.clone(),
                    rows: vec![row],
                })
                .await,
            ),
        ),
        (
            "ClaimRows",
            code(
                l.claim_rows(pb::ClaimRowsRequest {
                    parent: parent.clone(),
                    max_rows: 5,
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "ReportOutcomes",
            code(
                l.report_outcomes(pb::ReportOutcomesRequest {
                    claim: held.claim.clone().unwrap().name,
                    outcomes: vec![pb::RowOutcome {
                        key: held.rows[0].key.clone(),
                        outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
                        ..Default::default()
                    }],
                    claim_next: None,
                })
                .await,
            ),
        ),
        (
            "ExtendClaim",
            code(
                l.extend_claim(pb::ExtendClaimRequest {
                    name: held.claim.clone().unwrap().name,
                    lease: None,
                })
                .await,
            ),
        ),
        (
            "ListRows",
            code(
                l.list_rows(pb::ListRowsRequest {
                    parent: parent.clone(),
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "GetRow",
            code(
                l.get_row(pb::GetRowRequest {
                    name: "ledgers/busy/rows/k00001".into(),
                })
                .await,
            ),
        ),
        (
            "SummarizeLedger",
            code(
                l.summarize_ledger(pb::SummarizeLedgerRequest {
                    name: parent.clone(),
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "UpdateLedger",
            code(
                l.update_ledger(pb::UpdateLedgerRequest {
                    ledger: Some(pb::Ledger {
                        name: parent.clone(),
                        ..Default::default()
                    }),
                    update_mask: Some(prost_types::FieldMask {
                        paths: vec!["policy.model".into()],
                    }),
                })
                .await,
            ),
        ),
        (
            "CreateJob",
            code(
                j.create_job(pb::CreateJobRequest {
                    claim: held.claim.clone().unwrap().name,
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "ListJobs",
            code(
                j.list_jobs(pb::ListJobsRequest {
                    parent: parent.clone(),
                    ..Default::default()
                })
                .await,
            ),
        ),
    ];
    for (rpc, c) in codes {
        assert_eq!(c, Code::NotFound, "{rpc} on a deleting ledger");
    }

    // The name is held, and says why.
    let taken = l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "busy".into(),
            policy: None,
        })
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists);
    assert!(
        taken.message().contains("being deleted"),
        "{}",
        taken.message()
    );
    // Deleting again answers the same deletion.
    let again = l
        .delete_ledger(delete("busy", false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.delete_time, deleted.delete_time);

    // Lists: left out unless asked.
    let listed = l
        .list_ledgers(pb::ListLedgersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = listed.ledgers.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["ledgers/other"]);
    let all = l
        .list_ledgers(pb::ListLedgersRequest {
            show_deleted: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let states: Vec<_> = all
        .ledgers
        .iter()
        .map(|x| (x.name.as_str(), x.state))
        .collect();
    assert_eq!(
        states,
        [
            ("ledgers/busy", pb::LedgerState::Deleting as i32),
            ("ledgers/other", pb::LedgerState::Active as i32)
        ]
    );

    // The purge empties it in the background; the name stays held.
    until(&mut l, "busy", "rows purged", |r| {
        r.as_ref().is_ok_and(|x| {
            x.purge
                .is_some_and(|p| p.rows_purged == 50 && p.rows_total == Some(50))
        })
    })
    .await;
    assert_eq!(
        get(&mut l, "busy").await.unwrap().state,
        pb::LedgerState::Deleting as i32
    );
    // The other ledger is as it was, and still works.
    assert_eq!(summary(&mut l, "other").await, other_before);
    assert_eq!(claim(&mut l, "other", 5).await.rows.len(), 5);
    running.stop().await.unwrap();
}

// Invariant: a delete taken by a server that stops before purging is
// finished by the next server on the database, with no further call; then
// the ledger is NOT_FOUND, its id free for a new, empty ledger, and every
// table holds nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_purge_resumes_after_a_restart() {
    let db = TestDb::new().await;
    // One batch of 10, then a pause longer than the test: the purge is cut
    // short by the stop.
    let first = serve(&db, |a| {
        a.purge.purge_batch = 10;
        a.purge.purge_pause = Duration::from_secs(3600);
    })
    .await;
    let (mut l, _) = clients(&first).await;
    ledger_with_rows(&mut l, "old", 2000).await;
    let id: i64 = sqlx::query_scalar("SELECT id FROM ledgers WHERE name = 'old'")
        .fetch_one(first.store.pool())
        .await
        .unwrap();
    l.delete_ledger(delete("old", false)).await.unwrap();
    first.stop().await.unwrap();
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM rows WHERE ledger_id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(left > 0, "the first server did not finish the purge");

    let second = serve(&db, |_| {}).await;
    let (mut l, _) = clients(&second).await;
    until(
        &mut l,
        "old",
        "purge finished",
        |r| matches!(r, Err(s) if s.code() == Code::NotFound),
    )
    .await;
    for table in ["rows", "runnable", "ledger_models", "ledger_purges"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE ledger_id = $1"
        )))
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(n, 0, "{table}");
    }
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: "old".into(),
        policy: None,
    })
    .await
    .unwrap();
    assert_eq!(summary(&mut l, "old").await.total, 0);
    second.stop().await.unwrap();
}

// Invariant: DeleteLedger with the content etag read before an export is
// refused FAILED_PRECONDITION (LEDGER_CHANGED) once a row was enrolled
// since, and the ledger keeps every row; a content etag this server did
// not issue is INVALID_ARGUMENT; the etag as read deletes the ledger.
#[tokio::test]
async fn a_delete_carrying_a_content_etag_is_refused_after_a_write() {
    let db = TestDb::new().await;
    let r = serve(&db, |_| {}).await;
    let (mut l, _) = clients(&r).await;
    ledger_with_rows(&mut l, "arch", 3).await;
    let read = summary(&mut l, "arch").await.content_etag;
    assert!(read.starts_with("c1-"), "{read}");
    let with = |content_etag: &str| pb::DeleteLedgerRequest {
        name: "ledgers/arch".into(),
        force: false,
        etag: String::new(),
        content_etag: content_etag.into(),
    };
    let bad = l.delete_ledger(with("42")).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");

    l.enroll_rows(pb::EnrollRowsRequest {
        parent: "ledgers/arch".into(),
        rows: vec![pb::RowInput {
            key: "late".into(),
            payload: "{}".into(),
            ..Default::default()
        }],
    })
    .await
    .unwrap();
    let changed = l.delete_ledger(with(&read)).await.unwrap_err();
    assert_eq!(changed.code(), Code::FailedPrecondition, "{changed:?}");
    let info = changed.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.reason, "LEDGER_CHANGED");
    assert_eq!(summary(&mut l, "arch").await.total, 4);

    let now = summary(&mut l, "arch").await.content_etag;
    assert_ne!(now, read);
    let deleted = l.delete_ledger(with(&now)).await.unwrap().into_inner();
    assert!(deleted.delete_time.is_some());
    r.stop().await.unwrap();
}

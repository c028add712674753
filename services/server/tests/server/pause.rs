//! PauseLedger and ResumeLedger through gRPC against a real server on port
//! 0: what a paused ledger answers (an empty claim saying why, CreateJob
//! refused with LEDGER_PAUSED), what it still does (reports, enrollment),
//! the views (GetLedger, ListLedgers, SummarizeLedger, WatchJobs), and the
//! refusals (bad input, stale etag, a deleting ledger). Who may call them
//! is checked with every other RPC in security/matrix.rs. Each test states
//! the invariant it checks.

use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{self, Running};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

pub(crate) type Ledgers = LedgerServiceClient<Channel>;
pub(crate) type Jobs = JobServiceClient<Channel>;

pub(crate) struct Env {
    pub(crate) _db: TestDb,
    pub(crate) server: Running,
    pub(crate) l: Ledgers,
    pub(crate) j: Jobs,
}

pub(crate) async fn env() -> Env {
    let db = TestDb::new().await;
    let server = server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts");
    let ch = Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Env {
        _db: db,
        server,
        l: LedgerServiceClient::new(ch.clone()),
        j: JobServiceClient::new(ch),
    }
}

pub(crate) async fn ledger_with_rows(l: &mut Ledgers, id: &str, rows: usize) -> pb::Ledger {
    let created = l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: None,
        })
        .await
        .unwrap()
        .into_inner();
    enroll(l, id, 0..rows).await;
    created
}

async fn enroll(l: &mut Ledgers, id: &str, keys: std::ops::Range<usize>) {
    let rows = keys
        .map(|i| pb::RowInput {
            key: format!("k{i:03}"),
            payload: format!("{{\"n\": {i}}}"),
            ..Default::default()
        })
        .collect();
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: format!("ledgers/{id}"),
        rows,
    })
    .await
    .unwrap();
}

pub(crate) async fn claim(l: &mut Ledgers, id: &str, n: i32) -> pb::ClaimRowsResponse {
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

pub(crate) fn pause(id: &str, message: &str, etag: &str) -> pb::PauseLedgerRequest {
    pb::PauseLedgerRequest {
        name: format!("ledgers/{id}"),
        message: message.into(),
        etag: etag.into(),
    }
}

fn resume(id: &str, etag: &str) -> pb::ResumeLedgerRequest {
    pb::ResumeLedgerRequest {
        name: format!("ledgers/{id}"),
        etag: etag.into(),
    }
}

pub(crate) fn refused<T: std::fmt::Debug>(r: Result<tonic::Response<T>, Status>) -> Status {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s,
    }
}

async fn get(l: &mut Ledgers, id: &str) -> pb::Ledger {
    l.get_ledger(pb::GetLedgerRequest {
        name: format!("ledgers/{id}"),
    })
    .await
    .unwrap()
    .into_inner()
}

pub(crate) async fn summary(l: &mut Ledgers, id: &str) -> pb::LedgerSummary {
    l.summarize_ledger(pb::SummarizeLedgerRequest {
        name: format!("ledgers/{id}"),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// A paused ledger answers ClaimRows with no claim and the pause (nothing
/// held, every row still PENDING); a claim made before the pause is still
/// reported, but cannot become a job (FAILED_PRECONDITION, ErrorInfo
/// LEDGER_PAUSED); rows can still be enrolled; every view says PAUSED with
/// reason, message and actor; a resume hands out claims again.
#[tokio::test]
async fn a_paused_ledger_claims_nothing_finishes_what_is_out_and_resumes() {
    let Env {
        _db,
        server,
        mut l,
        mut j,
    } = env().await;
    ledger_with_rows(&mut l, "p", 5).await;
    let before = claim(&mut l, "p", 2).await;
    let live = before.claim.expect("a claim before the pause");

    let paused = l
        .pause_ledger(pause("p", "provider incident", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(paused.state(), pb::LedgerState::Paused);
    let p = paused.pause.clone().expect("the pause");
    assert_eq!(p.reason(), pb::LedgerPauseReason::Operator);
    assert_eq!(p.message, "provider incident");
    assert!(!p.actor.is_empty() && p.pause_time.is_some());

    let none = claim(&mut l, "p", 10).await;
    assert!(none.claim.is_none() && none.rows.is_empty());
    assert_eq!(none.pause, Some(p.clone()));

    let s = refused(
        j.create_job(pb::CreateJobRequest {
            claim: live.name.clone(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    let info = s
        .get_error_details()
        .error_info()
        .cloned()
        .expect("ErrorInfo");
    assert_eq!(info.reason, "LEDGER_PAUSED");
    assert_eq!(
        info.metadata.get("pause_reason").map(String::as_str),
        Some("operator")
    );

    let r = l
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: live.name.clone(),
            outcomes: before
                .rows
                .iter()
                .map(|row| pb::RowOutcome {
                    key: row.key.clone(),
                    outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
                    usage: None,
                    ..Default::default()
                })
                .collect(),
            claim_next: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.succeeded, 2);
    enroll(&mut l, "p", 5..7).await;

    assert_eq!(get(&mut l, "p").await.pause, Some(p.clone()));
    let listed = l
        .list_ledgers(pb::ListLedgersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.ledgers[0].state(), pb::LedgerState::Paused);
    let sum = summary(&mut l, "p").await;
    assert_eq!(sum.state(), pb::LedgerState::Paused);
    assert_eq!(sum.pause, Some(p));
    assert_eq!((sum.pending, sum.running, sum.succeeded), (5, 0, 2));
    assert!(
        sum.summary_line
            .starts_with("PAUSED reason=operator succeeded=2 "),
        "{}",
        sum.summary_line
    );

    let resumed = l.resume_ledger(resume("p", "")).await.unwrap().into_inner();
    assert_eq!(resumed.state(), pb::LedgerState::Active);
    assert!(resumed.pause.is_none());
    let after = claim(&mut l, "p", 10).await;
    assert_eq!(after.rows.len(), 5);
    assert!(after.pause.is_none());
    let sum = summary(&mut l, "p").await;
    assert_eq!(sum.state(), pb::LedgerState::Active);
    assert!(
        sum.summary_line.starts_with("succeeded=2 "),
        "{}",
        sum.summary_line
    );
    server.stop().await.unwrap();
}

/// Bad requests are INVALID_ARGUMENT and write nothing; a stale etag is
/// ABORTED and writes nothing; the current etag works; a second pause and
/// a resume of an active ledger answer OK without changing it; a ledger
/// being deleted (or unknown) is NOT_FOUND.
#[tokio::test]
async fn refusals_and_idempotent_calls() {
    let Env {
        _db, server, mut l, ..
    } = env().await;
    let created = ledger_with_rows(&mut l, "p", 1).await;
    let long = "x".repeat(1025);
    for (req, field) in [
        (pause("p", "", ""), "message"),
        (pause("p", "  ", ""), "message"),
        (pause("p", &long, ""), "message"),
        (pause("p", "why", "not-an-etag"), "etag"),
        (pause("P!", "why", ""), "name"),
    ] {
        let s = refused(l.pause_ledger(req).await);
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        let bad = s
            .get_error_details()
            .bad_request()
            .cloned()
            .expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, field);
    }
    let stale = (created.etag.parse::<i64>().unwrap() - 1).to_string();
    let s = refused(l.pause_ledger(pause("p", "why", &stale)).await);
    assert_eq!(s.code(), Code::Aborted, "{s:?}");
    let unchanged = get(&mut l, "p").await;
    assert_eq!(
        (unchanged.state(), unchanged.etag.as_str()),
        (pb::LedgerState::Active, created.etag.as_str())
    );

    let again = l.resume_ledger(resume("p", "")).await.unwrap().into_inner();
    assert_eq!(again.etag, created.etag);
    let paused = l
        .pause_ledger(pause("p", "first", &created.etag))
        .await
        .unwrap()
        .into_inner();
    let twice = l
        .pause_ledger(pause("p", "second", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(twice.etag, paused.etag);
    assert_eq!(twice.pause.unwrap().message, "first");
    let s = refused(l.resume_ledger(resume("p", &created.etag)).await);
    assert_eq!(s.code(), Code::Aborted, "{s:?}");

    l.delete_ledger(pb::DeleteLedgerRequest {
        name: "ledgers/p".into(),
        force: false,
        etag: String::new(),
        content_etag: String::new(),
    })
    .await
    .unwrap();
    for s in [
        refused(l.pause_ledger(pause("p", "why", "")).await),
        refused(l.resume_ledger(resume("p", "")).await),
        refused(l.pause_ledger(pause("nope", "why", "")).await),
    ] {
        assert_eq!(s.code(), Code::NotFound, "{s:?}");
    }
    server.stop().await.unwrap();
}

/// WatchJobs shows a pause and a resume to the ledger's watchers, in
/// sequence after the job events before them, with the ledger and the
/// pause and without a job.
#[tokio::test]
async fn watchers_see_the_pause_and_the_resume() {
    let Env {
        _db,
        server,
        mut l,
        mut j,
    } = env().await;
    ledger_with_rows(&mut l, "p", 2).await;
    let c = claim(&mut l, "p", 1).await.claim.unwrap();
    j.create_job(pb::CreateJobRequest {
        claim: c.name,
        ..Default::default()
    })
    .await
    .unwrap();
    l.pause_ledger(pause("p", "look at the prompt", ""))
        .await
        .unwrap();
    l.resume_ledger(resume("p", "")).await.unwrap();

    let mut stream = j
        .watch_jobs(pb::WatchJobsRequest {
            parent: "ledgers/p".into(),
            after_sequence: -1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    for _ in 0..3 {
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
            .await
            .expect("an event in time")
            .unwrap()
            .expect("the stream goes on");
        events.push(e);
    }
    let types: Vec<_> = events.iter().map(|e| e.r#type()).collect();
    assert_eq!(
        types,
        [
            pb::JobEventType::Created,
            pb::JobEventType::LedgerPaused,
            pb::JobEventType::LedgerResumed
        ]
    );
    assert!(events.iter().all(|e| e.ledger == "ledgers/p"));
    assert!(events[0].job.is_some() && events[1].job.is_none() && events[2].job.is_none());
    let p = events[1].pause.as_ref().expect("the pause");
    assert_eq!(
        (p.reason(), p.message.as_str()),
        (pb::LedgerPauseReason::Operator, "look at the prompt")
    );
    assert!(events[2].pause.is_none());
    server.stop().await.unwrap();
}

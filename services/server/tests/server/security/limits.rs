//! Each limit hit through a real server and answered with its code while
//! the server keeps serving other calls.
//!
//! Calls are held in flight deterministically by locking the `ledgers`
//! table from the test: GetLedger then waits on the lock inside the server,
//! and the test waits until PostgreSQL reports those waiters.

use crate::security::common::*;
use sqlx::Connection as _;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt as _;

/// A transaction holding `ledgers` in ACCESS EXCLUSIVE mode until dropped.
async fn lock_ledgers(server: &TestServer) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(server.db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("LOCK TABLE ledgers IN ACCESS EXCLUSIVE MODE")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

async fn unlock(mut conn: sqlx::PgConnection) {
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
}

/// GetLedger calls of this database waiting on a lock. Only GetLedger's
/// statement counts (it reads the purge columns, `p.rows_purged`): the
/// server's own background readers of `ledgers` (the backlog refresher,
/// the purger) can wait on the same lock at any moment, and counting them
/// made "both calls wait" sometimes never exactly true.
async fn lock_waiters(server: &TestServer) -> i64 {
    let mut conn = sqlx::PgConnection::connect(server.db.url()).await.unwrap();
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query LIKE '%p.rows_purged%'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

async fn get_ledger(channel: Channel) -> Result<pb::Ledger, tonic::Status> {
    LedgerServiceClient::new(channel)
        .get_ledger(authed(
            pb::GetLedgerRequest {
                name: "ledgers/held".into(),
            },
            Some(OPERATOR),
        ))
        .await
        .map(|r| r.into_inner())
}

/// A call that touches no locked table.
async fn get_prompt(channel: Channel) -> Result<(), tonic::Status> {
    let missing = LedgerServiceClient::new(channel)
        .get_prompt(authed(
            pb::GetPromptRequest {
                name: "prompts/none/versions/v1".into(),
            },
            Some(OPERATOR),
        ))
        .await;
    match missing {
        Err(s) if s.code() == Code::NotFound || s.code() == Code::InvalidArgument => Ok(()),
        Err(s) => Err(s),
        Ok(_) => Ok(()),
    }
}

async fn create_ledger(channel: Channel, id: &str) {
    LedgerServiceClient::new(channel)
        .create_ledger(authed(
            pb::CreateLedgerRequest {
                ledger_id: id.into(),
                policy: None,
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap();
}

async fn health_check(channel: Channel) -> Result<(), tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|_| ())
}

async fn health_watch(
    channel: Channel,
) -> Result<tonic::Streaming<tonic_health::pb::HealthCheckResponse>, tonic::Status> {
    HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn oversized_messages_and_row_counts_are_refused_naming_the_limit() {
    let server = start(|a| {
        a.limits.max_message_bytes = 4096;
        a.limits.max_rows_per_call = 3;
        a.limits.max_claim_rows = 2;
    })
    .await;
    let channel = server.connect().await;
    create_ledger(channel.clone(), "small").await;
    let mut ledgers = LedgerServiceClient::new(channel.clone());
    let row = |key: &str, payload: String| pb::RowInput {
        key: key.into(),
        payload,
        ..Default::default()
    };

    // A message over its method's limit: RESOURCE_EXHAUSTED from its length
    // prefix, as the gRPC status codes document (tonic's own decoder would
    // say OUT_OF_RANGE).
    let big = format!(r#"{{"text": "{}"}}"#, "x".repeat(8192));
    let too_big = ledgers
        .enroll_rows(authed(
            pb::EnrollRowsRequest {
                parent: "ledgers/small".into(),
                rows: vec![row("a", big)],
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), Code::ResourceExhausted, "{too_big:?}");
    assert!(too_big.message().contains("4096"), "{too_big:?}");

    let rows: Vec<pb::RowInput> = (0..4)
        .map(|i| row(&format!("k{i}"), r#"{"a": 1}"#.into()))
        .collect();
    let too_many = ledgers
        .enroll_rows(authed(
            pb::EnrollRowsRequest {
                parent: "ledgers/small".into(),
                rows,
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert!(
        too_many.message().contains("max_rows_per_call"),
        "{too_many:?}"
    );
    assert!(too_many.get_error_details().bad_request().is_some());

    let outcomes: Vec<pb::RowOutcome> = (0..4)
        .map(|i| pb::RowOutcome {
            key: format!("k{i}"),
            outcome: Some(pb::row_outcome::Outcome::Result("1".into())),
            usage: None,
            ..Default::default()
        })
        .collect();
    let report = ledgers
        .report_outcomes(authed(
            pb::ReportOutcomesRequest {
                claim: format!("ledgers/small/claims/{}", uuid::Uuid::new_v4()),
                outcomes,
                claim_next: None,
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(report.code(), Code::InvalidArgument);
    assert!(report.message().contains("max_rows_per_call"), "{report:?}");

    let claim = ledgers
        .claim_rows(authed(
            pb::ClaimRowsRequest {
                parent: "ledgers/small".into(),
                max_rows: 3,
                ..Default::default()
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(claim.code(), Code::InvalidArgument);
    assert!(claim.message().contains("max_claim_rows"), "{claim:?}");

    // And the server goes on serving calls within the limits.
    let ok = ledgers
        .enroll_rows(authed(
            pb::EnrollRowsRequest {
                parent: "ledgers/small".into(),
                rows: vec![row("a", r#"{"a": 1}"#.into())],
            },
            Some(OPERATOR),
        ))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_full_call_budget_sheds_with_resource_exhausted_while_others_are_served() {
    let server = start(|a| {
        a.limits.max_concurrent_calls = 2;
        a.limits.max_calls_per_connection = 8;
    })
    .await;
    let channel = server.connect().await;
    create_ledger(channel.clone(), "held").await;

    let lock = lock_ledgers(&server).await;
    let first = tokio::spawn(get_ledger(channel.clone()));
    let second = tokio::spawn(get_ledger(channel.clone()));
    eventually("both calls wait on the lock", || async {
        lock_waiters(&server).await == 2
    })
    .await;

    // Load shedding: the third call is refused at once, not queued.
    let shed = get_prompt(channel.clone()).await.unwrap_err();
    assert_eq!(shed.code(), Code::ResourceExhausted, "{shed:?}");
    assert_eq!(reason(&shed), "TOO_MANY_CALLS");
    assert!(shed.message().contains("max_concurrent_calls"));
    assert!(shed.get_error_details().retry_info().is_some());
    // Health checks and streams are other budgets.
    health_check(channel.clone()).await.unwrap();
    let mut watch = health_watch(channel.clone()).await.unwrap();
    assert!(watch.message().await.unwrap().is_some());
    drop(watch);

    unlock(lock).await;
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    // A call that ended has freed its slot by the time its client sees it.
    get_prompt(channel.clone()).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn stream_and_connection_budgets_shed_with_resource_exhausted() {
    let server = start(|a| {
        // Health watches carry no token: they take the tokenless budget.
        a.limits.max_anonymous_streams = 3;
        a.limits.max_calls_per_connection = 2;
    })
    .await;
    let a = server.connect().await;
    let b = server.connect().await;

    let a1 = health_watch(a.clone()).await.unwrap();
    let _a2 = health_watch(a.clone()).await.unwrap();
    let over = health_watch(a.clone()).await.unwrap_err();
    assert_eq!(over.code(), Code::ResourceExhausted, "{over:?}");
    assert_eq!(reason(&over), "CONNECTION_LIMIT");
    assert!(over.message().contains("max_calls_per_connection"));

    let _b1 = health_watch(b.clone()).await.unwrap();
    let full = health_watch(b.clone()).await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    assert_eq!(reason(&full), "TOO_MANY_ANONYMOUS_STREAMS");
    assert!(full.message().contains("max_anonymous_streams"));

    // Unary calls on another connection are served meanwhile.
    let c = server.connect().await;
    get_prompt(c.clone()).await.unwrap();
    health_check(c).await.unwrap();

    // Hanging up frees the slot (the server notices on its own time).
    drop(a1);
    eventually("a freed stream slot is reused", || {
        let b = b.clone();
        async move { health_watch(b).await.is_ok() }
    })
    .await;
    server.stop().await;
}

/// Invariant: a call held past `--request-timeout` ends DEADLINE_EXCEEDED
/// (REQUEST_TIMEOUT) while other calls are served, and a stream ends
/// UNAVAILABLE (STREAM_MAX_AGE) at `--max-stream-age`. The limits leave every
/// unheld call seconds: at 500 ms a CreateLedger on a loaded CI machine
/// once ran past the limit itself.
#[tokio::test]
async fn slow_calls_time_out_and_streams_end_at_their_maximum_age() {
    let server = start(|a| {
        a.limits.request_timeout = Duration::from_secs(3);
        a.limits.max_stream_age = Duration::from_secs(2);
    })
    .await;
    let channel = server.connect().await;
    create_ledger(channel.clone(), "held").await;

    let lock = lock_ledgers(&server).await;
    let slow = get_ledger(channel.clone()).await.unwrap_err();
    assert_eq!(slow.code(), Code::DeadlineExceeded, "{slow:?}");
    assert_eq!(reason(&slow), "REQUEST_TIMEOUT");
    assert!(slow.message().contains("request_timeout"));
    // Others are served while the ledgers table is still locked.
    get_prompt(channel.clone()).await.unwrap();
    unlock(lock).await;
    get_ledger(channel.clone()).await.unwrap();

    // A health watch answers at once, then the server ends it at its age.
    let mut watch = health_watch(channel.clone()).await.unwrap();
    assert!(watch.message().await.unwrap().is_some());
    let ended = loop {
        match watch.message().await {
            Ok(Some(_)) => continue, // a status change (SERVING) may come first
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert_eq!(reason(&ended), "STREAM_MAX_AGE");
    assert!(ended.message().contains("max_stream_age"));
    health_check(channel).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams_instead_of_waiting_for_them() {
    let server = start(|a| a.shutdown_grace = Duration::from_secs(60)).await;
    let channel = server.connect().await;
    let mut watch = health_watch(channel).await.unwrap();
    assert!(watch.message().await.unwrap().is_some());
    let TestServer { running, db } = server;
    // Without ending streams the drain would wait the whole 60 s grace.
    tokio::time::timeout(Duration::from_secs(30), running.stop())
        .await
        .expect("shutdown does not wait for open streams")
        .unwrap();
    // Messages already produced are delivered before the stream ends, so a
    // watcher sees NOT_SERVING, then the end.
    let mut last = None;
    let ended = loop {
        match watch.message().await {
            Ok(Some(m)) => last = Some(m.status()),
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(last, Some(ServingStatus::NotServing));
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert_eq!(reason(&ended), "SHUTTING_DOWN");
    drop(db);
}

/// Invariant: calls in flight are limited per principal over all of its
/// connections (`--max-calls-per-principal`): with one operator call held,
/// the operator's next call on another connection is refused
/// PRINCIPAL_CALL_LIMIT, while another principal's call goes through.
#[tokio::test]
async fn calls_in_flight_are_limited_per_principal_across_connections() {
    let server = start(|a| {
        a.limits.max_calls_per_principal = 1;
    })
    .await;
    create_ledger(server.connect().await, "held").await;
    let lock = lock_ledgers(&server).await;
    let held = tokio::spawn(get_ledger(server.connect().await));
    eventually("the operator's call waits on the lock", || async {
        lock_waiters(&server).await == 1
    })
    .await;
    let other_connection = server.connect().await;
    let refused = get_prompt(other_connection.clone()).await;
    assert_refused(refused, Code::ResourceExhausted, "PRINCIPAL_CALL_LIMIT");
    // The worker is another principal.
    let worker = LedgerServiceClient::new(other_connection.clone())
        .get_prompt(authed(
            pb::GetPromptRequest {
                name: "prompts/none/versions/v1".into(),
            },
            Some(WORKER),
        ))
        .await;
    assert_eq!(worker.unwrap_err().code(), Code::NotFound);
    unlock(lock).await;
    held.await.unwrap().expect("the held call finishes");
    get_prompt(other_connection).await.expect("a slot again");
    server.stop().await;
}

/// Invariant: request bytes are limited per principal
/// (`--principal-byte-rate`, a burst of one largest request): a second
/// large enroll right after the first is refused RATE_LIMITED with a
/// RetryInfo, before its body is read; another principal is not affected.
#[tokio::test]
async fn request_bytes_are_limited_per_principal() {
    let server = start(|a| {
        a.limits.max_message_bytes = 64 * 1024;
        a.limits.principal_byte_rate = 1;
    })
    .await;
    let channel = server.connect().await;
    create_ledger(channel.clone(), "bytes").await;
    let enroll = |key: &str| pb::EnrollRowsRequest {
        parent: "ledgers/bytes".into(),
        rows: vec![pb::RowInput {
            key: key.into(),
            payload: format!(r#"{{"text": "{}"}}"#, "x".repeat(40 * 1024)),
            ..Default::default()
        }],
    };
    let mut ledgers = LedgerServiceClient::new(channel);
    ledgers
        .enroll_rows(authed(enroll("a"), Some(ENROLLER)))
        .await
        .expect("the first fits the burst");
    let refused = ledgers
        .enroll_rows(authed(enroll("b"), Some(ENROLLER)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "RATE_LIMITED");
    assert!(refused.message().contains("principal_byte_rate"));
    assert!(refused.get_error_details().retry_info().is_some());
    ledgers
        .enroll_rows(authed(enroll("c"), Some(OPERATOR)))
        .await
        .expect("another principal has its own bytes");
    server.stop().await;
}

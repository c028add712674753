//! Shared setup: a real server on port 0 against a fresh database, test
//! tokens for each role, and raw gRPC calls to any method path.

use http::uri::PathAndQuery;
use std::future::Future;
use std::time::Duration;
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::{AuthMode, ServeArgs};
use tally_server::edge::auth::tokens::hash_hex;
use tally_server::startup::server::{self, Running};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt as _;

pub const ENROLLER: &str = "tally_test-enroller-token";
pub const WORKER: &str = "tally_test-worker-token";
pub const OPERATOR: &str = "tally_test-operator-token";
pub const WRONG: &str = "tally_not-a-configured-token";

/// The tokens document: one token per role, named after the role's user.
pub fn tokens_json(certificates: &str) -> String {
    format!(
        r#"{{"tokens": [
            {{"name": "enroll-svc", "roles": ["enroller"], "ledgers": ["*"], "sha256": "{}"}},
            {{"name": "worker-pool", "roles": ["worker"], "ledgers": ["*"], "sha256": "{}"}},
            {{"name": "alice", "roles": ["operator"], "ledgers": ["*"], "sha256": "{}"}}
        ],
        "certificates": [{certificates}]}}"#,
        hash_hex(ENROLLER),
        hash_hex(WORKER),
        hash_hex(OPERATOR)
    )
}

pub struct TestServer {
    pub running: Running,
    pub db: TestDb,
}

/// Starts a server with auth on (the test tokens) after `configure`.
pub async fn start(configure: impl FnOnce(&mut ServeArgs)) -> TestServer {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.security.auth = AuthMode::Tokens;
    args.security.tokens = Some(tokens_json(""));
    configure(&mut args);
    let running = server::start(args).await.expect("server starts");
    TestServer { running, db }
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.running.grpc_addr)
    }

    /// A new connection (each `Channel` is one HTTP/2 connection).
    pub async fn connect(&self) -> Channel {
        Endpoint::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    pub async fn stop(self) {
        self.running.stop().await.expect("clean stop");
    }
}

/// `msg` with `authorization: Bearer token` when a token is given.
pub fn authed<T>(msg: T, token: Option<&str>) -> Request<T> {
    let mut req = Request::new(msg);
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    req
}

/// Calls `path` with an empty request message. For streaming methods,
/// success means the server accepted the call and sent response headers.
pub async fn call_empty(
    channel: &Channel,
    path: &str,
    streaming: bool,
    token: Option<&str>,
) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let path = PathAndQuery::try_from(path).unwrap();
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    if streaming {
        grpc.server_streaming(authed((), token), path, codec)
            .await
            .map(|_| ())
    } else {
        grpc.unary(authed((), token), path, codec).await.map(|_| ())
    }
}

/// The ErrorInfo reason of a status ("" without one).
pub fn reason(status: &Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

/// Asserts `result` failed with `code` and ErrorInfo `reason`.
pub fn assert_refused<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, why: &str) {
    match result {
        Ok(v) => panic!("expected {code:?} {why}, got {v:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{s:?}");
            assert_eq!(reason(&s), why, "{s:?}");
        }
    }
}

/// Polls `check` until it answers true; fails after 20 s. For conditions
/// the server reaches on its own (a slot freed after a client hung up).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client and the token it sends (`None`: a client certificate speaks).
pub type As = (LedgerServiceClient<Channel>, Option<&'static str>);

/// An operator creates ledger `id` and enrolls one row; a worker claims it
/// and reports a success; the operator reads the row back with its
/// attempts history.
pub async fn one_reported_row(operator: As, worker: As, id: &str) -> pb::Row {
    let (mut admin, admin_token) = operator;
    let (mut work, work_token) = worker;
    admin
        .create_ledger(authed(
            pb::CreateLedgerRequest {
                ledger_id: id.into(),
                policy: None,
            },
            admin_token,
        ))
        .await
        .expect("create ledger");
    let parent = format!("ledgers/{id}");
    admin
        .enroll_rows(authed(
            pb::EnrollRowsRequest {
                parent: parent.clone(),
                rows: vec![pb::RowInput {
                    key: "k1".into(),
                    payload: r#"{"text": "hello"}"#.into(),
                    ..Default::default()
                }],
            },
            admin_token,
        ))
        .await
        .expect("enroll");
    let claimed = work
        .claim_rows(authed(
            pb::ClaimRowsRequest {
                parent,
                max_rows: 1,
                worker: "test-worker".into(),
                ..Default::default()
            },
            work_token,
        ))
        .await
        .expect("claim")
        .into_inner();
    let claim = claimed.claim.expect("a row was claimable");
    work.report_outcomes(authed(
        pb::ReportOutcomesRequest {
            claim: claim.name,
            outcomes: vec![pb::RowOutcome {
                key: "k1".into(),
                outcome: Some(pb::row_outcome::Outcome::Result(r#"{"ok": true}"#.into())),
                usage: None,
                ..Default::default()
            }],
            claim_next: None,
        },
        work_token,
    ))
    .await
    .expect("report");
    admin
        .get_row(authed(
            pb::GetRowRequest {
                name: format!("ledgers/{id}/rows/k1"),
            },
            admin_token,
        ))
        .await
        .expect("get row")
        .into_inner()
}

/// Creates ledger `id` (with `policy`) holding `n` rows and claims them
/// all as the worker; returns the claim's name.
pub async fn claimed(
    server: &TestServer,
    id: &str,
    policy: Option<pb::LedgerPolicy>,
    n: usize,
) -> String {
    let mut l = LedgerServiceClient::new(server.connect().await);
    l.create_ledger(authed(
        pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy,
        },
        Some(OPERATOR),
    ))
    .await
    .expect("create ledger");
    let parent = format!("ledgers/{id}");
    let rows = (0..n)
        .map(|i| pb::RowInput {
            key: format!("k{i}"),
            payload: r#"{"text": "hi"}"#.into(),
            ..Default::default()
        })
        .collect();
    l.enroll_rows(authed(
        pb::EnrollRowsRequest {
            parent: parent.clone(),
            rows,
        },
        Some(OPERATOR),
    ))
    .await
    .expect("enroll");
    let claim = l
        .claim_rows(authed(
            pb::ClaimRowsRequest {
                parent,
                max_rows: n as i32,
                worker: "w".into(),
                ..Default::default()
            },
            Some(WORKER),
        ))
        .await
        .expect("claim")
        .into_inner()
        .claim
        .expect("rows were claimable");
    assert_eq!(claim.row_count as usize, n);
    claim.name
}

//! The harness every scenario shares: a real server on a fresh database
//! (DATABASE_URL's server, or the private test cluster), a real generated
//! client connected to it, request builders, and assertions on statuses and
//! on the database.
//!
//! Two things keep the tests honest without sleeping:
//! - the claim sweeper is off by default (its interval is an hour), so nothing
//!   writes in the background and "nothing was written" compares exact
//!   snapshots; the one test that needs the sweeper turns it on;
//! - ledgers get a zero backoff, so a RETRYABLE row is claimable at once.

#![allow(dead_code)]

use sqlx::PgPool;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{Running, start};
use tonic::transport::Channel;
use tonic::{Code, Response, Status};
use tonic_types::StatusExt;

pub type Client = LedgerServiceClient<Channel>;

/// A running server on its own database, and a client for it.
pub struct Env {
    client: Client,
    running: Option<Running>,
    /// One statement digesting every table (see [`Env::snapshot`]).
    snapshot_sql: String,
    // Declared last, so dropped last: after `stop` the server is gone by
    // then; after a panic the drop (WITH FORCE) cuts its connections.
    _db: TestDb,
}

/// A server with the test defaults (see the module docs).
pub async fn env() -> Env {
    Env::start_with(|_| {}).await
}

impl Env {
    /// A server whose arguments `tweak` adjusts (limits, sweeper).
    pub async fn start_with(tweak: impl FnOnce(&mut ServeArgs)) -> Env {
        let db = TestDb::new().await;
        let mut args = ServeArgs::for_tests(db.url().to_string());
        args.sweep_interval = Duration::from_secs(3600);
        tweak(&mut args);
        let running = start(args).await.expect("the server starts");
        let client = LedgerServiceClient::connect(format!("http://{}", running.grpc_addr))
            .await
            .expect("the client connects");
        let snapshot_sql = snapshot_sql(running.store.pool()).await;
        Env {
            client,
            running: Some(running),
            snapshot_sql,
            _db: db,
        }
    }

    /// A client for the server (clones share one connection).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Where the server listens for gRPC.
    pub fn grpc_addr(&self) -> std::net::SocketAddr {
        self.running().grpc_addr
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("the server is running")
    }

    /// The server's own connection pool, for checks the API cannot make.
    pub fn pool(&self) -> &PgPool {
        self.running().store.pool()
    }

    /// Stops the server in order and checks that it stopped cleanly.
    pub async fn stop(mut self) {
        let running = self.running.take().expect("the server is running");
        tokio::time::timeout(Duration::from_secs(10), running.stop())
            .await
            .expect("the server stops within 10s")
            .expect("the server stops cleanly");
    }

    // ---- ledgers ---------------------------------------------------------

    /// Creates ledger `id` with small budgets (provider 3, content 1,
    /// infra 2) and a zero backoff, so retries are claimable at once. A zero
    /// backoff cannot be set on create (zero takes the default there), so it
    /// is set with an UpdateLedger.
    pub async fn ledger(&self, id: &str) -> pb::Ledger {
        self.client()
            .create_ledger(pb::CreateLedgerRequest {
                ledger_id: id.into(),
                policy: Some(pb::LedgerPolicy {
                    budgets: Some(pb::AttemptBudgets {
                        provider: 3,
                        content: 1,
                        infra: 2,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .expect("create ledger");
        self.client()
            .update_ledger(pb::UpdateLedgerRequest {
                ledger: Some(pb::Ledger {
                    name: ledger_name(id),
                    policy: Some(pb::LedgerPolicy {
                        backoff: Some(pb::Backoff {
                            initial: Some(secs(0)),
                            max: Some(secs(0)),
                            multiplier: 1.0,
                            jitter: 0.0,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                update_mask: Some(mask(&["policy.backoff"])),
            })
            .await
            .expect("zero the backoff")
            .into_inner()
    }

    pub async fn get_ledger(&self, id: &str) -> pb::Ledger {
        self.client()
            .get_ledger(pb::GetLedgerRequest {
                name: ledger_name(id),
            })
            .await
            .expect("get ledger")
            .into_inner()
    }

    // ---- rows ------------------------------------------------------------

    pub async fn enroll(&self, ledger: &str, rows: Vec<pb::RowInput>) -> pb::EnrollRowsResponse {
        self.client()
            .enroll_rows(pb::EnrollRowsRequest {
                parent: ledger_name(ledger),
                rows,
            })
            .await
            .expect("enroll rows")
            .into_inner()
    }

    /// Enrolls `n` independent rows `{prefix}{i}`.
    pub async fn enroll_n(&self, ledger: &str, prefix: &str, n: usize) {
        let rows = (0..n).map(|i| row(&format!("{prefix}{i}"))).collect();
        let r = self.enroll(ledger, rows).await;
        assert_eq!(r.enrolled as usize, n);
    }

    pub async fn get_row(&self, ledger: &str, key: &str) -> pb::Row {
        self.client()
            .get_row(pb::GetRowRequest {
                name: format!("ledgers/{ledger}/rows/{key}"),
            })
            .await
            .expect("get row")
            .into_inner()
    }

    pub async fn status_of(&self, ledger: &str, key: &str) -> pb::RowStatus {
        self.get_row(ledger, key).await.status()
    }

    pub async fn summary(&self, ledger: &str) -> pb::LedgerSummary {
        self.client()
            .summarize_ledger(pb::SummarizeLedgerRequest {
                name: ledger_name(ledger),
                ..Default::default()
            })
            .await
            .expect("summarize")
            .into_inner()
    }

    // ---- claims and reports ----------------------------------------------

    /// Claims up to `max_rows` rows; `None` when nothing is runnable.
    pub async fn claim(&self, ledger: &str, max_rows: i32) -> Option<Grant> {
        self.claim_with(pb::ClaimRowsRequest {
            parent: ledger_name(ledger),
            max_rows,
            worker: "e2e-worker".into(),
            ..Default::default()
        })
        .await
    }

    pub async fn claim_with(&self, req: pb::ClaimRowsRequest) -> Option<Grant> {
        let resp = self
            .client()
            .claim_rows(req)
            .await
            .expect("claim rows")
            .into_inner();
        match resp.claim {
            None => {
                assert!(resp.rows.is_empty(), "rows without a claim");
                None
            }
            Some(claim) => Some(Grant {
                claim,
                rows: resp.rows,
            }),
        }
    }

    pub async fn report(
        &self,
        claim: &str,
        outcomes: Vec<pb::RowOutcome>,
    ) -> pb::ReportOutcomesResponse {
        self.client()
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: claim.into(),
                outcomes,
                claim_next: None,
            })
            .await
            .expect("report outcomes")
            .into_inner()
    }

    /// Makes a claim's lease run out now, on the database clock.
    pub async fn expire(&self, claim: &pb::Claim) {
        let token = claim_token(&claim.name);
        let n = sqlx::query(
            "UPDATE claims SET expire_time = now() - interval '1 second' WHERE token = $1",
        )
        .bind(token)
        .execute(self.pool())
        .await
        .expect("expire the claim")
        .rows_affected();
        assert_eq!(n, 1, "no claim {}", claim.name);
    }

    // ---- nothing written -------------------------------------------------

    /// Every table's row count and a digest of its contents.
    pub async fn snapshot(&self) -> Snapshot {
        let rows: Vec<(String, i64, String)> =
            sqlx::query_as(sqlx::AssertSqlSafe(self.snapshot_sql.clone()))
                .fetch_all(self.pool())
                .await
                .expect("digest the tables");
        Snapshot(rows.into_iter().map(|(t, n, d)| (t, (n, d))).collect())
    }

    /// Runs a call that must fail; checks that the database is exactly as
    /// before it; returns the status for the caller to examine.
    pub async fn rejected<T: std::fmt::Debug>(
        &self,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Status {
        let before = self.snapshot().await;
        let result = call.await;
        let after = self.snapshot().await;
        let status = match result {
            Ok(resp) => panic!("expected an error, got {:?}", resp.into_inner()),
            Err(s) => s,
        };
        assert_unchanged(&before, &after, &status);
        status
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // A test that panicked never called `stop`: at least start the
        // shutdown; the runtime ending finishes it.
        if let Some(r) = &self.running {
            r.stop_token().cancel();
        }
    }
}

/// One statement answering (table, row count, md5 of its sorted rows) for
/// every table of the schema, migrations included. The tables are listed
/// once, after the server migrated.
async fn snapshot_sql(pool: &PgPool) -> String {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(tablename) FROM pg_tables
         WHERE schemaname = current_schema() ORDER BY tablename",
    )
    .fetch_all(pool)
    .await
    .expect("list tables");
    assert!(
        tables.iter().any(|t| t == "rows"),
        "no rows table: {tables:?}"
    );
    tables
        .iter()
        .map(|t| {
            // Safe: names come from quote_ident.
            format!(
                "SELECT '{t}'::text, count(*), \
                 coalesce(md5(string_agg(x::text, E'\\n' ORDER BY x::text)), '') FROM {t} x"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// What every table held at one moment.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<String, (i64, String)>);

fn assert_unchanged(before: &Snapshot, after: &Snapshot, status: &Status) {
    let changed: Vec<&String> = before
        .0
        .iter()
        .filter(|(t, d)| after.0.get(*t) != Some(d))
        .map(|(t, _)| t)
        .collect();
    assert!(
        changed.is_empty() && before.0.len() == after.0.len(),
        "a rejected call ({:?}: {}) wrote to {changed:?}",
        status.code(),
        status.message()
    );
}

/// A claim and the rows it leased.
#[derive(Debug, Clone)]
pub struct Grant {
    pub claim: pb::Claim,
    pub rows: Vec<pb::ClaimedRow>,
}

impl Grant {
    pub fn keys(&self) -> Vec<String> {
        self.rows.iter().map(|r| r.key.clone()).collect()
    }
}

// ---- builders ------------------------------------------------------------

pub fn ledger_name(id: &str) -> String {
    format!("ledgers/{id}")
}

pub fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

pub fn mask(paths: &[&str]) -> prost_types::FieldMask {
    prost_types::FieldMask {
        paths: paths.iter().map(|p| p.to_string()).collect(),
    }
}

/// A row whose payload names its key.
pub fn row(key: &str) -> pb::RowInput {
    pb::RowInput {
        key: key.into(),
        payload: format!(r#"{{"text": "{key}"}}"#),
        ..Default::default()
    }
}

pub fn row_deps(key: &str, deps: &[&str]) -> pb::RowInput {
    pb::RowInput {
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        ..row(key)
    }
}

pub fn row_payload(key: &str, payload: &str) -> pb::RowInput {
    pb::RowInput {
        payload: payload.into(),
        ..row(key)
    }
}

pub fn usage(input: i64, output: i64) -> pb::Usage {
    pb::Usage {
        input_tokens: input,
        output_tokens: output,
        ..Default::default()
    }
}

/// A success with a JSON result naming the key.
pub fn success(key: &str, input_tokens: i64, output_tokens: i64) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(pb::row_outcome::Outcome::Result(format!(
            r#"{{"answer": "{key}"}}"#
        ))),
        usage: Some(usage(input_tokens, output_tokens)),
        ..Default::default()
    }
}

/// A provider error with an HTTP-like code.
pub fn failure(key: &str, http_code: i32) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: pb::FailureKind::ProviderError as i32,
            http_code,
            message: format!("http {http_code}"),
            ..Default::default()
        })),
        usage: Some(usage(10, 0)),
        ..Default::default()
    }
}

/// The fencing token inside `ledgers/{ledger}/claims/{token}`.
pub fn claim_token(name: &str) -> uuid::Uuid {
    let id = name.rsplit('/').next().expect("a claim name");
    uuid::Uuid::parse_str(id).expect("a claim token")
}

pub fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

// ---- status assertions -----------------------------------------------------

/// INVALID_ARGUMENT whose BadRequest names exactly `fields`, in order, each
/// with a description.
#[track_caller]
pub fn assert_invalid(status: &Status, fields: &[&str]) {
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "expected INVALID_ARGUMENT naming {fields:?}, got {:?}: {}",
        status.code(),
        status.message()
    );
    let details = status.get_error_details();
    let bad = details
        .bad_request()
        .unwrap_or_else(|| panic!("no BadRequest detail on {:?}", status.message()));
    let got: Vec<&str> = bad
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(got, fields, "field violations of {:?}", status.message());
    for v in &bad.field_violations {
        assert!(!v.description.is_empty(), "{} has no description", v.field);
    }
}

/// NOT_FOUND whose ResourceInfo names the resource.
#[track_caller]
pub fn assert_not_found(status: &Status, kind: &str, name: &str) {
    assert_resource(status, Code::NotFound, kind, name);
}

/// ALREADY_EXISTS whose ResourceInfo names the resource.
#[track_caller]
pub fn assert_already_exists(status: &Status, kind: &str, name: &str) {
    assert_resource(status, Code::AlreadyExists, kind, name);
}

#[track_caller]
fn assert_resource(status: &Status, code: Code, kind: &str, name: &str) {
    assert_eq!(
        status.code(),
        code,
        "expected {code:?} for {name}, got {:?}: {}",
        status.code(),
        status.message()
    );
    let details = status.get_error_details();
    let info = details
        .resource_info()
        .unwrap_or_else(|| panic!("no ResourceInfo on {:?}", status.message()));
    assert_eq!(
        (info.resource_type.as_str(), info.resource_name.as_str()),
        (kind, name)
    );
}

/// FAILED_PRECONDITION with an ErrorInfo (domain `tally.v1`) and a
/// PreconditionFailure, both carrying `reason`.
#[track_caller]
pub fn assert_precondition(status: &Status, reason: &str) {
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "expected FAILED_PRECONDITION {reason}, got {:?}: {}",
        status.code(),
        status.message()
    );
    let details = status.get_error_details();
    let info = details.error_info().expect("an ErrorInfo detail");
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        (reason, "tally.v1")
    );
    let pre = details
        .precondition_failure()
        .expect("a PreconditionFailure detail");
    assert_eq!(pre.violations[0].r#type, reason);
}

//! Crash tests for DESIGN.md invariant 9: killing the server or its
//! PostgreSQL connections at any point loses no acknowledged write, and
//! after a restart everything converges.
//!
//! Clients record exactly what the server acknowledged (an OK answer and
//! its per-row verdicts); after the fault, the database and GetRow must
//! hold all of it. The fault is injected after a fixed number of
//! acknowledged calls, and every wait is a poll of an observable condition
//! under a deadline, never a sleep that a race could outrun.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Bound on every wait; generous, as crash recovery includes a lease expiry.
const DEADLINE: Duration = Duration::from_secs(60);

use crate::process;
use process::spawn_server_process;
/// How often a bounded wait looks again.
const POLL: Duration = Duration::from_millis(20);
/// The model of the rows the churning clients enroll and claim.
const CHURN_MODEL: &str = "churn-model";
/// The model of the rows the test itself claims and never reports.
const HELD_MODEL: &str = "held-model";
const LEDGER: &str = "crash";

type Ledgers = LedgerServiceClient<Channel>;

fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

/// Retries after a millisecond, and an infra budget large enough that a rescue after
/// a crash never ends a row PERMANENT: the ledger must converge to
/// SUCCEEDED.
fn policy() -> pb::LedgerPolicy {
    let one_ms = prost_types::Duration {
        seconds: 0,
        nanos: 1_000_000,
    };
    pb::LedgerPolicy {
        model: CHURN_MODEL.into(),
        budgets: Some(pb::AttemptBudgets {
            provider: 4,
            content: 1,
            infra: 50,
        }),
        // A zero would take the 30s default: one millisecond is "at once".
        backoff: Some(pb::Backoff {
            initial: Some(one_ms),
            max: Some(one_ms),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn payload(key: &str) -> String {
    format!("{{\"text\": \"{key}\"}}")
}

/// The claim id inside a claim name.
fn token_of(claim: &str) -> uuid::Uuid {
    claim.rsplit('/').next().unwrap().parse().unwrap()
}

/// The result reported for `key` by `claim`: distinct per claim, so a stored
/// result names the report that wrote it.
fn result_for(key: &str, claim: &str) -> String {
    format!("{{\"key\": \"{key}\", \"claim\": \"{}\"}}", token_of(claim))
}

fn success(key: &str, claim: &str) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(pb::row_outcome::Outcome::Result(result_for(key, claim))),
        usage: None,
        ..Default::default()
    }
}

fn enroll_request(keys: &[String], model: &str) -> pb::EnrollRowsRequest {
    pb::EnrollRowsRequest {
        parent: format!("ledgers/{LEDGER}"),
        rows: keys
            .iter()
            .map(|k| pb::RowInput {
                key: k.clone(),
                payload: payload(k),
                model: model.into(),
                ..Default::default()
            })
            .collect(),
    }
}

fn claim_request(max: i32, lease: i64, model: &str, request_id: &str) -> pb::ClaimRowsRequest {
    pb::ClaimRowsRequest {
        parent: format!("ledgers/{LEDGER}"),
        max_rows: max,
        lease: Some(secs(lease)),
        worker: "crash-test".into(),
        request_id: request_id.into(),
        model: model.into(),
        ..Default::default()
    }
}

fn report_request(claim: &str, keys: &[String]) -> pb::ReportOutcomesRequest {
    pb::ReportOutcomesRequest {
        claim: claim.into(),
        outcomes: keys.iter().map(|k| success(k, claim)).collect(),
        claim_next: None,
    }
}

/// What the server acknowledged, as the clients saw it.
#[derive(Default)]
struct Acked {
    /// Every key a client tried to enroll, acknowledged or not.
    attempted: BTreeSet<String>,
    /// Keys whose enrollment was answered OK (ENROLLED or ALREADY_PRESENT).
    enrolled: BTreeSet<String>,
    /// Claims answered OK, with the keys each leased.
    claims: BTreeMap<String, Vec<String>>,
    /// Keys a report answered SUCCEEDED (or DUPLICATE, the same report
    /// again) for: the claim and the result reported.
    succeeded: BTreeMap<String, (String, String)>,
    /// Calls answered OK.
    calls: usize,
}

impl Acked {
    fn record_enroll(&mut self, resp: &pb::EnrollRowsResponse) {
        for r in &resp.results {
            let outcome = pb::EnrollOutcome::try_from(r.outcome).unwrap();
            assert!(
                matches!(
                    outcome,
                    pb::EnrollOutcome::Enrolled | pb::EnrollOutcome::AlreadyPresent
                ),
                "enrolling {} answered {outcome:?}",
                r.key
            );
            self.enrolled.insert(r.key.clone());
        }
        self.calls += 1;
    }

    /// Records the rows a report settled. `may_be_stale`: the claim's lease
    /// is short enough that a slow machine may see it run out (a STALE
    /// verdict acknowledges nothing).
    fn record_report(
        &mut self,
        claim: &str,
        resp: &pb::ReportOutcomesResponse,
        may_be_stale: bool,
    ) {
        for v in &resp.verdicts {
            let verdict = pb::Verdict::try_from(v.verdict).unwrap();
            if may_be_stale && verdict == pb::Verdict::Stale {
                continue;
            }
            assert!(
                matches!(verdict, pb::Verdict::Succeeded | pb::Verdict::Duplicate),
                "a success reported by a live claim answered {verdict:?} for {}",
                v.key
            );
            self.succeeded.insert(
                v.key.clone(),
                (claim.to_string(), result_for(&v.key, claim)),
            );
        }
        self.calls += 1;
    }
}

/// A row as stored, with its attempt history counted.
#[derive(Debug, sqlx::FromRow)]
struct StoredRow {
    key: String,
    payload: String,
    status: i16,
    result: Option<String>,
    rule: String,
    attempts: i32,
    infra_failures: i32,
    /// Rows of `attempts` for this row.
    history: i64,
    /// Of those, SUCCEEDED attempts.
    successes: i64,
}

const SUCCEEDED: i16 = pb::RowStatus::Succeeded as i16;
const RUNNING: i16 = pb::RowStatus::Running as i16;
const RETRYABLE: i16 = pb::RowStatus::Retryable as i16;

async fn stored_rows(pool: &PgPool) -> BTreeMap<String, StoredRow> {
    let rows: Vec<StoredRow> = sqlx::query_as(
        "SELECT r.key, r.payload, r.status, r.result, r.rule, r.attempts, r.infra_failures,
                (SELECT count(*) FROM attempts a
                  WHERE a.ledger_id = r.ledger_id AND a.row_id = r.id) AS history,
                (SELECT count(*) FROM attempts a
                  WHERE a.ledger_id = r.ledger_id AND a.row_id = r.id
                    AND a.outcome = 4) AS successes
         FROM rows r JOIN ledgers l ON l.id = r.ledger_id
         WHERE l.name = $1",
    )
    .bind(LEDGER)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter().map(|r| (r.key.clone(), r)).collect()
}

/// A pool for the test's own reads, under an application name the
/// terminations never match.
async fn check_pool(db: &TestDb) -> PgPool {
    let opts = PgConnectOptions::from_str(db.url())
        .unwrap()
        .application_name("tally-crash-test");
    PgPoolOptions::new()
        .max_connections(2)
        .connect_with(opts)
        .await
        .unwrap()
}

/// Polls `cond` until it holds; panics with `what` after [`DEADLINE`].
async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Starts `tally-server` as a separate process on `db` (see
/// `process.rs`); expired claims are swept every 100ms.
async fn spawn_server(db: &TestDb) -> (SocketAddr, tokio::process::Child) {
    spawn_server_process(
        db,
        &[
            "--sweep-interval",
            "100ms",
            "--health-interval",
            "200ms",
            "--db-max-connections",
            "8",
        ],
    )
    .await
}

async fn connect(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the server")
}

async fn create_ledger(l: &mut Ledgers) {
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: LEDGER.into(),
        policy: Some(policy()),
    })
    .await
    .unwrap();
}

/// Enrolls, claims and reports in a loop, recording every acknowledged
/// call, until a call fails; answers that failure. Each claim is reported
/// in two halves, so a crash can land between them.
async fn churn_until_error(mut l: Ledgers, worker: usize, acked: Arc<Mutex<Acked>>) -> Status {
    for batch in 0.. {
        let keys: Vec<String> = (0..4).map(|i| format!("w{worker}-b{batch}-{i}")).collect();
        acked.lock().unwrap().attempted.extend(keys.iter().cloned());
        match l.enroll_rows(enroll_request(&keys, "")).await {
            Ok(r) => acked.lock().unwrap().record_enroll(r.get_ref()),
            Err(s) => return s,
        }
        let grant = match l.claim_rows(claim_request(4, 3, CHURN_MODEL, "")).await {
            Ok(r) => r.into_inner(),
            Err(s) => return s,
        };
        let Some(claim) = grant.claim else {
            acked.lock().unwrap().calls += 1;
            continue;
        };
        let held: Vec<String> = grant.rows.iter().map(|r| r.key.clone()).collect();
        {
            let mut a = acked.lock().unwrap();
            a.claims.insert(claim.name.clone(), held.clone());
            a.calls += 1;
        }
        for half in held.chunks(2) {
            match l.report_outcomes(report_request(&claim.name, half)).await {
                Ok(r) => acked
                    .lock()
                    .unwrap()
                    .record_report(&claim.name, r.get_ref(), true),
                Err(s) => return s,
            }
        }
    }
    unreachable!()
}

/// Claims and reports (with a long lease) until nothing is runnable and
/// every row is SUCCEEDED, for a ledger whose writers have stopped.
async fn drain(l: &mut Ledgers, pool: &PgPool) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "the ledger did not converge");
        let grant = l
            .claim_rows(claim_request(50, 60, "", ""))
            .await
            .unwrap()
            .into_inner();
        match grant.claim {
            Some(claim) => {
                let keys: Vec<String> = grant.rows.iter().map(|r| r.key.clone()).collect();
                let resp = l
                    .report_outcomes(report_request(&claim.name, &keys))
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(resp.succeeded as usize, keys.len(), "{resp:?}");
            }
            None => {
                let rows = stored_rows(pool).await;
                if rows.values().all(|r| r.status == SUCCEEDED) {
                    return;
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Checks that every acknowledged write is in the database and visible
/// through GetRow: every acknowledged enroll is present with its payload,
/// every acknowledged success is SUCCEEDED with the result its claim
/// reported and a SUCCEEDED attempt of that claim in its history.
async fn assert_acknowledged_writes_durable(l: &mut Ledgers, pool: &PgPool, acked: &Acked) {
    let rows = stored_rows(pool).await;
    for key in &acked.enrolled {
        let row = rows
            .get(key)
            .unwrap_or_else(|| panic!("acknowledged enroll of {key} was lost"));
        assert_eq!(row.payload, payload(key), "{key}");
    }
    for (key, (claim, result)) in &acked.succeeded {
        let row = rows
            .get(key)
            .unwrap_or_else(|| panic!("row {key} with an acknowledged success was lost"));
        assert_eq!(row.status, SUCCEEDED, "acknowledged success of {key} lost");
        assert_eq!(row.result.as_deref(), Some(result.as_str()), "{key}");
        let got = l
            .get_row(pb::GetRowRequest {
                name: format!("ledgers/{LEDGER}/rows/{key}"),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.status, pb::RowStatus::Succeeded as i32, "{key}");
        assert_eq!(&got.result, result, "{key}");
        assert!(
            got.history
                .iter()
                .any(|a| &a.claim == claim && a.outcome == pb::RowStatus::Succeeded as i32),
            "{key}: no SUCCEEDED attempt of {claim} in {:?}",
            got.history
        );
    }
}

/// Invariant 9, killing the server: several clients enroll, claim and
/// report against a `tally-server` process that is SIGKILLed with calls in
/// flight. After a restart on the same database every acknowledged enroll
/// and every acknowledged SUCCEEDED report is there, with its result; rows
/// of claims the crash left unreported stay RUNNING under their claim until
/// its lease expires, are then rescued (one infra attempt, RETRYABLE) and
/// can be claimed and finished; the ledger converges to all SUCCEEDED with
/// each row's attempt count equal to its history (invariant 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_server_loses_no_acknowledged_write() {
    const WORKERS: usize = 4;
    const CALLS_BEFORE_KILL: usize = 60;
    let db = TestDb::new().await;
    let pool = check_pool(&db).await;
    let (addr, mut child) = spawn_server(&db).await;
    let mut l = LedgerServiceClient::new(connect(addr).await);
    create_ledger(&mut l).await;
    // Rows the test claims just before the kill and never reports: a claim
    // the crash certainly leaves open.
    let held_keys: Vec<String> = (0..3).map(|i| format!("held-{i}")).collect();
    l.enroll_rows(enroll_request(&held_keys, HELD_MODEL))
        .await
        .unwrap();

    let acked = Arc::new(Mutex::new(Acked::default()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let client = l.clone();
            let acked = acked.clone();
            tokio::spawn(churn_until_error(client, w, acked))
        })
        .collect();
    wait_for("acknowledged calls before the kill", || {
        let n = acked.lock().unwrap().calls;
        async move { n >= CALLS_BEFORE_KILL }
    })
    .await;
    let held = l
        .claim_rows(claim_request(10, 3, HELD_MODEL, ""))
        .await
        .unwrap()
        .into_inner();
    let held_claim = held.claim.expect("the held rows are claimable").name;
    assert_eq!(held.rows.len(), held_keys.len());
    acked
        .lock()
        .unwrap()
        .claims
        .insert(held_claim.clone(), held_keys.clone());
    child.kill().await.expect("SIGKILL tally-server");

    for w in workers {
        let status = tokio::time::timeout(DEADLINE, w)
            .await
            .expect("a client noticed the crash")
            .unwrap();
        eprintln!(
            "client stopped by the crash: {:?} {}",
            status.code(),
            status.message()
        );
    }
    let acked = Arc::try_unwrap(acked)
        .ok()
        .expect("workers are done")
        .into_inner()
        .unwrap();
    assert!(acked.calls >= CALLS_BEFORE_KILL);

    let (addr, mut child) = spawn_server(&db).await;
    let mut l = LedgerServiceClient::new(connect(addr).await);
    assert_acknowledged_writes_durable(&mut l, &pool, &acked).await;

    // Rows of claims left open by the crash: until the claim's lease ends,
    // RUNNING under that claim (unless an unacknowledged report of the
    // claim committed). One statement, so `expired` and the row's state are
    // read from one snapshot.
    let mut open_rows = BTreeSet::new();
    for (claim, keys) in &acked.claims {
        let open: Vec<&String> = keys
            .iter()
            .filter(|k| !acked.succeeded.contains_key(*k))
            .collect();
        if open.is_empty() {
            continue;
        }
        let states: Vec<(String, i16, Option<uuid::Uuid>, bool, bool)> = sqlx::query_as(
            "SELECT r.key,
                    CASE WHEN c.state = 1 AND r.id = ANY(c.row_ids) THEN 2::int2 ELSE r.status END,
                    CASE WHEN c.state = 1 AND r.id = ANY(c.row_ids) THEN c.token END,
                    c.expire_time <= now(),
                    EXISTS (SELECT 1 FROM attempts a
                             WHERE a.ledger_id = r.ledger_id AND a.row_id = r.id
                               AND a.claim_id = c.token AND a.outcome = 4)
             FROM rows r JOIN ledgers l ON l.id = r.ledger_id
                         JOIN claims c ON c.token = $2
             WHERE l.name = $1 AND r.key = ANY($3)",
        )
        .bind(LEDGER)
        .bind(token_of(claim))
        .bind(open.iter().map(|k| k.to_string()).collect::<Vec<_>>())
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(states.len(), open.len(), "rows of {claim} missing");
        for (key, status, holder, expired, reported) in states {
            assert!(
                reported || expired || (status == RUNNING && holder == Some(token_of(claim))),
                "{key} of the open claim {claim} is {status} held by {holder:?} before its lease ended"
            );
            if !reported {
                open_rows.insert(key);
            }
        }
    }
    assert!(held_keys.iter().all(|k| open_rows.contains(k)));

    // The sweeper rescues every claim the crash left open.
    wait_for("open claims to be rescued", || {
        let pool = pool.clone();
        async move {
            let active: i64 = sqlx::query_scalar("SELECT count(*) FROM claims WHERE state = 1")
                .fetch_one(&pool)
                .await
                .unwrap();
            active == 0
        }
    })
    .await;
    let rows = stored_rows(&pool).await;
    for key in &open_rows {
        let r = &rows[key];
        assert!(
            (r.status == SUCCEEDED && r.successes == 1)
                || (r.status == RETRYABLE && r.rule == "lease_expired" && r.infra_failures == 1),
            "{key} after the rescue: {r:?}"
        );
    }
    for key in &held_keys {
        let r = &rows[key];
        assert_eq!(
            (r.status, r.rule.as_str(), r.infra_failures),
            (RETRYABLE, "lease_expired", 1),
            "{key}"
        );
    }

    // Converge: enroll again whatever may not have been (idempotent), then
    // claim and finish everything.
    let attempted: Vec<String> = acked.attempted.iter().cloned().collect();
    for chunk in attempted.chunks(100) {
        let resp = l
            .enroll_rows(enroll_request(chunk, ""))
            .await
            .unwrap()
            .into_inner();
        for r in resp.results {
            if acked.enrolled.contains(&r.key) {
                assert_eq!(r.outcome, pb::EnrollOutcome::AlreadyPresent as i32, "{r:?}");
            } else {
                assert!(
                    r.outcome == pb::EnrollOutcome::AlreadyPresent as i32
                        || r.outcome == pb::EnrollOutcome::Enrolled as i32,
                    "{r:?}"
                );
            }
        }
    }
    drain(&mut l, &pool).await;

    let rows = stored_rows(&pool).await;
    let want: BTreeSet<String> = acked.attempted.iter().chain(&held_keys).cloned().collect();
    assert_eq!(rows.keys().cloned().collect::<BTreeSet<_>>(), want);
    for r in rows.values() {
        assert_eq!(r.status, SUCCEEDED, "{r:?}");
        assert_eq!(r.successes, 1, "{r:?}");
        assert_eq!(i64::from(r.attempts), r.history, "{r:?}");
        assert_eq!(r.attempts, 1 + r.infra_failures, "{r:?}");
    }
    let total: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM attempts a JOIN ledgers l ON l.id = a.ledger_id WHERE l.name = $1",
    )
    .bind(LEDGER)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows.values().map(|r| i64::from(r.attempts)).sum::<i64>(),
        total
    );
    // What was acknowledged before the crash is unchanged by the recovery.
    assert_acknowledged_writes_durable(&mut l, &pool, &acked).await;

    child.kill().await.unwrap();
}

/// Retries `call` until it answers OK, recording the code of every failure
/// in `errors`.
async fn retry<T, F, Fut>(errors: &Mutex<Vec<Status>>, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, Status>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        match call().await {
            Ok(r) => return r.into_inner(),
            Err(s) => {
                assert!(Instant::now() < deadline, "still failing: {s:?}");
                errors.lock().unwrap().push(s);
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Enrolls, claims (with request ids, so a retry of a claim whose answer was
/// lost gets the same claim back) and reports, retrying every call until it
/// answers OK, until `stop` is set.
async fn churn_with_retries(
    l: Ledgers,
    worker: usize,
    acked: Arc<Mutex<Acked>>,
    errors: Arc<Mutex<Vec<Status>>>,
    stop: Arc<AtomicBool>,
) {
    let mut claims = 0;
    for batch in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let keys: Vec<String> = (0..4).map(|i| format!("w{worker}-b{batch}-{i}")).collect();
        acked.lock().unwrap().attempted.extend(keys.iter().cloned());
        let req = enroll_request(&keys, "");
        let resp = retry(&errors, || {
            let (mut l, req) = (l.clone(), req.clone());
            async move { l.enroll_rows(req).await }
        })
        .await;
        acked.lock().unwrap().record_enroll(&resp);
        loop {
            claims += 1;
            let req = claim_request(4, 60, CHURN_MODEL, &format!("w{worker}-c{claims}"));
            let grant = retry(&errors, || {
                let (mut l, req) = (l.clone(), req.clone());
                async move { l.claim_rows(req).await }
            })
            .await;
            acked.lock().unwrap().calls += 1;
            let Some(claim) = grant.claim else { break };
            let held: Vec<String> = grant.rows.iter().map(|r| r.key.clone()).collect();
            acked
                .lock()
                .unwrap()
                .claims
                .insert(claim.name.clone(), held.clone());
            let req = report_request(&claim.name, &held);
            let resp = retry(&errors, || {
                let (mut l, req) = (l.clone(), req.clone());
                async move { l.report_outcomes(req).await }
            })
            .await;
            acked
                .lock()
                .unwrap()
                .record_report(&claim.name, &resp, false);
        }
    }
}

/// Invariant 9, losing database connections: while clients enroll, claim and
/// report, every PostgreSQL connection of the server is terminated again
/// and again. Calls may fail, but only with a retryable code (UNAVAILABLE
/// or ABORTED, never INTERNAL); every call answered OK is durable; after
/// the terminations stop, health is SERVING again and, by retries, every
/// row converges to SUCCEEDED with exactly one attempt (a retried claim
/// gets its claim back, so no lease ever has to expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_database_connections_lose_nothing_and_the_server_recovers() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 25;
    let db = TestDb::new().await;
    let pool = check_pool(&db).await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.sweep_interval = Duration::from_millis(100);
    let running = server::start(args).await.expect("server starts");
    let channel = connect(running.grpc_addr).await;
    let mut l = LedgerServiceClient::new(channel.clone());
    create_ledger(&mut l).await;

    let acked = Arc::new(Mutex::new(Acked::default()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            tokio::spawn(churn_with_retries(
                l.clone(),
                w,
                acked.clone(),
                errors.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let admin_opts = PgConnectOptions::from_str(db.url())
        .unwrap()
        .application_name("tally-crash-admin");
    let mut admin = PgConnection::connect_with(&admin_opts).await.unwrap();
    let terminated = AtomicUsize::new(0);
    let mut gone: HashSet<i32> = HashSet::new();
    for _ in 0..ROUNDS {
        // Each round waits for the clients to get on (two more acknowledged
        // calls) and for the server to hold a connection it did not hold at
        // the last round, then terminates every connection it holds.
        let calls = acked.lock().unwrap().calls;
        let deadline = Instant::now() + DEADLINE;
        loop {
            let pids: Vec<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = $1 AND application_name = 'tally' AND pid <> pg_backend_pid()",
            )
            .bind(db.name())
            .fetch_all(&mut admin)
            .await
            .unwrap();
            let fresh = pids.iter().any(|p| !gone.contains(p));
            if fresh && acked.lock().unwrap().calls >= calls + 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no progress between terminations"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let killed: Vec<(i32, bool)> = sqlx::query_as(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'tally' AND pid <> pg_backend_pid()",
        )
        .bind(db.name())
        .fetch_all(&mut admin)
        .await
        .unwrap();
        for (pid, ok) in killed {
            gone.insert(pid);
            if ok {
                terminated.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        tokio::time::timeout(DEADLINE, w)
            .await
            .expect("clients finish after the terminations stop")
            .unwrap();
    }
    admin.close().await.unwrap();
    let acked = Arc::try_unwrap(acked)
        .ok()
        .expect("workers are done")
        .into_inner()
        .unwrap();
    let errors = std::mem::take(&mut *errors.lock().unwrap());
    let terminated = terminated.into_inner();
    let mut by_code = BTreeMap::new();
    for e in &errors {
        *by_code.entry(format!("{:?}", e.code())).or_insert(0) += 1;
    }
    eprintln!(
        "{terminated} connections terminated; {} calls acknowledged; failures: {by_code:?}",
        acked.calls,
    );
    assert!(terminated >= ROUNDS, "every round terminated a connection");
    for e in &errors {
        assert!(
            matches!(e.code(), Code::Unavailable | Code::Aborted),
            "a lost connection answered a non-retryable {:?}: {}",
            e.code(),
            e.message()
        );
    }

    let mut health = HealthClient::new(channel);
    wait_for("health SERVING after the terminations", || {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32)
        }
    })
    .await;
    health
        .check(HealthCheckRequest {
            service: "tally.v1.LedgerService".into(),
        })
        .await
        .unwrap();

    assert_acknowledged_writes_durable(&mut l, &pool, &acked).await;
    drain(&mut l, &pool).await;
    let rows = stored_rows(&pool).await;
    assert_eq!(
        rows.keys().cloned().collect::<BTreeSet<_>>(),
        acked.attempted
    );
    for r in rows.values() {
        assert_eq!(r.status, SUCCEEDED, "{r:?}");
        assert_eq!((r.attempts, r.history, r.successes), (1, 1, 1), "{r:?}");
    }
    running.stop().await.unwrap();
}

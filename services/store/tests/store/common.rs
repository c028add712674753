//! Shared setup for the store's integration tests: a fresh database per test
//! (DATABASE_URL's server or a private one), migrated, with helpers.

use std::time::Duration;
use tally_core::classify::Failure;
use tally_core::payload::{Content, content_hash};
use tally_core::policy::{Caps, Policy};
use tally_core::transition::Outcome;
use tally_pg::TestDb;
use tally_store::types::{ClaimGrant, ClaimRequest, NewRow, ReportItem, Usage};
use tally_store::{ConnectOptions, Store};

pub struct Env {
    pub store: Store,
    _db: TestDb,
}

impl Env {
    /// The test database's URL (for checks the store's API cannot make).
    pub fn url(&self) -> &str {
        self._db.url()
    }
}

pub async fn env() -> Env {
    let db = TestDb::new().await;
    let store = Store::connect(&ConnectOptions::new(db.url()))
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    Env { store, _db: db }
}

/// A policy whose retries are claimable at once, so tests never wait.
pub fn fast_policy() -> Policy {
    let mut p = Policy::default();
    p.backoff.initial = Duration::ZERO;
    p.backoff.max = Duration::ZERO;
    p.caps = Caps {
        provider: 3,
        content: 1,
        infra: 2,
    };
    p
}

pub fn row(key: &str, deps: &[&str]) -> NewRow {
    row_with(key, &format!("{{\"text\": \"{key}\"}}"), deps)
}

pub fn row_with(key: &str, payload: &str, deps: &[&str]) -> NewRow {
    let depends_on: Vec<String> = deps.iter().map(|d| d.to_string()).collect();
    let dep_refs: Vec<&str> = deps.to_vec();
    NewRow {
        key: key.into(),
        payload: payload.into(),
        content_hash: content_hash(&Content {
            payload,
            depends_on: &dep_refs,
            prompt_name: "",
            prompt_version: "",
            model: "",
            ..Default::default()
        }),
        depends_on,
        prompt_name: String::new(),
        prompt_version: String::new(),
        model: String::new(),
        ..Default::default()
    }
}

pub fn claim_req(max_rows: i64) -> ClaimRequest {
    ClaimRequest {
        max_rows,
        worker: "test-worker".into(),
        ..ClaimRequest::default()
    }
}

pub async fn claim(store: &Store, ledger: &str, max_rows: i64) -> Option<ClaimGrant> {
    store
        .claim_rows(ledger, &claim_req(max_rows))
        .await
        .expect("claim")
}

pub fn success(key: &str, tokens: i64) -> ReportItem {
    ReportItem {
        key: key.into(),
        outcome: Outcome::Success,
        result: Some(format!("{{\"ok\": \"{key}\"}}")),
        response: None,
        usage: Usage {
            input: tokens,
            output: tokens / 2,
            thinking: 0,
            cached: 0,
            cache_write: 0,
        },
        request_id: None,
        tier: None,
        model_version: None,
        cached: None,
    }
}

pub fn failure(key: &str, http_code: u32) -> ReportItem {
    ReportItem {
        key: key.into(),
        outcome: Outcome::Failure(Failure {
            http_code,
            message: format!("http {http_code}"),
            ..Failure::default()
        }),
        result: None,
        response: None,
        usage: Usage {
            input: 10,
            output: 0,
            thinking: 0,
            cached: 0,
            cache_write: 0,
        },
        request_id: None,
        tier: None,
        model_version: None,
        cached: None,
    }
}

/// Makes a claim's lease run out now, on the database clock.
pub async fn expire(store: &Store, claim: &ClaimGrant) {
    sqlx::query("UPDATE claims SET expire_time = now() - interval '1 second' WHERE token = $1")
        .bind(claim.claim.token)
        .execute(store.pool())
        .await
        .expect("expire claim");
}

/// Every row on the runnable queue (a single entry or one of a chunk) is
/// claimable, every claimable row with no unmet dependency is on it exactly
/// once, a row held by an active claim is on no other active claim and not
/// on the queue, and only active claims hold rows (claims hold rows without
/// writing them, so the queue is what keeps two claims from taking one row).
pub async fn assert_queue_consistent(store: &Store) {
    let bad: i64 = sqlx::query_scalar(
        "WITH queued AS (
             SELECT unnest(coalesce(row_ids, ARRAY[row_id])) AS row_id FROM runnable
         ),
         held AS (SELECT unnest(row_ids) AS row_id FROM claims WHERE state = 1)
         SELECT
           (SELECT count(*) FROM queued q JOIN rows r ON r.id = q.row_id
              WHERE r.status NOT IN (1, 3) OR r.unmet_deps > 0
                 OR r.id IN (SELECT row_id FROM held))
         + (SELECT count(*) FROM rows r WHERE r.status IN (1, 3) AND r.unmet_deps = 0
              AND r.id NOT IN (SELECT row_id FROM held)
              AND (SELECT count(*) FROM queued q WHERE q.row_id = r.id) <> 1)
         + (SELECT count(*) - count(DISTINCT row_id) FROM held)
         + (SELECT count(*) FROM held h JOIN rows r ON r.id = h.row_id
              WHERE r.status NOT IN (1, 3))
         + (SELECT count(*) FROM claims
              WHERE held <> cardinality(row_ids) OR (state <> 1 AND held > 0))",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(bad, 0, "runnable queue out of step with row statuses");
}

//! A report loads its rows either from what this process's claim found
//! (then writes them in one guarded statement) or by reading them under the
//! claim's lock (another replica's claim, a repeat, a moved-on claim); core
//! decides either way. Both must give the same verdicts and keep invariant 1
//! (nothing settles twice) and the attempts history exact.

use crate::common;

use common::*;
use std::time::Duration;
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::types::{ReportItem, ReportSummary, Verdict};
use uuid::Uuid;

async fn ledger(env: &Env) {
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
}

fn verdicts(r: &ReportSummary) -> Vec<(&str, Verdict)> {
    r.verdicts
        .iter()
        .map(|v| (v.key.as_str(), v.verdict))
        .collect()
}

/// Attempts recorded for `key`, from the history itself.
async fn attempts(store: &Store, key: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM attempts a JOIN rows r ON r.id = a.row_id WHERE r.key = $1",
    )
    .bind(key)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

async fn report(store: &Store, token: Uuid, keys: &[&str]) -> ReportSummary {
    let items: Vec<_> = keys.iter().map(|k| success(k, 1)).collect();
    store.report("l", token, &items, "w").await.unwrap()
}

/// Invariant 1: a claim reported in parts, with a repeat of a settled row
/// beside a held one and a key twice in one call, settles each row once and
/// records one attempt each; the claim is DONE when nothing is held.
#[tokio::test]
async fn a_report_in_parts_with_repeats_settles_each_row_once() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    let token = g.claim.token;

    let r = report(&env.store, token, &["a"]).await;
    assert_eq!(verdicts(&r), [("a", Verdict::Succeeded)]);
    assert_eq!(r.held, 2);
    let r = report(&env.store, token, &["a", "b"]).await;
    assert_eq!(
        verdicts(&r),
        [("a", Verdict::Duplicate), ("b", Verdict::Succeeded)]
    );
    assert_eq!(r.held, 1);
    let r = report(&env.store, token, &["c", "c"]).await;
    assert_eq!(
        verdicts(&r),
        [("c", Verdict::Succeeded), ("c", Verdict::Duplicate)]
    );
    assert_eq!(r.held, 0);
    for k in ["a", "b", "c"] {
        assert_eq!(attempts(&env.store, k).await, 1, "{k}");
        let row = env.store.get_row("l", k).await.unwrap();
        assert_eq!((row.status, row.total), (RowStatus::Succeeded, 1), "{k}");
    }
    let state: i16 = sqlx::query_scalar("SELECT state FROM claims WHERE token = $1")
        .bind(token)
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(state, 2, "the claim is DONE");
    assert_queue_consistent(&env.store).await;
}

/// Invariant 1 across replicas: a claim granted by one server and reported
/// through another settles there; the same report sent again to the server
/// that granted it (which still has the claim's rows in memory) is a
/// DUPLICATE and writes nothing.
#[tokio::test]
async fn a_report_through_another_replica_and_back_settles_once() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let other = Store::from_pool(env.store.pool().clone());
    let g = claim(&env.store, "l", 10).await.unwrap();
    let token = g.claim.token;

    let r = report(&other, token, &["a", "b"]).await;
    assert_eq!(
        verdicts(&r),
        [("a", Verdict::Succeeded), ("b", Verdict::Succeeded)]
    );
    let before = env.store.get_row("l", "a").await.unwrap();
    let r = report(&env.store, token, &["a", "b"]).await;
    assert_eq!(
        verdicts(&r),
        [("a", Verdict::Duplicate), ("b", Verdict::Duplicate)]
    );
    let after = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(
        (after.update_time, after.total),
        (before.update_time, before.total)
    );
    for k in ["a", "b"] {
        assert_eq!(attempts(&env.store, k).await, 1, "{k}");
    }
}

/// Invariant 3: rows released from a claim cannot be reported by it, even
/// though the server that granted it remembers them; the rows still held
/// are settled in the same call.
#[tokio::test]
async fn released_rows_are_stale_beside_held_ones() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    let token = g.claim.token;
    env.store
        .release_claim("l", token, Some(&["a".to_string()]), "w")
        .await
        .unwrap();
    let r = report(&env.store, token, &["a", "b"]).await;
    assert_eq!(
        verdicts(&r),
        [("a", Verdict::Stale), ("b", Verdict::Succeeded)]
    );
    assert_eq!(attempts(&env.store, "a").await, 0);
    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(a.status, RowStatus::Pending);
    assert_queue_consistent(&env.store).await;
}

/// Invariant 1 under a race: the same report sent eight times at once (a
/// worker retrying on a timeout) settles each row exactly once; every other
/// copy answers DUPLICATE and records no attempt.
#[tokio::test]
async fn concurrent_copies_of_one_report_settle_each_row_once() {
    let env = env().await;
    ledger(&env).await;
    let keys = ["a", "b", "c", "d"];
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let token = claim(&env.store, "l", 10).await.unwrap().claim.token;
    let copies: Vec<_> = (0..8)
        .map(|_| {
            let store = env.store.clone();
            tokio::spawn(async move { report(&store, token, &keys).await })
        })
        .collect();
    let mut succeeded = 0;
    for copy in copies {
        for (key, verdict) in verdicts(&copy.await.unwrap()) {
            match verdict {
                Verdict::Succeeded => succeeded += 1,
                Verdict::Duplicate => {}
                other => panic!("{key}: {other:?}"),
            }
        }
    }
    assert_eq!(succeeded, keys.len());
    for k in keys {
        assert_eq!(attempts(&env.store, k).await, 1, "{k}");
    }
    assert_queue_consistent(&env.store).await;
}

/// Each answer as the worker sees it: verdict, rule, counters after the
/// report, and whether a next attempt time is given.
fn answers(r: &ReportSummary) -> Vec<(Verdict, String, u32, u32, bool)> {
    r.verdicts
        .iter()
        .map(|v| {
            let f = v.failures;
            (
                v.verdict,
                v.rule.clone(),
                f.provider + f.content + f.infra,
                v.total,
                v.next_attempt_time.is_some(),
            )
        })
        .collect()
}

/// One judgement, however the rows were loaded: the same report (a key
/// twice, a retryable and a permanent failure) through the server that
/// granted its claim (rows from its memory) and, for another claim, through
/// a replica that reads them answers alike and records one attempt a row.
#[tokio::test]
async fn a_report_is_answered_alike_from_memory_and_from_the_database() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c", "d"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let other = Store::from_pool(env.store.pool().clone());
    let first = claim(&env.store, "l", 2).await.unwrap();
    let second = claim(&env.store, "l", 2).await.unwrap();
    let keys = |g: &tally_store::types::ClaimGrant| -> Vec<String> {
        g.rows.iter().map(|r| r.key.clone()).collect()
    };
    let items = |k: &[String]| -> Vec<ReportItem> {
        vec![failure(&k[0], 503), success(&k[0], 1), failure(&k[1], 400)]
    };

    let (k1, k2) = (keys(&first), keys(&second));
    let from_memory = env
        .store
        .report("l", first.claim.token, &items(&k1), "w")
        .await
        .unwrap();
    let read = other
        .report("l", second.claim.token, &items(&k2), "w")
        .await
        .unwrap();
    assert_eq!(answers(&from_memory), answers(&read));
    assert_eq!(
        answers(&read),
        [
            (Verdict::Retryable, "http_transient".into(), 1, 1, true),
            (Verdict::Duplicate, "already_reported".into(), 0, 0, false),
            (Verdict::Permanent, "http_permanent".into(), 1, 1, false),
        ]
    );
    assert_eq!((from_memory.held, read.held), (0, 0));
    for k in k1.iter().chain(&k2) {
        assert_eq!(attempts(&env.store, k).await, 1, "{k}");
    }
    assert_queue_consistent(&env.store).await;
}

/// A RETRYABLE answer's next attempt time is the one written on the row
/// (both count from the writing transaction's time), however the rows were
/// loaded.
#[tokio::test]
async fn a_retryable_answer_names_the_rows_next_attempt_time() {
    let env = env().await;
    let mut policy = fast_policy();
    policy.backoff.initial = Duration::from_secs(60);
    policy.backoff.max = Duration::from_secs(600);
    env.store.create_ledger("l", &policy).await.unwrap();
    let rows: Vec<_> = ["a", "b"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let other = Store::from_pool(env.store.pool().clone());
    let first = claim(&env.store, "l", 1).await.unwrap();
    let second = claim(&env.store, "l", 1).await.unwrap();
    for (store, g) in [(&env.store, &first), (&other, &second)] {
        let key = &g.rows[0].key;
        let r = store
            .report("l", g.claim.token, &[failure(key, 503)], "w")
            .await
            .unwrap();
        let v = &r.verdicts[0];
        assert_eq!(v.verdict, Verdict::Retryable, "{key}");
        let row = env.store.get_row("l", key).await.unwrap();
        assert!(v.next_attempt_time.is_some(), "{key}");
        assert_eq!(v.next_attempt_time, row.next_attempt_time, "{key}");
    }
}

/// The provider's own response is kept with a success only, on both report
/// paths (this process's claim and another replica's).
#[tokio::test]
async fn a_provider_response_is_kept_with_its_result_only() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let other = Store::from_pool(env.store.pool().clone());
    let body = |k: &str| format!(r#"{{"status_code": 200, "request_id": "req_{k}"}}"#);
    let with_body = |mut item: ReportItem| {
        item.response = Some(body(&item.key));
        item
    };
    let g = claim(&env.store, "l", 10).await.unwrap();
    let items = [with_body(success("a", 1)), with_body(failure("b", 400))];
    env.store
        .report("l", g.claim.token, &items, "w")
        .await
        .unwrap();
    other
        .report("l", g.claim.token, &[with_body(success("c", 1))], "w")
        .await
        .unwrap();
    let response = |k: &'static str| {
        let store = env.store.clone();
        async move { store.get_row("l", k).await.unwrap().response }
    };
    assert_eq!(response("a").await, Some(body("a")));
    assert_eq!(response("b").await, None, "a failure keeps no response");
    assert_eq!(
        response("c").await,
        Some(body("c")),
        "the locked path keeps it"
    );
}

/// A claim that got a job is reported under its lock at once: the guarded
/// statement of the claim cache writes nothing for a claim with a job, so
/// trying it first (as every report of a worker's job did) cost a wasted
/// statement of the whole report and a second round trip. A claim whose
/// cache is behind (reported through another replica) still tries it and
/// misses once, which shows the count counts.
#[tokio::test]
async fn a_claim_with_a_job_is_reported_without_trying_the_cache() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c", "d"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();

    let g = claim(&env.store, "l", 2).await.unwrap();
    env.store.create_job("l", g.claim.token, "w").await.unwrap();
    let r = report(&env.store, g.claim.token, &["a", "b"]).await;
    assert_eq!(
        verdicts(&r),
        [("a", Verdict::Succeeded), ("b", Verdict::Succeeded)]
    );
    assert_eq!(
        env.store.claim_cache_misses(),
        0,
        "the report of a claim with a job tried the guarded statement"
    );

    let other = Store::from_pool(env.store.pool().clone());
    let g = claim(&env.store, "l", 2).await.unwrap();
    other
        .report("l", g.claim.token, &[success("c", 1)], "w")
        .await
        .unwrap();
    let r = report(&env.store, g.claim.token, &["d"]).await;
    assert_eq!(verdicts(&r), [("d", Verdict::Succeeded)]);
    assert_eq!(
        env.store.claim_cache_misses(),
        1,
        "the cache behind its claim"
    );
}

/// A claim asked for a job (`for_job`: tally-worker's batches, which it
/// reports under the job's lock) is not copied into the claim cache; one
/// reported row by row (the Python client's sessions) is.
#[tokio::test]
async fn only_claims_reported_row_by_row_are_remembered() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c", "d"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let mut req = claim_req(2);
    req.for_job = true;
    let for_job = env.store.claim_rows("l", &req).await.unwrap().unwrap();
    assert!(!env.store.claim_cached(for_job.claim.token));
    let plain = claim(&env.store, "l", 2).await.unwrap();
    assert!(env.store.claim_cached(plain.claim.token));
}

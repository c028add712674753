//! A report is decided either in one statement from what this process's
//! claim found, or by reading the rows first (another replica's claim, a
//! repeat, a moved-on claim). Both must give the same verdicts and keep
//! invariant 1 (nothing settles twice) and the attempts history exact.

mod common;

use common::*;
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::types::{ReportSummary, Verdict};
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

//! Enrollments large enough to go in by `COPY` (32 rows or more, every one
//! new, PENDING and without dependencies) store what the enrollment
//! statement stores, and fall back to it when a key is already there.

use crate::common;

use common::*;
use std::collections::HashMap;
use tally_store::types::{EnrollOutcome, NewRow};

async fn ledger(env: &Env, name: &str) {
    env.store.create_ledger(name, &fast_policy()).await.unwrap();
}

/// Key `k{i}`; every third row on another provider's model.
fn rows(range: std::ops::Range<usize>) -> Vec<NewRow> {
    range
        .map(|i| {
            let mut r = row(&format!("k{i:03}"), &[]);
            if i % 3 == 0 {
                r.model = "gpt-4o-mini".into();
            }
            r
        })
        .collect()
}

/// Every column a row was enrolled with, in id order (ids and times aside).
async fn stored(env: &Env, ledger: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT (to_jsonb(r) - 'id' - 'ledger_id' - 'create_time' - 'update_time')::text
         FROM rows r JOIN ledgers l ON l.id = r.ledger_id
         WHERE l.name = $1 ORDER BY r.id",
    )
    .bind(ledger)
    .fetch_all(env.store.pool())
    .await
    .unwrap()
}

async fn models(env: &Env, ledger: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT m.model, m.provider FROM ledger_models m JOIN ledgers l ON l.id = m.ledger_id
         WHERE l.name = $1 ORDER BY m.model",
    )
    .bind(ledger)
    .fetch_all(env.store.pool())
    .await
    .unwrap()
}

/// Invariant 2 and the queue's: a call of 90 new rows (by `COPY`) stores
/// every column, the ledger's models with their providers and the queue
/// entries as calls of under 32 rows (by the statement) do, and its rows
/// are claimed in key order, each once.
#[tokio::test]
async fn a_large_enrollment_stores_what_the_statement_stores() {
    let env = env().await;
    ledger(&env, "copied").await;
    ledger(&env, "stated").await;
    let all = rows(0..90);
    let mut shuffled = all.clone();
    shuffled.reverse();
    let outcomes = env.store.enroll("copied", &shuffled).await.unwrap();
    assert_eq!(outcomes, vec![EnrollOutcome::Enrolled; 90]);
    for part in all.chunks(30) {
        env.store.enroll("stated", part).await.unwrap();
    }
    assert_eq!(stored(&env, "copied").await, stored(&env, "stated").await);
    assert_eq!(models(&env, "copied").await, models(&env, "stated").await);
    assert_eq!(models(&env, "copied").await.len(), 2);
    assert_queue_consistent(&env.store).await;

    let mut claimed = Vec::new();
    while let Some(g) = claim(&env.store, "copied", 7).await {
        claimed.extend(
            g.rows
                .iter()
                .map(|r| (g.claim.model.clone(), r.key.clone())),
        );
    }
    let mut by_model: HashMap<String, Vec<String>> = HashMap::new();
    for (model, key) in claimed {
        by_model.entry(model).or_default().push(key);
    }
    for (model, keys) in &by_model {
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, &sorted, "claim order of {model} follows key order");
    }
    assert_eq!(by_model.values().map(Vec::len).sum::<usize>(), 90);
}

/// Invariant 2: a large call naming keys already stored (the same content
/// and other content) falls back to the statement: ALREADY_PRESENT,
/// CONFLICT and ENROLLED as for a small call, the stored rows untouched,
/// nothing of the abandoned `COPY` kept.
#[tokio::test]
async fn a_large_enrollment_of_stored_keys_answers_each_key() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store.enroll("l", &rows(0..40)).await.unwrap();
    let before = stored(&env, "l").await;
    let mut again = rows(0..80);
    for r in &mut again[20..40] {
        r.payload = r#"{"other": true}"#.into();
        r.content_hash[0] ^= 1;
    }
    let outcomes = env.store.enroll("l", &again).await.unwrap();
    let expected: Vec<EnrollOutcome> = (0..80)
        .map(|i| match i {
            0..20 => EnrollOutcome::AlreadyPresent,
            20..40 => EnrollOutcome::Conflict,
            _ => EnrollOutcome::Enrolled,
        })
        .collect();
    assert_eq!(outcomes, expected);
    let after = stored(&env, "l").await;
    assert_eq!(after.len(), 80);
    assert_eq!(after[..40], before[..]);
    assert_queue_consistent(&env.store).await;
}

/// Invariant 2 under concurrency: two large enrollments of the same keys
/// at once enroll each key exactly once (one call ENROLLED, the other
/// ALREADY_PRESENT), and the queue holds each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_large_enrollments_of_the_same_keys_enroll_each_once() {
    let env = env().await;
    ledger(&env, "l").await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = env.store.clone();
        tasks.push(tokio::spawn(async move {
            store.enroll("l", &rows(0..300)).await.unwrap()
        }));
    }
    let mut enrolled = vec![0; 300];
    for t in tasks {
        for (i, o) in t.await.unwrap().into_iter().enumerate() {
            match o {
                EnrollOutcome::Enrolled => enrolled[i] += 1,
                EnrollOutcome::AlreadyPresent => {}
                other => panic!("key {i}: {other:?}"),
            }
        }
    }
    assert!(enrolled.iter().all(|&n| n == 1), "{enrolled:?}");
    assert_eq!(stored(&env, "l").await.len(), 300);
    assert_queue_consistent(&env.store).await;
}

//! A claim holds its rows without writing them (`claims.row_ids`): the rows
//! keep the status they were claimed with until they are settled, and every
//! reader shows them RUNNING under the claim (and its job).

use crate::common;

use common::*;
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::types::{RowFilter, RowRecord};

async fn ledger(env: &Env) {
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
}

/// Each row's tuple version (`xmin`), by key.
async fn versions(store: &Store) -> Vec<(String, String)> {
    sqlx::query_as("SELECT key, xmin::text FROM rows ORDER BY key")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

async fn list(store: &Store, filter: RowFilter) -> Vec<RowRecord> {
    store
        .list_rows("l", &filter, None, 100, None)
        .await
        .unwrap()
        .rows
}

fn keys(rows: &[RowRecord]) -> Vec<&str> {
    rows.iter().map(|r| r.key.as_str()).collect()
}

fn with_status(s: RowStatus) -> RowFilter {
    RowFilter {
        statuses: vec![s],
        ..RowFilter::default()
    }
}

/// A claim changes no row (only its report does); the queue and the claim
/// record say which rows it holds.
#[tokio::test]
async fn a_claim_writes_none_of_its_rows() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let before = versions(&env.store).await;
    let g = claim(&env.store, "l", 2).await.unwrap();
    assert_eq!(versions(&env.store).await, before);
    assert_queue_consistent(&env.store).await;

    env.store
        .report("l", g.claim.token, &[success("a", 1)], "w")
        .await
        .unwrap();
    let after = versions(&env.store).await;
    assert_ne!(after[0], before[0], "a report writes its row");
    assert_eq!(after[1..], before[1..]);
    assert_queue_consistent(&env.store).await;
}

/// GetRow, ListRows (by status and by job) and SummarizeLedger show held
/// rows RUNNING under their claim and its job; settled rows keep the job
/// that carried them.
#[tokio::test]
async fn held_rows_read_as_running_under_their_claim_and_job() {
    let env = env().await;
    ledger(&env).await;
    let rows: Vec<_> = ["a", "b", "c", "d"].iter().map(|k| row(k, &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let g = claim(&env.store, "l", 2).await.unwrap();
    let token = g.claim.token;

    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!((a.status, a.claim), (RowStatus::Running, Some(token)));
    let c = env.store.get_row("l", "c").await.unwrap();
    assert_eq!((c.status, c.claim), (RowStatus::Pending, None));
    let running = list(&env.store, with_status(RowStatus::Running)).await;
    assert_eq!(keys(&running), ["a", "b"]);
    assert!(running.iter().all(|r| r.claim == Some(token)));
    assert_eq!(
        keys(&list(&env.store, with_status(RowStatus::Pending)).await),
        ["c", "d"]
    );
    let all = list(&env.store, RowFilter::default()).await;
    let statuses: Vec<_> = all.iter().map(|r| r.status).collect();
    use RowStatus::{Pending, Running};
    assert_eq!(statuses, [Running, Running, Pending, Pending]);
    let s = env.store.summarize("l").await.unwrap();
    assert_eq!((s.counts.running, s.counts.pending), (2, 2));

    let job = env.store.create_job("l", token, "w").await.unwrap();
    let by_job = RowFilter {
        job: Some(job.public_id.clone()),
        ..RowFilter::default()
    };
    assert_eq!(keys(&list(&env.store, by_job.clone()).await), ["a", "b"]);
    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(a.job.as_deref(), Some(job.public_id.as_str()));

    env.store
        .report("l", token, &[success("a", 1)], "w")
        .await
        .unwrap();
    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!((a.status, a.claim), (RowStatus::Succeeded, None));
    assert_eq!(a.job.as_deref(), Some(job.public_id.as_str()));
    assert_eq!(keys(&list(&env.store, by_job.clone()).await), ["a", "b"]);
    let s = env.store.summarize("l").await.unwrap();
    assert_eq!(
        (s.counts.running, s.counts.pending, s.counts.succeeded),
        (1, 2, 1)
    );

    // Another claim takes c and d: they are its, not the job's.
    let other = claim(&env.store, "l", 10).await.unwrap();
    let c = env.store.get_row("l", "c").await.unwrap();
    assert_eq!(
        (c.status, c.claim),
        (RowStatus::Running, Some(other.claim.token))
    );
    assert_eq!(c.job, None);
    assert_eq!(keys(&list(&env.store, by_job).await), ["a", "b"]);
    assert_queue_consistent(&env.store).await;
}

//! The critical path in the store: each row's depth (the links of the
//! longest chain of unfinished rows behind it) kept as rows enroll, on the
//! row and its queue entry; claims of each lane take the depths routing
//! gives that lane under the ledger's deadline.

use crate::common;

use common::*;
use std::time::Duration;
use tally_core::lane::{Lane, Lanes};
use tally_core::policy::Policy;
use tally_core::route::Turnarounds;
use tally_store::Store;
use tally_store::types::{ClaimRequest, NewRow};

async fn depth(store: &Store, key: &str) -> i32 {
    sqlx::query_scalar("SELECT depth FROM rows WHERE key = $1")
        .bind(key)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// The deepest queue entry holding `key`'s row.
async fn queued_depth(store: &Store, key: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT max(q.depth) FROM runnable q JOIN rows r ON r.id = q.row_id OR r.id = ANY(q.row_ids)
         WHERE r.key = $1",
    )
    .bind(key)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

fn chain(prefix: &str, n: usize) -> Vec<NewRow> {
    (0..n)
        .map(|i| {
            let key = format!("{prefix}{i:02}");
            let dep = format!("{prefix}{:02}", i.wrapping_sub(1));
            if i == 0 {
                row(&key, &[])
            } else {
                row(&key, &[dep.as_str()])
            }
        })
        .collect()
}

fn routed_policy(deadline: Option<Duration>) -> Policy {
    Policy {
        lanes: Lanes::of([Lane::Batch, Lane::Flex]).unwrap(),
        deadline_ms: deadline.map(|d| chrono::Utc::now().timestamp_millis() + d.as_millis() as i64),
        turnarounds: Turnarounds {
            batch: Duration::from_secs(60),
            flex: Duration::from_secs(1),
            ..Turnarounds::default()
        },
        ..fast_policy()
    }
}

fn lane_claim(lane: Lane, max_rows: i64) -> ClaimRequest {
    ClaimRequest {
        lane,
        ..claim_req(max_rows)
    }
}

// Invariant: a chain enrolled in one call has its length as its head's
// depth; enrolled link by link, each new link deepens every unfinished
// ancestor, on the row and on its queue entry.
#[tokio::test]
async fn depths_follow_the_chains_as_they_are_enrolled() {
    let env = env().await;
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
    env.store.enroll("l", &chain("a", 5)).await.unwrap();
    assert_eq!(depth(&env.store, "a00").await, 5);
    assert_eq!(depth(&env.store, "a04").await, 1);
    assert_eq!(queued_depth(&env.store, "a00").await, Some(5));
    for link in chain("b", 4) {
        env.store.enroll("l", &[link]).await.unwrap();
    }
    assert_eq!(depth(&env.store, "b00").await, 4, "lifted link by link");
    assert_eq!(depth(&env.store, "b02").await, 2);
    assert_eq!(queued_depth(&env.store, "b00").await, Some(4));
    // Flat rows stay at 1 (enrolled by COPY or not).
    let flat: Vec<NewRow> = (0..40).map(|i| row(&format!("f{i:02}"), &[])).collect();
    env.store.enroll("l", &flat).await.unwrap();
    assert_eq!(queued_depth(&env.store, "f10").await, Some(1));
}

// Invariant: under a deadline, a batch claim takes the shallow rows and a
// flex claim the heads of chains too deep to finish by batch; without a
// deadline, batch takes everything and flex nothing.
#[tokio::test]
async fn claims_take_the_depths_routing_gives_their_lane() {
    let env = env().await;
    env.store
        .create_ledger("l", &routed_policy(Some(Duration::from_secs(600))))
        .await
        .unwrap();
    for book in ["x", "y", "z"] {
        env.store.enroll("l", &chain(book, 40)).await.unwrap();
    }
    let flat: Vec<NewRow> = (0..20).map(|i| row(&format!("f{i:02}"), &[])).collect();
    env.store.enroll("l", &flat).await.unwrap();
    let flex = env
        .store
        .claim_rows("l", &lane_claim(Lane::Flex, 100))
        .await
        .unwrap()
        .expect("the chains' heads go by flex");
    let mut keys: Vec<&str> = flex.rows.iter().map(|r| r.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["x00", "y00", "z00"]);
    let batch = env
        .store
        .claim_rows("l", &lane_claim(Lane::Batch, 100))
        .await
        .unwrap()
        .expect("the flat rows stay in batch");
    assert_eq!(batch.rows.len(), 20);
    assert!(batch.rows.iter().all(|r| r.key.starts_with('f')));

    let env = common::env().await;
    env.store
        .create_ledger("l", &routed_policy(None))
        .await
        .unwrap();
    env.store.enroll("l", &chain("x", 40)).await.unwrap();
    assert!(
        env.store
            .claim_rows("l", &lane_claim(Lane::Flex, 10))
            .await
            .unwrap()
            .is_none(),
        "no deadline: nothing goes by flex"
    );
    let batch = env
        .store
        .claim_rows("l", &lane_claim(Lane::Batch, 10))
        .await
        .unwrap()
        .expect("batch takes the chain's head");
    assert_eq!(batch.rows[0].key, "x00");
}

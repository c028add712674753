//! Dependency answers as prompt inputs: a claim gives each row its
//! dependencies' results (by key, with the names the row gave them) and
//! records the hash of each result given as the row's input; a claim's
//! byte budget counts those results.

use crate::common;

use common::*;
use tally_core::payload::vars_hash;
use tally_store::types::{ClaimRequest, ClaimedRow, NewRow};

fn named(key: &str, deps: &[(&str, &str)]) -> NewRow {
    let keys: Vec<&str> = deps.iter().map(|(k, _)| *k).collect();
    let mut row = row(key, &keys);
    row.dependency_names = deps
        .iter()
        .filter(|(_, n)| !n.is_empty())
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
    row
}

fn only(grant: Option<tally_store::types::ClaimGrant>) -> ClaimedRow {
    let grant = grant.expect("a claim");
    assert_eq!(grant.rows.len(), 1, "{:?}", grant.rows);
    grant.rows.into_iter().next().unwrap()
}

// Invariant: a dependant's claim carries the result of every dependency,
// each under its key with the name the row gave it and the SHA-256 of the
// result, and the row then shows those hashes as the inputs it used; a row
// without dependencies carries none.
#[tokio::test]
async fn a_claim_gives_each_row_its_dependencies_results() {
    let env = env().await;
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
    env.store
        .enroll(
            "l",
            &[
                row("a", &[]),
                row("g", &[]),
                named("b", &[("a", "previous"), ("g", "")]),
            ],
        )
        .await
        .unwrap();
    let first = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(first.rows.len(), 2);
    assert!(first.rows.iter().all(|r| r.dependencies.is_empty()));
    env.store
        .report(
            "l",
            first.claim.token,
            &[success("a", 1), success("g", 1)],
            "w",
        )
        .await
        .unwrap();
    let before = env.store.get_row("l", "b").await.unwrap();
    assert!(
        before.inputs.iter().all(|i| i.used_hash.is_empty()),
        "nothing used before a claim: {:?}",
        before.inputs
    );
    let b = only(claim(&env.store, "l", 10).await);
    assert_eq!(b.key, "b");
    let given: Vec<(&str, &str, &str)> = b
        .dependencies
        .iter()
        .map(|d| (d.key.as_str(), d.name.as_str(), d.result.as_str()))
        .collect();
    assert_eq!(
        given,
        [
            ("a", "previous", "{\"ok\": \"a\"}"),
            ("g", "", "{\"ok\": \"g\"}")
        ]
    );
    for d in &b.dependencies {
        assert_eq!(d.result_hash, vars_hash(&d.result), "SHA-256 of the result");
    }
    let after = env.store.get_row("l", "b").await.unwrap();
    let used: Vec<(&str, &str, &str)> = after
        .inputs
        .iter()
        .map(|i| (i.key.as_str(), i.name.as_str(), i.used_hash.as_str()))
        .collect();
    assert_eq!(
        used,
        [
            ("a", "previous", b.dependencies[0].result_hash.as_str()),
            ("g", "", b.dependencies[1].result_hash.as_str())
        ]
    );
    assert_queue_consistent(&env.store).await;
}

// Invariant: a claim's byte budget counts the dependency results it carries,
// so a dependant whose dependency answered at length waits for a claim with
// room for it instead of overflowing the answer; the row stays runnable.
#[tokio::test]
async fn dependency_results_count_in_a_claims_byte_budget() {
    let env = env().await;
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
    env.store
        .enroll(
            "l",
            &[row("a", &[]), named("b", &[("a", "prev")]), row("c", &[])],
        )
        .await
        .unwrap();
    let a = claim(&env.store, "l", 1).await.unwrap();
    assert_eq!(a.rows[0].key, "a");
    let mut long = success("a", 1);
    long.result = Some(format!("\"{}\"", "x".repeat(50_000)));
    env.store
        .report("l", a.claim.token, &[long], "w")
        .await
        .unwrap();
    let budget = |max_bytes| ClaimRequest {
        bytes: Some(tally_store::types::ByteBudget {
            max_bytes,
            row_overhead: 0,
        }),
        ..claim_req(10)
    };
    // c was queued first; b (queued when a succeeded) carries a's answer
    // and does not fit beside it: b is held back, still runnable…
    let first = env
        .store
        .claim_rows("l", &budget(10_000))
        .await
        .unwrap()
        .unwrap();
    let keys: Vec<&str> = first.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["c"]);
    assert_eq!(
        first.held_back, 1,
        "b was held back for its dependency's bytes"
    );
    // …and the next claim takes it (the first row found is always taken),
    // with the whole answer.
    let next = env
        .store
        .claim_rows("l", &budget(10_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.rows.len(), 1);
    assert_eq!(next.rows[0].key, "b");
    assert_eq!(next.rows[0].dependencies[0].result.len(), 50_002);
    assert_queue_consistent(&env.store).await;
}

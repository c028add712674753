//! Shared provider cool-downs against a real PostgreSQL: a batch create the
//! provider refused for quota (MarkNotCreated with a cool-down) makes every
//! ledger's CreateJob for that model wait, and spends no row's attempt.

use crate::common;

use tally_store::types::NotCreated;

use common::*;
use std::time::Duration;
use tally_store::{Store, StoreError};

async fn ledger(store: &Store, name: &str, model: &str, keys: &[&str]) {
    let mut p = fast_policy();
    p.model = model.into();
    store.create_ledger(name, &p).await.unwrap();
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    store.enroll(name, &rows).await.unwrap();
}

/// Invariants: after a 429 at create for model m, CreateJob for m on any
/// ledger answers RESOURCE_EXHAUSTED with the time left until the cool-down
/// ends, while other models go on; the refused job's rows are back with no
/// attempt; a later cool-down never shortens a running one; once it ended,
/// jobs are made again.
#[tokio::test]
async fn a_quota_refusal_cools_the_model_down_for_every_ledger() {
    let env = env().await;
    let s = &env.store;
    ledger(s, "a", "m", &["a1", "a2"]).await;
    ledger(s, "b", "m", &["b1"]).await;
    ledger(s, "c", "other", &["c1"]).await;

    // Two jobs of model m are being created when the provider refuses both:
    // first with a 30 s RetryInfo, then with 5 s.
    let mut refused = Vec::new();
    for ledger in ["a", "b"] {
        let g = claim(s, ledger, 10).await.unwrap();
        let job = s.create_job(ledger, g.claim.token, "w").await.unwrap();
        s.mark_creating(ledger, &job.public_id, g.claim.token, "files/x", "w")
            .await
            .unwrap();
        refused.push((ledger, job.public_id, g.claim.token));
    }
    for ((ledger, job, token), secs) in refused.iter().zip([30, 5]) {
        s.mark_not_created(
            ledger,
            job,
            *token,
            &NotCreated {
                reason: "429",
                cooldown: Some(Duration::from_secs(secs)),
                pause: None,
            },
            "w",
        )
        .await
        .unwrap();
    }
    for (ledger, key) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        let r = s.get_row(ledger, key).await.unwrap();
        assert_eq!(r.total, 0, "{key}: no attempt spent on the 429");
    }

    // /metrics shows the cool-down of m, and nothing of m in flight.
    let b = s.backlog().await.unwrap();
    let m = b.models.iter().find(|m| m.model == "m").expect("model m");
    assert!((25.0..=30.0).contains(&m.cooldown_secs), "{m:?}");
    assert_eq!(m.batches, 0);

    // Every ledger's CreateJob for m waits out the longer cool-down.
    let gb = claim(s, "b", 10).await.unwrap();
    match s.create_job("b", gb.claim.token, "w").await.unwrap_err() {
        StoreError::ResourceExhausted {
            reason,
            message,
            retry_after_secs,
        } => {
            assert_eq!(reason, "PROVIDER_COOLDOWN");
            assert!((29..=30).contains(&retry_after_secs), "{retry_after_secs}");
            assert!(message.contains("\"m\""), "{message}");
        }
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
    let gc = claim(s, "c", 10).await.unwrap();
    s.create_job("c", gc.claim.token, "w")
        .await
        .expect("another model is not cooling down");

    // Over: jobs are made again.
    sqlx::query("UPDATE model_cooldowns SET until = now() - interval '1 second'")
        .execute(s.pool())
        .await
        .unwrap();
    s.create_job("b", gb.claim.token, "w")
        .await
        .expect("the cool-down is over");
    assert_queue_consistent(s).await;
}

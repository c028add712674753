//! Admission against the provider's quotas, against a real PostgreSQL:
//! CreateJob admits a job only when the batches and estimated input tokens
//! of every open job, plus this one, fit the limits the server was given
//! (`tally_core::quota`), across ledgers, even when creators race.

use crate::common;

use tally_store::types::NotCreated;

use common::*;
use tally_core::quota::ProviderQuotas;
use tally_store::{Store, StoreError};

/// A row whose payload is `tokens` estimated tokens (4 bytes each).
fn sized(key: &str, tokens: usize) -> tally_store::types::NewRow {
    let pad = "x".repeat(tokens * 4 - 8);
    let payload = format!("{{\"t\":\"{pad}\"}}");
    assert_eq!(payload.len(), tokens * 4);
    row_with(key, &payload, &[])
}

async fn ledger(store: &Store, name: &str, model: &str, rows: usize) {
    let mut p = fast_policy();
    p.model = model.into();
    store.create_ledger(name, &p).await.unwrap();
    let rows: Vec<_> = (0..rows)
        .map(|i| sized(&format!("{name}{i}"), 100))
        .collect();
    store.enroll(name, &rows).await.unwrap();
}

fn quotas(batches: u32, tokens_of_m: i64) -> ProviderQuotas {
    let mut q = ProviderQuotas::unlimited();
    q.max_batches = batches;
    q.per_model.insert("m".into(), tokens_of_m);
    q
}

fn expect_quota(e: StoreError, says: &str) -> u64 {
    match e {
        StoreError::ResourceExhausted {
            reason,
            message,
            retry_after_secs,
        } => {
            assert_eq!(reason, "PROVIDER_QUOTA");
            assert!(message.contains(says), "{message}");
            retry_after_secs
        }
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
}

/// Invariants: a job whose tokens would pass its model's limit beside the
/// open jobs of that model (any ledger) is refused with a RetryInfo and
/// writes nothing (the claim stays live, no attempt spent); other models'
/// tokens do not count; a job alone is admitted whatever its size; closing
/// a job frees its tokens.
#[tokio::test]
async fn enqueued_tokens_are_counted_across_ledgers() {
    let env = env().await;
    let s = env.store.clone().with_provider_quotas(quotas(0, 250));
    ledger(&s, "a", "m", 5).await;
    ledger(&s, "b", "m", 5).await;
    ledger(&s, "c", "other", 5).await;

    // 300 estimated tokens, alone: admitted (the provider decides).
    let g1 = claim(&s, "a", 3).await.unwrap();
    let j1 = s.create_job("a", g1.claim.token, "w").await.unwrap();
    // Another ledger, the same model: 300 + 100 > 250.
    let g2 = claim(&s, "b", 1).await.unwrap();
    let wait = expect_quota(
        s.create_job("b", g2.claim.token, "w").await.unwrap_err(),
        "this job's ~100 more would pass its limit of 250",
    );
    assert!((5..=900).contains(&wait), "{wait}");
    assert_eq!(s.get_row("b", "b0").await.unwrap().total, 0);
    // Another model is not held back.
    let g3 = claim(&s, "c", 5).await.unwrap();
    s.create_job("c", g3.claim.token, "w").await.unwrap();

    // /metrics reads the same count: per model, batches and tokens in
    // flight, with the model's limit.
    let b = s.backlog().await.unwrap();
    let m = b.models.iter().find(|m| m.model == "m").expect("model m");
    assert_eq!(
        (m.batches, m.enqueued_tokens, m.enqueued_tokens_limit),
        (1, 300, 250)
    );
    let other = b.models.iter().find(|m| m.model == "other").unwrap();
    assert_eq!((other.batches, other.enqueued_tokens_limit), (1, 0));
    assert_eq!(b.max_batches, 0);

    // The first job ends without a batch: its tokens are free again.
    s.mark_creating(
        "a",
        &j1.public_id,
        g1.claim.token,
        "files/x",
        &Default::default(),
        "w",
    )
    .await
    .unwrap();
    s.mark_not_created(
        "a",
        &j1.public_id,
        g1.claim.token,
        &NotCreated {
            reason: "400",
            ..Default::default()
        },
        "w",
    )
    .await
    .unwrap();
    s.create_job("b", g2.claim.token, "w")
        .await
        .expect("room again once the first job closed");
    assert_queue_consistent(&s).await;
}

/// Invariants: the batch limit counts every model's open jobs; racing
/// creators never admit more than the limits allow (exactly as many as fit).
#[tokio::test]
async fn racing_creators_never_pass_the_limits() {
    let env = env().await;
    // Room for 2 jobs of one row (100 tokens) of model m, 3 batches in all.
    let s = env.store.clone().with_provider_quotas(quotas(3, 200));
    ledger(&s, "a", "m", 8).await;
    ledger(&s, "c", "other", 2).await;
    let mut grants = Vec::new();
    for _ in 0..8 {
        grants.push(claim(&s, "a", 1).await.unwrap().claim.token);
    }
    let mut set = tokio::task::JoinSet::new();
    for t in grants {
        let s = s.clone();
        set.spawn(async move { s.create_job("a", t, "w").await });
    }
    let results: Vec<_> = set.join_all().await;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 2, "{results:?}");
    for r in results.into_iter().filter_map(Result::err) {
        expect_quota(r, "would pass its limit of 200");
    }
    // One batch of another model fits; the fourth batch of any model does not.
    let g = claim(&s, "c", 1).await.unwrap();
    s.create_job("c", g.claim.token, "w").await.unwrap();
    let g = claim(&s, "c", 1).await.unwrap();
    expect_quota(
        s.create_job("c", g.claim.token, "w").await.unwrap_err(),
        "this team has 3 batches at the provider",
    );
    // Without limits, everything is admitted.
    let open = env
        .store
        .clone()
        .with_provider_quotas(ProviderQuotas::unlimited());
    open.create_job("c", g.claim.token, "w").await.unwrap();
}

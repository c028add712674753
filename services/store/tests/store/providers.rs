//! Claims by provider against a real PostgreSQL: a ledger whose rows run on
//! two providers (by model) hands each worker only its provider's rows.

use crate::common;

use common::*;
use tally_store::types::{ClaimRequest, NewRow};

fn on(key: &str, model: &str) -> NewRow {
    NewRow {
        model: model.into(),
        ..row(key, &[])
    }
}

fn for_provider(provider: &str) -> ClaimRequest {
    ClaimRequest {
        provider: Some(provider.into()),
        ..claim_req(100)
    }
}

/// Invariants: a claim for a provider takes only rows whose model runs
/// there, whichever model's rows are older; a claim for a provider with no
/// rows takes nothing (and leaves every row runnable); a claim naming a
/// model of another provider takes nothing; a claim without a provider
/// takes any model, as before.
#[tokio::test]
async fn each_provider_claims_only_its_models() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("mixed", &fast_policy()).await.unwrap();
    // Gemini's rows are enrolled first (older: a claim without a provider
    // would take them first).
    s.enroll(
        "mixed",
        &[on("g1", "gemini-2.5-flash"), on("g2", "gemini-2.5-flash")],
    )
    .await
    .unwrap();
    s.enroll(
        "mixed",
        &[
            on("o1", "gpt-4o-mini"),
            on("o2", "openai/gpt-4.1"),
            on("v1", "vllm/meta-llama/x"),
        ],
    )
    .await
    .unwrap();

    let none = s
        .claim_rows("mixed", &for_provider("anthropic"))
        .await
        .unwrap();
    assert!(none.is_none(), "no Anthropic rows: nothing claimed");
    let wrong = ClaimRequest {
        model: Some("gemini-2.5-flash".into()),
        ..for_provider("openai")
    };
    assert!(s.claim_rows("mixed", &wrong).await.unwrap().is_none());

    let mut openai_keys = Vec::new();
    while let Some(g) = s
        .claim_rows("mixed", &for_provider("openai"))
        .await
        .unwrap()
    {
        assert!(
            ["gpt-4o-mini", "openai/gpt-4.1"].contains(&g.claim.model.as_str()),
            "{}",
            g.claim.model
        );
        openai_keys.extend(g.rows.into_iter().map(|r| r.key));
    }
    openai_keys.sort();
    assert_eq!(openai_keys, ["o1", "o2"]);

    let v = s
        .claim_rows("mixed", &for_provider("vllm"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.claim.model, "vllm/meta-llama/x");
    let g = claim(s, "mixed", 100).await.unwrap();
    assert_eq!(g.claim.model, "gemini-2.5-flash");
    assert_eq!(g.rows.len(), 2);
}

/// Invariant: models listed before providers were recorded (migration
/// 0005 leaves them NULL) are routed by the same rule at the next start,
/// so a worker of their provider claims them.
#[tokio::test]
async fn models_listed_before_providers_are_routed_at_startup() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("old", &fast_policy()).await.unwrap();
    s.enroll("old", &[on("a", "gpt-4o"), on("b", "flash")])
        .await
        .unwrap();
    sqlx::query("UPDATE ledger_models SET provider = NULL")
        .execute(s.pool())
        .await
        .unwrap();
    assert!(
        s.claim_rows("old", &for_provider("openai"))
            .await
            .unwrap()
            .is_none()
    );
    s.migrate().await.unwrap();
    let routed: Vec<(String, String)> =
        sqlx::query_as("SELECT model, provider FROM ledger_models ORDER BY model")
            .fetch_all(s.pool())
            .await
            .unwrap();
    assert_eq!(
        routed,
        [
            ("flash".into(), "gemini".into()),
            ("gpt-4o".into(), "openai".into())
        ]
    );
    let g = s
        .claim_rows("old", &for_provider("openai"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.rows[0].key, "a");
}

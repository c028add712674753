//! Ledgers through gRPC: listing, policy updates with etags, and a policy
//! change taking effect.

use crate::harness::*;
use tally_proto::v1 as pb;
use tonic::Code;

/// ListLedgers walks every ledger exactly once, in name order, whatever the
/// page size.
#[tokio::test]
async fn list_ledgers_pages_in_name_order() {
    let env = env().await;
    let mut ids: Vec<String> = (0..7).map(|i| format!("ledger-{}", 7 - i)).collect();
    for id in &ids {
        env.ledger(id).await;
    }
    ids.sort();
    let want: Vec<String> = ids.iter().map(|i| ledger_name(i)).collect();
    for size in [1, 3, 7, 8, 0] {
        let mut got = Vec::new();
        let mut token = String::new();
        loop {
            let page = env
                .client()
                .list_ledgers(pb::ListLedgersRequest {
                    page_size: size,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(size == 0 || page.ledgers.len() <= size as usize);
            got.extend(page.ledgers.into_iter().map(|l| l.name));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(got, want, "page size {size}");
    }
    env.stop().await;
}

fn model_update(id: &str, model: &str, etag: &str) -> pb::UpdateLedgerRequest {
    pb::UpdateLedgerRequest {
        ledger: Some(pb::Ledger {
            name: ledger_name(id),
            policy: Some(pb::LedgerPolicy {
                model: model.into(),
                max_active_jobs: 99,
                ..Default::default()
            }),
            etag: etag.into(),
            ..Default::default()
        }),
        update_mask: Some(mask(&["policy.model"])),
    }
}

/// UpdateLedger copies only the masked paths and changes the etag; an
/// update carrying a stale etag is ABORTED and writes nothing; one without
/// an etag applies to whatever is current.
#[tokio::test]
async fn update_ledger_with_a_stale_etag_is_aborted() {
    let env = env().await;
    let original = env.ledger("l").await;
    let updated = env
        .client()
        .update_ledger(model_update("l", "gemini-pro", &original.etag))
        .await
        .expect("update with the current etag")
        .into_inner();
    assert_ne!(updated.etag, original.etag);
    let (before, after) = (original.policy.unwrap(), updated.policy.clone().unwrap());
    assert_eq!(after.model, "gemini-pro");
    assert_eq!(
        after.max_active_jobs, before.max_active_jobs,
        "an unmasked path changed"
    );
    assert_eq!(after.budgets, before.budgets);

    let s = env
        .rejected(
            env.client()
                .update_ledger(model_update("l", "gemini-ultra", &original.etag)),
        )
        .await;
    assert_eq!(s.code(), Code::Aborted, "{}", s.message());
    assert_eq!(env.get_ledger("l").await, updated);

    let last = env
        .client()
        .update_ledger(model_update("l", "gemini-ultra", ""))
        .await
        .expect("update without an etag")
        .into_inner();
    assert_eq!(last.policy.unwrap().model, "gemini-ultra");
    assert_ne!(last.etag, updated.etag);
    env.stop().await;
}

/// A policy change applies to the next verdicts: with the provider budget
/// lowered to 1, the next transient failure ends PERMANENT
/// (`provider_attempts_exhausted`, invariant 4); rows that named no model
/// keep the model they were enrolled with.
#[tokio::test]
async fn a_policy_update_takes_effect() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a")]).await;
    env.client()
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: ledger_name("l"),
                policy: Some(pb::LedgerPolicy {
                    model: "gemini-pro".into(),
                    budgets: Some(pb::AttemptBudgets {
                        provider: 1,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: Some(mask(&["policy.budgets.provider", "policy.model"])),
        })
        .await
        .unwrap();
    let g = env.claim("l", 1).await.unwrap();
    assert_eq!(g.rows[0].model, "gemini-flash-latest");
    let r = env.report(&g.claim.name, vec![failure("a", 503)]).await;
    assert_eq!(
        (r.verdicts[0].verdict(), r.verdicts[0].rule.as_str()),
        (pb::Verdict::Permanent, "provider_attempts_exhausted")
    );
    env.enroll("l", vec![row("b")]).await;
    assert_eq!(env.get_row("l", "b").await.model, "gemini-pro");
    env.stop().await;
}

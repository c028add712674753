//! CreateLedger, GetLedger, ListLedgers, UpdateLedger.

use super::BAD_LEDGER_NAMES;
use crate::harness::*;
use tally_proto::v1 as pb;

fn create(id: &str, policy: Option<pb::LedgerPolicy>) -> pb::CreateLedgerRequest {
    pb::CreateLedgerRequest {
        ledger_id: id.into(),
        policy,
    }
}

fn budgets(provider: i32, content: i32, infra: i32) -> Option<pb::AttemptBudgets> {
    Some(pb::AttemptBudgets {
        provider,
        content,
        infra,
    })
}

fn backoff(initial: i64, max: i64) -> Option<pb::Backoff> {
    Some(pb::Backoff {
        initial: Some(secs(initial)),
        max: Some(secs(max)),
        multiplier: 2.0,
        jitter: 0.1,
    })
}

/// CreateLedger refuses malformed ids and invalid policy values (negative
/// budgets, negative or inverted backoff, absurd leases, out-of-range
/// multiplier and jitter, bad override verdicts, non-http alert URLs) with a
/// violation per field, and a taken id with ALREADY_EXISTS naming the
/// ledger; nothing is written.
#[tokio::test]
async fn create_ledger() {
    let env = env().await;
    for id in [
        "",
        "Reviews",
        "9lives",
        "trailing-",
        "under_score",
        "a/b",
        "a b",
        &"a".repeat(64),
    ] {
        let s = env
            .rejected(env.client().create_ledger(create(id, None)))
            .await;
        assert_invalid(&s, &["ledger_id"]);
    }

    let cases: Vec<(pb::LedgerPolicy, Vec<&str>)> = vec![
        (
            pb::LedgerPolicy {
                budgets: budgets(-1, 0, -3),
                ..Default::default()
            },
            vec!["policy.budgets.provider", "policy.budgets.infra"],
        ),
        (
            pb::LedgerPolicy {
                backoff: backoff(-1, 60),
                ..Default::default()
            },
            vec!["policy.backoff.initial"],
        ),
        (
            pb::LedgerPolicy {
                backoff: backoff(600, 60),
                ..Default::default()
            },
            vec!["policy.backoff.max"],
        ),
        (
            pb::LedgerPolicy {
                backoff: Some(pb::Backoff {
                    multiplier: 0.5,
                    jitter: 1.5,
                    ..Default::default()
                }),
                ..Default::default()
            },
            vec!["policy.backoff.multiplier", "policy.backoff.jitter"],
        ),
        (
            pb::LedgerPolicy {
                lease: Some(secs(8 * 86_400)),
                ..Default::default()
            },
            vec!["policy.lease"],
        ),
        (
            pb::LedgerPolicy {
                lease: Some(secs(-5)),
                ..Default::default()
            },
            vec!["policy.lease"],
        ),
        (
            pb::LedgerPolicy {
                max_active_jobs: -1,
                review_threshold: -1,
                ..Default::default()
            },
            vec!["policy.review_threshold", "policy.max_active_jobs"],
        ),
        (
            pb::LedgerPolicy {
                alert_url: "ftp://alerts.example".into(),
                ..Default::default()
            },
            vec!["policy.alert_url"],
        ),
        (
            pb::LedgerPolicy {
                overrides: vec![pb::ClassifierOverride {
                    name: "teapot".into(),
                    http_code: 418,
                    verdict: pb::RowStatus::Succeeded as i32,
                    ..Default::default()
                }],
                ..Default::default()
            },
            vec!["policy.overrides[0].verdict"],
        ),
        (
            pb::LedgerPolicy {
                prices: vec![pb::ModelPrice {
                    model: "m".into(),
                    input_per_million: 1.0,
                    output_per_million: 1.0,
                    cached_input_per_million: -0.5,
                    thinking_per_million: 0.0,
                    ..Default::default()
                }],
                ..Default::default()
            },
            vec!["policy.prices[0]"],
        ),
        (
            pb::LedgerPolicy {
                spend_cap: Some(pb::SpendCap::default()),
                ..Default::default()
            },
            vec!["policy.spend_cap.max_cost_usd"],
        ),
        (
            pb::LedgerPolicy {
                spend_cap: Some(pb::SpendCap {
                    max_input_tokens: -5,
                    warn_fraction: 1.5,
                    ..Default::default()
                }),
                ..Default::default()
            },
            vec![
                "policy.spend_cap.max_input_tokens",
                "policy.spend_cap.warn_fraction",
            ],
        ),
    ];
    for (policy, fields) in cases {
        let s = env
            .rejected(
                env.client()
                    .create_ledger(create("fine", Some(policy.clone()))),
            )
            .await;
        assert_invalid(&s, &fields);
    }

    // Every problem at once is named at once.
    let s = env
        .rejected(env.client().create_ledger(create(
            "Bad",
            Some(pb::LedgerPolicy {
                budgets: budgets(-1, 0, 0),
                ..Default::default()
            }),
        )))
        .await;
    assert_invalid(&s, &["ledger_id", "policy.budgets.provider"]);

    env.ledger("taken").await;
    let s = env
        .rejected(env.client().create_ledger(create("taken", None)))
        .await;
    assert_already_exists(&s, "ledger", "ledgers/taken");
    env.stop().await;
}

/// GetLedger and SummarizeLedger refuse malformed names (INVALID_ARGUMENT
/// on `name`) and answer NOT_FOUND with a ResourceInfo for an unknown
/// ledger.
#[tokio::test]
async fn get_ledger_and_summarize_ledger() {
    let env = env().await;
    env.ledger("known").await;
    for name in BAD_LEDGER_NAMES {
        let s = env
            .rejected(
                env.client()
                    .get_ledger(pb::GetLedgerRequest { name: name.into() }),
            )
            .await;
        assert_invalid(&s, &["name"]);
        let s = env
            .rejected(env.client().summarize_ledger(pb::SummarizeLedgerRequest {
                name: name.into(),
                ..Default::default()
            }))
            .await;
        assert_invalid(&s, &["name"]);
    }
    let s = env
        .rejected(env.client().get_ledger(pb::GetLedgerRequest {
            name: "ledgers/unknown".into(),
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/unknown");
    let s = env
        .rejected(env.client().summarize_ledger(pb::SummarizeLedgerRequest {
            name: "ledgers/unknown".into(),
            ..Default::default()
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/unknown");
    env.stop().await;
}

/// ListLedgers refuses page sizes outside 0..=1000 and page tokens it did
/// not issue for this list (garbage, or a ListRows token).
#[tokio::test]
async fn list_ledgers() {
    let env = env().await;
    env.ledger("a").await;
    env.enroll_n("a", "k", 3).await;
    for size in [-1, 1001, i32::MIN] {
        let s = env
            .rejected(env.client().list_ledgers(pb::ListLedgersRequest {
                page_size: size,
                page_token: String::new(),
                ..Default::default()
            }))
            .await;
        assert_invalid(&s, &["page_size"]);
    }
    let rows_token = env
        .client()
        .list_rows(pb::ListRowsRequest {
            parent: ledger_name("a"),
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .next_page_token;
    assert!(!rows_token.is_empty());
    for token in ["garbage!", "eyJsIjoieCJ9", rows_token.as_str()] {
        let s = env
            .rejected(env.client().list_ledgers(pb::ListLedgersRequest {
                page_size: 10,
                page_token: token.into(),
                ..Default::default()
            }))
            .await;
        assert_invalid(&s, &["page_token"]);
    }
    env.stop().await;
}

fn update(name: &str, policy: pb::LedgerPolicy, paths: &[&str]) -> pb::UpdateLedgerRequest {
    pb::UpdateLedgerRequest {
        ledger: Some(pb::Ledger {
            name: name.into(),
            policy: Some(policy),
            ..Default::default()
        }),
        update_mask: Some(mask(paths)),
    }
}

/// UpdateLedger refuses a missing ledger, malformed names, an unknown
/// ledger (NOT_FOUND), a missing or unknown update_mask path, zero budgets,
/// negative backoff, an unset lease under its path and an etag the server
/// never issued; the policy is unchanged after each.
#[tokio::test]
async fn update_ledger() {
    let env = env().await;
    env.ledger("l").await;
    let name = ledger_name("l");
    let before = env.get_ledger("l").await;

    let s = env
        .rejected(env.client().update_ledger(pb::UpdateLedgerRequest {
            ledger: None,
            update_mask: Some(mask(&["policy.model"])),
        }))
        .await;
    assert_invalid(&s, &["ledger"]);
    for bad in BAD_LEDGER_NAMES {
        let s = env
            .rejected(env.client().update_ledger(update(
                bad,
                pb::LedgerPolicy::default(),
                &["policy.model"],
            )))
            .await;
        assert_invalid(&s, &["ledger.name"]);
    }
    let s = env
        .rejected(env.client().update_ledger(update(
            "ledgers/unknown",
            pb::LedgerPolicy {
                model: "m".into(),
                ..Default::default()
            },
            &["policy.model"],
        )))
        .await;
    assert_not_found(&s, "ledger", "ledgers/unknown");

    let cases: Vec<(pb::LedgerPolicy, Vec<&str>, Vec<&str>)> = vec![
        (pb::LedgerPolicy::default(), vec![], vec!["update_mask"]),
        (
            pb::LedgerPolicy::default(),
            vec!["policy.nope"],
            vec!["update_mask"],
        ),
        (
            pb::LedgerPolicy::default(),
            vec!["name", "policy.model"],
            vec!["update_mask"],
        ),
        (
            pb::LedgerPolicy {
                budgets: budgets(3, 0, 2),
                ..Default::default()
            },
            vec!["policy.budgets.content"],
            vec!["policy.budgets.content"],
        ),
        (
            pb::LedgerPolicy::default(),
            vec!["policy.budgets"],
            vec![
                "policy.budgets.provider",
                "policy.budgets.content",
                "policy.budgets.infra",
            ],
        ),
        (
            pb::LedgerPolicy {
                budgets: budgets(-2, 1, 1),
                ..Default::default()
            },
            vec!["policy.budgets"],
            vec!["policy.budgets.provider"],
        ),
        (
            pb::LedgerPolicy {
                backoff: backoff(-30, 60),
                ..Default::default()
            },
            vec!["policy.backoff"],
            vec!["policy.backoff.initial"],
        ),
        (
            pb::LedgerPolicy::default(),
            vec!["policy.lease"],
            vec!["policy.lease"],
        ),
        (
            pb::LedgerPolicy {
                lease: Some(secs(0)),
                ..Default::default()
            },
            vec!["policy.lease"],
            vec!["policy.lease"],
        ),
        (
            pb::LedgerPolicy {
                max_active_jobs: 0,
                ..Default::default()
            },
            vec!["policy.max_active_jobs"],
            vec!["policy.max_active_jobs"],
        ),
    ];
    for (policy, paths, fields) in cases {
        let s = env
            .rejected(env.client().update_ledger(update(&name, policy, &paths)))
            .await;
        assert_invalid(&s, &fields);
    }
    // An absent update_mask is refused like an empty one.
    let s = env
        .rejected(env.client().update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: name.clone(),
                policy: Some(pb::LedgerPolicy::default()),
                ..Default::default()
            }),
            update_mask: None,
        }))
        .await;
    assert_invalid(&s, &["update_mask"]);

    let mut req = update(
        &name,
        pb::LedgerPolicy {
            model: "m".into(),
            ..Default::default()
        },
        &["policy.model"],
    );
    req.ledger.as_mut().unwrap().etag = "not-an-etag".into();
    let s = env.rejected(env.client().update_ledger(req)).await;
    assert_invalid(&s, &["ledger.etag"]);

    assert_eq!(env.get_ledger("l").await, before);
    env.stop().await;
}

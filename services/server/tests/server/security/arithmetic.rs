//! Token counts cannot overflow (issue 17, item 6): a report above the
//! per-attempt bound is refused before anything is written, and sums over
//! a ledger saturate instead of answering INTERNAL.

use crate::security::common::*;
use tally_core::usage::MAX_TOKENS_PER_ATTEMPT;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tonic::Code;
use tonic_types::StatusExt as _;

fn success(key: String, tokens: i64) -> pb::RowOutcome {
    pb::RowOutcome {
        key,
        outcome: Some(pb::row_outcome::Outcome::Result(r#"{"ok": true}"#.into())),
        usage: Some(pb::Usage {
            input_tokens: tokens,
            output_tokens: tokens,
            thinking_tokens: tokens,
            cached_tokens: tokens,
            cache_write_tokens: 0,
        }),
        ..Default::default()
    }
}

async fn summarize(server: &TestServer, id: &str) -> Result<pb::LedgerSummary, tonic::Status> {
    LedgerServiceClient::new(server.connect().await)
        .summarize_ledger(authed(
            pb::SummarizeLedgerRequest {
                name: format!("ledgers/{id}"),
                ..Default::default()
            },
            Some(OPERATOR),
        ))
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn token_counts_above_the_bound_are_refused_and_nothing_is_written() {
    // Invariant: a report whose counts exceed MAX_TOKENS_PER_ATTEMPT (the
    // issue's case: input_tokens = i64::MAX on two rows) answers
    // INVALID_ARGUMENT naming each usage field, and changes no row.
    let server = start(|_| {}).await;
    let claim = claimed(&server, "big", None, 2).await;
    let mut l = LedgerServiceClient::new(server.connect().await);
    let refused = l
        .report_outcomes(authed(
            pb::ReportOutcomesRequest {
                claim: claim.clone(),
                outcomes: vec![
                    success("k0".into(), i64::MAX),
                    success("k1".into(), MAX_TOKENS_PER_ATTEMPT + 1),
                ],
                claim_next: None,
            },
            Some(WORKER),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let fields: Vec<String> = refused
        .get_error_details()
        .bad_request()
        .expect("field violations")
        .field_violations
        .iter()
        .map(|f| f.field.clone())
        .collect();
    assert_eq!(fields, ["outcomes[0].usage", "outcomes[1].usage"]);
    assert!(refused.message().contains("1000000000000"), "{refused:?}");

    let s = summarize(&server, "big").await.expect("summary");
    assert_eq!((s.running, s.succeeded, s.attempts_total), (2, 0, 0));
    assert_eq!(s.usage.unwrap_or_default().input_tokens, 0);

    // The bound itself is legal: the same rows report at it.
    let ok = l
        .report_outcomes(authed(
            pb::ReportOutcomesRequest {
                claim,
                outcomes: vec![
                    success("k0".into(), MAX_TOKENS_PER_ATTEMPT),
                    success("k1".into(), MAX_TOKENS_PER_ATTEMPT),
                ],
                claim_next: None,
            },
            Some(WORKER),
        ))
        .await
        .expect("counts at the bound are accepted")
        .into_inner();
    assert_eq!(ok.succeeded, 2);
    let s = summarize(&server, "big").await.expect("summary");
    assert_eq!(
        s.usage.unwrap_or_default().input_tokens,
        2 * MAX_TOKENS_PER_ATTEMPT
    );
    server.stop().await;
}

#[tokio::test]
async fn summaries_over_huge_totals_saturate_instead_of_failing() {
    // Invariant: SummarizeLedger answers OK however large the stored counts
    // (sums are held at i64::MAX, never overflow into INTERNAL). Legal
    // reports cannot reach i64::MAX in a test's time (9 million attempts),
    // so the attempts are raised to i64::MAX in the database afterwards, as
    // a history written before the bound existed would be.
    let server = start(|_| {}).await;
    let n = 50;
    let claim = claimed(&server, "many", None, n).await;
    LedgerServiceClient::new(server.connect().await)
        .report_outcomes(authed(
            pb::ReportOutcomesRequest {
                claim,
                outcomes: (0..n)
                    .map(|i| success(format!("k{i}"), MAX_TOKENS_PER_ATTEMPT))
                    .collect(),
                claim_next: None,
            },
            Some(WORKER),
        ))
        .await
        .expect("legal counts are accepted");
    let legal = summarize(&server, "many").await.expect("summary");
    let u = legal.usage.unwrap_or_default();
    assert_eq!(u.output_tokens, n as i64 * MAX_TOKENS_PER_ATTEMPT);

    let pool = sqlx::PgPool::connect(server.db.url()).await.unwrap();
    sqlx::query("UPDATE attempts SET input_tokens = $1, cached_tokens = $1")
        .bind(i64::MAX)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let huge = summarize(&server, "many")
        .await
        .expect("summary answers OK");
    let u = huge.usage.unwrap_or_default();
    assert_eq!((u.input_tokens, u.cached_tokens), (i64::MAX, i64::MAX));
    assert_eq!(u.output_tokens, n as i64 * MAX_TOKENS_PER_ATTEMPT);
    assert!(huge.estimated_cost_usd.is_finite());
    server.stop().await;
}

/// Invariant: a capped ledger's spend sums saturate: with what it spent
/// already at the largest count (as years of reports could leave it), one
/// more report is still accepted (not INTERNAL "bigint out of range"), and
/// the summary's spend is finite. A price above the bound is refused, so no
/// cost is infinite or NaN.
#[tokio::test]
async fn spend_sums_saturate_and_prices_are_bounded() {
    let server = start(|_| {}).await;
    let policy = pb::LedgerPolicy {
        spend_cap: Some(pb::SpendCap {
            max_input_tokens: tally_core::spend::MAX_TOKENS,
            ..Default::default()
        }),
        ..Default::default()
    };
    let claim = claimed(&server, "spent", Some(policy), 2).await;
    let mut ledgers = LedgerServiceClient::new(server.connect().await);
    let report = |key: &str| pb::ReportOutcomesRequest {
        claim: claim.clone(),
        outcomes: vec![success(key.into(), MAX_TOKENS_PER_ATTEMPT)],
        claim_next: None,
    };
    ledgers
        .report_outcomes(authed(report("k0"), Some(WORKER)))
        .await
        .expect("first report");
    let pool = sqlx::PgPool::connect(server.db.url()).await.unwrap();
    sqlx::query(
        "UPDATE ledger_spend SET input_tokens = $1, output_tokens = $1, cost_usd = 'Infinity'",
    )
    .bind(i64::MAX - 5)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    ledgers
        .report_outcomes(authed(report("k1"), Some(WORKER)))
        .await
        .expect("a report over saturated sums is accepted");
    let summary = summarize(&server, "spent").await.expect("summary");
    let spend = summary.spend.expect("a capped ledger shows its spend");
    let spent = spend.spent.unwrap_or_default();
    assert_eq!(spent.input_tokens, i64::MAX);
    assert!(spent.cost_usd.is_finite(), "{spent:?}");

    let priced = ledgers
        .create_ledger(authed(
            pb::CreateLedgerRequest {
                ledger_id: "priced".into(),
                policy: Some(pb::LedgerPolicy {
                    prices: vec![pb::ModelPrice {
                        model: "m".into(),
                        input_per_million: 1e300,
                        output_per_million: 1.0,
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(priced.code(), Code::InvalidArgument);
    let bad = priced.get_error_details().bad_request().unwrap().clone();
    assert_eq!(bad.field_violations[0].field, "policy.prices[0]");
    server.stop().await;
}

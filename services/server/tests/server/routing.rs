//! The critical path through gRPC: a ledger's deadline, lanes and priors
//! set over the wire, the claims of each lane taking the depths routing
//! gives it, and SummarizeLedger's forecast of the routed plan beside
//! all-batch. Each test states the invariant it checks.

use std::time::Duration;

use tally_proto::v1 as pb;

use crate::pause::env;

fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

fn in_minutes(m: i64) -> prost_types::Timestamp {
    let at = chrono::Utc::now() + chrono::TimeDelta::minutes(m);
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: 0,
    }
}

/// Three books of 40 pages (each page depends on the one before) and 20
/// loose pages.
fn pages() -> Vec<pb::RowInput> {
    let mut rows = Vec::new();
    for book in ["a", "b", "c"] {
        for p in 0..40 {
            rows.push(pb::RowInput {
                key: format!("{book}-{p:02}"),
                payload: format!(r#"{{"text": "page {p} of {book}"}}"#),
                depends_on: if p == 0 {
                    vec![]
                } else {
                    vec![format!("{book}-{:02}", p - 1)]
                },
                ..Default::default()
            });
        }
    }
    rows.extend((0..20).map(|i| pb::RowInput {
        key: format!("loose-{i:02}"),
        payload: format!(r#"{{"text": "loose page {i}"}}"#),
        ..Default::default()
    }));
    rows
}

/// The books' ledger policy: a 10-minute deadline, batch (60 s) and
/// `fast` (1 s) allowed, gpt-4o-mini priced.
fn books_policy(fast: pb::Lane) -> pb::LedgerPolicy {
    let mut turnarounds = pb::LaneTurnarounds {
        batch: Some(secs(60)),
        ..Default::default()
    };
    match fast {
        pb::Lane::Flex => turnarounds.flex = Some(secs(1)),
        pb::Lane::Standard => turnarounds.standard = Some(secs(1)),
        _ => turnarounds.priority = Some(secs(1)),
    }
    pb::LedgerPolicy {
        model: "gpt-4o-mini".into(),
        lanes: vec![pb::Lane::Batch as i32, fast as i32],
        deadline: Some(in_minutes(10)),
        turnarounds: Some(turnarounds),
        prices: vec![pb::ModelPrice {
            model: "gpt-4o-mini".into(),
            input_per_million: 0.075,
            output_per_million: 0.3,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Ledger `id` under `policy` with the [`pages`] enrolled, summarized
/// with its forecast.
async fn books_forecast(
    env: &mut crate::pause::Env,
    id: &str,
    policy: pb::LedgerPolicy,
) -> pb::LedgerSummary {
    env.l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: Some(policy),
        })
        .await
        .unwrap();
    env.l
        .enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{id}"),
            rows: pages(),
        })
        .await
        .unwrap();
    env.l
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{id}"),
            forecast: true,
        })
        .await
        .unwrap()
        .into_inner()
}

// Invariant (issue 49, the most a ledger may pay): a deadline whose plan
// costs more than the ledger's spend cap leaves is said to be out of reach
// at the price allowed, in the forecast's words.
#[tokio::test]
async fn a_plan_past_the_spend_cap_is_said_to_miss_the_deadline() {
    let mut env = env().await;
    let policy = pb::LedgerPolicy {
        spend_cap: Some(pb::SpendCap {
            max_cost_usd: 0.0001,
            ..Default::default()
        }),
        ..books_policy(pb::Lane::Standard)
    };
    let f = books_forecast(&mut env, "capped", policy)
        .await
        .forecast
        .expect("asked for");
    println!("{}", f.explanation);
    assert!(
        f.explanation.contains("the spend cap leaves $0.0001")
            && f.explanation
                .contains("the deadline cannot be met at the price allowed"),
        "{}",
        f.explanation
    );
}

// Invariant: under a 10-minute deadline with 60 s batches and 1 s flex,
// the forecast finishes the routed plan in time and all-batch not (40
// turnarounds), at the same cost (flex at the batch price); the heads of
// the three chains go by flex, the loose pages by batch.
#[tokio::test]
async fn a_deadline_routes_deep_chains_to_flex_and_the_forecast_says_so() {
    let mut env = env().await;
    let s = books_forecast(&mut env, "books", books_policy(pb::Lane::Flex)).await;
    let f = s.forecast.expect("asked for");
    assert_eq!(f.depth, 40);
    let (plan, batch) = (f.plan.unwrap(), f.all_batch.unwrap());
    assert!(plan.in_time, "routed: in time");
    assert!(!batch.in_time, "all batch: 40 turnarounds of 60 s");
    assert!(
        (plan.cost_usd - batch.cost_usd).abs() < 1e-9,
        "flex at the batch price"
    );
    let finish = |p: &pb::ForecastPlan| p.finish_time.as_ref().unwrap().seconds;
    assert!(finish(&batch) - finish(&plan) > 20 * 60);
    assert!(
        f.explanation.starts_with("batch alone would be late")
            && f.explanation.contains("by flex")
            && f.explanation.contains("at the all-batch cost"),
        "the forecast says why: {}",
        f.explanation
    );
    let claim = |lane: pb::Lane| pb::ClaimRowsRequest {
        parent: "ledgers/books".into(),
        max_rows: 100,
        lane: lane as i32,
        ..Default::default()
    };
    let flex = env
        .l
        .claim_rows(claim(pb::Lane::Flex))
        .await
        .unwrap()
        .into_inner();
    let mut heads: Vec<String> = flex.rows.iter().map(|r| r.key.clone()).collect();
    heads.sort();
    assert_eq!(heads, ["a-00", "b-00", "c-00"]);
    let batch_claim = env
        .l
        .claim_rows(claim(pb::Lane::Batch))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch_claim.rows.len(), 20);
    // Without asking, no forecast (it reads every unfinished row).
    let plain = env
        .l
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: "ledgers/books".into(),
            forecast: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plain.forecast.is_none());
    let _ = Duration::ZERO;
}

// Invariant: a bad deadline or turnaround is refused with the field named,
// and nothing is written.
#[tokio::test]
async fn bad_routing_settings_are_refused_by_field() {
    let mut env = env().await;
    let e = env
        .l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "bad".into(),
            policy: Some(pb::LedgerPolicy {
                deadline: Some(prost_types::Timestamp {
                    seconds: -5,
                    nanos: 0,
                }),
                turnarounds: Some(pb::LaneTurnarounds {
                    flex: Some(secs(-1)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("deadline") || format!("{e:?}").contains("policy.deadline"),
        "{e:?}"
    );
    assert!(format!("{e:?}").contains("turnarounds.flex"), "{e:?}");
    let got = env
        .l
        .get_ledger(pb::GetLedgerRequest {
            name: "ledgers/bad".into(),
        })
        .await;
    assert_eq!(got.unwrap_err().code(), tonic::Code::NotFound);
}

// Invariant (issue 49): the forecast prices each unfinished row's output at
// the ledger's own average once 5 rows have answered (100 tokens here),
// not at the 1,024-token prior it uses before.
#[tokio::test]
async fn the_forecast_cost_learns_the_output_per_row_from_the_answers() {
    let mut env = env().await;
    env.l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "learn".into(),
            policy: Some(pb::LedgerPolicy {
                model: "gpt-4o-mini".into(),
                // A dollar an output token, input free: a row costs its
                // output.
                prices: vec![pb::ModelPrice {
                    model: "gpt-4o-mini".into(),
                    input_per_million: 0.0,
                    output_per_million: 1e6,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let rows: Vec<pb::RowInput> = (0..10)
        .map(|i| pb::RowInput {
            key: format!("r{i}"),
            payload: r#"{"text": "t"}"#.into(),
            ..Default::default()
        })
        .collect();
    env.l
        .enroll_rows(pb::EnrollRowsRequest {
            parent: "ledgers/learn".into(),
            rows,
        })
        .await
        .unwrap();
    let forecast_cost = |mut l: crate::pause::Ledgers| async move {
        let s = l
            .summarize_ledger(pb::SummarizeLedgerRequest {
                name: "ledgers/learn".into(),
                forecast: true,
            })
            .await
            .unwrap()
            .into_inner();
        s.forecast.unwrap().plan.unwrap().cost_usd
    };
    let before = forecast_cost(env.l.clone()).await;
    assert!((before - 10.0 * 1024.0).abs() < 1e-6, "the prior: {before}");
    let claim = env
        .l
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/learn".into(),
            max_rows: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let outcomes = claim
        .rows
        .iter()
        .map(|r| pb::RowOutcome {
            key: r.key.clone(),
            outcome: Some(pb::row_outcome::Outcome::Result(r#"{"a": 1}"#.into())),
            usage: Some(pb::Usage {
                output_tokens: 100,
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    env.l
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claim.claim.unwrap().name,
            outcomes,
            ..Default::default()
        })
        .await
        .unwrap();
    let after = forecast_cost(env.l.clone()).await;
    assert!((after - 5.0 * 100.0).abs() < 1e-6, "the history: {after}");
}

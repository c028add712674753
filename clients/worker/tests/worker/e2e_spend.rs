//! Spend caps stop the work before the money goes out (issue 18, item 1).
//!
//! A ledger of 40 rows with a price and a spend cap of $0.50; the emulator
//! runs every row; one worker claims 4 rows at a time. Each claim reserves
//! its rows' estimates and gets only the rows that fit under the cap,
//! counting what was spent and what claims out hold; so the ledger is
//! paused (reason SPEND_CAP) after the provider was sent rows whose
//! estimates sum to at most the cap. Then the cap is raised, the ledger
//! resumed, and the same worker finishes every row.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_spend:: -- --nocapture`.

use crate::common;

use common::{World, resume, summary, until};
use gemini_emulator::FaultPlan;
use std::time::Duration;
use tally_core::spend::{RowSize, SpendCap};
use tally_proto::v1 as pb;

const LEDGER: &str = "capped";
const ROWS: usize = 40;
const CAP_USD: f64 = 0.5;
const OUTPUT_PER_ROW: i64 = 50;

fn price() -> pb::ModelPrice {
    // $1 per thousand tokens either way: a row costs a few cents.
    pb::ModelPrice {
        model: "gemini-2.5-flash".into(),
        input_per_million: 1000.0,
        output_per_million: 1000.0,
        ..Default::default()
    }
}

async fn set_cap(w: &World, usd: f64) {
    w.c.ledgers
        .clone()
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: format!("ledgers/{LEDGER}"),
                policy: Some(pb::LedgerPolicy {
                    prices: vec![price()],
                    spend_cap: Some(pb::SpendCap {
                        max_cost_usd: usd,
                        output_tokens_per_row: OUTPUT_PER_ROW,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["policy.prices".into(), "policy.spend_cap".into()],
            }),
        })
        .await
        .expect("update the cap");
}

/// The largest estimate of one row of this ledger, by the documented rule.
fn max_row_estimate() -> f64 {
    let cap = SpendCap {
        max_cost_usd: CAP_USD,
        output_tokens_per_row: OUTPUT_PER_ROW,
        ..SpendCap::default()
    };
    let p = price();
    let price = tally_core::policy::Price {
        model: p.model,
        input_per_million: p.input_per_million,
        output_per_million: p.output_per_million,
        cached_input_per_million: 0.0,
        thinking_per_million: 0.0,
        lane: tally_core::lane::Lane::Batch,
    };
    let payload = serde_json::json!({"text": format!("document {}", ROWS - 1)}).to_string();
    cap.estimate(
        RowSize {
            payload_bytes: payload.len() as u64,
            prompt_bytes: "Summarize {{ text }} in one line.".len() as u64,
        },
        Some(&price),
    )
    .unwrap()
    .cost_usd
}

/// Invariants: the ledger pauses with reason SPEND_CAP and work left; with
/// estimates above the actual usage, what the rows sent before the pause
/// actually spent is within the cap; no row is charged an attempt for the
/// pause; nothing stays reserved once the jobs out ended; after
/// the cap is raised and the ledger resumed, every row succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spend_cap_pauses_before_the_money_goes_out() {
    let w = World::start(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    set_cap(&w, CAP_USD).await;
    let worker = w.worker_in_process(
        LEDGER,
        "spender",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );

    until(
        Duration::from_secs(60),
        "the ledger pauses at its cap",
        || async { summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32 },
    )
    .await;
    // Jobs already out run to their end; then nothing moves.
    until(Duration::from_secs(60), "the jobs out finish", || async {
        let s = summary(&w.c, LEDGER).await;
        s.active_jobs == 0 && s.running == 0
    })
    .await;
    let s = summary(&w.c, LEDGER).await;
    let pause = s.pause.clone().expect("a pause");
    println!("paused: {} ({})", pause.message, pause.actor);
    assert_eq!(pause.reason, pb::LedgerPauseReason::SpendCap as i32);
    let spend = s.spend.expect("spend shown for a capped ledger");
    let spent = spend.spent.unwrap_or_default();
    let reserved = spend.reserved.unwrap_or_default();
    let sent = s.succeeded + s.permanent + s.retryable;
    let per_row = max_row_estimate();
    println!(
        "rows sent {sent} of {ROWS}; spent ${:.4} (tokens in {} out {}), reserved ${:.4}; cap ${CAP_USD}; one row's estimate ${per_row:.4}",
        spent.cost_usd, spent.input_tokens, spent.output_tokens, reserved.cost_usd
    );
    assert!(
        sent > 0 && (sent as usize) < ROWS,
        "the cap stopped the work midway: {sent}"
    );
    assert_eq!(
        reserved.cost_usd, 0.0,
        "nothing is held once the jobs ended"
    );
    // The estimates here are above the emulator's usage (output 50 tokens a
    // row, the answers are shorter): a grant keeps spent + reserved within
    // the cap, so what was actually spent stays within it.
    let overshoot = spent.cost_usd - CAP_USD;
    println!("measured overshoot of actual spend over the cap: ${overshoot:.4}");
    assert!(spent.cost_usd > 0.0);
    assert!(
        overshoot <= 1e-9,
        "spent within the cap: ${}",
        spent.cost_usd
    );
    assert_eq!(s.attempts_infra, 0, "no attempt was spent on the pause");
    assert_eq!(
        s.pending + s.retryable,
        ROWS as i64 - s.succeeded - s.permanent
    );

    // Raise the cap and resume: the same worker finishes every row.
    set_cap(&w, 100.0).await;
    resume(&w.c, LEDGER).await;
    until(Duration::from_secs(120), "every row succeeds", || async {
        summary(&w.c, LEDGER).await.succeeded == ROWS as i64
    })
    .await;
    let s = summary(&w.c, LEDGER).await;
    assert_eq!(s.state, pb::LedgerState::Active as i32);
    let spent = s.spend.unwrap().spent.unwrap();
    println!("after resume: spent ${:.4} for {ROWS} rows", spent.cost_usd);
    assert!(spent.cost_usd > CAP_USD);
    worker.stop().await;
    w.stop().await;
}

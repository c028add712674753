//! Spend caps against a real PostgreSQL (rules in `tally_core::spend`):
//! claims reserve their rows' estimates, get only the rows that fit, pause
//! the ledger when nothing fits, and every way a row leaves a claim gives
//! its reservation back. One database per test.

use crate::common;

use common::*;
use tally_core::pause::PauseReason;
use tally_core::spend::SpendCap;
use tally_store::types::LedgerRecord;
use tally_store::{Store, StoreError};

/// Rows `{"text": "k"}` are 13 bytes: 4 input tokens each by the 4-bytes
/// rule; 10 output tokens each by the cap.
const IN_PER_ROW: i64 = 4;

async fn capped(store: &Store, ledger: &str, cap: SpendCap, keys: &[&str]) -> LedgerRecord {
    let mut p = fast_policy();
    p.spend_cap = Some(cap);
    p.alert_url = "https://alerts.example/hook".into();
    store.create_ledger(ledger, &p).await.unwrap();
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    store.enroll(ledger, &rows).await.unwrap();
    store.get_ledger(ledger).await.unwrap()
}

fn input_cap(tokens: i64) -> SpendCap {
    SpendCap {
        max_input_tokens: tokens,
        output_tokens_per_row: 10,
        ..SpendCap::default()
    }
}

async fn reserved_input(store: &Store, l: &LedgerRecord) -> i64 {
    store.spend(l).await.unwrap().unwrap().reserved.input_tokens
}

async fn alert_kinds(store: &Store) -> Vec<String> {
    sqlx::query_scalar("SELECT kind FROM alert_outbox ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

fn assert_spend_cap_pause(e: StoreError) -> String {
    match e {
        StoreError::LedgerPaused { pause, .. } => {
            assert_eq!(pause.reason, PauseReason::SpendCap);
            pause.message
        }
        other => panic!("expected LEDGER_PAUSED, got {other:?}"),
    }
}

/// Invariants: a claim gets only the rows whose estimates fit under the
/// cap counting what claims out reserve (the rest stay runnable, with no
/// attempt); a claim for which nothing fits takes nothing and pauses the
/// ledger; the warning and the cap-reached alerts are queued once each;
/// releasing rows and reporting them give their reservation back, and a
/// report adds the actual usage to what was spent.
#[tokio::test]
async fn claims_get_what_fits_and_pause_at_the_cap() {
    let env = env().await;
    let s = &env.store;
    let l = capped(
        s,
        "l",
        input_cap(5 * IN_PER_ROW),
        &["a", "b", "c", "d", "e", "f", "g", "h"],
    )
    .await;

    let first = claim(s, "l", 3).await.expect("three rows fit");
    assert_eq!(first.rows.len(), 3);
    assert_eq!(reserved_input(s, &l).await, 3 * IN_PER_ROW);
    let second = claim(s, "l", 3).await.expect("two more rows fit");
    assert_eq!(second.rows.len(), 2, "only the rows that fit");
    assert_eq!(reserved_input(s, &l).await, 5 * IN_PER_ROW);
    assert_queue_consistent(s).await;

    let message = assert_spend_cap_pause(s.claim_rows("l", &claim_req(3)).await.unwrap_err());
    assert!(message.contains("20 of 20 input tokens"), "{message}");
    assert_eq!(
        alert_kinds(s).await,
        ["spend_cap_warning", "spend_cap_reached"]
    );
    // A second refused claim does not alert again.
    assert_spend_cap_pause(s.claim_rows("l", &claim_req(3)).await.unwrap_err());
    assert_eq!(alert_kinds(s).await.len(), 2);

    // Released rows give their share back, with no attempt spent.
    s.release_claim("l", first.claim.token, None, "w")
        .await
        .unwrap();
    assert_eq!(reserved_input(s, &l).await, 2 * IN_PER_ROW);
    // Reported rows: their estimate is replaced by what they used.
    let items: Vec<_> = second.rows.iter().map(|r| success(&r.key, 7)).collect();
    s.report("l", second.claim.token, &items, "w")
        .await
        .unwrap();
    let spend = s.spend(&l).await.unwrap().unwrap();
    assert_eq!(spend.reserved.input_tokens, 0);
    assert_eq!(spend.spent.input_tokens, 14, "2 rows of 7 input tokens");
    assert_eq!(spend.spent.output_tokens, 6, "2 rows of 3 output tokens");
    let summary = s.summarize("l").await.unwrap();
    assert_eq!(
        summary.attempts_total, 2,
        "only the reported rows made attempts: none was spent on the cap or the release"
    );
    assert_queue_consistent(s).await;

    // The backlog (for /metrics) carries the same spend, for capped
    // ledgers only.
    s.create_ledger("uncapped", &fast_policy()).await.unwrap();
    let backlog = s.backlog().await.unwrap();
    let of = |name: &str| backlog.ledgers.iter().find(|l| l.name == name).unwrap();
    assert_eq!(of("l").spend, Some(spend));
    assert_eq!(of("uncapped").spend, None);
}

/// Invariant: a claim whose lease ran out stops reserving once its rows
/// are rescued.
#[tokio::test]
async fn expired_claims_give_their_reservation_back() {
    let env = env().await;
    let s = &env.store;
    let l = capped(s, "l", input_cap(1000), &["a", "b", "c"]).await;
    let c = claim(s, "l", 2).await.unwrap();
    assert_eq!(reserved_input(s, &l).await, 2 * IN_PER_ROW);
    expire(s, &c).await;
    s.rescue_expired(Some(l.id)).await.unwrap();
    assert_eq!(reserved_input(s, &l).await, 0);
    assert_queue_consistent(s).await;
}

/// Invariant: a dollar cap never sends a row it cannot price: the claim
/// takes nothing and the pause says which model has no price.
#[tokio::test]
async fn a_dollar_cap_without_a_price_sends_nothing() {
    let env = env().await;
    let s = &env.store;
    let cap = SpendCap {
        max_cost_usd: 10.0,
        ..SpendCap::default()
    };
    let l = capped(s, "l", cap, &["a", "b"]).await;
    let message = assert_spend_cap_pause(s.claim_rows("l", &claim_req(2)).await.unwrap_err());
    assert!(message.contains("no price for model"), "{message}");
    assert_eq!(reserved_input(s, &l).await, 0);
    let summary = s.summarize("l").await.unwrap();
    assert_eq!(summary.counts.pending, 2, "both rows wait, unattempted");
    assert_queue_consistent(s).await;
}

/// Invariant: a submitted job's rows stay reserved while they are at the
/// provider, through the adoption that moves them to a new claim.
#[tokio::test]
async fn an_adopted_job_keeps_its_reservation() {
    let env = env().await;
    let s = &env.store;
    let l = capped(s, "l", input_cap(1000), &["a", "b"]).await;
    let c = claim(s, "l", 2).await.unwrap();
    let job = s.create_job("l", c.claim.token, "worker-a").await.unwrap();
    s.mark_submitted(
        "l",
        &job.public_id,
        c.claim.token,
        "batches/x",
        "files/x",
        "w",
    )
    .await
    .unwrap();
    expire(s, &c).await;
    let adopted = s
        .adopt_jobs("l", "worker-b", 10, None, "worker-b")
        .await
        .unwrap();
    assert_eq!(adopted.adopted.len(), 1);
    assert_ne!(adopted.adopted[0].claim.token, c.claim.token);
    assert_eq!(reserved_input(s, &l).await, 2 * IN_PER_ROW);
}

/// Invariant (issue 48): a dollar cap prices a claim's rows at the lane it
/// is for: at twice the batch price, a standard claim gets half the rows a
/// batch claim gets under the same cap.
#[tokio::test]
async fn a_dollar_cap_prices_each_claim_at_its_lane() {
    use tally_core::lane::{Lane, Lanes};
    use tally_core::policy::{DEFAULT_MODEL, Price};
    let env = env().await;
    let s = &env.store;
    // A dollar a token at batch, two at standard: a row (4 input tokens,
    // 10 output by the cap) is $14 in batch, $28 in standard.
    let price = |lane, usd_per_token: f64| Price {
        model: DEFAULT_MODEL.into(),
        input_per_million: usd_per_token * 1e6,
        output_per_million: usd_per_token * 1e6,
        cached_input_per_million: 0.0,
        thinking_per_million: 0.0,
        lane,
    };
    for (ledger, lane) in [("std", Lane::Standard), ("bat", Lane::Batch)] {
        let mut p = fast_policy();
        p.lanes = Lanes::of([lane]).unwrap();
        p.prices = vec![price(Lane::Batch, 1.0), price(Lane::Standard, 2.0)];
        p.spend_cap = Some(SpendCap {
            max_cost_usd: 56.0,
            output_tokens_per_row: 10,
            ..SpendCap::default()
        });
        s.create_ledger(ledger, &p).await.unwrap();
        let rows: Vec<_> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|k| row(k, &[]))
            .collect();
        s.enroll(ledger, &rows).await.unwrap();
    }
    let in_lane = |lane| tally_store::types::ClaimRequest {
        lane,
        ..claim_req(6)
    };
    let standard = s
        .claim_rows("std", &in_lane(Lane::Standard))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(standard.rows.len(), 2, "2 × $28 = the $56 cap");
    let batch = s
        .claim_rows("bat", &in_lane(Lane::Batch))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(batch.rows.len(), 4, "4 × $14 = the $56 cap");
}

//! Synchronous lanes: a claim is made for a lane its ledger allows, its
//! attempts record the lane, the provider's request id and the tier
//! granted, each priced at its lane; AcquireCapacity hands out an
//! account's requests and tokens per minute across every claim, and a
//! reported 429 or shed call cools the account and model down for all.

use crate::common;

use common::*;
use std::time::Duration;
use tally_core::capacity::{Measure, SyncLimits};
use tally_core::lane::{Lane, Lanes};
use tally_core::policy::{Policy, Price};
use tally_store::capacity::CapacityAsk;
use tally_store::types::{ClaimRequest, ReportItem};
use tally_store::{Store, StoreError};
use uuid::Uuid;

fn policy(lanes: &[Lane]) -> Policy {
    Policy {
        lanes: Lanes::of(lanes.iter().copied()).unwrap(),
        prices: vec![Price {
            model: tally_core::policy::DEFAULT_MODEL.into(),
            input_per_million: 1.0,
            output_per_million: 2.0,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: Lane::Batch,
        }],
        ..fast_policy()
    }
}

fn lane_claim(lane: Lane, max_rows: i64) -> ClaimRequest {
    ClaimRequest {
        lane,
        ..claim_req(max_rows)
    }
}

async fn enroll(store: &Store, ledger: &str, n: usize) {
    let rows: Vec<_> = (0..n).map(|i| row(&format!("r{i}"), &[])).collect();
    store.enroll(ledger, &rows).await.unwrap();
}

/// A ledger `ledger` allowing `lane` alone, with `rows` rows, all claimed
/// for that lane.
async fn claimed(
    store: &Store,
    ledger: &str,
    lane: Lane,
    rows: usize,
) -> tally_store::types::ClaimGrant {
    store.create_ledger(ledger, &policy(&[lane])).await.unwrap();
    enroll(store, ledger, rows).await;
    store
        .claim_rows(ledger, &lane_claim(lane, rows as i64))
        .await
        .unwrap()
        .unwrap()
}

fn ask<'a>(claim: Uuid, tokens: &'a [i64]) -> CapacityAsk<'a> {
    ask_in("l", claim, tokens)
}

fn ask_in<'a>(ledger: &'a str, claim: Uuid, tokens: &'a [i64]) -> CapacityAsk<'a> {
    CapacityAsk {
        ledger,
        claim,
        account: "acct",
        tokens,
        rate_limited: None,
        shed: false,
        refused: None,
        actor: "w",
    }
}

// Invariant: a claim for a lane the ledger does not allow takes nothing
// and says which lanes it allows; an allowed one records its lane.
#[tokio::test]
async fn a_claim_takes_only_a_lane_its_ledger_allows() {
    let env = env().await;
    env.store
        .create_ledger("l", &policy(&[Lane::Batch]))
        .await
        .unwrap();
    enroll(&env.store, "l", 2).await;
    let refused = env
        .store
        .claim_rows("l", &lane_claim(Lane::Flex, 2))
        .await
        .unwrap_err();
    match refused {
        StoreError::FailedPrecondition {
            reason,
            description,
        } => {
            assert_eq!(reason, "LANE_NOT_ALLOWED");
            assert!(
                description.contains("flex") && description.contains("batch"),
                "{description}"
            );
        }
        other => panic!("{other:?}"),
    }
    let g = env
        .store
        .claim_rows("l", &lane_claim(Lane::Batch, 2))
        .await
        .unwrap()
        .expect("rows are runnable: the refused claim took none");
    assert_eq!((g.rows.len(), g.claim.lane), (2, Lane::Batch));
}

// Invariant: an attempt of a synchronous claim records its lane, request id
// and tier, and costs its lane's price (standard: twice batch here).
#[tokio::test]
async fn a_synchronous_attempt_records_its_lane_request_and_price() {
    let env = env().await;
    let g = claimed(&env.store, "l", Lane::Standard, 1).await;
    let item = ReportItem {
        request_id: Some("req_123".into()),
        tier: Some("default".into()),
        model_version: None,
        cached: None,
        ..success("r0", 1_000_000)
    };
    env.store
        .report("l", g.claim.token, &[item], "w")
        .await
        .unwrap();
    let row = env.store.get_row("l", "r0").await.unwrap();
    let a = &row.history[0];
    assert_eq!(
        (a.lane, a.request_id.as_str(), a.tier.as_str()),
        (Lane::Standard, "req_123", "default")
    );
    // 1M input and 0.5M output at twice the batch price (1 and 2 USD).
    assert!(
        (a.cost_usd - 2.0 * (1.0 + 1.0)).abs() < 1e-9,
        "{}",
        a.cost_usd
    );
    let s = env.store.summarize("l").await.unwrap();
    assert_eq!(s.by_model.len(), 1);
    assert_eq!(s.by_model[0].lane, Lane::Standard);
}

// Invariant: grants of every claim on one account never pass its RPM
// within the window; the refusal names when more fits.
#[tokio::test]
async fn capacity_is_shared_by_every_claim_of_the_account() {
    let env = env().await;
    let mut limits = SyncLimits::default();
    limits.set(Measure::Requests, "5").unwrap();
    limits.set(Measure::Tokens, "0").unwrap();
    let store = env.store.clone().with_sync_limits(limits);
    store
        .create_ledger("l", &policy(&[Lane::Flex]))
        .await
        .unwrap();
    enroll(&store, "l", 8).await;
    let a = store
        .claim_rows("l", &lane_claim(Lane::Flex, 4))
        .await
        .unwrap()
        .unwrap();
    let b = store
        .claim_rows("l", &lane_claim(Lane::Flex, 4))
        .await
        .unwrap()
        .unwrap();
    let first = store
        .acquire_capacity(&ask(a.claim.token, &[10; 4]))
        .await
        .unwrap();
    assert_eq!((first.grant.requests, first.grant.retry_after), (4, None));
    let second = store
        .acquire_capacity(&ask(b.claim.token, &[10; 4]))
        .await
        .unwrap();
    assert_eq!(second.grant.requests, 1, "5 a minute across both claims");
    assert!(second.grant.retry_after.unwrap() > Duration::from_secs(50));
    assert_eq!(first.limits.rpm, 5);
}

// Invariant: a reported 429 cools every synchronous claim of the team's
// account and model down (nothing granted, the wait named); a shed flex
// call cools only flex; another team is not cooled.
#[tokio::test]
async fn a_reported_429_holds_back_every_claim_of_the_account() {
    let env = env().await;
    // Two ledgers sending to one account (and model), a lane each.
    for (ledger, lane) in [("l", Lane::Flex), ("m", Lane::Standard)] {
        env.store
            .create_ledger(ledger, &policy(&[lane]))
            .await
            .unwrap();
        enroll(&env.store, ledger, 2).await;
    }
    let flex = env
        .store
        .claim_rows("l", &lane_claim(Lane::Flex, 2))
        .await
        .unwrap()
        .unwrap();
    let standard = env
        .store
        .claim_rows("m", &lane_claim(Lane::Standard, 2))
        .await
        .unwrap()
        .unwrap();
    let shed = CapacityAsk {
        shed: true,
        ..ask(flex.claim.token, &[1])
    };
    assert_eq!(
        env.store
            .acquire_capacity(&shed)
            .await
            .unwrap()
            .grant
            .requests,
        0
    );
    let other = env
        .store
        .acquire_capacity(&ask_in("m", standard.claim.token, &[1]))
        .await
        .unwrap();
    assert_eq!(
        other.grant.requests, 1,
        "a shed flex call holds back flex only"
    );
    let limited = CapacityAsk {
        rate_limited: Some(Duration::from_secs(30)),
        ..ask_in("m", standard.claim.token, &[1])
    };
    let got = env.store.acquire_capacity(&limited).await.unwrap();
    assert_eq!(got.grant.requests, 0);
    assert!(got.grant.retry_after.unwrap() > Duration::from_secs(25));
    let also = env
        .store
        .acquire_capacity(&ask_in("m", standard.claim.token, &[1]))
        .await
        .unwrap();
    assert_eq!(also.grant.requests, 0, "every worker waits the cool-down");
    // Issue 51: the account is the worker's word; another team naming it
    // is not held back by this team's cool-down (nor could it hold this
    // team back with a 429 it reports).
    let beta = CapacityAsk {
        actor: "beta",
        ..ask_in("m", standard.claim.token, &[1])
    };
    let got = env.store.acquire_capacity(&beta).await.unwrap();
    assert_eq!(got.grant.requests, 1, "another team's cool-down is its own");
}

// Invariant: only a live claim of a synchronous lane asks for capacity,
// and never for more requests than it holds rows.
#[tokio::test]
async fn capacity_is_for_live_synchronous_claims_only() {
    let env = env().await;
    env.store
        .create_ledger("l", &policy(&[Lane::Batch]))
        .await
        .unwrap();
    enroll(&env.store, "l", 1).await;
    env.store
        .create_ledger("m", &policy(&[Lane::Flex]))
        .await
        .unwrap();
    enroll(&env.store, "m", 1).await;
    let batch = env
        .store
        .claim_rows("l", &lane_claim(Lane::Batch, 1))
        .await
        .unwrap()
        .unwrap();
    let e = env
        .store
        .acquire_capacity(&ask(batch.claim.token, &[1]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::FailedPrecondition {
                reason: "BATCH_CLAIM",
                ..
            }
        ),
        "{e:?}"
    );
    let flex = env
        .store
        .claim_rows("m", &lane_claim(Lane::Flex, 1))
        .await
        .unwrap()
        .unwrap();
    let e = env
        .store
        .acquire_capacity(&ask_in("m", flex.claim.token, &[1, 1]))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)), "{e:?}");
    expire(&env.store, &flex).await;
    let e = env
        .store
        .acquire_capacity(&ask_in("m", flex.claim.token, &[1]))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::FailedPrecondition { .. }), "{e:?}");
}

// Invariant: a refusal no retry fixes, reported with the provider's words,
// pauses the ledger with them and grants nothing.
#[tokio::test]
async fn a_refused_call_pauses_the_ledger_with_the_providers_words() {
    let env = env().await;
    let g = claimed(&env.store, "l", Lane::Standard, 1).await;
    let refused = CapacityAsk {
        refused: Some((
            tally_core::pause::PauseReason::Refused,
            "401 invalid api key",
        )),
        ..ask(g.claim.token, &[1])
    };
    let got = env.store.acquire_capacity(&refused).await.unwrap();
    assert_eq!(got.grant.requests, 0);
    let ledger = env.store.get_ledger("l").await.unwrap();
    let pause = ledger.pause.expect("paused");
    assert!(
        pause.message.contains("401 invalid api key"),
        "{}",
        pause.message
    );
}

// Invariant (issue 51): a batch job's later calls refused for good (a key
// revoked after submission) pause the ledger through its claim, with the
// provider's words, once the job's create was attempted; a claim with no
// job, or a job not yet sent, cannot speak for the provider (nothing
// paused), and a batch claim still asks no capacity.
#[tokio::test]
async fn a_batch_jobs_refused_reads_pause_the_ledger_once_it_was_sent() {
    let env = env().await;
    let g = claimed(&env.store, "l", Lane::Batch, 2).await;
    let refused = CapacityAsk {
        refused: Some((tally_core::pause::PauseReason::Refused, "401 key revoked")),
        ..ask(g.claim.token, &[])
    };
    let not_sent = |e: StoreError| {
        matches!(
            e,
            StoreError::FailedPrecondition {
                reason: "JOB_NOT_CREATING",
                ..
            }
        )
    };
    let e = env.store.acquire_capacity(&refused).await.unwrap_err();
    assert!(not_sent(e), "no job yet");
    let job = env.store.create_job("l", g.claim.token, "w").await.unwrap();
    let e = env.store.acquire_capacity(&refused).await.unwrap_err();
    assert!(not_sent(e), "a job not yet sent");
    assert!(env.store.get_ledger("l").await.unwrap().pause.is_none());
    let e = env
        .store
        .acquire_capacity(&CapacityAsk {
            tokens: &[1],
            ..refused.clone()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::FailedPrecondition {
                reason: "BATCH_CLAIM",
                ..
            }
        ),
        "{e:?}"
    );
    env.store
        .mark_creating(
            "l",
            &job.public_id,
            g.claim.token,
            "files/x",
            &Default::default(),
            "w",
        )
        .await
        .unwrap();
    let got = env.store.acquire_capacity(&refused).await.unwrap();
    assert_eq!(got.grant.requests, 0);
    let pause = env
        .store
        .get_ledger("l")
        .await
        .unwrap()
        .pause
        .expect("paused");
    assert!(
        pause.message.contains("a batch already sent") && pause.message.contains("401 key revoked"),
        "{}",
        pause.message
    );
}

// Invariant (issue 48): a shed flex call moves the ledger's rows to another
// lane it allows while the shedding lasts: flex claims take nothing, a
// standard claim takes the rows the flex claim gave back; once the shed
// window has passed, flex takes rows again. A ledger allowing flex alone
// waits instead (nothing else may carry its rows).
#[tokio::test]
async fn a_shed_flex_row_goes_to_another_allowed_lane() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &policy(&[Lane::Flex, Lane::Standard]))
        .await
        .unwrap();
    enroll(s, "l", 4).await;
    let flex = s
        .claim_rows("l", &lane_claim(Lane::Flex, 2))
        .await
        .unwrap()
        .unwrap();
    let none = s
        .claim_rows("l", &lane_claim(Lane::Standard, 2))
        .await
        .unwrap();
    assert!(
        none.is_none(),
        "without a deadline flex, the first allowed lane, takes every row"
    );
    let shed = CapacityAsk {
        shed: true,
        ..ask(flex.claim.token, &[1, 1])
    };
    assert_eq!(s.acquire_capacity(&shed).await.unwrap().grant.requests, 0);
    s.release_claim("l", flex.claim.token, None, "w")
        .await
        .unwrap();
    let again = s.claim_rows("l", &lane_claim(Lane::Flex, 4)).await.unwrap();
    assert!(again.is_none(), "flex is shedding: no flex claim");
    let moved = s
        .claim_rows("l", &lane_claim(Lane::Standard, 4))
        .await
        .unwrap()
        .expect("the rows go to standard while flex sheds");
    assert_eq!(moved.rows.len(), 4, "the shed rows among them");
    s.release_claim("l", moved.claim.token, None, "w")
        .await
        .unwrap();
    sqlx::query("UPDATE ledgers SET flex_shed_until = now() - interval '1 second'")
        .execute(s.pool())
        .await
        .unwrap();
    s.claim_rows("l", &lane_claim(Lane::Flex, 4))
        .await
        .unwrap()
        .expect("the shedding over, flex takes rows again");
}

//! ClaimRows, ExtendClaim, ReleaseClaim.

use super::{BAD_LEDGER_NAMES, bad_keys};
use crate::harness::*;
use tally_proto::v1 as pb;

const LIMIT: usize = 5;

async fn small_server() -> Env {
    Env::start_with(|a| {
        a.limits.max_rows_per_call = LIMIT;
        a.limits.max_claim_rows = LIMIT as i32;
    })
    .await
}

fn duration(seconds: i64, nanos: i32) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos }
}

/// Leases that are zero, below one second, negative, malformed or longer
/// than seven days.
fn bad_leases() -> Vec<prost_types::Duration> {
    vec![
        secs(0),
        duration(0, 500_000_000),
        secs(-1),
        duration(0, -1),
        duration(1, 1_000_000_000),
        secs(7 * 86_400 + 1),
        secs(365 * 86_400),
        secs(i64::MAX),
    ]
}

/// Claim names that are malformed.
fn bad_claim_names(token: uuid::Uuid) -> Vec<String> {
    vec![
        String::new(),
        format!("claims/{token}"),
        "ledgers/a/claims/".into(),
        "ledgers/a/claims/not-a-uuid".into(),
        format!("ledgers/a/claims/{}", token.to_string().to_uppercase()),
        format!("ledgers/A/claims/{token}"),
        format!("ledgers/a/rows/{token}"),
        format!("ledgers/a/claims/{token}/more"),
    ]
}

/// ClaimRows refuses, leasing nothing: malformed parents, an unknown ledger
/// (NOT_FOUND), max_rows of 0, negative or over max_claim_rows, zero,
/// sub-second, negative, malformed and absurd (over 7 days) leases, and
/// over-long worker, request_id and model; the limits themselves are
/// accepted.
#[tokio::test]
async fn claim_rows() {
    let env = small_server().await;
    env.ledger("a").await;
    env.enroll_n("a", "k", LIMIT).await;
    env.enroll_n("a", "j", 3).await;
    let ok = || pb::ClaimRowsRequest {
        parent: ledger_name("a"),
        max_rows: 1,
        ..Default::default()
    };

    for bad in BAD_LEDGER_NAMES {
        let s = env
            .rejected(env.client().claim_rows(pb::ClaimRowsRequest {
                parent: bad.into(),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["parent"]);
    }
    let s = env
        .rejected(env.client().claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/unknown".into(),
            ..ok()
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/unknown");

    for max_rows in [0, -1, LIMIT as i32 + 1, i32::MAX, i32::MIN] {
        let s = env
            .rejected(
                env.client()
                    .claim_rows(pb::ClaimRowsRequest { max_rows, ..ok() }),
            )
            .await;
        assert_invalid(&s, &["max_rows"]);
    }
    for lease in bad_leases() {
        let s = env
            .rejected(env.client().claim_rows(pb::ClaimRowsRequest {
                lease: Some(lease),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["lease"]);
    }
    let long = "x".repeat(129);
    for (req, field) in [
        (
            pb::ClaimRowsRequest {
                worker: long.clone(),
                ..ok()
            },
            "worker",
        ),
        (
            pb::ClaimRowsRequest {
                request_id: long.clone(),
                ..ok()
            },
            "request_id",
        ),
        (
            pb::ClaimRowsRequest {
                model: long.clone(),
                ..ok()
            },
            "model",
        ),
    ] {
        let s = env.rejected(env.client().claim_rows(req)).await;
        assert_invalid(&s, &[field]);
    }
    let s = env
        .rejected(env.client().claim_rows(pb::ClaimRowsRequest {
            max_rows: 0,
            lease: Some(secs(0)),
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["max_rows", "lease"]);

    // The bounds themselves are fine.
    let g = env
        .claim_with(pb::ClaimRowsRequest {
            max_rows: LIMIT as i32,
            lease: Some(secs(7 * 86_400)),
            request_id: "r".repeat(128),
            ..ok()
        })
        .await
        .expect("a claim at the limits");
    assert_eq!(g.rows.len(), LIMIT);
    let g = env
        .claim_with(pb::ClaimRowsRequest {
            lease: Some(secs(1)),
            ..ok()
        })
        .await
        .expect("a one-second claim");
    assert_eq!(g.rows.len(), 1);
    env.stop().await;
}

/// The claims the ExtendClaim and ReleaseClaim cases act on.
struct Claims {
    /// Live, on ledger `a`.
    live: Grant,
    /// Past its lease (not yet rescued), on ledger `c`.
    expired: Grant,
    /// Every row reported, on ledger `d`.
    done: Grant,
}

async fn claims(env: &Env) -> Claims {
    for l in ["a", "b", "c", "d"] {
        env.ledger(l).await;
        env.enroll_n(l, "k", 2).await;
    }
    let live = env.claim("a", 2).await.unwrap();
    let expired = env.claim("c", 2).await.unwrap();
    env.expire(&expired.claim).await;
    let done = env.claim("d", 2).await.unwrap();
    let keys = done.keys();
    env.report(
        &done.claim.name,
        keys.iter().map(|k| success(k, 1, 1)).collect(),
    )
    .await;
    Claims {
        live,
        expired,
        done,
    }
}

/// ExtendClaim refuses malformed claim names, answers NOT_FOUND for an
/// unknown claim, a claim of another ledger and an unknown ledger, refuses
/// zero and absurd leases, and answers FAILED_PRECONDITION (CLAIM_EXPIRED,
/// CLAIM_DONE) for a claim past its lease or with nothing left to hold;
/// no lease moves.
#[tokio::test]
async fn extend_claim() {
    let env = small_server().await;
    let c = claims(&env).await;
    let token = claim_token(&c.live.claim.name);
    let extend = |name: &str, lease: Option<prost_types::Duration>| {
        let mut client = env.client();
        let req = pb::ExtendClaimRequest {
            name: name.into(),
            lease,
        };
        async move { client.extend_claim(req).await }
    };

    for name in bad_claim_names(token) {
        let s = env.rejected(extend(&name, None)).await;
        assert_invalid(&s, &["name"]);
    }
    let unknown = format!("ledgers/a/claims/{}", uuid::Uuid::new_v4());
    let s = env.rejected(extend(&unknown, None)).await;
    assert_not_found(&s, "claim", &unknown);
    let elsewhere = format!("ledgers/b/claims/{token}");
    let s = env.rejected(extend(&elsewhere, None)).await;
    assert_not_found(&s, "claim", &elsewhere);
    let s = env
        .rejected(extend(&format!("ledgers/nope/claims/{token}"), None))
        .await;
    assert_not_found(&s, "ledger", "ledgers/nope");

    for lease in bad_leases() {
        let s = env.rejected(extend(&c.live.claim.name, Some(lease))).await;
        assert_invalid(&s, &["lease"]);
    }

    let s = env
        .rejected(extend(&c.expired.claim.name, Some(secs(60))))
        .await;
    assert_precondition(&s, "CLAIM_EXPIRED");
    let s = env
        .rejected(extend(&c.done.claim.name, Some(secs(60))))
        .await;
    assert_precondition(&s, "CLAIM_DONE");

    // The live claim can still be extended.
    let extended = extend(&c.live.claim.name, Some(secs(3600)))
        .await
        .expect("extend a live claim")
        .into_inner();
    assert!(
        extended.expire_time.unwrap().seconds > c.live.claim.expire_time.unwrap().seconds,
        "the lease did not move"
    );
    env.stop().await;
}

/// ReleaseClaim refuses malformed claim names and keys, more keys than
/// max_rows_per_call, answers NOT_FOUND for unknown claims, claims of
/// another ledger and unknown ledgers, and FAILED_PRECONDITION for expired
/// and finished claims; no row goes back.
#[tokio::test]
async fn release_claim() {
    let env = small_server().await;
    let c = claims(&env).await;
    let token = claim_token(&c.live.claim.name);
    let release = |name: &str, keys: Vec<String>| {
        let mut client = env.client();
        let req = pb::ReleaseClaimRequest {
            name: name.into(),
            keys,
        };
        async move { client.release_claim(req).await }
    };

    for name in bad_claim_names(token) {
        let s = env.rejected(release(&name, vec![])).await;
        assert_invalid(&s, &["name"]);
    }
    for key in bad_keys() {
        let s = env
            .rejected(release(&c.live.claim.name, vec!["k0".into(), key]))
            .await;
        assert_invalid(&s, &["keys[1]"]);
    }
    let many = (0..=LIMIT).map(|i| format!("k{i}")).collect();
    let s = env.rejected(release(&c.live.claim.name, many)).await;
    assert_invalid(&s, &["keys"]);

    let unknown = format!("ledgers/a/claims/{}", uuid::Uuid::new_v4());
    let s = env.rejected(release(&unknown, vec![])).await;
    assert_not_found(&s, "claim", &unknown);
    let elsewhere = format!("ledgers/b/claims/{token}");
    let s = env.rejected(release(&elsewhere, vec![])).await;
    assert_not_found(&s, "claim", &elsewhere);
    let s = env
        .rejected(release(&format!("ledgers/nope/claims/{token}"), vec![]))
        .await;
    assert_not_found(&s, "ledger", "ledgers/nope");

    let s = env.rejected(release(&c.expired.claim.name, vec![])).await;
    assert_precondition(&s, "CLAIM_EXPIRED");
    let s = env.rejected(release(&c.done.claim.name, vec![])).await;
    assert_precondition(&s, "CLAIM_DONE");

    // The live claim still holds both rows and can give them back.
    let r = release(&c.live.claim.name, vec![])
        .await
        .expect("release a live claim")
        .into_inner();
    assert_eq!(r.released, 2);
    assert_eq!(r.claim.unwrap().state(), pb::ClaimState::Done);
    env.stop().await;
}

//! ReportOutcomes.

use super::bad_keys;
use crate::harness::*;
use tally_proto::v1 as pb;
use tally_proto::v1::row_outcome::Outcome;

const LIMIT: usize = 5;

fn with_failure(key: &str, f: pb::Failure) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.into(),
        outcome: Some(Outcome::Failure(f)),
        usage: None,
        ..Default::default()
    }
}

/// ReportOutcomes refuses, changing no row: malformed claim names, no
/// outcomes, more than max_rows_per_call, malformed keys, an outcome with
/// neither result nor failure, a result that is not JSON, negative token
/// counts, impossible HTTP codes, unknown failure kinds, negative or absurd
/// retry delays; a valid outcome in a rejected call is not applied; unknown
/// claims, claims of another ledger and unknown ledgers are NOT_FOUND.
#[tokio::test]
async fn report_outcomes() {
    let env = Env::start_with(|a| a.limits.max_rows_per_call = LIMIT).await;
    env.ledger("a").await;
    env.ledger("b").await;
    env.enroll_n("a", "k", 2).await;
    let g = env.claim("a", 2).await.unwrap();
    let claim = g.claim.name.clone();
    let token = claim_token(&claim);
    let report = |claim: &str, outcomes: Vec<pb::RowOutcome>| {
        let mut client = env.client();
        let req = pb::ReportOutcomesRequest {
            claim: claim.into(),
            outcomes,
            claim_next: None,
        };
        async move { client.report_outcomes(req).await }
    };

    for name in [
        String::new(),
        "ledgers/a".into(),
        "ledgers/a/claims/not-a-uuid".into(),
        format!("ledgers/a/jobs/{token}"),
        format!("ledgers/Nope/claims/{token}"),
    ] {
        let s = env.rejected(report(&name, vec![success("k0", 1, 1)])).await;
        assert_invalid(&s, &["claim"]);
    }
    let s = env.rejected(report(&claim, vec![])).await;
    assert_invalid(&s, &["outcomes"]);
    let many = (0..=LIMIT)
        .map(|i| success(&format!("k{i}"), 1, 1))
        .collect();
    let s = env.rejected(report(&claim, many)).await;
    assert_invalid(&s, &["outcomes"]);

    for key in bad_keys() {
        let s = env
            .rejected(report(
                &claim,
                vec![success("k0", 1, 1), success(&key, 1, 1)],
            ))
            .await;
        assert_invalid(&s, &["outcomes[1].key"]);
    }

    let neither = pb::RowOutcome {
        key: "k1".into(),
        outcome: None,
        usage: Some(usage(1, 1)),
        ..Default::default()
    };
    let s = env
        .rejected(report(&claim, vec![success("k0", 1, 1), neither]))
        .await;
    assert_invalid(&s, &["outcomes[1].outcome"]);

    for result in ["", "{nope", "not json", "[1,]", "{} {}"] {
        let bad = pb::RowOutcome {
            key: "k1".into(),
            outcome: Some(Outcome::Result(result.into())),
            usage: None,
            ..Default::default()
        };
        let s = env
            .rejected(report(&claim, vec![success("k0", 1, 1), bad]))
            .await;
        assert_invalid(&s, &["outcomes[1].result"]);
    }

    for u in [
        usage(-1, 0),
        usage(0, -1),
        pb::Usage {
            thinking_tokens: -1,
            ..Default::default()
        },
        pb::Usage {
            cached_tokens: i64::MIN,
            ..Default::default()
        },
    ] {
        let bad = pb::RowOutcome {
            usage: Some(u),
            ..success("k1", 0, 0)
        };
        let s = env
            .rejected(report(&claim, vec![success("k0", 1, 1), bad]))
            .await;
        assert_invalid(&s, &["outcomes[1].usage"]);
    }

    let cases: Vec<(pb::Failure, &str)> = vec![
        (
            pb::Failure {
                http_code: -1,
                ..Default::default()
            },
            "outcomes[0].failure.http_code",
        ),
        (
            pb::Failure {
                http_code: 1000,
                ..Default::default()
            },
            "outcomes[0].failure.http_code",
        ),
        (
            pb::Failure {
                kind: 99,
                ..Default::default()
            },
            "outcomes[0].failure.kind",
        ),
        (
            pb::Failure {
                http_code: 429,
                retry_delay: Some(secs(-1)),
                ..Default::default()
            },
            "outcomes[0].failure.retry_delay",
        ),
        (
            pb::Failure {
                http_code: 429,
                retry_delay: Some(secs(8 * 86_400)),
                ..Default::default()
            },
            "outcomes[0].failure.retry_delay",
        ),
    ];
    for (f, field) in cases {
        let s = env
            .rejected(report(&claim, vec![with_failure("k0", f)]))
            .await;
        assert_invalid(&s, &[field]);
    }

    // Every bad field of every outcome is named.
    let s = env
        .rejected(report(
            &claim,
            vec![
                pb::RowOutcome {
                    key: "bad key".into(),
                    outcome: None,
                    usage: Some(usage(-1, 0)),
                    ..Default::default()
                },
                success("k1", 1, 1),
            ],
        ))
        .await;
    assert_invalid(
        &s,
        &[
            "outcomes[0].key",
            "outcomes[0].usage",
            "outcomes[0].outcome",
        ],
    );

    let unknown = format!("ledgers/a/claims/{}", uuid::Uuid::new_v4());
    let s = env
        .rejected(report(&unknown, vec![success("k0", 1, 1)]))
        .await;
    assert_not_found(&s, "claim", &unknown);
    let elsewhere = format!("ledgers/b/claims/{token}");
    let s = env
        .rejected(report(&elsewhere, vec![success("k0", 1, 1)]))
        .await;
    assert_not_found(&s, "claim", &elsewhere);
    let s = env
        .rejected(report(
            &format!("ledgers/nope/claims/{token}"),
            vec![success("k0", 1, 1)],
        ))
        .await;
    assert_not_found(&s, "ledger", "ledgers/nope");

    // The claim still holds both rows, untouched, and can report them.
    for key in ["k0", "k1"] {
        let r = env.get_row("a", key).await;
        assert_eq!((r.status(), r.history.len()), (pb::RowStatus::Running, 0));
    }
    let ok = env
        .report(&claim, vec![success("k0", 1, 1), success("k1", 1, 1)])
        .await;
    assert_eq!(ok.succeeded, 2);
    env.stop().await;
}

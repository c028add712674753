//! The README's walkthrough (create a ledger, enroll, claim, report a
//! success and failures, summarize), through gRPC.

use crate::harness::*;
use tally_proto::v1 as pb;

/// The walkthrough: enroll three rows, claim them, report one success, one
/// transient failure (RETRYABLE, provider budget) and one permanent failure;
/// the summary counts them and prints the one-line summary; the retried row
/// is claimable again at once and succeeds on its second attempt
/// (invariants 4 and 10: attempts and tokens add up to what was reported).
#[tokio::test]
async fn readme_walkthrough() {
    let env = env().await;
    let ledger = env.ledger("reviews-nightly").await;
    assert_eq!(ledger.name, "ledgers/reviews-nightly");
    let policy = ledger.policy.expect("a resolved policy");
    assert_eq!(policy.model, "gemini-flash-latest");

    let enrolled = env
        .enroll(
            "reviews-nightly",
            vec![row("review-1"), row("review-2"), row("review-3")],
        )
        .await;
    assert_eq!(enrolled.enrolled, 3);
    assert!(
        enrolled
            .results
            .iter()
            .all(|r| r.outcome() == pb::EnrollOutcome::Enrolled)
    );

    let grant = env.claim("reviews-nightly", 10).await.expect("a claim");
    assert_eq!(grant.keys(), ["review-1", "review-2", "review-3"]);
    assert_eq!(grant.claim.row_count, 3);
    assert_eq!(grant.claim.state(), pb::ClaimState::Active);
    assert!(
        grant
            .claim
            .name
            .starts_with("ledgers/reviews-nightly/claims/")
    );

    let report = env
        .report(
            &grant.claim.name,
            vec![
                success("review-1", 120, 40),
                failure("review-2", 503),
                failure("review-3", 400),
            ],
        )
        .await;
    let verdicts: Vec<(pb::Verdict, &str)> = report
        .verdicts
        .iter()
        .map(|v| (v.verdict(), v.rule.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (pb::Verdict::Succeeded, "success"),
            (pb::Verdict::Retryable, "http_transient"),
            (pb::Verdict::Permanent, "http_permanent"),
        ]
    );
    assert_eq!(report.verdicts[1].budget(), pb::Budget::Provider);
    assert_eq!(
        (
            report.succeeded,
            report.retryable,
            report.permanent,
            report.held
        ),
        (1, 1, 1, 0)
    );

    let s = env.summary("reviews-nightly").await;
    assert!(
        s.summary_line
            .starts_with("succeeded=1 retryable=1 permanent=1 blocked=0 pending=0"),
        "{}",
        s.summary_line
    );
    assert_eq!(
        (s.total, s.succeeded, s.retryable, s.permanent, s.running),
        (3, 1, 1, 1, 0)
    );
    assert_eq!(s.attempts_total, 3);
    assert_eq!(s.permanent_by_rule.get("http_permanent"), Some(&1));
    let u = s.usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (120 + 10 + 10, 40));

    // The transient failure is claimable again at once (zero backoff).
    let retry = env.claim("reviews-nightly", 10).await.expect("the retry");
    assert_eq!(retry.keys(), ["review-2"]);
    let before = retry.rows[0].attempts.expect("attempt counts");
    assert_eq!((before.provider, before.total), (1, 1));
    let done = env
        .report(&retry.claim.name, vec![success("review-2", 100, 30)])
        .await;
    assert_eq!(done.verdicts[0].verdict(), pb::Verdict::Succeeded);
    assert!(env.claim("reviews-nightly", 10).await.is_none());

    let s = env.summary("reviews-nightly").await;
    assert!(
        s.summary_line
            .starts_with("succeeded=2 retryable=0 permanent=1 blocked=0 pending=0"),
        "{}",
        s.summary_line
    );
    assert_eq!(s.attempts_total, 4);
    let u = s.usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (240, 70));
    env.stop().await;
}

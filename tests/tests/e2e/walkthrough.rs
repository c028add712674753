//! The walkthrough of services/server/README.md (create a ledger, enroll,
//! claim, report, summarize), through gRPC: once exactly as its grpcurl
//! session ("Talking to it with grpcurl") has it, once extended with
//! failures.

use crate::harness::*;
use tally_proto::v1 as pb;
use tonic_types::StatusExt;

/// services/server/README.md, whose grpcurl session this test follows.
const SERVER_README: &str = include_str!("../../../services/server/README.md");

/// The summary lines the README's grpcurl session prints: (after both
/// ReportOutcomes, the `claim_next` one included; after the first alone),
/// read from its "`SummarizeLedger` ends with the one-line summary"
/// paragraph (`succeeded=…` in full, then the counts that differ when only
/// the first ReportOutcomes was sent).
fn readme_summary_lines() -> (String, String) {
    let start = SERVER_README
        .find("`SummarizeLedger` ends with the one-line summary")
        .expect("the README's summary paragraph");
    let paragraph = SERVER_README[start..].split("\n\n").next().unwrap();
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let quoted: Vec<&str> = paragraph.split('`').skip(1).step_by(2).collect();
    let full = quoted
        .iter()
        .find(|q| q.starts_with("succeeded="))
        .expect("the README's summary line");
    let first_only = quoted
        .iter()
        .find(|q| q.starts_with("pending="))
        .expect("the README's counts after the first ReportOutcomes");
    let at = full.find("pending=").expect("pending= in the summary line");
    (full.to_string(), format!("{}{first_only}", &full[..at]))
}

/// services/server/README.md's grpcurl session, request for request: a ledger with the
/// default backoff and provider budget 3; `r1` and `r2` (waiting for `r1`)
/// enrolled, again (ALREADY_PRESENT) and with another payload (CONFLICT);
/// the claim takes only `r1`; its result is reported (the summary line is
/// the README's for "only the first ReportOutcomes"); the `claim_next`
/// report run after it answers `r1` DUPLICATE and its next claim holds
/// `r2`; the summary line is then the README's, read from the README;
/// `r1`'s history has the one attempt; nothing is PENDING; a dry-run
/// redrive finds nothing; the bad-input example names `rows[0].key` and
/// `rows[0].payload` and writes nothing.
#[tokio::test]
async fn readme_grpcurl_session() {
    let env = env().await;
    let parent = "ledgers/reviews-nightly".to_string();
    let ledger = env
        .client()
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "reviews-nightly".into(),
            policy: Some(pb::LedgerPolicy {
                budgets: Some(pb::AttemptBudgets {
                    provider: 3,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let policy = ledger.policy.unwrap();
    let budgets = policy.budgets.unwrap();
    assert_eq!(
        (budgets.provider, budgets.content, budgets.infra),
        (3, 1, 4)
    );
    assert_eq!(policy.lease.unwrap().seconds, 30 * 60);
    let backoff = policy.backoff.unwrap();
    assert_eq!(
        (
            backoff.initial.unwrap().seconds,
            backoff.max.unwrap().seconds
        ),
        (30, 3600)
    );

    let rows = vec![
        row_payload("r1", r#"{"text": "great app"}"#),
        pb::RowInput {
            depends_on: vec!["r1".into()],
            ..row_payload("r2", r#"{"text": "crashes on start"}"#)
        },
    ];
    let first = env.enroll("reviews-nightly", rows.clone()).await;
    assert_eq!(first.enrolled, 2);
    let again = env.enroll("reviews-nightly", rows).await;
    assert_eq!(again.already_present, 2);
    let other = env
        .enroll(
            "reviews-nightly",
            vec![row_payload("r1", r#"{"text": "meh"}"#)],
        )
        .await;
    assert_eq!(other.results[0].outcome(), pb::EnrollOutcome::Conflict);

    let claim = env
        .claim_with(pb::ClaimRowsRequest {
            parent: parent.clone(),
            max_rows: 100,
            worker: "me".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(claim.keys(), ["r1"]);
    let report = env
        .report(
            &claim.claim.name,
            vec![pb::RowOutcome {
                key: "r1".into(),
                outcome: Some(pb::row_outcome::Outcome::Result(
                    r#"{"label": "praise"}"#.into(),
                )),
                usage: Some(usage(120, 8)),
                ..Default::default()
            }],
        )
        .await;
    assert_eq!(
        (
            report.verdicts[0].verdict(),
            report.verdicts[0].rule.as_str()
        ),
        (pb::Verdict::Succeeded, "success")
    );

    let (after_both, after_first) = readme_summary_lines();
    let s = env.summary("reviews-nightly").await;
    assert_eq!(s.summary_line, after_first);

    // The README's second ReportOutcomes, run after the first: `r1` again
    // (DUPLICATE), and `claim_next` claims `r2`, which reporting `r1` freed.
    let chained = env
        .client()
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claim.claim.name.clone(),
            outcomes: vec![pb::RowOutcome {
                key: "r1".into(),
                outcome: Some(pb::row_outcome::Outcome::Result(
                    r#"{"label": "praise"}"#.into(),
                )),
                ..Default::default()
            }],
            claim_next: Some(pb::ClaimRowsRequest {
                max_rows: 100,
                worker: "me".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("report outcomes with claim_next")
        .into_inner();
    assert_eq!(chained.verdicts[0].verdict(), pb::Verdict::Duplicate);
    let next = chained.next_claim.expect("a next claim");
    let next_keys: Vec<&str> = next.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(next_keys, ["r2"]);

    let s = env.summary("reviews-nightly").await;
    assert_eq!(s.summary_line, after_both);
    let r1 = env.get_row("reviews-nightly", "r1").await;
    assert_eq!(r1.history.len(), 1);
    assert_eq!(r1.result, r#"{"label": "praise"}"#);
    let pending = env
        .client()
        .list_rows(pb::ListRowsRequest {
            parent: parent.clone(),
            filter: Some(pb::RowFilter {
                statuses: vec![pb::RowStatus::Pending as i32],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // `r2` is held by the claim `claim_next` made: nothing is PENDING.
    assert!(pending.rows.is_empty(), "{:?}", pending.rows);
    let dry = env
        .client()
        .redrive_rows(pb::RedriveRowsRequest {
            parent: parent.clone(),
            target: Some(pb::redrive_rows_request::Target::Filter(pb::RowFilter {
                statuses: vec![pb::RowStatus::Permanent as i32],
                ..Default::default()
            })),
            validate_only: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.redriven, dry.unblocked, dry.skipped), (0, 0, 0));

    let s = env
        .rejected(env.client().enroll_rows(pb::EnrollRowsRequest {
            parent,
            rows: vec![row_payload("", "[1]")],
        }))
        .await;
    assert_invalid(&s, &["rows[0].key", "rows[0].payload"]);
    assert!(s.get_error_details().bad_request().is_some());
    env.stop().await;
}

/// The walkthrough with failures: enroll three rows, claim them, report one
/// success, one transient failure (RETRYABLE, provider budget) and one
/// permanent failure;
/// the summary counts them and prints the one-line summary; the retried row
/// is claimable again at once and succeeds on its second attempt
/// (invariants 4 and 10: attempts and tokens add up to what was reported).
#[tokio::test]
async fn walkthrough_with_failures() {
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

//! ReportOutcomes with `claim_next`: a report that also claims the next
//! rows (one round trip a batch for a worker reporting and claiming in a
//! loop). Each test states the invariant it checks.

use super::pause::{Env, Ledgers, claim, env, ledger_with_rows, pause, refused, summary};
use std::collections::HashSet;
use tally_proto::v1 as pb;
use tonic::Code;

fn succeeded(rows: &[pb::ClaimedRow]) -> Vec<pb::RowOutcome> {
    rows.iter()
        .map(|row| pb::RowOutcome {
            key: row.key.clone(),
            outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
            ..Default::default()
        })
        .collect()
}

fn next(max_rows: i32) -> pb::ClaimRowsRequest {
    pb::ClaimRowsRequest {
        max_rows,
        worker: "w".into(),
        ..Default::default()
    }
}

async fn report_and_claim(
    l: &mut Ledgers,
    claim: &pb::ClaimRowsResponse,
    claim_next: pb::ClaimRowsRequest,
) -> Result<pb::ReportOutcomesResponse, tonic::Status> {
    l.report_outcomes(pb::ReportOutcomesRequest {
        claim: claim.claim.as_ref().expect("a claim").name.clone(),
        outcomes: succeeded(&claim.rows),
        claim_next: Some(claim_next),
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Reporting with `claim_next` records the outcomes and hands out the next
/// rows, never one already handed out, until nothing is runnable (a report
/// answered with no next claim); every row ends SUCCEEDED after exactly one
/// attempt. On a paused ledger the outcomes are still recorded and the next
/// claim is the empty one saying why.
#[tokio::test]
async fn a_report_claims_the_next_rows_until_none_is_left() {
    let Env {
        _db, server, mut l, ..
    } = env().await;
    ledger_with_rows(&mut l, "rc", 10).await;
    let mut current = claim(&mut l, "rc", 3).await;
    let mut seen: HashSet<String> = current.rows.iter().map(|r| r.key.clone()).collect();
    let mut reports = 0;
    loop {
        let r = report_and_claim(&mut l, &current, next(3)).await.unwrap();
        reports += 1;
        assert_eq!(r.succeeded as usize, current.rows.len());
        assert_eq!(r.held, 0);
        let n = r.next_claim.expect("the next claim's answer");
        if n.claim.is_none() {
            assert!(n.rows.is_empty() && n.pause.is_none());
            break;
        }
        for row in &n.rows {
            assert!(seen.insert(row.key.clone()), "{} handed out twice", row.key);
        }
        current = n;
    }
    assert_eq!((seen.len(), reports), (10, 4));
    let sum = summary(&mut l, "rc").await;
    assert_eq!((sum.succeeded, sum.pending, sum.running), (10, 0, 0));
    assert_eq!(sum.attempts_total, 10);

    ledger_with_rows(&mut l, "paused", 4).await;
    let out = claim(&mut l, "paused", 2).await;
    l.pause_ledger(pause("paused", "incident", ""))
        .await
        .unwrap();
    let r = report_and_claim(&mut l, &out, next(2)).await.unwrap();
    assert_eq!(r.succeeded, 2);
    let n = r.next_claim.expect("the next claim's answer");
    assert!(n.claim.is_none() && n.rows.is_empty());
    assert_eq!(n.pause.expect("the pause").message, "incident");
    server.stop().await.unwrap();
}

/// A row the report frees (a dependant of the row it reports) is in the
/// next claim: a claim that found nothing while the outcomes were being
/// written is tried again once they are, so no next claim means nothing is
/// runnable after the report.
#[tokio::test]
async fn a_dependant_freed_by_the_report_is_in_the_next_claim() {
    let Env {
        _db, server, mut l, ..
    } = env().await;
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: "deps".into(),
        policy: None,
    })
    .await
    .unwrap();
    let row = |key: &str, deps: &[&str]| pb::RowInput {
        key: key.into(),
        payload: "{}".into(),
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        ..Default::default()
    };
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: "ledgers/deps".into(),
        rows: vec![row("r1", &[]), row("r2", &["r1"])],
    })
    .await
    .unwrap();
    let first = claim(&mut l, "deps", 10).await;
    assert_eq!(first.rows.len(), 1, "r2 waits for r1");
    let r = report_and_claim(&mut l, &first, next(10)).await.unwrap();
    assert_eq!(r.succeeded, 1);
    let n = r.next_claim.expect("the next claim's answer");
    let keys: Vec<&str> = n.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["r2"]);
    let last = report_and_claim(&mut l, &n, next(10)).await.unwrap();
    assert!(last.next_claim.expect("answered").claim.is_none());
    server.stop().await.unwrap();
}

/// A report that fails gives back the claim it took beside it: the call
/// answers the report's error, and every row is runnable again at once
/// (a plain ClaimRows takes them all), with no attempt counted.
#[tokio::test]
async fn a_failed_report_gives_its_next_claim_back() {
    let Env {
        _db, server, mut l, ..
    } = env().await;
    ledger_with_rows(&mut l, "fail", 5).await;
    let unknown = pb::ClaimRowsResponse {
        claim: Some(pb::Claim {
            name: format!("ledgers/fail/claims/{}", uuid::Uuid::new_v4()),
            ..Default::default()
        }),
        rows: vec![pb::ClaimedRow {
            key: "k000".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let s = refused(
        report_and_claim(&mut l, &unknown, next(5))
            .await
            .map(tonic::Response::new),
    );
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    let sum = summary(&mut l, "fail").await;
    assert_eq!((sum.pending, sum.running, sum.attempts_total), (5, 0, 0));
    assert_eq!(claim(&mut l, "fail", 10).await.rows.len(), 5);
    server.stop().await.unwrap();
}

/// A bad `claim_next` is INVALID_ARGUMENT naming its field and writes
/// nothing: the outcomes are not recorded (the claim still holds its rows,
/// and a later report of them counts as the first).
#[tokio::test]
async fn a_bad_claim_next_is_refused_before_anything_is_written() {
    let Env {
        _db, server, mut l, ..
    } = env().await;
    ledger_with_rows(&mut l, "bad", 4).await;
    ledger_with_rows(&mut l, "other", 1).await;
    let out = claim(&mut l, "bad", 2).await;
    for (req, field) in [
        (next(0), "claim_next.max_rows"),
        (
            pb::ClaimRowsRequest {
                parent: "ledgers/other".into(),
                ..next(1)
            },
            "claim_next.parent",
        ),
        (
            pb::ClaimRowsRequest {
                max_response_bytes: 1,
                ..next(1)
            },
            "claim_next.max_response_bytes",
        ),
        (
            // Room for one largest row, but not beside the verdicts.
            pb::ClaimRowsRequest {
                max_response_bytes: min_claim_response(),
                ..next(1)
            },
            "claim_next.max_response_bytes",
        ),
    ] {
        let s = refused(
            report_and_claim(&mut l, &out, req)
                .await
                .map(tonic::Response::new),
        );
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains(field), "{field}: {}", s.message());
    }
    let sum = summary(&mut l, "bad").await;
    assert_eq!((sum.running, sum.succeeded, sum.attempts_total), (2, 0, 0));
    let r = l
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: out.claim.as_ref().unwrap().name.clone(),
            outcomes: succeeded(&out.rows),
            claim_next: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.succeeded, r.duplicate), (2, 0));
    assert!(r.next_claim.is_none());
    server.stop().await.unwrap();
}

/// The smallest `max_response_bytes` ClaimRows accepts: one largest row.
fn min_claim_response() -> i64 {
    tally_server::edge::responses::MIN_CLAIM_RESPONSE as i64
}

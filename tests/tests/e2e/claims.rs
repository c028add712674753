//! Claims through gRPC: fencing, leases, rescue, STALE and DUPLICATE,
//! request-id replay, budgets, and claimers racing each other.

use crate::harness::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_proto::v1::row_outcome::Outcome;

/// Invariant 3: several workers claiming at once, each on its own
/// connection, never receive the same row; between them they receive every
/// row exactly once, and since each reports success at once, every row ends
/// SUCCEEDED after exactly one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_never_share_a_row() {
    const ROWS: usize = 600;
    let env = env().await;
    env.ledger("l").await;
    for chunk in 0..3 {
        let rows = (0..ROWS / 3)
            .map(|i| row(&format!("k{chunk}-{i:03}")))
            .collect();
        env.enroll("l", rows).await;
    }
    let url = format!("http://{}", env.grpc_addr());
    let mut tasks = Vec::new();
    for w in 0..6 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = LedgerServiceClient::connect(url).await.unwrap();
            let mut got = Vec::new();
            loop {
                let resp = client
                    .claim_rows(pb::ClaimRowsRequest {
                        parent: ledger_name("l"),
                        max_rows: 17,
                        worker: format!("w{w}"),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let Some(claim) = resp.claim else { break };
                let keys: Vec<String> = resp.rows.into_iter().map(|r| r.key).collect();
                let verdicts = client
                    .report_outcomes(pb::ReportOutcomesRequest {
                        claim: claim.name,
                        outcomes: keys.iter().map(|k| success(k, 2, 1)).collect(),
                        claim_next: None,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(verdicts.succeeded as usize, keys.len(), "{verdicts:?}");
                got.extend(keys);
            }
            got
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for key in t.await.unwrap() {
            assert!(seen.insert(key.clone()), "{key} was claimed twice");
        }
    }
    assert_eq!(seen.len(), ROWS);
    let s = env.summary("l").await;
    assert_eq!((s.succeeded, s.attempts_total), (ROWS as i64, ROWS as i64));
    env.stop().await;
}

/// Invariant 3: a claim whose lease ran out is rescued by the next claim
/// (an infra attempt, `lease_expired`, actor `system`); the stale claim's
/// late report is answered STALE and changes nothing, and it can no longer
/// be extended (CLAIM_EXPIRED); the new claim reports normally.
#[tokio::test]
async fn an_expired_claim_is_rescued_and_its_late_report_is_stale() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a"), row("b")]).await;
    let old = env.claim("l", 10).await.unwrap();
    env.expire(&old.claim).await;

    let new = env.claim("l", 10).await.expect("the rows are rescued");
    assert_eq!(sorted(new.keys()), ["a", "b"]);
    for r in &new.rows {
        let a = r.attempts.unwrap();
        assert_eq!((a.infra, a.total), (1, 1), "{}", r.key);
    }

    let before = env.snapshot().await;
    let late = env.report(&old.claim.name, vec![success("a", 5, 5)]).await;
    assert_eq!(late.verdicts[0].verdict(), pb::Verdict::Stale);
    assert_eq!(late.stale, 1);
    assert_eq!(env.snapshot().await, before, "a stale report wrote");
    let a = env.get_row("l", "a").await;
    assert_eq!(a.status(), pb::RowStatus::Running);
    assert_eq!(a.claim, new.claim.name);
    assert_eq!(a.history.len(), 1);
    let h = &a.history[0];
    assert_eq!(
        (
            h.rule.as_str(),
            h.budget(),
            h.actor.as_str(),
            h.claim.as_str()
        ),
        (
            "lease_expired",
            pb::Budget::Infra,
            "system",
            old.claim.name.as_str()
        )
    );

    let s = env
        .rejected(env.client().extend_claim(pb::ExtendClaimRequest {
            name: old.claim.name.clone(),
            lease: None,
        }))
        .await;
    assert_precondition(&s, "CLAIM_EXPIRED");

    let ok = env
        .report(
            &new.claim.name,
            vec![success("a", 5, 5), success("b", 5, 5)],
        )
        .await;
    assert_eq!(ok.succeeded, 2);
    env.stop().await;
}

/// Invariant 3: a claim past its lease that nobody has rescued yet cannot
/// report either: the report is STALE (`lease_lost`) and writes nothing.
#[tokio::test]
async fn a_claim_past_its_lease_cannot_report_before_rescue() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a")]).await;
    let g = env.claim("l", 1).await.unwrap();
    env.expire(&g.claim).await;
    let before = env.snapshot().await;
    let r = env.report(&g.claim.name, vec![success("a", 1, 1)]).await;
    assert_eq!(
        (r.verdicts[0].verdict(), r.verdicts[0].rule.as_str()),
        (pb::Verdict::Stale, "lease_lost")
    );
    assert_eq!(
        env.snapshot().await,
        before,
        "a report past the lease wrote"
    );
    env.stop().await;
}

/// Invariants 3 and 6: with nobody claiming, the server's sweeper rescues
/// the rows of an expired claim on its own (RETRYABLE, `lease_expired`).
/// The test waits for that event with a deadline; it does not sleep for a
/// fixed time.
#[tokio::test]
async fn the_sweeper_rescues_expired_claims_without_a_claimer() {
    let env = Env::start_with(|a| a.sweep_interval = Duration::from_millis(50)).await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a")]).await;
    let g = env.claim("l", 1).await.unwrap();
    env.expire(&g.claim).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let a = loop {
        let a = env.get_row("l", "a").await;
        if a.status() != pb::RowStatus::Running {
            break a;
        }
        assert!(Instant::now() < deadline, "the sweeper never rescued a");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (a.status(), a.rule.as_str()),
        (pb::RowStatus::Retryable, "lease_expired")
    );
    assert_eq!(a.attempts.unwrap().infra, 1);
    let late = env.report(&g.claim.name, vec![success("a", 1, 1)]).await;
    assert_eq!(late.verdicts[0].verdict(), pb::Verdict::Stale);
    env.stop().await;
}

/// Invariant 1: a SUCCEEDED row never changes again. A repeat report (same
/// or other outcome, same call or a later one) is DUPLICATE and writes
/// nothing; re-enrolling it is ALREADY_PRESENT or CONFLICT; a redrive skips
/// it; it is never claimed again; its result and update time stay.
#[tokio::test]
async fn a_succeeded_row_never_changes() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a")]).await;
    let g = env.claim("l", 1).await.unwrap();
    let r = env
        .report(&g.claim.name, vec![success("a", 3, 3), failure("a", 500)])
        .await;
    let verdicts: Vec<_> = r
        .verdicts
        .iter()
        .map(|v| (v.verdict(), v.rule.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (pb::Verdict::Succeeded, "success"),
            (pb::Verdict::Duplicate, "already_reported")
        ]
    );
    let first = env.get_row("l", "a").await;
    assert_eq!(first.result, r#"{"answer": "a"}"#);

    let before = env.snapshot().await;
    for again in [
        success("a", 3, 3),
        pb::RowOutcome {
            outcome: Some(Outcome::Result(r#"{"answer": "other"}"#.into())),
            ..success("a", 9, 9)
        },
        failure("a", 503),
    ] {
        let r = env.report(&g.claim.name, vec![again]).await;
        assert_eq!(
            (r.verdicts[0].verdict(), r.duplicate),
            (pb::Verdict::Duplicate, 1)
        );
    }
    assert_eq!(env.snapshot().await, before, "a duplicate report wrote");

    let e = env
        .enroll("l", vec![row("a"), row_payload("a2", "{}")])
        .await;
    assert_eq!(e.results[0].outcome(), pb::EnrollOutcome::AlreadyPresent);
    let e = env.enroll("l", vec![row_payload("a", "{}")]).await;
    assert_eq!(e.results[0].outcome(), pb::EnrollOutcome::Conflict);
    let redrive = env
        .client()
        .redrive_rows(pb::RedriveRowsRequest {
            parent: ledger_name("l"),
            target: Some(pb::redrive_rows_request::Target::Keys(pb::RowKeys {
                keys: vec!["a".into()],
            })),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((redrive.redriven, redrive.skipped), (0, 1));
    let next = env.claim("l", 10).await.unwrap();
    assert_eq!(next.keys(), ["a2"], "a succeeded row was claimed again");

    let after = env.get_row("l", "a").await;
    assert_eq!(after, first);
    env.stop().await;
}

/// A ClaimRows retried with the same request_id (say, after a lost
/// response) answers the same claim and the rows it still holds instead of
/// leasing more, also when the retries race each other; the id is scoped
/// to its ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_claim_with_the_same_request_id_returns_the_same_claim() {
    let env = env().await;
    env.ledger("l").await;
    env.ledger("other").await;
    env.enroll_n("l", "k", 12).await;
    env.enroll_n("other", "k", 2).await;
    let req = |ledger: &str, id: &str| pb::ClaimRowsRequest {
        parent: ledger_name(ledger),
        max_rows: 4,
        request_id: id.into(),
        ..Default::default()
    };

    let first = env.claim_with(req("l", "req-1")).await.unwrap();
    let again = env.claim_with(req("l", "req-1")).await.unwrap();
    assert_eq!(again.claim.name, first.claim.name);
    assert_eq!(again.keys(), first.keys());

    // After one row is reported, the replay answers the rows still held.
    env.report(&first.claim.name, vec![success(&first.keys()[0], 1, 1)])
        .await;
    let replay = env.claim_with(req("l", "req-1")).await.unwrap();
    assert_eq!(replay.claim.name, first.claim.name);
    assert_eq!(replay.keys(), first.keys()[1..]);

    // Racing retries of a new id all get one claim.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut client = env.client();
        let r = req("l", "req-2");
        tasks.push(tokio::spawn(async move {
            client.claim_rows(r).await.unwrap().into_inner()
        }));
    }
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for t in tasks {
        let resp = t.await.unwrap();
        names.insert(resp.claim.unwrap().name);
        keys.extend(resp.rows.into_iter().map(|r| r.key));
    }
    assert_eq!(names.len(), 1, "racing retries made {names:?}");
    assert_eq!(keys.len(), 4);

    // The rest is left for others; the id means nothing in another ledger.
    let rest = env.claim("l", 100).await.unwrap();
    assert_eq!(rest.rows.len(), 12 - 8);
    let elsewhere = env.claim_with(req("other", "req-1")).await.unwrap();
    assert!(elsewhere.claim.name.starts_with("ledgers/other/claims/"));
    assert_eq!(elsewhere.rows.len(), 2);
    env.stop().await;
}

/// ReleaseClaim gives rows back unworked: no attempt is counted, they are
/// claimable again at once, and the releasing claim's late report on them
/// is STALE, as are reports for rows held by another claim or never
/// enrolled; none of them writes.
#[tokio::test]
async fn released_rows_come_back_without_an_attempt() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("a"), row("b")]).await;
    let g = env.claim("l", 2).await.unwrap();
    let r = env
        .client()
        .release_claim(pb::ReleaseClaimRequest {
            name: g.claim.name.clone(),
            keys: vec!["a".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.released, r.claim.unwrap().held_count), (1, 1));
    let a = env.get_row("l", "a").await;
    assert_eq!(
        (a.status(), a.attempts.unwrap().total),
        (pb::RowStatus::Pending, 0)
    );
    let again = env.claim("l", 2).await.unwrap();
    assert_eq!(again.keys(), ["a"]);
    // Reports for rows a claim does not hold change nothing: released (a),
    // held by another claim (b), never enrolled (ghost).
    let before = env.snapshot().await;
    let late = env.report(&g.claim.name, vec![success("a", 1, 1)]).await;
    let stray = env
        .report(
            &again.claim.name,
            vec![success("b", 1, 1), success("ghost", 1, 1)],
        )
        .await;
    let rules: Vec<_> = late
        .verdicts
        .iter()
        .chain(&stray.verdicts)
        .map(|v| (v.verdict(), v.rule.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            (pb::Verdict::Stale, "not_held"),
            (pb::Verdict::Stale, "not_held"),
            (pb::Verdict::Stale, "unknown_key"),
        ]
    );
    assert_eq!(env.snapshot().await, before, "a stale report wrote");
    env.stop().await;
}

/// Invariant 4: no budget's attempts exceed its cap. Transient provider
/// failures stop at the provider cap (3) as PERMANENT
/// `provider_attempts_exhausted`; an unusable answer exhausts the content
/// budget (1) at once; lease expiries exhaust the infra budget (2); a
/// provider retry delay keeps the row out of claims until it has passed.
#[tokio::test]
async fn attempts_stop_at_each_budget_cap() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("provider")]).await;
    let mut verdicts = Vec::new();
    while let Some(g) = env.claim("l", 1).await {
        let r = env
            .report(&g.claim.name, vec![failure("provider", 503)])
            .await;
        verdicts.push((r.verdicts[0].verdict(), r.verdicts[0].rule.clone()));
    }
    assert_eq!(
        verdicts,
        [
            (pb::Verdict::Retryable, "http_transient".to_string()),
            (pb::Verdict::Retryable, "http_transient".to_string()),
            (
                pb::Verdict::Permanent,
                "provider_attempts_exhausted".to_string()
            ),
        ]
    );
    let p = env.get_row("l", "provider").await;
    assert_eq!(
        (p.status(), p.attempts.unwrap().provider, p.history.len()),
        (pb::RowStatus::Permanent, 3, 3)
    );

    env.enroll("l", vec![row("content")]).await;
    let g = env.claim("l", 1).await.unwrap();
    let invalid = pb::RowOutcome {
        key: "content".into(),
        outcome: Some(Outcome::Failure(pb::Failure {
            kind: pb::FailureKind::InvalidOutput as i32,
            message: "does not match the schema".into(),
            ..Default::default()
        })),
        usage: Some(usage(5, 5)),
        ..Default::default()
    };
    let r = env.report(&g.claim.name, vec![invalid]).await;
    assert_eq!(r.verdicts[0].verdict(), pb::Verdict::Permanent);
    assert_eq!(r.verdicts[0].budget(), pb::Budget::Content);
    assert_eq!(r.verdicts[0].attempts.unwrap().content, 1);

    env.enroll("l", vec![row("infra")]).await;
    for _ in 0..2 {
        let g = env.claim("l", 1).await.expect("claimable after an expiry");
        assert_eq!(g.keys(), ["infra"]);
        env.expire(&g.claim).await;
    }
    assert!(
        env.claim("l", 1).await.is_none(),
        "claimed past the infra cap"
    );
    let i = env.get_row("l", "infra").await;
    assert_eq!(
        (i.status(), i.rule.as_str(), i.attempts.unwrap().infra),
        (pb::RowStatus::Permanent, "infra_attempts_exhausted", 2)
    );

    env.enroll("l", vec![row("slow")]).await;
    let g = env.claim("l", 1).await.unwrap();
    let throttled = pb::RowOutcome {
        key: "slow".into(),
        outcome: Some(Outcome::Failure(pb::Failure {
            http_code: 429,
            retry_delay: Some(secs(3600)),
            ..Default::default()
        })),
        usage: None,
        ..Default::default()
    };
    let r = env.report(&g.claim.name, vec![throttled]).await;
    assert_eq!(r.verdicts[0].verdict(), pb::Verdict::Retryable);
    let when = r.verdicts[0].next_attempt_time.unwrap();
    let now = g.claim.create_time.unwrap();
    assert!(when.seconds - now.seconds >= 3599, "{when:?} vs {now:?}");
    assert!(
        env.claim("l", 1).await.is_none(),
        "claimed before its delay"
    );
    env.stop().await;
}

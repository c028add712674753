//! DESIGN.md invariants 1–6 and 10 against a real PostgreSQL, one database
//! per test. Each test names the invariant it checks.

use crate::common;

use common::*;
use std::collections::HashSet;
use std::time::Duration;
use tally_core::classify::{Failure, FailureKind};
use tally_core::status::RowStatus;
use tally_core::transition::Outcome;
use tally_store::StoreError;
use tally_store::types::{
    ClaimRequest, EnrollOutcome, RedriveTarget, ReportItem, RowFilter, Usage, Verdict,
};

async fn ledger(env: &Env, name: &str) {
    env.store.create_ledger(name, &fast_policy()).await.unwrap();
}

async fn status(env: &Env, ledger: &str, key: &str) -> RowStatus {
    env.store.get_row(ledger, key).await.unwrap().status
}

/// Invariant 2: enrolling an existing key never changes that row; the same
/// key with a different payload is reported as CONFLICT.
#[tokio::test]
async fn enrolling_again_is_idempotent_and_conflicts_change_nothing() {
    let env = env().await;
    ledger(&env, "l").await;
    let first = env
        .store
        .enroll("l", &[row("a", &[]), row("b", &[])])
        .await
        .unwrap();
    assert_eq!(first, [EnrollOutcome::Enrolled, EnrollOutcome::Enrolled]);
    let again = env
        .store
        .enroll(
            "l",
            &[
                row("a", &[]),
                row_with("b", r#"{"other": 1}"#, &[]),
                row("c", &[]),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        [
            EnrollOutcome::AlreadyPresent,
            EnrollOutcome::Conflict,
            EnrollOutcome::Enrolled
        ]
    );
    let b = env.store.get_row("l", "b").await.unwrap();
    assert_eq!(b.payload.as_deref(), Some(r#"{"text": "b"}"#));
    assert_queue_consistent(&env.store).await;
}

/// Invariant 1: a SUCCEEDED row never changes again; its result is never
/// overwritten (not by a repeat report, a re-enrollment, a redrive or a
/// stale claim).
#[tokio::test]
async fn a_succeeded_row_never_changes() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store.enroll("l", &[row("a", &[])]).await.unwrap();
    let grant = claim(&env.store, "l", 10).await.unwrap();
    let r = env
        .store
        .report("l", grant.claim.token, &[success("a", 100)], "w")
        .await
        .unwrap();
    assert_eq!(r.verdicts[0].verdict, Verdict::Succeeded);
    let before = env.store.get_row("l", "a").await.unwrap();

    let dup = env
        .store
        .report("l", grant.claim.token, &[failure("a", 500)], "w")
        .await
        .unwrap();
    assert_eq!(dup.verdicts[0].verdict, Verdict::Duplicate);
    assert_eq!(
        env.store
            .enroll("l", &[row_with("a", "{}", &[])])
            .await
            .unwrap(),
        [EnrollOutcome::Conflict]
    );
    let redrive = env
        .store
        .redrive(
            "l",
            &RedriveTarget::Keys(vec!["a".into()]),
            false,
            false,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!((redrive.redriven, redrive.skipped), (0, 1));
    assert!(claim(&env.store, "l", 10).await.is_none());

    let after = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(after.status, RowStatus::Succeeded);
    assert_eq!(after.result, before.result);
    assert_eq!(after.total, 1);
    assert_eq!(after.update_time, before.update_time);
}

/// Invariant 3: several claimers at once never receive the same row, and
/// between them they receive every row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_never_share_a_row() {
    let env = env().await;
    ledger(&env, "l").await;
    let rows: Vec<_> = (0..2000).map(|i| row(&format!("k{i}"), &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = env.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut keys = Vec::new();
            while let Some(g) = claim(&store, "l", 37).await {
                keys.extend(g.rows.into_iter().map(|r| r.key));
            }
            keys
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for key in t.await.unwrap() {
            total += 1;
            assert!(seen.insert(key.clone()), "{key} was claimed twice");
        }
    }
    assert_eq!(total, 2000);
    assert_eq!(seen.len(), 2000);
}

/// Invariant 3: a claim that expires is rescued (an infra attempt counted)
/// and its late report is answered STALE and changes nothing.
#[tokio::test]
async fn an_expired_claim_is_rescued_and_its_late_report_is_stale() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store
        .enroll("l", &[row("a", &[]), row("b", &[])])
        .await
        .unwrap();
    let old = claim(&env.store, "l", 10).await.unwrap();
    expire(&env.store, &old).await;

    // The next claim rescues the rows first, then takes them.
    let new = claim(&env.store, "l", 10).await.unwrap();
    let mut keys: Vec<_> = new.rows.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(new.rows[0].failures.infra, 1);

    let late = env
        .store
        .report("l", old.claim.token, &[success("a", 5)], "slow-worker")
        .await
        .unwrap();
    assert_eq!(late.verdicts[0].verdict, Verdict::Stale);
    assert_eq!(status(&env, "l", "a").await, RowStatus::Running);
    let row = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(row.history.len(), 1);
    assert_eq!(row.history[0].rule, "lease_expired");
    assert_eq!(row.usage, Usage::default());

    let ok = env
        .store
        .report("l", new.claim.token, &[success("a", 5)], "w")
        .await
        .unwrap();
    assert_eq!(ok.verdicts[0].verdict, Verdict::Succeeded);
    let err = env
        .store
        .extend_claim("l", old.claim.token, None)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::FailedPrecondition {
            reason: "CLAIM_EXPIRED",
            ..
        }
    ));
}

/// Invariant 3: a claim past its lease but not yet rescued cannot report.
#[tokio::test]
async fn a_claim_past_its_lease_cannot_report_even_before_rescue() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store.enroll("l", &[row("a", &[])]).await.unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    expire(&env.store, &g).await;
    let r = env
        .store
        .report("l", g.claim.token, &[success("a", 1)], "w")
        .await
        .unwrap();
    assert_eq!(
        (r.verdicts[0].verdict, r.verdicts[0].rule.as_str()),
        (Verdict::Stale, "lease_lost")
    );
    assert_eq!(status(&env, "l", "a").await, RowStatus::Running);
}

/// Invariant 4: no budget's attempts exceed its cap; a retryable failure at
/// the cap ends PERMANENT with `<budget>_attempts_exhausted`.
#[tokio::test]
async fn transient_failures_stop_at_the_cap() {
    let env = env().await;
    ledger(&env, "l").await; // provider cap 3
    env.store.enroll("l", &[row("a", &[])]).await.unwrap();
    let mut verdicts = Vec::new();
    while let Some(g) = claim(&env.store, "l", 1).await {
        let r = env
            .store
            .report("l", g.claim.token, &[failure("a", 503)], "w")
            .await
            .unwrap();
        verdicts.push((r.verdicts[0].verdict, r.verdicts[0].rule.clone()));
    }
    assert_eq!(
        verdicts,
        [
            (Verdict::Retryable, "http_transient".to_string()),
            (Verdict::Retryable, "http_transient".to_string()),
            (
                Verdict::Permanent,
                "provider_attempts_exhausted".to_string()
            ),
        ]
    );
    let row = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(
        (row.status, row.failures.provider, row.total),
        (RowStatus::Permanent, 3, 3)
    );
    assert_eq!(row.history.len(), 3);
}

/// Invariant 4 for the infra budget: repeated lease expiry ends PERMANENT.
#[tokio::test]
async fn repeated_lease_expiry_exhausts_the_infra_budget() {
    let env = env().await;
    ledger(&env, "l").await; // infra cap 2
    env.store.enroll("l", &[row("a", &[])]).await.unwrap();
    for _ in 0..2 {
        let g = claim(&env.store, "l", 1).await.unwrap();
        expire(&env.store, &g).await;
        env.store.rescue_expired(None).await.unwrap();
    }
    let row = env.store.get_row("l", "a").await.unwrap();
    assert_eq!(row.status, RowStatus::Permanent);
    assert_eq!(row.rule, "infra_attempts_exhausted");
    assert_eq!(row.failures.infra, 2);
}

/// Safety blocks are permanent at once; a provider retry delay keeps the
/// row out of claims until it has passed.
#[tokio::test]
async fn safety_blocks_are_permanent_and_retry_delays_are_honoured() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store
        .enroll("l", &[row("safe", &[]), row("slow", &[])])
        .await
        .unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    let blocked = ReportItem {
        key: "safe".into(),
        outcome: Outcome::Failure(Failure {
            kind: Some(FailureKind::Blocked),
            finish_reason: "SAFETY".into(),
            ..Failure::default()
        }),
        result: None,
        response: None,
        usage: Usage::default(),
        request_id: None,
        tier: None,
        model_version: None,
        cached: None,
    };
    let slow = ReportItem {
        key: "slow".into(),
        outcome: Outcome::Failure(Failure {
            http_code: 429,
            retry_delay: Some(Duration::from_secs(3600)),
            ..Failure::default()
        }),
        result: None,
        response: None,
        usage: Usage::default(),
        request_id: None,
        tier: None,
        model_version: None,
        cached: None,
    };
    let r = env
        .store
        .report("l", g.claim.token, &[blocked, slow], "w")
        .await
        .unwrap();
    assert_eq!(
        (r.verdicts[0].verdict, r.verdicts[0].rule.as_str()),
        (Verdict::Permanent, "finish_reason_blocked")
    );
    assert_eq!(r.verdicts[1].verdict, Verdict::Retryable);
    assert!(
        claim(&env.store, "l", 10).await.is_none(),
        "claimable before its retry delay"
    );
    let row = env.store.get_row("l", "slow").await.unwrap();
    let wait = row.next_attempt_time.unwrap() - row.update_time;
    assert!(wait >= chrono::TimeDelta::seconds(3599), "{wait}");
    assert_eq!(r.held, 0);
}

/// Invariant 5: a row is never claimed before its dependencies SUCCEEDED;
/// dependants of a PERMANENT row become BLOCKED (transitively); a redrive
/// unblocks them.
#[tokio::test]
async fn dependencies_gate_claims_block_on_failure_and_unblock_on_redrive() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store
        .enroll(
            "l",
            &[
                row("p3", &[]),
                row("p4", &["p3"]),
                row("p5", &["p4"]),
                row("p12", &[]),
            ],
        )
        .await
        .unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    let mut keys: Vec<_> = g.rows.iter().map(|r| r.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["p12", "p3"]);
    let r = env
        .store
        .report(
            "l",
            g.claim.token,
            &[success("p3", 1), failure("p12", 400)],
            "w",
        )
        .await
        .unwrap();
    assert_eq!(r.verdicts[1].verdict, Verdict::Permanent);
    let g = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(
        g.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["p4"]
    );
    env.store
        .report("l", g.claim.token, &[failure("p4", 404)], "w")
        .await
        .unwrap();
    assert_eq!(status(&env, "l", "p5").await, RowStatus::Blocked);
    assert!(claim(&env.store, "l", 10).await.is_none());
    assert_queue_consistent(&env.store).await;

    // Enrolling a new dependant of a PERMANENT row makes it BLOCKED at once.
    env.store.enroll("l", &[row("p6", &["p5"])]).await.unwrap();
    assert_eq!(status(&env, "l", "p6").await, RowStatus::Blocked);

    let dry = env
        .store
        .redrive(
            "l",
            &RedriveTarget::Keys(vec!["p4".into()]),
            true,
            false,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!((dry.redriven, dry.unblocked), (1, 2));
    assert_eq!(
        status(&env, "l", "p4").await,
        RowStatus::Permanent,
        "validate_only wrote"
    );

    let done = env
        .store
        .redrive(
            "l",
            &RedriveTarget::Keys(vec!["p4".into()]),
            false,
            false,
            "op",
            "fixed input",
        )
        .await
        .unwrap();
    assert_eq!((done.redriven, done.unblocked, done.skipped), (1, 2, 0));
    let p4 = env.store.get_row("l", "p4").await.unwrap();
    assert_eq!(
        (p4.status, p4.failures.provider, p4.total),
        (RowStatus::Pending, 0, 1)
    );
    assert_eq!(status(&env, "l", "p5").await, RowStatus::Pending);
    let g = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(
        g.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["p4"]
    );
    assert_queue_consistent(&env.store).await;
}

/// Invariant 5: a dependant with two failed parents stays BLOCKED until both
/// are redriven.
#[tokio::test]
async fn a_row_blocked_twice_needs_both_blockers_redriven() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store
        .enroll(
            "l",
            &[row("a", &[]), row("b", &[]), row("child", &["a", "b"])],
        )
        .await
        .unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    env.store
        .report(
            "l",
            g.claim.token,
            &[failure("a", 400), failure("b", 400)],
            "w",
        )
        .await
        .unwrap();
    assert_eq!(status(&env, "l", "child").await, RowStatus::Blocked);
    let one = env
        .store
        .redrive(
            "l",
            &RedriveTarget::Keys(vec!["a".into()]),
            false,
            false,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!((one.redriven, one.unblocked), (1, 0));
    assert_eq!(status(&env, "l", "child").await, RowStatus::Blocked);
    let filter = RowFilter {
        statuses: vec![RowStatus::Permanent],
        ..RowFilter::default()
    };
    let both = env
        .store
        .redrive("l", &RedriveTarget::Filter(filter), false, false, "op", "")
        .await
        .unwrap();
    assert_eq!((both.redriven, both.unblocked), (1, 1));
    assert_eq!(status(&env, "l", "child").await, RowStatus::Pending);
    assert_queue_consistent(&env.store).await;
}

/// Enrollment rejects unknown dependencies and writes nothing.
#[tokio::test]
async fn unknown_dependencies_are_rejected_and_nothing_is_written() {
    let env = env().await;
    ledger(&env, "l").await;
    let err = env
        .store
        .enroll("l", &[row("a", &[]), row("b", &["nope"])])
        .await
        .unwrap_err();
    let StoreError::InvalidArgument(v) = err else {
        panic!("expected invalid argument, got {err:?}");
    };
    assert_eq!(v[0].field, "rows[1].depends_on[0]");
    assert!(env.store.get_row("l", "a").await.is_err(), "a was written");
}

/// Invariant 10: attempts and tokens summed over the history equal what was
/// reported.
#[tokio::test]
async fn attempts_and_tokens_add_up() {
    let env = env().await;
    ledger(&env, "l").await;
    let rows: Vec<_> = (0..50).map(|i| row(&format!("k{i}"), &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let (mut reported_attempts, mut reported_input, mut reported_output) = (0i64, 0i64, 0i64);
    let mut round = 0;
    while let Some(g) = claim(&env.store, "l", 20).await {
        round += 1;
        let items: Vec<ReportItem> = g
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                if (i + round) % 3 == 0 {
                    failure(&r.key, 503)
                } else {
                    success(&r.key, 7 + i as i64)
                }
            })
            .collect();
        for item in &items {
            reported_attempts += 1;
            reported_input += item.usage.input;
            reported_output += item.usage.output;
        }
        env.store
            .report("l", g.claim.token, &items, "w")
            .await
            .unwrap();
    }
    let s = env.store.summarize("l").await.unwrap();
    assert_eq!(s.attempts_total, reported_attempts);
    assert_eq!(s.usage.input, reported_input);
    assert_eq!(s.usage.output, reported_output);
    let rows_total: i64 = env
        .store
        .list_rows("l", &RowFilter::default(), None, 1000, None)
        .await
        .unwrap()
        .rows
        .iter()
        .map(|r| i64::from(r.total))
        .sum();
    assert_eq!(rows_total, reported_attempts);
    assert!(s.counts.is_settled());
    assert_eq!(s.counts.total(), 50);
}

/// A retried ClaimRows with the same request id answers the same claim
/// instead of leasing more rows.
#[tokio::test]
async fn a_retried_claim_with_the_same_request_id_gets_the_same_rows() {
    let env = env().await;
    ledger(&env, "l").await;
    let rows: Vec<_> = (0..10).map(|i| row(&format!("k{i}"), &[])).collect();
    env.store.enroll("l", &rows).await.unwrap();
    let req = ClaimRequest {
        max_rows: 4,
        request_id: Some("req-1".into()),
        ..claim_req(4)
    };
    let a = env.store.claim_rows("l", &req).await.unwrap().unwrap();
    let b = env.store.claim_rows("l", &req).await.unwrap().unwrap();
    assert_eq!(a.claim.token, b.claim.token);
    let keys = |g: &tally_store::types::ClaimGrant| {
        g.rows.iter().map(|r| r.key.clone()).collect::<Vec<_>>()
    };
    assert_eq!(keys(&a), keys(&b));
    let rest = claim(&env.store, "l", 100).await.unwrap();
    assert_eq!(rest.rows.len(), 6);
}

/// Releasing gives rows back without counting an attempt.
#[tokio::test]
async fn released_rows_come_back_without_an_attempt() {
    let env = env().await;
    ledger(&env, "l").await;
    env.store
        .enroll("l", &[row("a", &[]), row("b", &[])])
        .await
        .unwrap();
    let g = claim(&env.store, "l", 10).await.unwrap();
    let (n, c) = env
        .store
        .release_claim("l", g.claim.token, Some(&["a".to_string()]), "w")
        .await
        .unwrap();
    assert_eq!((n, c.held), (1, 1));
    let a = env.store.get_row("l", "a").await.unwrap();
    assert_eq!((a.status, a.total), (RowStatus::Pending, 0));
    let again = claim(&env.store, "l", 10).await.unwrap();
    assert_eq!(again.rows[0].key, "a");
    let late = env
        .store
        .report("l", g.claim.token, &[success("a", 1)], "w")
        .await
        .unwrap();
    assert_eq!(late.verdicts[0].verdict, Verdict::Stale);
    assert_queue_consistent(&env.store).await;
}

/// Invariant 6: with workers running (some dying mid-claim) and the
/// provider eventually answering, every row ends SUCCEEDED, PERMANENT or
/// BLOCKED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_row_settles_under_failures_and_dying_workers() {
    let env = env().await;
    ledger(&env, "l").await;
    let mut rows = Vec::new();
    for i in 0..300 {
        let deps: Vec<String> = if i % 10 > 0 {
            vec![format!("k{}", i - 1)]
        } else {
            vec![]
        };
        let dep_refs: Vec<&str> = deps.iter().map(String::as_str).collect();
        rows.push(row(&format!("k{i}"), &dep_refs));
    }
    env.store.enroll("l", &rows).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let store = env.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                n += 1;
                let Some(g) = claim(&store, "l", 7).await else {
                    let s = store.summarize("l").await.unwrap();
                    if s.counts.is_settled() {
                        return;
                    }
                    store.rescue_expired(None).await.unwrap();
                    tokio::task::yield_now().await;
                    continue;
                };
                if (n + w).is_multiple_of(11) {
                    // This worker "dies": its claim expires unreported.
                    expire(&store, &g).await;
                    continue;
                }
                let items: Vec<ReportItem> = g
                    .rows
                    .iter()
                    .map(|r| {
                        let h = r.key.bytes().map(u64::from).sum::<u64>() + n;
                        match h % 17 {
                            0 => failure(&r.key, 400),
                            1..=4 => failure(&r.key, 503),
                            _ => success(&r.key, 3),
                        }
                    })
                    .collect();
                store.report("l", g.claim.token, &items, "w").await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = env.store.summarize("l").await.unwrap();
    assert!(s.counts.is_settled(), "{s:?}");
    assert_eq!(s.counts.total(), 300);
    assert!(s.counts.succeeded > 0 && s.counts.permanent > 0);
    assert_queue_consistent(&env.store).await;
    // Every BLOCKED row has a PERMANENT or BLOCKED dependency.
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rows r WHERE r.status = 6 AND NOT EXISTS (
           SELECT 1 FROM row_deps d JOIN rows p ON p.id = d.dep_id
           WHERE d.row_id = r.id AND p.status IN (5, 6))",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(orphans, 0);
}

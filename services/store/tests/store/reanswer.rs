//! Re-answers (issue 49): a redrive that includes succeeded rows asks them
//! again, keeping each old result as superseded; a dependant that used the
//! old answer is asked again only when the new answer differs and the
//! ledger asks for it (`rerun_dependants`), and is otherwise marked as
//! having used a changed input.

use crate::common;

use common::*;
use tally_core::lane::Lane;
use tally_core::policy::{Policy, Price};
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::types::{RedriveResult, RedriveTarget, ReportItem, RowFilter};

fn priced(rerun_dependants: bool) -> Policy {
    let mut p = fast_policy();
    p.prices = vec![Price {
        model: p.model.clone(),
        input_per_million: 1_000_000.0,
        output_per_million: 0.0,
        cached_input_per_million: 0.0,
        thinking_per_million: 0.0,
        lane: Lane::Batch,
    }];
    p.rerun_dependants = rerun_dependants;
    p
}

fn answer(key: &str, text: &str) -> ReportItem {
    let mut item = success(key, 2);
    item.result = Some(format!("{{\"ok\": \"{text}\"}}"));
    item
}

/// Claims the one runnable row, expected to be `key`, and reports `item`.
async fn run_one(store: &Store, key: &str, item: ReportItem) {
    let grant = claim(store, "l", 10).await.expect("a claim");
    let keys: Vec<&str> = grant.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, [key], "the only runnable row");
    store
        .report("l", grant.claim.token, &[item], "w")
        .await
        .unwrap();
}

async fn ask_again(store: &Store, keys: &[&str], dry: bool) -> RedriveResult {
    let target = RedriveTarget::Keys(keys.iter().map(|k| k.to_string()).collect());
    store
        .redrive("l", &target, dry, true, "op", "prompt fixed")
        .await
        .unwrap()
}

async fn status(store: &Store, key: &str) -> RowStatus {
    store.get_row("l", key).await.unwrap().status
}

/// A chain a → b → c (each named `previous` by the next), every row
/// answered once (`a1`, `b1`, `c1`).
async fn chain(store: &Store, policy: &Policy) {
    store.create_ledger("l", policy).await.unwrap();
    let named = |key: &str, dep: &str| {
        let mut r = row(key, &[dep]);
        r.dependency_names = [(dep.to_string(), "previous".to_string())].into();
        r
    };
    store
        .enroll("l", &[row("a", &[]), named("b", "a"), named("c", "b")])
        .await
        .unwrap();
    for key in ["a", "b", "c"] {
        run_one(store, key, answer(key, &format!("{key}1"))).await;
    }
}

async fn superseded(store: &Store, key: &str) -> Vec<(i32, String, String)> {
    sqlx::query_as(
        "SELECT s.result_version, s.result, s.rule FROM superseded_results s
         JOIN rows r ON r.id = s.row_id WHERE r.key = $1 ORDER BY 1",
    )
    .bind(key)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

// Invariant: a dry run says what asking a succeeded row again would do and
// cost and writes nothing; the real one keeps the old result (by the
// version it was delivered as), sends the row back PENDING with its next
// result a new version, and makes its dependants wait for the new answer.
// Without `rerun_dependants` a different answer leaves the dependant
// SUCCEEDED, its input marked changed (GetRow, the summary, a filter),
// until the operator asks it again; then the mark is cleared.
#[tokio::test]
async fn a_row_asked_again_keeps_its_old_result_and_marks_what_used_it() {
    let env = env().await;
    let s = &env.store;
    chain(s, &priced(false)).await;
    let dry = ask_again(s, &["a"], true).await;
    assert_eq!((dry.reanswered, dry.dependants_at_risk), (1, 2));
    assert_eq!(dry.at_risk_keys, ["b", "c"]);
    // Each of a's attempts read 2 input tokens at $1 a token; the
    // dependants are not priced, since the ledger does not re-run them.
    assert!((dry.estimated_cost_usd - 2.0).abs() < 1e-9, "{dry:?}");
    assert_eq!(status(s, "a").await, RowStatus::Succeeded, "dry run");
    assert!(superseded(s, "a").await.is_empty(), "dry run");

    let done = ask_again(s, &["a"], false).await;
    assert_eq!((done.reanswered, done.skipped), (1, 0));
    let a = s.get_row("l", "a").await.unwrap();
    assert_eq!((a.status, a.result_version), (RowStatus::Pending, 2));
    assert_eq!(a.result, None);
    assert_eq!(a.rule, "reanswer");
    assert_eq!(
        superseded(s, "a").await,
        [(1, "{\"ok\": \"a1\"}".to_string(), "reanswer".to_string())]
    );
    let shown: Vec<_> = a
        .superseded
        .iter()
        .map(|x| (x.result_version, x.result.as_deref(), x.reason.as_str()))
        .collect();
    assert_eq!(
        shown,
        [(1, Some("{\"ok\": \"a1\"}"), "prompt fixed")],
        "GetRow shows it"
    );
    assert_eq!(status(s, "b").await, RowStatus::Succeeded);
    assert_queue_consistent(s).await;

    run_one(s, "a", answer("a", "a2")).await;
    assert!(claim(s, "l", 10).await.is_none(), "nothing is re-run");
    let b = s.get_row("l", "b").await.unwrap();
    assert_eq!(b.status, RowStatus::Succeeded);
    assert!(b.inputs[0].changed, "b used a1, a now says a2");
    assert!(!s.get_row("l", "c").await.unwrap().inputs[0].changed);
    assert_eq!(s.summarize("l").await.unwrap().inputs_changed, 1);
    let changed = RowFilter {
        inputs_changed: true,
        ..RowFilter::default()
    };
    let page = s.list_rows("l", &changed, None, 10, None).await.unwrap();
    let keys: Vec<&str> = page.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["b"]);

    let again = s
        .redrive("l", &RedriveTarget::Filter(changed), false, true, "op", "")
        .await
        .unwrap();
    assert_eq!(again.reanswered, 1);
    let b_claim = claim(s, "l", 10).await.expect("b again");
    assert_eq!(b_claim.rows[0].dependencies[0].result, "{\"ok\": \"a2\"}");
    assert!(!s.get_row("l", "b").await.unwrap().inputs[0].changed);
    assert_eq!(s.summarize("l").await.unwrap().inputs_changed, 0);
    assert_queue_consistent(s).await;
}

// Invariant: with `rerun_dependants`, a dependant is asked again only when
// the answer it used changed: the same answer again re-runs nothing; a
// different one re-runs each later link once, in chain order, each with
// the new answer of the link before (rule `dependency_changed`).
#[tokio::test]
async fn with_rerun_dependants_each_link_is_asked_again_once_when_its_input_changes() {
    let env = env().await;
    let s = &env.store;
    chain(s, &priced(true)).await;
    let dry = ask_again(s, &["a"], true).await;
    assert!(
        (dry.estimated_cost_usd - 6.0).abs() < 1e-9,
        "a, b and c priced: {dry:?}"
    );

    ask_again(s, &["a"], false).await;
    run_one(s, "a", answer("a", "a1")).await;
    assert!(
        claim(s, "l", 10).await.is_none(),
        "the same answer re-runs nothing"
    );
    assert_eq!(status(s, "b").await, RowStatus::Succeeded);

    ask_again(s, &["a"], false).await;
    run_one(s, "a", answer("a", "a2")).await;
    let b = s.get_row("l", "b").await.unwrap();
    assert_eq!(
        (b.status, b.rule.as_str()),
        (RowStatus::Pending, "dependency_changed")
    );
    assert_eq!(
        status(s, "c").await,
        RowStatus::Succeeded,
        "c waits for b's answer"
    );
    assert_queue_consistent(s).await;
    run_one(s, "b", answer("b", "b2")).await;
    assert_eq!(status(s, "c").await, RowStatus::Pending);
    run_one(s, "c", answer("c", "c2")).await;
    assert!(claim(s, "l", 10).await.is_none());
    for (key, attempts) in [("a", 3), ("b", 2), ("c", 2)] {
        let r = s.get_row("l", key).await.unwrap();
        assert_eq!(
            (r.status, r.total),
            (RowStatus::Succeeded, attempts),
            "{key}"
        );
    }
    assert_eq!(superseded(s, "b").await[0].2, "dependency_changed");
    assert_eq!(s.summarize("l").await.unwrap().inputs_changed, 0);
}

// Invariant: a row whose dependant is queued or held is not asked again
// (the dependant would be sent with an answer about to change, or queued
// twice): it is skipped, and nothing changes.
#[tokio::test]
async fn a_row_with_a_dependant_queued_or_held_is_skipped() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &priced(true)).await.unwrap();
    s.enroll("l", &[row("a", &[]), row("b", &["a"])])
        .await
        .unwrap();
    run_one(s, "a", answer("a", "a1")).await;
    let queued = ask_again(s, &["a"], false).await;
    assert_eq!((queued.reanswered, queued.skipped), (0, 1));
    let held = claim(s, "l", 10).await.expect("b");
    let again = ask_again(s, &["a"], false).await;
    assert_eq!((again.reanswered, again.skipped), (0, 1));
    assert_eq!(status(s, "a").await, RowStatus::Succeeded);
    assert!(superseded(s, "a").await.is_empty());
    s.report("l", held.claim.token, &[answer("b", "b1")], "w")
        .await
        .unwrap();
    assert_queue_consistent(s).await;
}

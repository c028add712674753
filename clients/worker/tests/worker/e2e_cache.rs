//! The result cache end to end, counted at the emulator: a second ledger of
//! the same requests sends nothing and every row is answered from the
//! cache (recorded as cached, costing nothing); with one variable changed
//! in some rows, exactly those are sent.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_cache:: -- --nocapture`.

use std::time::Duration;

use crate::common;

use common::{
    World, all_rows, create_ledger_with, enroll_documents, exits_ok, summary, test_policy,
};
use gemini_emulator::{FaultPlan, Timing};
use tally_proto::v1 as pb;

const ROWS: usize = 100;
const CHANGED: usize = 10;

fn cached_policy() -> pb::LedgerPolicy {
    pb::LedgerPolicy {
        result_cache: Some(pb::ResultCachePolicy::default()),
        prices: vec![pb::ModelPrice {
            model: "gemini-2.5-flash".into(),
            input_per_million: 1.0,
            output_per_million: 2.0,
            ..Default::default()
        }],
        ..test_policy("gemini-2.5-flash", pb::AttemptBudgets::default())
    }
}

/// Every submission the emulator received, over all keys of `rows`.
fn sent(w: &World, rows: &[pb::Row]) -> usize {
    let stats = w.emulator.stats();
    rows.iter().map(|r| stats.submission_count(&r.key)).sum()
}

/// Invariants: the second ledger's rows reach the provider zero times and
/// all SUCCEED with the first ledger's answers, each by one attempt that
/// names its source and costs nothing; the summary counts the hits and
/// what they saved; a third ledger with `CHANGED` rows' text changed sends
/// exactly those rows, as the dry run said it would (sending and writing
/// nothing itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_requests_are_paid_for_once() {
    let timing = Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_millis(300),
    };
    let w = World::start_policy(
        "first",
        ROWS,
        FaultPlan::default(),
        timing,
        cached_policy(),
        |_| {},
    )
    .await;
    exits_ok(
        w.worker("first", "w1", &["--exit-when-idle"]),
        "the first run",
    )
    .await;
    let first = all_rows(&w.c, "first").await;
    assert!(first.iter().all(|r| r.status() == pb::RowStatus::Succeeded));
    let batches = w.emulator.stats().batches_created;
    let before = sent(&w, &first);
    assert_eq!(before, ROWS);

    create_ledger_with(&w.c, "second", cached_policy()).await;
    enroll_documents(&w.c, "second", "row-", ROWS, "").await;
    exits_ok(
        w.worker("second", "w2", &["--exit-when-idle"]),
        "the second run",
    )
    .await;
    assert_eq!(w.emulator.stats().batches_created, batches, "no batch made");
    assert_eq!(sent(&w, &first), before, "no request sent");
    let second = all_rows(&w.c, "second").await;
    let mut saved = 0.0;
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.key, b.key);
        assert_eq!(b.status(), pb::RowStatus::Succeeded, "{}", b.key);
        assert_eq!(a.result, b.result, "{}", b.key);
        let from = b.history[0]
            .cached
            .as_ref()
            .expect("answered from the cache");
        assert_eq!(b.history.len(), 1);
        assert_eq!(from.row, format!("ledgers/first/rows/{}", a.key));
        assert_eq!(b.history[0].cost_usd, 0.0);
        assert!((from.cost_usd - a.history[0].cost_usd).abs() < 1e-12);
        saved += from.cost_usd;
    }
    let s = summary(&w.c, "second").await;
    let stats = s.result_cache.expect("cache stats");
    assert_eq!((stats.hits, stats.misses), (ROWS as i64, 0));
    assert!((stats.saved_usd - saved).abs() < 1e-9 && saved > 0.0);

    // A third ledger: the first CHANGED documents say something else.
    create_ledger_with(&w.c, "third", cached_policy()).await;
    let rows: Vec<pb::RowInput> = (0..ROWS)
        .map(|i| pb::RowInput {
            key: format!("row-{i:02}"),
            payload: serde_json::json!({"text": if i < CHANGED {
                format!("changed {i}")
            } else {
                format!("document {i}")
            }})
            .to_string(),
            prompt: Some(pb::PromptRef {
                name: "summarize".into(),
                version: "v1".into(),
            }),
            ..Default::default()
        })
        .collect();
    w.c.ledgers
        .clone()
        .enroll_rows(pb::EnrollRowsRequest {
            parent: "ledgers/third".into(),
            rows,
        })
        .await
        .expect("enroll");
    // The dry run first: what the cache would answer, and nothing written.
    let dry = common::worker_command(
        &w.stack.grpc,
        &w.emulator.base_url(),
        "third",
        "w3",
        &["--cache-dry-run"],
    )
    .stdout(std::process::Stdio::piped())
    .output()
    .await
    .expect("the dry run runs");
    assert!(dry.status.success(), "{dry:?}");
    // The answer is the last line (the log goes before it).
    let out = String::from_utf8(dry.stdout).unwrap();
    let last = out.lines().last().unwrap_or_default();
    let said: serde_json::Value = serde_json::from_str(last).expect("JSON");
    assert_eq!(said["rows"], ROWS);
    assert_eq!(said["hits"], ROWS - CHANGED);
    assert_eq!(said["misses"], CHANGED);
    let dry_saved = said["saved_usd"].as_f64().unwrap();
    assert!((dry_saved - saved * (ROWS - CHANGED) as f64 / ROWS as f64).abs() < 1e-9);
    assert!(
        all_rows(&w.c, "third")
            .await
            .iter()
            .all(|r| r.status() == pb::RowStatus::Pending),
        "the dry run settles nothing"
    );
    assert_eq!(sent(&w, &first), before);

    exits_ok(
        w.worker("third", "w3", &["--exit-when-idle"]),
        "the third run",
    )
    .await;
    assert_eq!(
        sent(&w, &first),
        before + CHANGED,
        "only the changed rows sent"
    );
    let third = all_rows(&w.c, "third").await;
    for r in &third {
        assert_eq!(r.status(), pb::RowStatus::Succeeded);
        let n: usize = r.key["row-".len()..].parse().expect("row-N");
        let changed = n < CHANGED;
        assert_eq!(r.history[0].cached.is_none(), changed, "{}", r.key);
    }
    let stats = summary(&w.c, "third").await.result_cache.unwrap();
    assert_eq!(
        (stats.hits, stats.misses),
        ((ROWS - CHANGED) as i64, CHANGED as i64)
    );
    w.stop().await;
}

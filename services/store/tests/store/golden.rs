//! Golden rows against a real PostgreSQL: which jobs carry the set, results
//! recorded once per (job, key) and apart from rows, drift over the window
//! with one alert per model version, and the pause it asks for.

use crate::common;

use common::*;
use serde_json::json;
use tally_core::golden::GoldenPolicy;
use tally_store::Store;
use tally_store::golden::{Answer, GoldenRow, GoldenSet};

fn set(every: u32, pause: bool) -> GoldenSet {
    GoldenSet {
        rows: vec![
            GoldenRow {
                key: "g1".into(),
                payload: r#"{"text": "a"}"#.into(),
                prompt_name: String::new(),
                prompt_version: String::new(),
                expected: json!({"label": "pos", "score": 3}),
                fields: vec!["/label".into()],
            },
            GoldenRow {
                key: "g2".into(),
                payload: r#"{"text": "b"}"#.into(),
                prompt_name: String::new(),
                prompt_version: String::new(),
                expected: json!({"label": "neg"}),
                fields: Vec::new(),
            },
        ],
        policy: GoldenPolicy {
            every_nth_job: every,
            window: 4,
            max_mismatch_fraction: 0.5,
            pause_on_drift: pause,
        },
    }
}

fn answer(key: &str, text: &str, version: &str) -> Answer {
    Answer {
        key: key.into(),
        text: text.into(),
        model_version: version.into(),
        error: String::new(),
    }
}

async fn job(s: &Store) -> (String, uuid::Uuid, usize) {
    let g = claim(s, "l", 1).await.unwrap();
    let j = s.create_job("l", g.claim.token, "w").await.unwrap();
    (j.public_id, g.claim.token, j.golden.len())
}

/// Invariants: the first job after the set is set and every Nth carry it;
/// a repeated report records nothing more; rows and their counts are
/// untouched; drift needs more than the fraction of a full window; one
/// drift per model version pauses the ledger (reason model_drift) once.
#[tokio::test]
async fn golden_rows_ride_along_and_catch_drift() {
    let env = env().await;
    let s = &env.store;
    let mut p = fast_policy();
    p.max_active_jobs = 10;
    s.create_ledger("l", &p).await.unwrap();
    let rows: Vec<_> = (0..10).map(|i| row(&format!("r{i}"), &[])).collect();
    s.enroll("l", &rows).await.unwrap();
    s.set_golden("l", &set(3, true)).await.unwrap();

    let mut carried = Vec::new();
    let mut jobs = Vec::new();
    for _ in 0..6 {
        let (id, token, golden) = job(s).await;
        carried.push(golden);
        jobs.push((id, token));
    }
    assert_eq!(carried, [2, 0, 2, 0, 0, 2], "jobs 1, 3 and 6 carry the set");
    // CreateJob again (its answer lost) answers the same job and its rows.
    let again = s.create_job("l", jobs[2].1, "w").await.unwrap();
    assert_eq!(
        (again.public_id.as_str(), again.golden.len()),
        (jobs[2].0.as_str(), 2)
    );
    let again = s.create_job("l", jobs[1].1, "w").await.unwrap();
    assert!(again.golden.is_empty());

    // Today's answers match (g1 by its label, g2 whole).
    let today = [
        answer("g1", r#"{"label": "pos", "score": 5}"#, "m-1"),
        answer("g2", r#"{ "label": "neg" }"#, "m-1"),
    ];
    let (id, token) = &jobs[0];
    let r = s.report_golden("l", id, *token, &today).await.unwrap();
    assert_eq!((r.matched, r.mismatched), (2, 0));
    let again = s.report_golden("l", id, *token, &today).await.unwrap();
    assert_eq!((again.matched, again.mismatched), (0, 0), "recorded once");
    assert!(!again.drift.drift.drifted);

    // The model changes: 2 of 4 is not above half; 4 of 4 is drift.
    let changed = [
        answer("g1", r#"{"label": "neg"}"#, "m-2"),
        answer("g2", "not json", "m-2"),
        answer("unknown", "{}", "m-2"),
    ];
    let (id, token) = &jobs[2];
    let r = s.report_golden("l", id, *token, &changed).await.unwrap();
    assert_eq!((r.matched, r.mismatched), (0, 2), "unknown keys ignored");
    assert!(!r.drift.drift.drifted);
    assert!(s.get_ledger("l").await.unwrap().pause.is_none());
    let (id, token) = &jobs[5];
    let r = s.report_golden("l", id, *token, &changed).await.unwrap();
    assert!(r.drift.drift.drifted);
    assert_eq!(r.drift.model_version, "m-2");
    let fields: Vec<_> = r
        .drift
        .drift
        .fields
        .iter()
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(fields, ["", "/label"]);
    let pause = s.get_ledger("l").await.unwrap().pause.expect("paused");
    assert_eq!(pause.reason, tally_core::pause::PauseReason::ModelDrift);
    assert!(pause.message.contains("m-2"), "{}", pause.message);

    // Golden answers are not rows.
    let summary = s.summarize("l").await.unwrap();
    assert_eq!(summary.counts.total(), 10);
    let (got, drift) = s.get_golden("l").await.unwrap().unwrap();
    assert_eq!(got.rows.len(), 2);
    assert_eq!((drift.drift.results, drift.drift.mismatches), (4, 4));
    assert_queue_consistent(s).await;
}

/// Invariant: a ledger keeps only its newest `results_kept(window)` golden
/// results; older ones are deleted as new ones are recorded, and the drift
/// still reads the newest window.
#[tokio::test]
async fn golden_results_are_trimmed_to_twice_the_window() {
    let env = env().await;
    let s = &env.store;
    let mut p = fast_policy();
    p.max_active_jobs = 10;
    s.create_ledger("l", &p).await.unwrap();
    let rows: Vec<_> = (0..10).map(|i| row(&format!("r{i}"), &[])).collect();
    s.enroll("l", &rows).await.unwrap();
    // Every job carries the set; window 4, so 8 results are kept.
    s.set_golden("l", &set(1, false)).await.unwrap();
    let answers = [
        answer("g1", r#"{"label": "pos"}"#, "m-1"),
        answer("g2", r#"{"label": "neg"}"#, "m-1"),
    ];
    for _ in 0..6 {
        let (id, token, golden) = job(s).await;
        assert_eq!(golden, 2);
        s.report_golden("l", &id, token, &answers).await.unwrap();
    }
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM golden_results")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(kept, tally_core::golden::results_kept(4));
    assert_eq!(kept, 8, "12 recorded, the newest 8 kept");
    let (_, drift) = s.get_golden("l").await.unwrap().unwrap();
    assert_eq!(drift.drift.results, 4);
}

/// Invariant: the pause a drift asks for commits with the results and the
/// alert mark that found it. When the pause cannot be written, the report
/// keeps nothing, and the same report again records the drift and pauses
/// (were the results kept without the pause, no later report would pause
/// for that model version: its alert mark would be set already).
#[tokio::test]
async fn a_drift_pause_commits_with_the_results_that_found_it() {
    let env = env().await;
    let s = &env.store;
    let mut p = fast_policy();
    p.max_active_jobs = 10;
    s.create_ledger("l", &p).await.unwrap();
    let rows: Vec<_> = (0..4).map(|i| row(&format!("r{i}"), &[])).collect();
    s.enroll("l", &rows).await.unwrap();
    s.set_golden("l", &set(1, true)).await.unwrap();
    let (id1, token1, _) = job(s).await;
    let (id2, token2, _) = job(s).await;
    let wrong = [
        answer("g1", r#"{"label": "neg"}"#, "m-2"),
        answer("g2", r#"{"label": "pos"}"#, "m-2"),
    ];
    s.report_golden("l", &id1, token1, &wrong).await.unwrap();
    assert!(s.get_ledger("l").await.unwrap().pause.is_none());

    // The second job's answers fill the window (4 of 4 wrong): drift. The
    // pause's write is refused from outside.
    for sql in [
        "CREATE FUNCTION refuse_pause() RETURNS trigger LANGUAGE plpgsql AS
         $$ BEGIN RAISE EXCEPTION 'pause refused by the test'; END $$",
        "CREATE TRIGGER refuse_pause BEFORE UPDATE OF pause_reason ON ledgers
         FOR EACH ROW EXECUTE FUNCTION refuse_pause()",
    ] {
        sqlx::query(sql).execute(s.pool()).await.unwrap();
    }
    s.report_golden("l", &id2, token2, &wrong)
        .await
        .expect_err("the pause could not be written");
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM golden_results")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(kept, 2, "only the first job's results are kept");
    let (_, drift) = s.get_golden("l").await.unwrap().unwrap();
    assert!(!drift.drift.drifted);
    assert!(s.get_ledger("l").await.unwrap().pause.is_none());

    sqlx::query("DROP TRIGGER refuse_pause ON ledgers")
        .execute(s.pool())
        .await
        .unwrap();
    let r = s.report_golden("l", &id2, token2, &wrong).await.unwrap();
    assert_eq!((r.matched, r.mismatched), (0, 2));
    assert!(r.drift.drift.drifted);
    let pause = s.get_ledger("l").await.unwrap().pause.expect("paused");
    assert_eq!(pause.reason, tally_core::pause::PauseReason::ModelDrift);
}

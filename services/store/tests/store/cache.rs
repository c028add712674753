//! The result cache against a real PostgreSQL: answers served only to the
//! same request, within their scope, their age, their model's version and
//! before no drift; a hit settles its row like a report, recorded as cached
//! and costing nothing.

use crate::common;

use common::*;
use serde_json::json;
use tally_core::cache::{CacheScope, ResultCache};
use tally_core::golden::GoldenPolicy;
use tally_core::price::Price;
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::cache::Lookup;
use tally_store::golden::{Answer, GoldenRow, GoldenSet};
use tally_store::types::{ReportItem, RowFilter, Verdict};
use uuid::Uuid;

const MODEL: &str = "gemini-2.5-flash";

fn cached_policy(scope: CacheScope) -> tally_core::policy::Policy {
    let mut p = fast_policy();
    p.model = MODEL.into();
    p.max_active_jobs = 10;
    p.prices = vec![Price {
        model: MODEL.into(),
        input_per_million: 1.0,
        output_per_million: 2.0,
        cached_input_per_million: 0.0,
        thinking_per_million: 0.0,
        lane: Default::default(),
    }];
    p.result_cache = Some(ResultCache {
        scope,
        ..Default::default()
    });
    p
}

/// A ledger of rows `r0`…`r{n-1}`, all claimed: the claim's token.
async fn claimed(s: &Store, ledger: &str, scope: CacheScope, n: usize) -> Uuid {
    s.create_ledger(ledger, &cached_policy(scope))
        .await
        .unwrap();
    let rows: Vec<_> = (0..n).map(|i| row(&format!("r{i}"), &[])).collect();
    s.enroll(ledger, &rows).await.unwrap();
    claim(s, ledger, n as i64).await.unwrap().claim.token
}

fn lookups(requests: &[&str]) -> Vec<Lookup> {
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| Lookup {
            key: format!("r{i}"),
            request: r.to_string(),
        })
        .collect()
}

fn answered(key: &str, version: &str) -> ReportItem {
    ReportItem {
        model_version: Some(version.into()),
        ..success(key, 1000)
    }
}

/// Looks `requests` up for the claim's rows, then reports every row that
/// missed as answered by `version`: the rows that hit.
async fn run(
    s: &Store,
    ledger: &str,
    token: Uuid,
    team: &str,
    requests: &[&str],
    version: &str,
) -> Vec<String> {
    let got = s
        .settle_from_cache(ledger, token, team, &lookups(requests), "w")
        .await
        .unwrap();
    let missed: Vec<ReportItem> = (0..requests.len())
        .map(|i| format!("r{i}"))
        .filter(|k| !got.hits.contains(k))
        .map(|k| answered(&k, version))
        .collect();
    if !missed.is_empty() {
        let summary = s.report(ledger, token, &missed, "w").await.unwrap();
        assert!(
            summary
                .verdicts
                .iter()
                .all(|v| v.verdict == Verdict::Succeeded)
        );
    }
    assert_eq!(got.misses as usize, missed.len());
    got.hits
}

/// Invariants: a second ledger with the same requests is answered from the
/// cache without a report of its own: each hit is SUCCEEDED with the first
/// answer, one attempt recorded as cached (its source, what it cost then)
/// with no usage and no cost; another request, even for the same key, is a
/// miss; the stored request is compared, not only its hash; the summary
/// counts hits, misses and what they saved.
#[tokio::test]
async fn the_same_request_is_answered_once() {
    let env = env().await;
    let s = &env.store;
    let requests = ["q0", "q1", "q2", "q3"];
    let a = claimed(s, "a", CacheScope::Team, 4).await;
    assert!(run(s, "a", a, "team-1", &requests, "v1").await.is_empty());

    let b = claimed(s, "b", CacheScope::Team, 4).await;
    let hits = run(s, "b", b, "team-1", &["q0", "q1", "q2", "other"], "v1").await;
    assert_eq!(hits, ["r0", "r1", "r2"]);
    let r0 = s.get_row("b", "r0").await.unwrap();
    assert_eq!(r0.status, RowStatus::Succeeded);
    assert_eq!(r0.result, s.get_row("a", "r0").await.unwrap().result);
    assert_eq!(r0.history.len(), 1);
    let attempt = &r0.history[0];
    let from = attempt.cached.as_ref().expect("recorded as cached");
    assert_eq!(from.row, "ledgers/a/rows/r0");
    assert_eq!(from.attempt, 1);
    assert_eq!(from.model_version, "v1");
    // 1000 input and 500 output tokens at $1 and $2 a million.
    assert!((from.cost_usd - 0.002).abs() < 1e-12, "{}", from.cost_usd);
    assert_eq!(attempt.cost_usd, 0.0);
    assert!(attempt.usage.is_zero());
    let r3 = s.get_row("b", "r3").await.unwrap();
    assert!(r3.history[0].cached.is_none(), "another request was sent");

    let stats = s.cache_stats("b").await.unwrap();
    assert_eq!((stats.hits, stats.misses, stats.stale), (3, 1, 0));
    assert!((stats.saved_usd - 0.006).abs() < 1e-12);
    assert_eq!(s.cache_stats("a").await.unwrap().misses, 4);

    // The stored text is what is compared: an entry whose request is not the
    // one looked up is never served under the same hash.
    let pool = sqlx::PgPool::connect(env.url()).await.unwrap();
    sqlx::query("UPDATE result_cache SET request = 'tampered' WHERE request = 'q0'")
        .execute(&pool)
        .await
        .unwrap();
    let c = claimed(s, "c", CacheScope::Team, 2).await;
    let hits = run(s, "c", c, "team-1", &["q0", "q1"], "v1").await;
    assert_eq!(hits, ["r1"]);
}

/// Invariants: a team-scoped ledger is never served another team's answers;
/// answers cross teams only when both the answering and the asking ledger
/// share.
#[tokio::test]
async fn teams_share_only_by_consent_of_both() {
    let env = env().await;
    let s = &env.store;
    let mine = claimed(s, "mine", CacheScope::Team, 1).await;
    run(s, "mine", mine, "team-1", &["private"], "v1").await;
    let shared = claimed(s, "shared", CacheScope::Shared, 1).await;
    run(s, "shared", shared, "team-1", &["public"], "v1").await;

    let other = claimed(s, "other", CacheScope::Team, 2).await;
    let hits = run(s, "other", other, "team-2", &["private", "public"], "v1").await;
    assert!(
        hits.is_empty(),
        "a team-scoped ledger of another team: {hits:?}"
    );
    // Team-3 shares: it is served what team-1 shared, not what team-1 kept
    // to itself nor what team-2 answered just above for itself.
    let sharing = claimed(s, "sharing", CacheScope::Shared, 2).await;
    let hits = run(
        s,
        "sharing",
        sharing,
        "team-3",
        &["private", "public"],
        "v1",
    )
    .await;
    assert_eq!(hits, ["r1"], "both ledgers share");
    let late = claimed(s, "late", CacheScope::Team, 1).await;
    let hits = run(s, "late", late, "team-4", &["public"], "v1").await;
    assert!(
        hits.is_empty(),
        "a team-scoped ledger is served no shared answer"
    );
}

/// Invariants: once the provider reports another version of the model, the
/// answers of the old one are misses; once golden rows see the model drift,
/// answers cached before are not served, and the rows served them earlier
/// are counted and listed.
#[tokio::test]
async fn new_versions_and_drift_are_misses() {
    let env = env().await;
    let s = &env.store;
    let a = claimed(s, "a", CacheScope::Team, 2).await;
    run(s, "a", a, "t", &["q0", "q1"], "v1").await;
    let b = claimed(s, "b", CacheScope::Team, 2).await;
    assert_eq!(run(s, "b", b, "t", &["q0", "q1"], "v1").await.len(), 2);

    // Another row answered by v2: v1's answers are no longer current.
    let c = claimed(s, "c", CacheScope::Team, 1).await;
    run(s, "c", c, "t", &["fresh"], "v2").await;
    let d = claimed(s, "d", CacheScope::Team, 2).await;
    assert!(run(s, "d", d, "t", &["q0", "fresh"], "v2").await == ["r1"]);

    // Golden rows of ledger `g` on the same model see it drift.
    s.create_ledger("g", &cached_policy(CacheScope::Team))
        .await
        .unwrap();
    s.enroll("g", &[row("x", &[])]).await.unwrap();
    let set = GoldenSet {
        rows: vec![GoldenRow {
            key: "g1".into(),
            payload: r#"{"text": "a"}"#.into(),
            prompt_name: String::new(),
            prompt_version: String::new(),
            expected: json!({"label": "pos"}),
            fields: Vec::new(),
        }],
        policy: GoldenPolicy {
            every_nth_job: 1,
            window: 1,
            max_mismatch_fraction: 0.5,
            pause_on_drift: false,
        },
    };
    s.set_golden("g", &set).await.unwrap();
    let grant = claim(s, "g", 1).await.unwrap();
    let job = s.create_job("g", grant.claim.token, "w").await.unwrap();
    let drift = s
        .report_golden(
            "g",
            &job.public_id,
            grant.claim.token,
            &[Answer {
                key: "g1".into(),
                text: r#"{"label": "neg"}"#.into(),
                model_version: "v2".into(),
                error: String::new(),
            }],
        )
        .await
        .unwrap();
    assert!(drift.drift.drift.drifted);

    // `fresh` was cached before the drift: a miss now.
    let e = claimed(s, "e", CacheScope::Team, 1).await;
    assert!(run(s, "e", e, "t", &["fresh"], "v2").await.is_empty());
    // Answers cached after the drift are served again.
    let f = claimed(s, "f", CacheScope::Team, 1).await;
    assert_eq!(run(s, "f", f, "t", &["fresh"], "v2").await, ["r0"]);

    // Ledger b's two hits were answers from before the drift.
    assert_eq!(s.cache_stats("b").await.unwrap().stale, 2);
    let stale = RowFilter {
        stale_cache: true,
        ..Default::default()
    };
    let listed = s.list_rows("b", &stale, None, 10, None).await.unwrap();
    let keys: Vec<&str> = listed.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["r0", "r1"]);
    assert!(
        s.list_rows("f", &stale, None, 10, None)
            .await
            .unwrap()
            .rows
            .is_empty()
    );
}

/// Invariants: a ledger without the cache refuses lookups (and writes
/// nothing); a lookup for rows the claim does not hold settles none; a
/// lookup retried (its answer lost) answers the same hits again, so its
/// rows are never sent as well.
#[tokio::test]
async fn lookups_need_the_cache_and_the_rows() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("off", &fast_policy()).await.unwrap();
    s.enroll("off", &[row("r0", &[])]).await.unwrap();
    let token = claim(s, "off", 1).await.unwrap().claim.token;
    let err = s
        .settle_from_cache("off", token, "t", &lookups(&["q0"]), "w")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("result_cache"), "{err}");

    let a = claimed(s, "a", CacheScope::Team, 1).await;
    run(s, "a", a, "t", &["q0"], "v1").await;
    let b = claimed(s, "b", CacheScope::Team, 1).await;
    // A claim that is not b's holds none of b's rows.
    let got = s
        .settle_from_cache("b", Uuid::new_v4(), "t", &lookups(&["q0"]), "w")
        .await;
    assert!(got.is_err() || got.unwrap().hits.is_empty());
    assert_eq!(
        s.get_row("b", "r0").await.unwrap().status,
        RowStatus::Running
    );
    assert_eq!(run(s, "b", b, "t", &["q0"], "v1").await, ["r0"]);
    let again = s
        .settle_from_cache("b", b, "t", &lookups(&["q0"]), "w")
        .await
        .unwrap();
    assert_eq!(again.hits, ["r0"]);
    assert_eq!(s.get_row("b", "r0").await.unwrap().history.len(), 1);
}

/// Invariants: the cache is kept within its bounds, the oldest answers
/// going first: past the most entries, past the most bytes, past the
/// oldest age; within them nothing is deleted.
#[tokio::test]
async fn the_cache_is_bounded_oldest_first() {
    use std::time::Duration;
    use tally_store::cache::Bounds;
    let env = env().await;
    let s = &env.store;
    let a = claimed(s, "a", CacheScope::Team, 4).await;
    for (i, q) in ["q0", "q1", "q2", "q3"].iter().enumerate() {
        // One answer after the other: their answer times are in this order.
        let got = s
            .settle_from_cache(
                "a",
                a,
                "t",
                &[Lookup {
                    key: format!("r{i}"),
                    request: q.to_string(),
                }],
                "w",
            )
            .await
            .unwrap();
        assert_eq!(got.misses, 1);
        s.report("a", a, &[answered(&format!("r{i}"), "v1")], "w")
            .await
            .unwrap();
    }
    let size = s.cache_size().await.unwrap();
    assert_eq!(size.entries, 4);
    let day = Duration::from_secs(86400);
    let roomy = Bounds {
        max_age: day,
        max_entries: 4,
        max_bytes: size.bytes,
    };
    assert_eq!(s.purge_cache(&roomy, 100).await.unwrap(), 0);
    let three = Bounds {
        max_entries: 3,
        ..roomy
    };
    assert_eq!(s.purge_cache(&three, 100).await.unwrap(), 1);
    let pool = sqlx::PgPool::connect(env.url()).await.unwrap();
    let left = |pool: sqlx::PgPool| async move {
        let r: Vec<(String,)> =
            sqlx::query_as("SELECT request FROM result_cache ORDER BY answer_time")
                .fetch_all(&pool)
                .await
                .unwrap();
        r.into_iter().map(|(q,)| q).collect::<Vec<_>>()
    };
    assert_eq!(left(pool.clone()).await, ["q1", "q2", "q3"]);
    let size = s.cache_size().await.unwrap();
    let smaller = Bounds {
        max_bytes: size.bytes - 1,
        ..roomy
    };
    assert_eq!(s.purge_cache(&smaller, 100).await.unwrap(), 1);
    assert_eq!(left(pool.clone()).await, ["q2", "q3"]);
    let none = Bounds {
        max_age: Duration::ZERO,
        ..roomy
    };
    assert_eq!(
        s.purge_cache(&none, 1).await.unwrap(),
        1,
        "a batch at a time"
    );
    assert_eq!(s.purge_cache(&none, 100).await.unwrap(), 1);
    assert_eq!(s.cache_size().await.unwrap().entries, 0);
}

/// Invariant: rows of one report that made the same request keep one
/// answer (the report is not refused for it), which later rows are served.
#[tokio::test]
async fn rows_with_one_request_keep_one_answer() {
    let env = env().await;
    let s = &env.store;
    let a = claimed(s, "a", CacheScope::Team, 3).await;
    assert!(
        run(s, "a", a, "t", &["same", "same", "same"], "v1")
            .await
            .is_empty()
    );
    assert_eq!(s.cache_size().await.unwrap().entries, 1);
    let b = claimed(s, "b", CacheScope::Team, 2).await;
    assert_eq!(
        run(s, "b", b, "t", &["same", "same"], "v1").await,
        ["r0", "r1"]
    );
}

/// Invariant (issue 49): a row asked again is never answered from the
/// cache (it wants a new answer, not the one it had), while another row
/// of the same ledger with the same request still is.
#[tokio::test]
async fn a_row_asked_again_is_not_answered_from_the_cache() {
    let env = env().await;
    let s = &env.store;
    let a = claimed(s, "a", CacheScope::Team, 2).await;
    assert!(
        run(s, "a", a, "team-1", &["q0", "q1"], "v1")
            .await
            .is_empty()
    );
    let again = s
        .redrive(
            "a",
            &tally_store::types::RedriveTarget::Keys(vec!["r0".into()]),
            false,
            true,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!(again.reanswered, 1);
    s.enroll("a", &[row("r2", &[])]).await.unwrap();
    let token = claim(s, "a", 10).await.unwrap().claim.token;
    // r0 asks q0 again; r2 asks q1, which r1 was answered before.
    let lookups = vec![
        Lookup {
            key: "r0".into(),
            request: "q0".into(),
        },
        Lookup {
            key: "r2".into(),
            request: "q1".into(),
        },
    ];
    let got = s
        .settle_from_cache("a", token, "team-1", &lookups, "w")
        .await
        .unwrap();
    assert_eq!(got.hits, ["r2"], "r0 is asked again, not served");
    assert_eq!(got.misses, 1);
}

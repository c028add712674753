//! The server's ANALYZE of a fast-growing `rows` table: past 32 MiB, only
//! the columns plans find rows by, and still the table's size.

use crate::common;

use common::*;
use tally_store::types::NewRow;

/// Enrolls `n` rows of about 1.2 kB (two to a page at fill factor 40)
/// into a new ledger `name`, 1,000 a call.
async fn grow(env: &Env, name: &str, n: usize) {
    env.store.create_ledger(name, &fast_policy()).await.unwrap();
    let text = "0123456789abcdef".repeat(75);
    let rows: Vec<NewRow> = (0..n)
        .map(|i| {
            let key = format!("{name}-{i:06}");
            row_with(&key, &format!("{{\"text\": \"{key} {text}\"}}"), &[])
        })
        .collect();
    for chunk in rows.chunks(1_000) {
        env.store.enroll(name, chunk).await.unwrap();
    }
    // The statistics collector hears of the inserts within seconds (each
    // backend reports at most once a second); whether the table is stale
    // is decided from it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stats = env.store.hot_table_stats().await.unwrap();
        if stats
            .iter()
            .any(|t| t.table == "rows" && t.live >= n as i64)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the statistics collector never counted {n} rows: {stats:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The columns of `rows` that have statistics.
async fn analyzed_columns(env: &Env) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT attname::text FROM pg_stats
         WHERE schemaname = current_schema() AND tablename = 'rows' ORDER BY 1",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap()
}

/// Whether the `(ledger_id, status)` list `/metrics` reads has been built.
async fn status_list_built(env: &Env) -> bool {
    sqlx::query_scalar(
        "SELECT count(*) > 0 FROM pg_stats_ext
         WHERE schemaname = current_schema() AND statistics_name = 'rows_ledger_status'
           AND most_common_vals IS NOT NULL",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap()
}

/// A database whose `rows` grew by `n` rows and that the store then
/// analyzed.
async fn grown_and_analyzed(name: &str, n: usize) -> Env {
    let env = env().await;
    // Autovacuum analyzing first would leave the store nothing to do.
    sqlx::query("ALTER TABLE rows SET (autovacuum_enabled = false)")
        .execute(env.store.pool())
        .await
        .unwrap();
    grow(&env, name, n).await;
    assert!(env.store.analyze("rows").await.unwrap(), "analyzed");
    env
}

/// A `rows` table grown past 4,096 pages (10,000 rows of 1.2 kB) is
/// analyzed for the columns its statements find rows by (not the payloads,
/// results or the `/metrics` list, which a whole ANALYZE samples up to
/// 300,000 rows for), and the planner's size of it is current afterwards.
#[tokio::test]
async fn a_large_rows_table_is_analyzed_for_its_plans_only() {
    let env = grown_and_analyzed("big", 10_000).await;
    let stats = env.store.hot_table_stats().await.unwrap();
    let rows = stats.iter().find(|t| t.table == "rows").unwrap();
    assert!(
        rows.estimated >= 10_000 && rows.pages > 4_096 && !rows.stale(),
        "the planner's size is the table's: {rows:?}"
    );
    assert_eq!(analyzed_columns(&env).await, ["id", "key", "ledger_id"]);
    assert!(!status_list_built(&env).await, "left to autovacuum");
}

/// A young `rows` table is analyzed whole: the `/metrics` list is current
/// while the table is small enough to read in a few tenths of a second.
#[tokio::test]
async fn a_young_rows_table_is_analyzed_whole() {
    let env = grown_and_analyzed("small", 2_000).await;
    let columns = analyzed_columns(&env).await;
    assert!(columns.iter().any(|c| c == "payload"), "{columns:?}");
    assert!(status_list_built(&env).await);
}

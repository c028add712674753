//! Bytes on disk per row: a ledger of `rows` rows enrolled and run to its
//! end (claim 500 + report until nothing is claimable, the bench's mix: 90%
//! answered with a ~200-byte result, 7% retried, 3% failed for good), then
//! vacuumed; every relation of tally's schema (heap with its free-space and
//! visibility maps, TOAST, indexes) against the payload and result bytes the
//! ledger holds. The raw table gets the same rows and the same loop, for
//! comparison. It runs first, on the empty database, so every byte measured
//! is this phase's.

use crate::grpc;
use crate::raw;
use crate::stats::Line;
use crate::workload;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

/// One relation's bytes on disk.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Relation {
    name: String,
    heap: i64,
    toast: i64,
    indexes: i64,
}

impl Relation {
    fn total(&self) -> i64 {
        self.heap + self.toast + self.indexes
    }
}

/// Every table of the current schema, largest first.
async fn relations(pool: &PgPool) -> anyhow::Result<Vec<Relation>> {
    Ok(sqlx::query_as(
        "SELECT c.relname::text AS name,
                pg_table_size(c.oid) - coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS heap,
                coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast,
                pg_indexes_size(c.oid) AS indexes
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
          ORDER BY pg_total_relation_size(c.oid) DESC",
    )
    .fetch_all(pool)
    .await?)
}

/// The payload and result bytes `table` holds (columns `payload`, `result`).
async fn content_bytes(pool: &PgPool, table: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT coalesce(sum(octet_length(payload) + coalesce(octet_length(result), 0)), 0)::bigint
           FROM {table}"
    )))
    .fetch_one(pool)
    .await?)
}

/// Runs the phase: `rows` rows through tally and through the raw table.
pub async fn run(
    addr: &str,
    pool: &PgPool,
    rows: u64,
    clients: usize,
) -> anyhow::Result<Vec<Line>> {
    const LEDGER: &str = "disk";
    let keys = Arc::new(workload::keys(LEDGER, 0..rows));
    let mut client = grpc::connect(addr).await?;
    grpc::create_ledger(&mut client, LEDGER).await?;
    grpc::enroll(addr, LEDGER, keys.clone(), clients, 1000).await?;
    // Until nothing is claimable: retries are claimable at once.
    let forever = Duration::from_secs(24 * 3600);
    grpc::claim_report(addr, LEDGER, 2, 500, forever, false).await?;
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    let tally: Vec<Relation> = relations(pool).await?;
    let tally_content = content_bytes(pool, "rows").await?;

    raw::setup(pool, LEDGER).await?;
    raw::enroll(pool, LEDGER, keys, clients, 1000).await?;
    raw::claim_report(pool, LEDGER, 2, 500, forever).await?;
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    let raw_table = raw::table(LEDGER);
    let raw_content = content_bytes(pool, &raw_table).await?;
    let all = relations(pool).await?;
    let raw_bytes: i64 = all
        .iter()
        .filter(|r| r.name == raw_table)
        .map(Relation::total)
        .sum();

    let tally_bytes: i64 = tally.iter().map(Relation::total).sum();
    let per_row = |bytes: i64| format!("{:.0} B/row", bytes as f64 / rows.max(1) as f64);
    eprintln!("disk: {rows} rows; tally's relations over 1 MiB (heap / TOAST / indexes):");
    for r in tally.iter().filter(|r| r.total() >= 1 << 20) {
        eprintln!(
            "    {:<22} {:>8.1} MiB  ({:.1} / {:.1} / {:.1}), {}",
            r.name,
            mib(r.total()),
            mib(r.heap),
            mib(r.toast),
            mib(r.indexes),
            per_row(r.total())
        );
    }
    eprintln!(
        "    payload + result bytes: tally {:.1} MiB, raw {:.1} MiB",
        mib(tally_content),
        mib(raw_content)
    );
    Ok(vec![
        Line {
            workload: format!("disk per row at {rows} rows, vs payload + result bytes"),
            tally: per_row(tally_bytes),
            baseline: per_row(tally_content),
            ratio: Some(tally_bytes as f64 / tally_content.max(1) as f64),
        },
        Line {
            workload: format!("raw table's disk per row at {rows} rows, vs payload + result bytes"),
            tally: per_row(raw_bytes),
            baseline: per_row(raw_content),
            ratio: Some(raw_bytes as f64 / raw_content.max(1) as f64),
        },
    ])
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

//! Keeping the runnable queue's head clean, and the planner's statistics of
//! the tables that grow fastest current.
//!
//! Every claim deletes entries at the head of `runnable_order`, and each
//! claim walks past the dead index entries until VACUUM removes them
//! (DESIGN.md section 10): the server vacuums that narrow table when the
//! statistics say the dead entries are piling up.
//!
//! A table that grows by a row a claim, report or enrollment (`rows`,
//! `claims`, `attempts`, `jobs`) can be far larger than its last ANALYZE
//! says, and a plan made for a few pages then reads all of it. So the
//! server analyzes a hot table once it holds twice the live rows its
//! statistics say (and at least [`MIN_GROWTH`] more) — growth, not changes
//! — and only while it is young (under [`LARGE`] rows; past that it is
//! autovacuum's). Of a `rows` table past [`WHOLE_PAGES`] (by its size on
//! disk, not the lagging row count) only the columns plans find rows by
//! ([`ROWS_PLAN_COLUMNS`]) are analyzed: that sets the table's size, which
//! is what the plans needed, at a fraction of a whole ANALYZE's cost.
//! PostgreSQL's WARNING that the `/metrics` statistics object could not be
//! computed then is kept from the client. Measurements and history: the
//! bench README ("The statistics of fast-growing tables").

use crate::{Result, Store};

/// Advisory lock id: one replica vacuums at a time, the others skip.
const VACUUM_LOCK: i64 = 0x7461_6c6c_7976_6163; // "tallyvac"

/// Advisory lock id: one replica analyzes at a time, the others skip.
const ANALYZE_LOCK: i64 = 0x7461_6c6c_7961_6e6c; // "tallyanl"

/// The tables whose statistics are kept current, as `pg_stat_user_tables`
/// names them.
pub const HOT_TABLES: [&str; 6] = [
    "rows",
    "claims",
    "attempts",
    "jobs",
    "result_cache",
    "cache_requests",
];

/// Rows of growth below which a table is not analyzed (its plans are
/// cheap whatever the planner thinks).
pub const MIN_GROWTH: i64 = 1_000;

/// Statistics of at least this many rows are left to autovacuum (see the
/// module's documentation).
pub const LARGE: i64 = 100_000;

/// Pages (32 MiB) past which the server analyzes only
/// [`ROWS_PLAN_COLUMNS`] of `rows`: a whole ANALYZE of a table this size
/// reads every page of it, a few tenths of a second.
pub const WHOLE_PAGES: i64 = 4_096;

/// The columns of `rows` its statements find rows by (the key, the primary
/// key, the ledger): what the planner needs while the table grows.
pub const ROWS_PLAN_COLUMNS: &str = "id, ledger_id, key";

/// The columns of `result_cache` its lookups find answers by (its wide
/// request and answer texts are only compared, never planned on).
pub const CACHE_PLAN_COLUMNS: &str = "hash, team, answer_time";

/// A hot table as the statistics collector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableStats {
    /// One of [`HOT_TABLES`].
    pub table: &'static str,
    /// Rows at its last ANALYZE or VACUUM (0 or less: never, or empty then).
    pub estimated: i64,
    /// Live rows now, as the statistics collector counts them.
    pub live: i64,
    /// Its heap's pages on disk now.
    pub pages: i64,
}

impl TableStats {
    /// Live rows beyond what the planner believes the table holds.
    pub fn growth(&self) -> i64 {
        self.live - self.estimated.max(0)
    }

    /// Worth analyzing: grown by at least [`MIN_GROWTH`] rows and to twice
    /// what the planner believes it holds, which is under [`LARGE`].
    pub fn stale(&self) -> bool {
        let growth = self.growth();
        self.estimated < LARGE && growth >= MIN_GROWTH && growth >= self.estimated.max(0)
    }

    /// The ANALYZE statement for it: of `rows` past [`WHOLE_PAGES`], only
    /// [`ROWS_PLAN_COLUMNS`] (see the module's documentation); of
    /// `result_cache`, only [`CACHE_PLAN_COLUMNS`].
    pub fn analyze_statement(&self) -> String {
        if self.table == "rows" && self.pages > WHOLE_PAGES {
            format!("ANALYZE (SKIP_LOCKED) rows ({ROWS_PLAN_COLUMNS})")
        } else if self.table == "result_cache" {
            format!("ANALYZE (SKIP_LOCKED) result_cache ({CACHE_PLAN_COLUMNS})")
        } else {
            format!("ANALYZE (SKIP_LOCKED) {}", self.table)
        }
    }
}

/// What the queue looks like to the statistics collector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub live: i64,
    pub dead: i64,
}

impl QueueStats {
    /// Worth vacuuming: at least `min_dead` dead entries and at least a
    /// tenth as many dead as live ones.
    pub fn needs_vacuum(&self, min_dead: i64) -> bool {
        self.dead >= min_dead && self.dead * 10 >= self.live
    }
}

impl Store {
    pub async fn queue_stats(&self) -> Result<QueueStats> {
        let (live, dead): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'runnable'",
        )
        .fetch_optional(&self.pool)
        .await?
        .unwrap_or((None, None));
        Ok(QueueStats {
            live: live.unwrap_or(0),
            dead: dead.unwrap_or(0),
        })
    }

    /// Vacuums the runnable queue unless another replica is doing it.
    /// Returns whether this call vacuumed.
    pub async fn vacuum_queue(&self) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(VACUUM_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        if !got {
            return Ok(false);
        }
        let vacuumed = sqlx::query("VACUUM (SKIP_LOCKED) runnable")
            .execute(&mut *conn)
            .await;
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(VACUUM_LOCK)
            .execute(&mut *conn)
            .await?;
        vacuumed?;
        Ok(true)
    }

    /// The hot tables' sizes as the planner believes them, and their live
    /// rows now; only tables this role owns (the ones it may analyze).
    pub async fn hot_table_stats(&self) -> Result<Vec<TableStats>> {
        hot_table_stats(&self.pool, &HOT_TABLES[..]).await
    }

    /// Analyzes `table` (one of [`HOT_TABLES`]) if its statistics are still
    /// stale, unless another replica is analyzing or something else holds
    /// the table's ANALYZE lock (an autovacuum). Returns whether this call
    /// analyzed it.
    pub async fn analyze(&self, table: &'static str) -> Result<bool> {
        let Some(table) = HOT_TABLES.into_iter().find(|t| *t == table) else {
            return Err(crate::StoreError::Internal(format!(
                "{table} is not a table tally analyzes"
            )));
        };
        let mut tx = self.pool.begin().await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(ANALYZE_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !got {
            return Ok(false);
        }
        // Read again under the lock: another replica may have just done it.
        let before = hot_table_stats(&mut *tx, &[table]).await?;
        let Some(stale) = before.iter().find(|t| t.stale()) else {
            return Ok(false);
        };
        let analyzed_before = analyze_count(&mut *tx, table).await?;
        // Analyzing some columns, PostgreSQL warns that the statistics
        // object of the others could not be computed: expected here.
        sqlx::query("SET LOCAL client_min_messages = error")
            .execute(&mut *tx)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(stale.analyze_statement()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        // SKIP_LOCKED skips with a warning, not an error: count it.
        Ok(analyze_count(&self.pool, table).await? > analyzed_before)
    }
}

/// [`Store::hot_table_stats`] of `tables`.
async fn hot_table_stats<'e, E: sqlx::Executor<'e, Database = sqlx::Postgres>>(
    exec: E,
    tables: &[&'static str],
) -> Result<Vec<TableStats>> {
    let found: Vec<(String, f32, i64, i64)> = sqlx::query_as(
        "SELECT s.relname::text, c.reltuples, s.n_live_tup,
                pg_relation_size(s.relid) / current_setting('block_size')::int8
         FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
         WHERE s.schemaname = current_schema() AND s.relname = ANY($1)
           AND pg_has_role(c.relowner, 'USAGE')",
    )
    .bind(tables)
    .fetch_all(exec)
    .await?;
    Ok(found
        .into_iter()
        .filter_map(|(name, estimated, live, pages)| {
            let table = tables.iter().copied().find(|t| *t == name)?;
            Some(TableStats {
                table,
                estimated: estimated as i64,
                live,
                pages,
            })
        })
        .collect())
}

/// How many times `table` was analyzed by hand (not by autovacuum).
async fn analyze_count<'e, E: sqlx::Executor<'e, Database = sqlx::Postgres>>(
    exec: E,
    table: &str,
) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT analyze_count FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname = $1",
    )
    .bind(table)
    .fetch_optional(exec)
    .await?
    .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{QueueStats, TableStats};

    #[test]
    fn analyzes_once_a_young_table_doubled() {
        let t = |estimated, live| TableStats {
            table: "claims",
            estimated,
            live,
            pages: 0,
        };
        assert!(!t(0, 999).stale(), "too little growth to matter");
        assert!(t(0, 1_000).stale(), "analyzed empty, now a thousand rows");
        assert!(t(-1, 5_000).stale(), "never analyzed");
        assert!(!t(60_000, 119_999).stale());
        assert!(t(60_000, 120_000).stale());
        assert!(t(99_999, 10_000_000).stale(), "the last one");
        assert!(
            !t(100_000, 10_000_000).stale(),
            "statistics of a large table are autovacuum's"
        );
        assert!(
            !t(60_000, 60_000).stale(),
            "rows rewritten in place, however many, are autovacuum's"
        );
        assert!(!t(60_000, 10).stale(), "shrunk: plans only get cheaper");
    }

    #[test]
    fn a_grown_rows_table_is_analyzed_by_its_plan_columns_only() {
        let t = |table, pages| TableStats {
            table,
            estimated: 0,
            live: 20_000,
            pages,
        };
        assert_eq!(
            t("rows", 4_096).analyze_statement(),
            "ANALYZE (SKIP_LOCKED) rows",
            "a young table: a whole ANALYZE reads it in a few tenths of a second"
        );
        assert_eq!(
            t("rows", 4_097).analyze_statement(),
            "ANALYZE (SKIP_LOCKED) rows (id, ledger_id, key)",
            "by its size on disk, whatever the collector's lagging count says"
        );
        assert_eq!(
            t("attempts", 1_000_000).analyze_statement(),
            "ANALYZE (SKIP_LOCKED) attempts",
            "no statistics object, no wide columns"
        );
        assert_eq!(
            t("result_cache", 1).analyze_statement(),
            "ANALYZE (SKIP_LOCKED) result_cache (hash, team, answer_time)",
            "the texts are compared, never planned on"
        );
    }

    #[test]
    fn vacuums_only_when_dead_entries_matter() {
        let s = |live, dead| QueueStats { live, dead };
        assert!(!s(1_000_000, 50_000).needs_vacuum(10_000));
        assert!(s(1_000_000, 100_000).needs_vacuum(10_000));
        assert!(!s(0, 5_000).needs_vacuum(10_000));
        assert!(s(0, 10_000).needs_vacuum(10_000));
    }
}

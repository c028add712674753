//! Keeping the runnable queue's head clean.
//!
//! Every claim deletes entries at the head of `runnable_order`. Until VACUUM
//! removes them, each claim walks past the dead index entries of everything
//! claimed before it; autovacuum visits a database at most once a minute
//! (`autovacuum_naptime`), and at tens of thousands of claims a second a
//! minute of dead entries makes every claim read thousands of index pages
//! (DESIGN.md section 10). The table is narrow, so vacuuming it every few
//! seconds is cheap; the server does it when the statistics say the dead
//! entries are piling up.

use crate::{Result, Store};

/// Advisory lock id: one replica vacuums at a time, the others skip.
const VACUUM_LOCK: i64 = 0x7461_6c6c_7976_6163; // "tallyvac"

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
}

#[cfg(test)]
mod tests {
    use super::QueueStats;

    #[test]
    fn vacuums_only_when_dead_entries_matter() {
        let s = |live, dead| QueueStats { live, dead };
        assert!(!s(1_000_000, 50_000).needs_vacuum(10_000));
        assert!(s(1_000_000, 100_000).needs_vacuum(10_000));
        assert!(!s(0, 5_000).needs_vacuum(10_000));
        assert!(s(0, 10_000).needs_vacuum(10_000));
    }
}

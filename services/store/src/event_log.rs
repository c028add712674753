//! The store's commit-ordered logs, job events ([`crate::events`]),
//! operation transitions ([`crate::operations`]) and each ledger's results
//! ([`crate::results`]): what makes their sequence numbers follow commit
//! order, the `NOTIFY` that hints at a new job event or transition, and
//! the one `LISTEN` connection that hears both.
//!
//! # Why readers never miss an entry
//!
//! A watcher keeps the last sequence number it delivered and asks for
//! `seq > last`. That is only safe if no entry with a smaller number can
//! become visible after a larger one did. Identity and sequence values are
//! drawn when a row is inserted, not when its transaction commits, so two
//! writers could commit out of order (5 drawn first but committed after 6
//! was read), and a reader would skip 5 for ever.
//!
//! So every writer of a log takes that log's transaction-scoped advisory
//! lock ([`order`]) right before it draws its numbers, as the last
//! statement of its transaction, and PostgreSQL releases it only after the
//! commit is visible to others. The next writer draws its numbers after
//! that. Hence sequence order is commit order: once a reader sees N, every
//! number below N is committed (or rolled back, and never appears). The
//! cost is that a log's writers queue on one lock for the time of an insert
//! and a commit; they take it last, after every row lock they need, so it
//! cannot be part of a deadlock.
//!
//! # Notifications are hints
//!
//! A writer also calls `pg_notify` on its log's channel, delivered at commit
//! to every listening server. It carries no data: readers read the table,
//! and poll as well, because notifications are lost while a listening
//! connection reconnects and do not pass a transaction-mode pooler
//! (DESIGN.md §1).

use crate::{Result, Store};
use sqlx::postgres::PgListener;
use sqlx::{Postgres, Transaction};

/// One of the commit-ordered logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Log {
    /// `job_events`: WatchJobs.
    Jobs,
    /// `operation_events`: WatchOperations.
    Operations,
}

impl Log {
    pub const ALL: [Log; 2] = [Log::Jobs, Log::Operations];

    /// The channel its writers notify.
    pub const fn channel(self) -> &'static str {
        match self {
            Log::Jobs => "tally_job_events",
            Log::Operations => "tally_operations",
        }
    }

    /// The advisory lock that orders its sequence numbers by commit.
    const fn lock(self) -> i64 {
        match self {
            Log::Jobs => 0x7461_6c6c_7945_7631,       // "tallyEv1"
            Log::Operations => 0x7461_6c6c_795f_6f70, // "tally_op"
        }
    }

    fn of_channel(channel: &str) -> Option<Log> {
        Log::ALL.into_iter().find(|l| l.channel() == channel)
    }
}

/// Takes `log`'s ordering lock (see the module documentation). Call it right
/// before the statement that draws the entries' numbers, as the last
/// statement before committing.
pub(crate) async fn order(tx: &mut Transaction<'static, Postgres>, log: Log) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(log.lock())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The results log's ordering lock class ("tRes"): the same mechanism as
/// [`order`], one lock per ledger (the second key), because results are
/// read per ledger and the settle path of one ledger should not wait on
/// another's commits.
const RESULTS_LOCK: i32 = 0x7452_6573;

/// Takes the results-log ordering lock of every ledger of `ledgers` (see
/// [`order`]), in ascending key order so that two writers of several
/// ledgers cannot deadlock. The results log has no `NOTIFY`: a wake-up
/// would serialize every settling commit of the database on the
/// notification queue's lock, so its readers poll.
pub(crate) async fn order_results(
    tx: &mut Transaction<'static, Postgres>,
    ledgers: &[i64],
) -> Result<()> {
    // Ledger ids as the lock's 32-bit key (distinct below 2^32 ledgers;
    // two ledgers sharing a key only share a lock).
    let mut keys: Vec<i32> = ledgers.iter().map(|id| *id as i32).collect();
    keys.sort_unstable();
    keys.dedup();
    sqlx::query("SELECT pg_advisory_xact_lock($1, k) FROM unnest($2::int4[]) k")
        .bind(RESULTS_LOCK)
        .bind(&keys)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Wakes `log`'s listeners when `tx` commits.
pub(crate) async fn notify(tx: &mut Transaction<'static, Postgres>, log: Log) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(log.channel())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What woke a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// An entry was committed to this log.
    Appended(Log),
    /// The connection was lost (the next call reconnects): notifications
    /// sent meanwhile are gone, so readers of every log must look at the
    /// tables.
    Reconnected,
}

/// A dedicated connection (outside the pool) listening to every log; a
/// server holds one.
pub struct Listener {
    inner: PgListener,
}

impl Store {
    /// Opens the connection that hears every log's notifications.
    pub async fn listen(&self) -> Result<Listener> {
        let mut inner = PgListener::connect_with(&self.pool).await?;
        inner.listen_all(Log::ALL.map(Log::channel)).await?;
        Ok(Listener { inner })
    }
}

impl Listener {
    /// Waits for the next wake-up. Reconnects by itself; an error means it
    /// could not (the caller backs off and listens again).
    pub async fn next(&mut self) -> Result<Wake> {
        Ok(match self.inner.try_recv().await? {
            // A channel we did not ask for cannot arrive; were it to, waking
            // every reader is the safe answer.
            Some(n) => Log::of_channel(n.channel()).map_or(Wake::Reconnected, Wake::Appended),
            None => Wake::Reconnected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_log_has_its_own_channel_and_lock() {
        let [a, b] = Log::ALL;
        assert_ne!(a.channel(), b.channel());
        assert_ne!(a.lock(), b.lock());
        for log in Log::ALL {
            assert_eq!(Log::of_channel(log.channel()), Some(log));
        }
        assert_eq!(Log::of_channel("elsewhere"), None);
    }
}

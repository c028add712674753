//! What `/metrics` shows of each ledger's backlog, read without counting
//! rows (a count per ledger and status reads every row of the ledger):
//!
//! - rows by stored status: the planner's estimate, from the extended
//!   statistics `rows_ledger_status` times the table's
//!   row estimate; pairs missing from the statistics are left out;
//! - rows held by active claims: `claims.held` summed over active claims
//!   (partial index `claims_active_by_ledger`), exact;
//! - the oldest ready time in the runnable queue: one index probe per
//!   ledger and model (`runnable_order`), exact;
//! - open jobs by state (partial index `jobs_open`), exact;
//! - whether the ledger is paused, and why (its row), exact.
//!
//! Each query reads index entries or catalog rows only, in proportion to
//! ledgers, models, active claims and open jobs, not to rows.

use crate::codes::CLAIM_ACTIVE;
use crate::types::Time;
use crate::{Result, Store};
use std::collections::BTreeMap;
use tally_core::job::JobState;
use tally_core::pause::PauseReason;
use tally_core::status::RowStatus;

/// Most ledgers reported (by id); a larger deployment's others are left
/// out of the metrics rather than growing them without bound.
pub const MAX_LEDGERS: i64 = 1000;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerBacklog {
    pub name: String,
    /// Estimated rows by stored status (held rows keep theirs).
    pub estimated: Vec<(RowStatus, i64)>,
    pub held: i64,
    /// The queue's oldest ready time, if anything is queued.
    pub oldest_ready: Option<Time>,
    pub jobs_open: Vec<(JobState, i64)>,
    /// Open jobs whose lost create cannot be resolved within its search's
    /// bound (FlagCreateUnresolved).
    pub create_unresolved: i64,
    /// Why the ledger is paused, if it is.
    pub paused: Option<PauseReason>,
    /// Deleted (DELETING): its purge is under way, its metrics go.
    pub deleting: bool,
    /// Spent, reserved and the cap, for a ledger with a spend cap.
    pub spend: Option<crate::spend::SpendView>,
}

#[derive(Debug, Clone, Default)]
pub struct Backlog {
    pub ledgers: Vec<LedgerBacklog>,
    /// The database's now.
    pub now: Option<Time>,
    /// Batches and tokens at the provider, and cool-downs, per model.
    pub models: Vec<crate::admission::ModelInFlight>,
    /// The provider's limit of batches at once (0: none).
    pub max_batches: u32,
}

const ESTIMATES: &str = "
    SELECT s.most_common_vals[i][array_position(s.attnames, 'ledger_id')]::int8,
           s.most_common_vals[i][array_position(s.attnames, 'status')]::int2,
           round(s.most_common_freqs[i] * greatest(c.reltuples, 0))::int8
    FROM pg_stats_ext s
    JOIN pg_namespace n ON n.nspname = s.schemaname
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename
    CROSS JOIN LATERAL generate_subscripts(s.most_common_freqs, 1) i
    WHERE s.statistics_name = 'rows_ledger_status' AND s.schemaname = current_schema()";

const OLDEST: &str = "
    SELECT m.ledger_id, min(q.ready_time)
    FROM ledger_models m
    CROSS JOIN LATERAL (
        SELECT ready_time FROM runnable
        WHERE ledger_id = m.ledger_id AND model = m.model
        ORDER BY ready_time LIMIT 1
    ) q
    WHERE m.ledger_id = ANY($1)
    GROUP BY 1";

impl Store {
    /// Every ledger's backlog (the first [`MAX_LEDGERS`] by id).
    pub async fn backlog(&self) -> Result<Backlog> {
        let ledgers: Vec<(i64, String, Time, Option<String>, bool)> = sqlx::query_as(
            "SELECT id, name, now(), pause_reason, delete_time IS NOT NULL
             FROM ledgers ORDER BY id LIMIT $1",
        )
        .bind(MAX_LEDGERS)
        .fetch_all(&self.pool)
        .await?;
        let now = ledgers.first().map(|l| l.2);
        let ids: Vec<i64> = ledgers.iter().map(|l| l.0).collect();
        let mut by_id: BTreeMap<i64, LedgerBacklog> = ledgers
            .into_iter()
            .map(|(id, name, _, paused, deleting)| {
                (
                    id,
                    LedgerBacklog {
                        name,
                        paused: paused.as_deref().and_then(PauseReason::parse),
                        deleting,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let estimates: Vec<(Option<i64>, Option<i16>, i64)> =
            sqlx::query_as(ESTIMATES).fetch_all(&self.pool).await?;
        for (id, status, n) in estimates {
            let status = status.and_then(RowStatus::from_code);
            if let (Some(l), Some(status)) = (id.and_then(|id| by_id.get_mut(&id)), status) {
                l.estimated.push((status, n));
            }
        }
        let held: Vec<(i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT ledger_id, sum(held)::int8 FROM claims
             WHERE state = {CLAIM_ACTIVE} AND ledger_id = ANY($1) GROUP BY 1"
        )))
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        for (id, n) in held {
            if let Some(l) = by_id.get_mut(&id) {
                l.held = n;
            }
        }
        let oldest: Vec<(i64, Option<Time>)> = sqlx::query_as(OLDEST)
            .bind(&ids)
            .fetch_all(&self.pool)
            .await?;
        for (id, t) in oldest {
            if let Some(l) = by_id.get_mut(&id) {
                l.oldest_ready = t;
            }
        }
        let jobs: Vec<(i64, i16, i64, i64)> = sqlx::query_as(
            "SELECT ledger_id, state, count(*), count(*) FILTER (WHERE create_unresolved IS NOT NULL)
             FROM jobs WHERE end_time IS NULL AND ledger_id = ANY($1) GROUP BY 1, 2",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        for (id, state, n, unresolved) in jobs {
            if let (Some(l), Some(state)) = (by_id.get_mut(&id), JobState::from_code(state)) {
                l.jobs_open.push((state, n));
                l.create_unresolved += unresolved;
            }
        }
        for (id, spend) in crate::spend::of_ledgers(&self.pool, &ids).await? {
            if let Some(l) = by_id.get_mut(&id) {
                l.spend = Some(spend);
            }
        }
        Ok(Backlog {
            ledgers: by_id.into_values().collect(),
            now,
            models: crate::admission::in_flight_by_model(&self.pool, &self.quotas, MAX_LEDGERS)
                .await?,
            max_batches: self.quotas.max_batches,
        })
    }

    /// Refreshes the planner's statistics of `rows` (what
    /// [`Store::backlog`] estimates from). Autovacuum does this on its own;
    /// tests and demos call it to see an exact figure at once.
    pub async fn analyze_rows(&self) -> Result<()> {
        sqlx::query("ANALYZE rows").execute(&self.pool).await?;
        Ok(())
    }
}

//! The claim of a whole batch: before rows are taken, whether the batch
//! should wait for more (the rule is `tally_core::fill::decide`; this reads
//! the queue it judges, `queries/claims/fill.sql`, and, before it waits,
//! whether the rows fill the claim's bytes, `fill_bytes.sql`).

use crate::codes;
use crate::types::{ClaimGrant, ClaimRequest};
use crate::{Result, Store};
use std::sync::LazyLock;
use std::time::Duration;
use tally_core::fill::{Fill, Queue, WaitFor, decide};

/// A claim held back so that its batch fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillWaiting {
    pub runnable: u64,
    pub for_: WaitFor,
    /// Ask again after this long at most.
    pub within: Duration,
}

/// What a claim of a whole batch got.
#[derive(Debug)]
pub enum Filled {
    /// The claim as `claim_rows` answers it (None: nothing runnable).
    Claimed(Option<ClaimGrant>),
    Waiting(FillWaiting),
}

#[derive(sqlx::FromRow)]
struct QueueRow {
    runnable: i64,
    oldest_ms: i64,
    newest_ms: Option<i64>,
    next_ms: Option<i64>,
    at_provider: bool,
}

fn ms(x: i64) -> Duration {
    Duration::from_millis(x.max(0) as u64)
}

impl Store {
    /// [`Store::claim_rows`] for one provider batch: a retried call with a
    /// request id that made a claim answers it again; otherwise, under the
    /// ledger's `batch_fill`, a claim that would take fewer rows than it
    /// asks for waits while more can become runnable soon.
    pub async fn claim_batch(&self, ledger: &str, req: &ClaimRequest) -> Result<Filled> {
        let record = self.ledger(ledger).await?;
        let fill = record.policy.batch_fill;
        // A paused ledger is answered by the claim itself, at once.
        if fill.is_on() && record.pause.is_none() {
            if let Some(grant) = self.replay_claim(record.id, req).await? {
                return Ok(Filled::Claimed(Some(grant)));
            }
            static SQL: LazyLock<String> =
                LazyLock::new(|| codes::render(include_str!("queries/claims/fill.sql")));
            let row: QueueRow = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
                .bind(record.id)
                .bind(req.model.as_deref())
                .bind(req.provider.as_deref())
                .bind(req.max_rows)
                .fetch_one(self.pool())
                .await?;
            let queue = Queue {
                runnable: row.runnable.max(0) as u64,
                oldest_age: ms(row.oldest_ms),
                newest_age: row.newest_ms.map_or(Duration::MAX, ms),
                next_retry_in: row.next_ms.map(ms),
                at_provider: row.at_provider,
            };
            if let Fill::Wait { for_, within } = decide(&fill, req.max_rows.max(0) as u64, &queue)
                && !self.full_by_bytes(record.id, req).await?
            {
                return Ok(Filled::Waiting(FillWaiting {
                    runnable: queue.runnable,
                    for_,
                    within,
                }));
            }
        }
        Ok(Filled::Claimed(self.claim_rows(ledger, req).await?))
    }

    /// Whether the rows a claim would take fill its byte budget: a batch
    /// full by bytes goes, however few its rows.
    async fn full_by_bytes(&self, ledger_id: i64, req: &ClaimRequest) -> Result<bool> {
        let Some(budget) = req.bytes else {
            return Ok(false);
        };
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!("queries/claims/fill_bytes.sql")));
        let bytes: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(SQL.as_str()))
            .bind(ledger_id)
            .bind(req.model.as_deref())
            .bind(req.provider.as_deref())
            .bind(req.max_rows)
            .bind(budget.row_overhead)
            .fetch_one(self.pool())
            .await?;
        Ok(bytes >= budget.max_bytes)
    }
}

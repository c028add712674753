//! Reading operations, their events and applied transitions.

use super::*;
use crate::types::Time;
use crate::{Result, Store, StoreError};
use chrono::DateTime;
use sqlx::{Postgres, Transaction};
use std::collections::BTreeMap;
use tally_core::operation::OpState;
use tally_core::scope::Patterns;

impl Store {
    /// One operation by its normalized name.
    pub async fn get_operation(&self, name: &str) -> Result<OperationRecord> {
        let mut tx = self.begin().await?;
        let op = load_operation(&mut tx, name).await?;
        tx.commit().await?;
        op.ok_or_else(|| StoreError::not_found("operation", format!("operations/{name}")))
    }

    /// Operations newest first (by creation), optionally only in `states`,
    /// starting after `after`; only those whose job's ledger is inside
    /// `scope` (with every ledger in scope, those linked to no job too).
    pub async fn list_operations(
        &self,
        states: &[OpState],
        after: Option<&OperationCursor>,
        limit: i64,
        scope: &Patterns,
    ) -> Result<Vec<OperationRecord>> {
        let codes: Vec<i16> = states.iter().copied().map(state_code).collect();
        let after_time = after
            .map(|c| {
                DateTime::from_timestamp_micros(c.create_time_us).ok_or_else(|| {
                    StoreError::invalid("page_token", "is not a token from this list")
                })
            })
            .transpose()?;
        let sql = format!(
            "SELECT {OP_COLUMNS} FROM operations o
             WHERE (cardinality($1::int2[]) = 0 OR o.state = ANY($1))
               AND ($2::timestamptz IS NULL OR (o.create_time, o.name) < ($2, $3))
               AND ($5 OR EXISTS (
                    SELECT 1 FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
                     WHERE j.batch = o.name AND tally_in_scope(l.name, $6, $7)))
             ORDER BY o.create_time DESC, o.name DESC
             LIMIT $4"
        );
        let mut ops: Vec<OperationRecord> = sqlx::query_as::<_, OpRow>(sqlx::AssertSqlSafe(sql))
            .bind(&codes)
            .bind(after_time)
            .bind(after.map(|c| c.name.as_str()))
            .bind(limit)
            .bind(scope.is_all())
            .bind(scope.exact())
            .bind(scope.prefixes())
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(Into::into)
            .collect();
        let names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        let mut drops = drop_counts(&self.pool, &names).await?;
        for op in &mut ops {
            op.drops = drops.remove(&op.name).unwrap_or_default();
        }
        Ok(ops)
    }

    /// The job (`ledgers/{l}/jobs/{j}`) an operation is linked to, if any:
    /// whose ledger a caller must reach to see or move the operation.
    pub async fn operation_job(&self, name: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT 'ledgers/' || l.name || '/jobs/' || j.public_id
               FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
              WHERE j.batch = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Events of one operation, oldest first, after sequence `after`.
    /// NOT_FOUND when neither the operation nor any event about it exists.
    pub async fn list_operation_events(
        &self,
        name: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRecord>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM operation_events e
             WHERE e.operation = $1 AND e.sequence > $2
             ORDER BY e.sequence LIMIT $3"
        );
        let events = sqlx::query_as::<_, EventRow>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(EventRecord::try_from)
            .collect::<Result<Vec<_>>>()?;
        if events.is_empty() && after <= 0 {
            let known: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM operations WHERE name = $1)
                     OR EXISTS (SELECT 1 FROM operation_events WHERE operation = $1)",
            )
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
            if !known {
                return Err(StoreError::not_found(
                    "operation",
                    format!("operations/{name}"),
                ));
            }
        }
        Ok(events)
    }

    /// Applied transitions after sequence `after`, oldest first: one page of
    /// WatchOperations.
    pub async fn operation_transitions(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TransitionRecord>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            event: EventRow,
            create_time: Option<Time>,
            job: Option<String>,
        }
        let sql = format!(
            "SELECT {EVENT_COLUMNS}, o.create_time,
                    (SELECT 'ledgers/' || l.name || '/jobs/' || j.public_id
                       FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
                      WHERE j.batch = e.operation) AS job
             FROM operation_events e LEFT JOIN operations o ON o.name = e.operation
             WHERE e.verdict = {APPLIED} AND e.sequence > $1
             ORDER BY e.sequence LIMIT $2"
        );
        let rows = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(|row| {
                let create_time = row.create_time;
                let job = row.job;
                let e = EventRecord::try_from(row.event)?;
                let version = e.version.ok_or_else(|| {
                    StoreError::Internal(format!("applied event {} has no version", e.sequence))
                })?;
                Ok(TransitionRecord {
                    sequence: e.sequence,
                    source: e.source,
                    from: e.from_state,
                    time: e.receive_time,
                    operation: OperationRecord {
                        name: e.operation,
                        state: e.state,
                        update_time_us: e.update_time_us.unwrap_or(tally_core::operation::EPOCH),
                        version,
                        job,
                        output_file: e.output_file,
                        error_code: e.error_code,
                        error_message: e.error_message,
                        create_time: create_time.unwrap_or(e.receive_time),
                        change_time: e.receive_time,
                        drops: BTreeMap::new(),
                    },
                })
            })
            .collect()
    }

    /// The highest committed event sequence (0 when there is none): where a
    /// watch "from now" starts. Committed, not the sequence's last value, so
    /// an event still being written is after the start, not lost before it.
    pub async fn last_operation_sequence(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT coalesce(max(sequence), 0) FROM operation_events")
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

/// The operation with its job and drop counts, as this transaction sees it.
pub(super) async fn load_operation(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
) -> Result<Option<OperationRecord>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM operations o WHERE o.name = $1");
    let Some(row) = sqlx::query_as::<_, OpRow>(sqlx::AssertSqlSafe(sql))
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?
    else {
        return Ok(None);
    };
    let mut op = OperationRecord::from(row);
    op.drops = drop_counts(&mut **tx, &[name])
        .await?
        .remove(name)
        .unwrap_or_default();
    Ok(Some(op))
}

/// Not-applied events by operation and reason.
pub(super) async fn drop_counts<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    names: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, i64>>> {
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<(String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT operation, reason, count(*) FROM operation_events
         WHERE operation = ANY($1) AND verdict <> {APPLIED}
         GROUP BY operation, reason"
    )))
    .bind(names)
    .fetch_all(exec)
    .await?;
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for (operation, reason, n) in rows {
        out.entry(operation).or_default().insert(reason, n);
    }
    Ok(out)
}

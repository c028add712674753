//! The reducer's write path: read, decide, compare-and-swap, link the job,
//! append the event (see the module above).

use super::read::load_operation;
use super::*;
use crate::event_log::{self, Log};
use crate::{Result, Store, StoreError};
use sqlx::{Postgres, Transaction};
use tally_core::operation::{Decision, DropReason, OpSnapshot, reduce};

impl Store {
    /// Puts one event through the reducer and records it (see the module
    /// documentation). A drop is a normal result, not an error.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.ingest_event",
        skip_all
    )]
    pub async fn ingest_event(&self, event: &IncomingEvent) -> Result<IngestResult> {
        if tally_core::operation::normalize_name(&event.operation).as_deref()
            != Ok(event.operation.as_str())
        {
            return Err(StoreError::invalid(
                "operation",
                format!("`{}` is not a normalized operation name", event.operation),
            ));
        }
        let mut attempt = 1;
        loop {
            match self.try_ingest(event).await {
                Err(StoreError::Aborted(why)) if attempt < MAX_TX_ATTEMPTS => {
                    tracing::debug!(operation = %event.operation, attempt, error = %why, "ingest retried");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn try_ingest(&self, event: &IncomingEvent) -> Result<IngestResult> {
        let name = event.operation.as_str();
        let mut tx = self.begin().await?;
        let seen = match &event.event_id {
            Some(id) => {
                sqlx::query(
                    "INSERT INTO operation_deliveries (operation, event_id) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                )
                .bind(name)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 0
            }
            None => false,
        };

        let mut cas_conflicts = 0;
        let (decision, held) = loop {
            let current = read_snapshot(&mut tx, name).await?;
            let decision = reduce(current.as_ref(), &event.event, seen);
            let Decision::Applied { next, .. } = decision else {
                break (decision, current);
            };
            let written = match current {
                None => insert_operation(&mut tx, event, &next).await?,
                Some(current) => update_operation(&mut tx, event, &next, current.version).await?,
            };
            if written {
                break (decision, current);
            }
            cas_conflicts += 1;
            if cas_conflicts >= MAX_CAS_ATTEMPTS {
                return Err(StoreError::Aborted(format!(
                    "operation {name} changed under {cas_conflicts} attempts in a row; retry"
                )));
            }
        };

        let job = match (decision, held) {
            (Decision::Applied { next, .. }, _) => {
                job_link::move_linked_job(&mut tx, name, next.state, event.source).await?
            }
            // The operation is already where this event would take it, or
            // further: its job may not be (see `job_link::catch_up`), so
            // any later word on the batch catches the job up.
            (Decision::Dropped(_), Some(current)) => {
                job_link::move_linked_job(&mut tx, name, current.state, event.source).await?
            }
            (Decision::Dropped(_) | Decision::Recorded, _) => None,
        };
        let mut operation = load_operation(&mut tx, name).await?;
        if let (Some(op), Some(reason)) = (operation.as_mut(), decision.reason()) {
            *op.drops.entry(reason.as_str().to_string()).or_insert(0) += 1;
        }

        // Last, so the lock covers only the insert and the commit.
        event_log::order(&mut tx, Log::Operations).await?;
        let (from_state, version) = match decision {
            Decision::Applied { next, from } => (Some(from.map(state_code)), Some(next.version)),
            Decision::Dropped(_) | Decision::Recorded => (None, None),
        };
        let sequence: i64 = sqlx::query_scalar(
            "INSERT INTO operation_events (sequence, operation, source, event_id, raw_state, state,
                 update_time_us, verdict, reason, from_state, version, output_file, error_code,
                 error_message)
             VALUES (nextval('operation_event_seq'), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                     $11, $12, $13)
             RETURNING sequence",
        )
        .bind(name)
        .bind(event.source.code())
        .bind(event.event_id.as_deref())
        .bind(cut(Some(&event.raw_state), MAX_RAW_STATE))
        .bind(state_code(event.event.state))
        .bind(event.event.update_time)
        .bind(EventVerdict::of(&decision).code())
        .bind(decision.reason().map_or("", DropReason::as_str))
        .bind(from_state.flatten())
        .bind(version)
        .bind(cut(event.output_file.as_deref(), MAX_OUTPUT_FILE))
        .bind(cut(event.error_code.as_deref(), MAX_ERROR_CODE))
        .bind(cut(event.error_message.as_deref(), MAX_ERROR_MESSAGE))
        .fetch_one(&mut *tx)
        .await?;
        if decision.is_applied() {
            event_log::notify(&mut tx, Log::Operations).await?;
        }
        tx.commit().await?;
        Ok(IngestResult {
            decision,
            sequence,
            operation,
            job,
            cas_conflicts,
        })
    }
}

async fn read_snapshot(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
) -> Result<Option<OpSnapshot>> {
    let row: Option<(i16, i64, i64)> =
        sqlx::query_as("SELECT state, update_time_us, version FROM operations WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(row.map(|(state, update_time, version)| OpSnapshot {
        state: state_from_code(state),
        update_time,
        version,
    }))
}

/// First sighting: `false` when another writer created the operation first.
async fn insert_operation(
    tx: &mut Transaction<'static, Postgres>,
    event: &IncomingEvent,
    next: &OpSnapshot,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO operations (name, state, update_time_us, version, output_file, error_code,
                                 error_message)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&event.operation);
    let inserted = bind_state(inserted, event, next)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    Ok(inserted == 1)
}

/// Binds the state an event brings, in the order both writers take it:
/// state, provider time, version, output file, error code and message (the
/// texts cut to their bounds).
fn bind_state<'q>(
    q: crate::codes::PgQuery<'q>,
    event: &IncomingEvent,
    next: &OpSnapshot,
) -> crate::codes::PgQuery<'q> {
    q.bind(state_code(next.state))
        .bind(next.update_time)
        .bind(next.version)
        .bind(cut(event.output_file.as_deref(), MAX_OUTPUT_FILE))
        .bind(cut(event.error_code.as_deref(), MAX_ERROR_CODE))
        .bind(cut(event.error_message.as_deref(), MAX_ERROR_MESSAGE))
}

/// The compare-and-swap: `false` when the version is no longer `read`.
/// An event without an output file or error keeps the ones already held.
async fn update_operation(
    tx: &mut Transaction<'static, Postgres>,
    event: &IncomingEvent,
    next: &OpSnapshot,
    read: i64,
) -> Result<bool> {
    let updated = sqlx::query(
        "UPDATE operations SET state = $3, update_time_us = $4, version = $5,
                output_file = coalesce(nullif($6, ''), output_file),
                error_code = coalesce(nullif($7, ''), error_code),
                error_message = coalesce(nullif($8, ''), error_message),
                change_time = now()
         WHERE name = $1 AND version = $2",
    )
    .bind(&event.operation)
    .bind(read);
    let updated = bind_state(updated, event, next)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    Ok(updated == 1)
}

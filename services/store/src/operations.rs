//! Provider operations: the one door every change of an operation's state
//! goes through, and the event log behind it.
//!
//! [`Store::ingest_event`] is read → decide → compare-and-swap:
//!
//! 1. the delivery id (if any) is inserted into `operation_deliveries`; a
//!    conflict means the webhook was delivered before (`duplicate_event`);
//! 2. the operation's state, provider time and version are read;
//! 3. [`tally_core::operation::reduce`] (pure) decides: applied, dropped or
//!    recorded;
//! 4. an applied event is written conditioned on the version read
//!    (`UPDATE … WHERE name = $1 AND version = $2`), or, on first sighting,
//!    inserted with `ON CONFLICT DO NOTHING`; zero rows means another writer
//!    got there first, and steps 2–4 run again on what it wrote. A drop needs
//!    no guard: the operation only moves forward, and an event dropped
//!    against a state is dropped against every later one too;
//! 5. an applied state moves the linked job on (JobService's
//!    `job_link::follow_provider`) in the same transaction ([`job_link`]);
//! 6. the event is appended to `operation_events` with its verdict and
//!    reason, under a sequence number assigned in commit order (see
//!    [`EVENT_LOCK`]), and an applied event wakes watchers with `NOTIFY`.
//!
//! Readers: [`Store::get_operation`], [`Store::list_operations`],
//! [`Store::list_operation_events`], [`Store::operation_transitions`]
//! (WatchOperations pages) and [`Store::last_operation_sequence`].

mod job_link;
pub(crate) use job_link::catch_up;

pub use job_link::{ProviderMove as JobMove, ProviderMove, follow_provider};

use crate::codes::Code;
use crate::types::Time;
use crate::{Result, Store, StoreError};
use chrono::DateTime;
use sqlx::{Postgres, Transaction};
use std::collections::BTreeMap;
use tally_core::operation::{Decision, DropReason, OpEvent, OpSnapshot, OpState, reduce};
use tally_core::scope::Patterns;

/// The `NOTIFY` channel woken on every applied transition (payload: the
/// sequence number). Only a hint: watchers poll too.
/// An event the reducer applied, as SQL compares with it.
const APPLIED: Code = Code::new(EventVerdict::Applied.code());

pub const NOTIFY_CHANNEL: &str = "tally_operations";

/// The transaction-scoped advisory lock that orders `operation_events`.
///
/// Sequence numbers come from a PostgreSQL sequence, which hands them out in
/// call order, not commit order: transaction A could take 5, B take 6, B
/// commit first, a watcher read 6 and resume "after 6", and A's 5 appear
/// later behind its back, lost to that watcher for good. Taking this lock
/// right before `nextval` and holding it until commit makes numbering and
/// commit order the same (PostgreSQL makes a transaction visible before it
/// releases its locks), so every snapshot sees a gap-free prefix of the
/// committed events. The lock is taken last, after the compare-and-swap and
/// the job linkage, so it covers one insert and the commit; operations see a
/// few events per batch, far below what one serialized insert can carry.
pub const EVENT_LOCK: i64 = 0x7461_6c6c_795f_6f70; // "tally_op"

/// How many times one event re-reads after losing the compare-and-swap
/// before giving up with ABORTED (each loss means another event for the
/// same operation was applied, so this only trips under absurd contention).
const MAX_CAS_ATTEMPTS: u32 = 64;

/// How many times a whole ingest transaction is retried after a deadlock
/// or serialization failure.
const MAX_TX_ATTEMPTS: u32 = 5;

/// Longest text kept per event field; longer provider text is cut.
const MAX_RAW_STATE: usize = 128;
const MAX_OUTPUT_FILE: usize = 2048;
const MAX_ERROR_CODE: usize = 256;
const MAX_ERROR_MESSAGE: usize = 4096;
/// Longest delivery id accepted (callers reject longer ones).
pub const MAX_EVENT_ID: usize = 256;

/// Where an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSource {
    Webhook,
    Poller,
    Operator,
}

impl EventSource {
    /// The stored code (the `tally.v1.EventSource` number).
    pub fn code(self) -> i16 {
        match self {
            EventSource::Webhook => 1,
            EventSource::Poller => 2,
            EventSource::Operator => 3,
        }
    }

    pub fn from_code(code: i16) -> Option<EventSource> {
        match code {
            1 => Some(EventSource::Webhook),
            2 => Some(EventSource::Poller),
            3 => Some(EventSource::Operator),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventSource::Webhook => "webhook",
            EventSource::Poller => "poller",
            EventSource::Operator => "operator",
        }
    }
}

/// What the reducer made of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventVerdict {
    Applied,
    Dropped,
    /// A different terminal after a terminal: logged, not applied.
    Recorded,
}

impl EventVerdict {
    /// The stored code (the `tally.v1.EventVerdict` number).
    pub const fn code(self) -> i16 {
        match self {
            EventVerdict::Applied => 1,
            EventVerdict::Dropped => 2,
            EventVerdict::Recorded => 3,
        }
    }

    pub fn from_code(code: i16) -> Option<EventVerdict> {
        match code {
            1 => Some(EventVerdict::Applied),
            2 => Some(EventVerdict::Dropped),
            3 => Some(EventVerdict::Recorded),
            _ => None,
        }
    }

    pub fn of(decision: &Decision) -> EventVerdict {
        match decision {
            Decision::Applied { .. } => EventVerdict::Applied,
            Decision::Dropped(_) => EventVerdict::Dropped,
            Decision::Recorded => EventVerdict::Recorded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventVerdict::Applied => "applied",
            EventVerdict::Dropped => "dropped",
            EventVerdict::Recorded => "recorded",
        }
    }
}

/// The stored code of a state (the `tally.v1.OperationState` number; 0 for
/// a state we do not know).
pub fn state_code(state: OpState) -> i16 {
    match state {
        OpState::Unknown => 0,
        OpState::Pending => 1,
        OpState::Running => 2,
        OpState::Succeeded => 3,
        OpState::Failed => 4,
        OpState::Cancelled => 5,
        OpState::Expired => 6,
    }
}

/// Reads a stored state code back; anything else is `Unknown`.
pub fn state_from_code(code: i16) -> OpState {
    match code {
        1 => OpState::Pending,
        2 => OpState::Running,
        3 => OpState::Succeeded,
        4 => OpState::Failed,
        5 => OpState::Cancelled,
        6 => OpState::Expired,
        _ => OpState::Unknown,
    }
}

/// One event to ingest, already decoded by the caller (webhook receiver,
/// IngestEvent handler, poller helper).
#[derive(Debug, Clone)]
pub struct IncomingEvent {
    /// Normalized, `batches/{id}` (see `tally_core::operation::normalize_name`).
    pub operation: String,
    pub source: EventSource,
    /// The delivery id (webhook-id); a repeated one is `duplicate_event`.
    pub event_id: Option<String>,
    /// The state as received, for the log.
    pub raw_state: String,
    /// The state and provider time the reducer judges.
    pub event: OpEvent,
    pub output_file: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

/// An operation as stored, with its linked job and drop counts.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationRecord {
    pub name: String,
    pub state: OpState,
    /// Provider time of the applied state, unix microseconds (0: none given).
    pub update_time_us: i64,
    /// Also the number of applied events.
    pub version: i64,
    /// `ledgers/{ledger}/jobs/{job}` of the job whose batch this is.
    pub job: Option<String>,
    pub output_file: String,
    pub error_code: String,
    pub error_message: String,
    pub create_time: Time,
    pub change_time: Time,
    /// Dropped and recorded-not-applied events by reason.
    pub drops: BTreeMap<String, i64>,
}

/// The answer to one ingested event.
#[derive(Debug, Clone)]
pub struct IngestResult {
    pub decision: Decision,
    /// The event's position in the log.
    pub sequence: i64,
    /// The operation after the event; `None` when it does not exist (an
    /// event with an unknown state never creates one).
    pub operation: Option<OperationRecord>,
    /// What happened to the linked job, if the event moved one.
    pub job: Option<JobMove>,
    /// Compare-and-swap losses before the event was decided.
    pub cas_conflicts: u32,
}

impl IngestResult {
    pub fn verdict(&self) -> EventVerdict {
        EventVerdict::of(&self.decision)
    }
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub sequence: i64,
    pub operation: String,
    pub source: EventSource,
    pub event_id: Option<String>,
    pub raw_state: String,
    pub state: OpState,
    /// As received; `None` when the event carried no time.
    pub update_time_us: Option<i64>,
    pub receive_time: Time,
    pub verdict: EventVerdict,
    /// `None` when applied.
    pub reason: Option<DropReason>,
    /// Applied events: the state before (`None` on first sighting).
    pub from_state: Option<OpState>,
    /// Applied events: the version after.
    pub version: Option<i64>,
    pub output_file: String,
    pub error_code: String,
    pub error_message: String,
}

/// One applied transition, as WatchOperations streams it.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRecord {
    pub sequence: i64,
    pub source: EventSource,
    pub from: Option<OpState>,
    /// The operation right after the transition: state, provider time,
    /// version, and the output file or error the event brought. `drops` is
    /// left empty (GetOperation has the current counts).
    pub operation: OperationRecord,
    /// When we received the event.
    pub time: Time,
}

/// Where a ListOperations page starts: after this operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationCursor {
    pub create_time_us: i64,
    pub name: String,
}

impl OperationRecord {
    pub fn cursor(&self) -> OperationCursor {
        OperationCursor {
            create_time_us: self.create_time.timestamp_micros(),
            name: self.name.clone(),
        }
    }
}

#[derive(sqlx::FromRow)]
struct OpRow {
    name: String,
    state: i16,
    update_time_us: i64,
    version: i64,
    job: Option<String>,
    output_file: String,
    error_code: String,
    error_message: String,
    create_time: Time,
    change_time: Time,
}

impl From<OpRow> for OperationRecord {
    fn from(r: OpRow) -> Self {
        OperationRecord {
            name: r.name,
            state: state_from_code(r.state),
            update_time_us: r.update_time_us,
            version: r.version,
            job: r.job,
            output_file: r.output_file,
            error_code: r.error_code,
            error_message: r.error_message,
            create_time: r.create_time,
            change_time: r.change_time,
            drops: BTreeMap::new(),
        }
    }
}

/// Columns of `operations o`, with the linked job's name.
const OP_COLUMNS: &str = "o.name, o.state, o.update_time_us, o.version, \
     (SELECT 'ledgers/' || l.name || '/jobs/' || j.public_id \
        FROM jobs j JOIN ledgers l ON l.id = j.ledger_id WHERE j.batch = o.name) AS job, \
     o.output_file, o.error_code, o.error_message, o.create_time, o.change_time";

#[derive(sqlx::FromRow)]
struct EventRow {
    sequence: i64,
    operation: String,
    source: i16,
    event_id: Option<String>,
    raw_state: String,
    state: i16,
    update_time_us: Option<i64>,
    receive_time: Time,
    verdict: i16,
    reason: String,
    from_state: Option<i16>,
    version: Option<i64>,
    output_file: String,
    error_code: String,
    error_message: String,
}

const EVENT_COLUMNS: &str = "e.sequence, e.operation, e.source, e.event_id, e.raw_state, e.state, \
     e.update_time_us, e.receive_time, e.verdict, e.reason, e.from_state, e.version, \
     e.output_file, e.error_code, e.error_message";

impl TryFrom<EventRow> for EventRecord {
    type Error = StoreError;

    fn try_from(r: EventRow) -> Result<Self> {
        let bad =
            |what: &str| StoreError::Internal(format!("operation event {} has {what}", r.sequence));
        let source = EventSource::from_code(r.source).ok_or_else(|| bad("a bad source"))?;
        let verdict = EventVerdict::from_code(r.verdict).ok_or_else(|| bad("a bad verdict"))?;
        let reason = match verdict {
            EventVerdict::Applied => None,
            EventVerdict::Dropped | EventVerdict::Recorded => {
                Some(DropReason::parse(&r.reason).ok_or_else(|| bad("a bad reason"))?)
            }
        };
        Ok(EventRecord {
            sequence: r.sequence,
            operation: r.operation,
            source,
            event_id: r.event_id,
            raw_state: r.raw_state,
            state: state_from_code(r.state),
            update_time_us: r.update_time_us,
            receive_time: r.receive_time,
            verdict,
            reason,
            from_state: r.from_state.map(state_from_code),
            version: r.version,
            output_file: r.output_file,
            error_code: r.error_code,
            error_message: r.error_message,
        })
    }
}

fn cut(text: Option<&str>, max: usize) -> String {
    text.map(|t| t.chars().take(max).collect())
        .unwrap_or_default()
}

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
        let decision = loop {
            let current = read_snapshot(&mut tx, name).await?;
            let decision = reduce(current.as_ref(), &event.event, seen);
            let Decision::Applied { next, .. } = decision else {
                break decision;
            };
            let written = match current {
                None => insert_operation(&mut tx, event, &next).await?,
                Some(current) => update_operation(&mut tx, event, &next, current.version).await?,
            };
            if written {
                break decision;
            }
            cas_conflicts += 1;
            if cas_conflicts >= MAX_CAS_ATTEMPTS {
                return Err(StoreError::Aborted(format!(
                    "operation {name} changed under {cas_conflicts} attempts in a row; retry"
                )));
            }
        };

        let job = match decision {
            Decision::Applied { next, .. } => {
                job_link::move_linked_job(&mut tx, name, next.state, event.source).await?
            }
            Decision::Dropped(_) | Decision::Recorded => None,
        };
        let mut operation = load_operation(&mut tx, name).await?;
        if let (Some(op), Some(reason)) = (operation.as_mut(), decision.reason()) {
            *op.drops.entry(reason.as_str().to_string()).or_insert(0) += 1;
        }

        // Last, so the lock covers only the insert and the commit.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(EVENT_LOCK)
            .execute(&mut *tx)
            .await?;
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
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(NOTIFY_CHANNEL)
                .bind(sequence.to_string())
                .execute(&mut *tx)
                .await?;
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
    .bind(&event.operation)
    .bind(state_code(next.state))
    .bind(next.update_time)
    .bind(next.version)
    .bind(cut(event.output_file.as_deref(), MAX_OUTPUT_FILE))
    .bind(cut(event.error_code.as_deref(), MAX_ERROR_CODE))
    .bind(cut(event.error_message.as_deref(), MAX_ERROR_MESSAGE))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(inserted == 1)
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
    .bind(read)
    .bind(state_code(next.state))
    .bind(next.update_time)
    .bind(next.version)
    .bind(cut(event.output_file.as_deref(), MAX_OUTPUT_FILE))
    .bind(cut(event.error_code.as_deref(), MAX_ERROR_CODE))
    .bind(cut(event.error_message.as_deref(), MAX_ERROR_MESSAGE))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

/// The operation with its job and drop counts, as this transaction sees it.
async fn load_operation(
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
async fn drop_counts<'e, E: sqlx::Executor<'e, Database = Postgres>>(
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

//! What goes in and comes out of the operations store, and the codes
//! their enums are stored as.

use super::*;
use crate::types::Time;
use crate::{Result, StoreError};
use std::collections::BTreeMap;
use tally_core::operation::{Decision, DropReason, OpEvent, OpState};

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
pub(super) struct OpRow {
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
pub(super) const OP_COLUMNS: &str = "o.name, o.state, o.update_time_us, o.version, \
     (SELECT 'ledgers/' || l.name || '/jobs/' || j.public_id \
        FROM jobs j JOIN ledgers l ON l.id = j.ledger_id WHERE j.batch = o.name) AS job, \
     o.output_file, o.error_code, o.error_message, o.create_time, o.change_time";

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
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

pub(super) const EVENT_COLUMNS: &str = "e.sequence, e.operation, e.source, e.event_id, e.raw_state, e.state, \
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

pub(super) fn cut(text: Option<&str>, max: usize) -> String {
    text.map(|t| t.chars().take(max).collect())
        .unwrap_or_default()
}

//! OperationsService's conversions: operation records, their events and
//! transitions to `tally.v1` messages, operation states both ways,
//! provider times as unix microseconds, and the list's page cursor. Pure:
//! no I/O.

use crate::edge::status::invalid_field;
use crate::edge::wire_convert::timestamp;
use tally_core::operation::OpState;
use tally_proto::v1 as pb;
use tally_store::operations::{
    EventRecord, EventSource, EventVerdict, OperationCursor, OperationRecord, TransitionRecord,
};
use tonic::Status;

/// A timestamp as unix microseconds (sub-microsecond digits are cut, as
/// for provider times); `None` when malformed or outside years 1–9999.
pub fn timestamp_micros(ts: &prost_types::Timestamp) -> Option<i64> {
    const MIN: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    if !(MIN..=MAX).contains(&ts.seconds) || !(0..1_000_000_000).contains(&ts.nanos) {
        return None;
    }
    Some(ts.seconds * 1_000_000 + i64::from(ts.nanos) / 1_000)
}

pub fn micros_timestamp(us: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: us.div_euclid(1_000_000),
        nanos: (us.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

pub(super) fn encode_cursor(c: &OperationCursor) -> String {
    format!("{}/{}", c.create_time_us, c.name)
}

pub(super) fn decode_cursor(text: &str) -> Result<OperationCursor, Status> {
    let bad = || invalid_field("page_token", "is not a token from this list; start again");
    let (time, name) = text.split_once('/').ok_or_else(bad)?;
    Ok(OperationCursor {
        create_time_us: time.parse().map_err(|_| bad())?,
        name: name.to_string(),
    })
}

pub fn state_to_proto(state: OpState) -> pb::OperationState {
    match state {
        OpState::Pending => pb::OperationState::Pending,
        OpState::Running => pb::OperationState::Running,
        OpState::Succeeded => pb::OperationState::Succeeded,
        OpState::Failed => pb::OperationState::Failed,
        OpState::Cancelled => pb::OperationState::Cancelled,
        OpState::Expired => pb::OperationState::Expired,
        OpState::Unknown => pb::OperationState::Unspecified,
    }
}

pub(super) fn state_from_proto(code: i32) -> Option<OpState> {
    match pb::OperationState::try_from(code).ok()? {
        pb::OperationState::Pending => Some(OpState::Pending),
        pb::OperationState::Running => Some(OpState::Running),
        pb::OperationState::Succeeded => Some(OpState::Succeeded),
        pb::OperationState::Failed => Some(OpState::Failed),
        pb::OperationState::Cancelled => Some(OpState::Cancelled),
        pb::OperationState::Expired => Some(OpState::Expired),
        pb::OperationState::Unspecified => None,
    }
}

fn source_to_proto(source: EventSource) -> pb::EventSource {
    match source {
        EventSource::Webhook => pb::EventSource::Webhook,
        EventSource::Poller => pb::EventSource::Poller,
        EventSource::Operator => pb::EventSource::Operator,
    }
}

pub(super) fn verdict_to_proto(verdict: EventVerdict) -> pb::EventVerdict {
    match verdict {
        EventVerdict::Applied => pb::EventVerdict::Applied,
        EventVerdict::Dropped => pb::EventVerdict::Dropped,
        EventVerdict::Recorded => pb::EventVerdict::Recorded,
    }
}

pub fn operation_to_proto(op: &OperationRecord) -> pb::Operation {
    pb::Operation {
        name: format!("operations/{}", op.name),
        state: state_to_proto(op.state) as i32,
        update_time: Some(micros_timestamp(op.update_time_us)),
        version: op.version,
        job: op.job.clone().unwrap_or_default(),
        output_file: op.output_file.clone(),
        error_code: op.error_code.clone(),
        error_message: op.error_message.clone(),
        applied_events: op.version,
        drops: op.drops.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        create_time: Some(timestamp(op.create_time)),
    }
}

pub(super) fn event_to_proto(e: &EventRecord) -> pb::OperationEventRecord {
    pb::OperationEventRecord {
        sequence: e.sequence,
        source: source_to_proto(e.source) as i32,
        raw_state: e.raw_state.clone(),
        state: state_to_proto(e.state) as i32,
        update_time: e.update_time_us.map(micros_timestamp),
        receive_time: Some(timestamp(e.receive_time)),
        verdict: verdict_to_proto(e.verdict) as i32,
        reason: e.reason.map_or(String::new(), |r| r.as_str().to_string()),
        event_id: e.event_id.clone().unwrap_or_default(),
    }
}

pub(super) fn transition_to_proto(t: &TransitionRecord) -> pb::OperationTransition {
    pb::OperationTransition {
        sequence: t.sequence,
        operation: Some(operation_to_proto(&t.operation)),
        from_state: t
            .from
            .map_or(pb::OperationState::Unspecified, state_to_proto) as i32,
        to_state: state_to_proto(t.operation.state) as i32,
        source: source_to_proto(t.source) as i32,
        time: Some(timestamp(t.time)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_round_trip_through_timestamps() {
        for us in [0, 1, 999_999, 1_714_557_600_123_456, -1, -1_000_001] {
            assert_eq!(timestamp_micros(&micros_timestamp(us)), Some(us));
        }
    }

    #[test]
    fn cursors_round_trip() {
        let c = OperationCursor {
            create_time_us: 1_714_557_600_123_456,
            name: "batches/a-b_c".into(),
        };
        assert_eq!(decode_cursor(&encode_cursor(&c)).unwrap(), c);
        assert!(decode_cursor("nonsense").is_err());
    }
}

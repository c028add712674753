//! OperationsService's request checks: an operation's name in any of its
//! spellings, and an IngestEvent request as the store's incoming event, or
//! INVALID_ARGUMENT with a field violation per problem. Pure: no I/O.

use super::convert::timestamp_micros;
use crate::edge::status::{invalid, invalid_field};
use tally_core::operation::{OpEvent, OpState, normalize_name};
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::operations::{EventSource, IncomingEvent, MAX_EVENT_ID};
use tonic::Status;

/// Longest accepted text per event field.
const MAX_STATE: usize = 64;
const MAX_OUTPUT_FILE: usize = 2048;
const MAX_ERROR_CODE: usize = 256;
const MAX_ERROR_MESSAGE: usize = 4096;

/// Any spelling of a batch name (`operations/batches/abc`,
/// `batches/abc`, `projects/p/locations/l/batches/abc`, …) in `field`.
pub fn operation_name(field: &str, text: &str) -> Result<String, Status> {
    normalize_name(text).map_err(|e| invalid_field(field, e.to_string()))
}

pub(super) fn incoming(req: pb::IngestEventRequest) -> Result<IncomingEvent, Status> {
    let Some(e) = req.event else {
        return Err(invalid_field("event", "is required"));
    };
    let mut v = Violations::new();
    let operation = normalize_name(&e.operation)
        .map_err(|err| v.add("event.operation", err.to_string()))
        .ok();
    let raw_state = e.state.trim().to_string();
    if raw_state.is_empty() {
        v.add(
            "event.state",
            "is required (e.g. BATCH_STATE_RUNNING, JOB_STATE_SUCCEEDED, batch.failed)",
        );
    }
    text_limit("event.state", &raw_state, MAX_STATE, &mut v);
    let update_time = match e.update_time.as_ref().map(timestamp_micros) {
        None => None,
        Some(Some(us)) => Some(us),
        Some(None) => {
            v.add("event.update_time", "is not a valid timestamp");
            None
        }
    };
    let source = match pb::EventSource::try_from(e.source) {
        Ok(pb::EventSource::Webhook) => Some(EventSource::Webhook),
        Ok(pb::EventSource::Poller) => Some(EventSource::Poller),
        Ok(pb::EventSource::Operator) => Some(EventSource::Operator),
        Ok(pb::EventSource::Unspecified) | Err(_) => {
            v.add("event.source", "must be WEBHOOK, POLLER or OPERATOR");
            None
        }
    };
    text_limit("event.event_id", &e.event_id, MAX_EVENT_ID, &mut v);
    text_limit("event.output_file", &e.output_file, MAX_OUTPUT_FILE, &mut v);
    text_limit("event.error_code", &e.error_code, MAX_ERROR_CODE, &mut v);
    text_limit(
        "event.error_message",
        &e.error_message,
        MAX_ERROR_MESSAGE,
        &mut v,
    );
    v.finish().map_err(invalid)?;
    let (Some(operation), Some(source)) = (operation, source) else {
        return Err(Status::internal(
            "validation passed without a name or source",
        ));
    };
    let non_empty = |s: String| (!s.trim().is_empty()).then_some(s);
    Ok(IncomingEvent {
        operation,
        source,
        event_id: non_empty(e.event_id),
        event: OpEvent {
            state: OpState::parse(&raw_state),
            update_time,
        },
        raw_state,
        output_file: non_empty(e.output_file),
        error_code: non_empty(e.error_code),
        error_message: non_empty(e.error_message),
    })
}

fn text_limit(field: &str, text: &str, max: usize, v: &mut Violations) {
    if text.chars().count() > max {
        v.add(field, format!("must be at most {max} characters"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(event: pb::OperationEvent) -> pb::IngestEventRequest {
        pb::IngestEventRequest { event: Some(event) }
    }

    fn valid() -> pb::OperationEvent {
        pb::OperationEvent {
            operation: "projects/p/locations/l/batches/abc".into(),
            state: "JOB_STATE_RUNNING".into(),
            update_time: Some(prost_types::Timestamp {
                seconds: 10,
                nanos: 1_500,
            }),
            source: pb::EventSource::Poller as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_event_is_normalized() {
        let e = incoming(request(valid())).unwrap();
        assert_eq!(e.operation, "batches/abc");
        assert_eq!(e.event.state, OpState::Running);
        assert_eq!(e.event.update_time, Some(10_000_001));
        assert_eq!(e.raw_state, "JOB_STATE_RUNNING");
        assert_eq!(e.event_id, None);
    }

    #[test]
    fn bad_events_name_every_bad_field() {
        let bad = pb::OperationEvent {
            operation: "files/abc".into(),
            state: " ".into(),
            update_time: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: -1,
            }),
            source: 0,
            event_id: "x".repeat(MAX_EVENT_ID + 1),
            ..Default::default()
        };
        let status = incoming(request(bad)).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        for field in [
            "event.operation",
            "event.state",
            "event.update_time",
            "event.source",
            "event.event_id",
        ] {
            assert!(
                status.message().contains(field),
                "{field}: {}",
                status.message()
            );
        }
        assert!(incoming(pb::IngestEventRequest { event: None }).is_err());
    }

    #[test]
    fn an_unknown_state_spelling_is_accepted_for_the_log() {
        let e = incoming(request(pb::OperationEvent {
            state: "BATCH_STATE_ARCHIVED".into(),
            ..valid()
        }))
        .unwrap();
        assert_eq!(e.event.state, OpState::Unknown);
    }
}

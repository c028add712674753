//! The poller's path into the reducer.
//!
//! A poller must never write an operation's state itself: what it read from
//! `batches.get` may already be older than what a webhook delivered. It
//! turns the batch resource into an event (the same parsing the server
//! applies to webhooks, from `tally_core::operation`) and sends it through
//! IngestEvent with source POLLER; the server decides whether it moves the
//! operation forward, and a stale poll is answered as a drop, not an error.

use tally_core::operation::{BatchObservation, OpState, PayloadError, event_from_batch_resource};
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_client::OperationsServiceClient;

/// Why a poll could not be ingested.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The batch resource could not be read; nothing was sent.
    #[error("batch resource not understood: {0}")]
    Payload(#[from] PayloadError),
    /// The server refused or could not be reached.
    #[error("IngestEvent failed: {0}")]
    Rpc(#[from] tonic::Status),
}

/// Decodes a provider `batches.get` answer and sends it through
/// IngestEvent (source POLLER). A dropped event (the poll was stale) is an
/// `Ok` answer with its verdict and reason.
pub async fn ingest_batch_resource<T>(
    client: &mut OperationsServiceClient<T>,
    batch_json: &serde_json::Value,
) -> Result<pb::IngestEventResponse, IngestError>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let event = batch_resource_event(batch_json)?;
    let response = client
        .ingest_event(pb::IngestEventRequest { event: Some(event) })
        .await?;
    Ok(response.into_inner())
}

/// The IngestEvent event for a Gemini batch resource.
pub fn batch_resource_event(
    batch_json: &serde_json::Value,
) -> Result<pb::OperationEvent, PayloadError> {
    Ok(observation_event(&event_from_batch_resource(batch_json)?))
}

/// Sends what a poll observed (any provider's batch, decoded by
/// `tally_core::operation`) through IngestEvent (source POLLER).
pub async fn ingest_observation<T>(
    client: &mut OperationsServiceClient<T>,
    observation: &BatchObservation,
) -> Result<pb::IngestEventResponse, tonic::Status>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let event = observation_event(observation);
    let response = client
        .ingest_event(pb::IngestEventRequest { event: Some(event) })
        .await?;
    Ok(response.into_inner())
}

/// The IngestEvent event (source POLLER) for what a poll observed.
pub fn observation_event(obs: &BatchObservation) -> pb::OperationEvent {
    pb::OperationEvent {
        operation: obs.operation.clone(),
        state: state_text(obs),
        update_time: obs.update_time.map(|us| prost_types::Timestamp {
            seconds: us.div_euclid(1_000_000),
            nanos: (us.rem_euclid(1_000_000) * 1_000) as i32,
        }),
        source: pb::EventSource::Poller as i32,
        event_id: String::new(),
        output_file: obs.output_file.clone().unwrap_or_default(),
        error_code: obs.error_code.clone().unwrap_or_default(),
        error_message: obs.error_message.clone().unwrap_or_default(),
    }
}

/// The provider's own spelling when it says what the observation means (so
/// the event log shows what was read); otherwise the state the parser
/// settled on (e.g. from `done` and `error` when no state was given).
fn state_text(obs: &BatchObservation) -> String {
    match &obs.raw_state {
        Some(raw) if OpState::parse(raw) == obs.state => raw.clone(),
        Some(_) | None => obs.state.as_str().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_running_batch_becomes_a_poller_event() {
        let e = batch_resource_event(&json!({
            "name": "projects/p/locations/l/batches/abc",
            "metadata": {
                "state": "BATCH_STATE_RUNNING",
                "updateTime": "2024-05-01T10:00:00.000001Z"
            }
        }))
        .unwrap();
        assert_eq!(e.operation, "batches/abc");
        assert_eq!(e.state, "BATCH_STATE_RUNNING");
        assert_eq!(e.source, pb::EventSource::Poller as i32);
        assert_eq!(
            e.update_time,
            Some(prost_types::Timestamp {
                seconds: 1_714_557_600,
                nanos: 1_000
            })
        );
        assert!(e.event_id.is_empty());
    }

    #[test]
    fn a_done_batch_without_a_state_sends_the_derived_one() {
        let e = batch_resource_event(&json!({
            "name": "batches/abc",
            "done": true,
            "error": {"code": 13, "message": "internal"}
        }))
        .unwrap();
        assert_eq!(e.state, "FAILED");
        assert_eq!(e.error_code, "13");
        assert_eq!(e.error_message, "internal");
        assert_eq!(e.update_time, None);
    }

    #[test]
    fn a_succeeded_batch_carries_its_output_file() {
        let e = batch_resource_event(&json!({
            "name": "batches/abc",
            "metadata": {"state": "BATCH_STATE_SUCCEEDED"},
            "done": true,
            "response": {"responsesFile": "files/out"}
        }))
        .unwrap();
        assert_eq!(e.state, "BATCH_STATE_SUCCEEDED");
        assert_eq!(e.output_file, "files/out");
    }

    #[test]
    fn an_unreadable_resource_is_not_sent() {
        assert!(batch_resource_event(&json!({"metadata": {}})).is_err());
    }
}

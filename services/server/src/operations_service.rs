//! OperationsService: thin handlers over `tally-store`'s operations module,
//! and the translations between `tally.v1` operation messages and store
//! records (kept here, next to their only user).
//!
//! IngestEvent answers a drop as a normal response: the reducer refusing to
//! move an operation backward is the system working, not an error. Bad
//! input (a name that is not a batch name, no state, no source, a malformed
//! time) is INVALID_ARGUMENT and writes nothing.
//!
//! WatchOperations streams applied transitions from the event log itself,
//! one bounded page at a time, woken by `NOTIFY` (see [`crate::wakeup`])
//! with a poll as the fallback, so a slow consumer holds at most a page and
//! a small channel in memory and a reconnecting one resumes by sequence.

use crate::caller::{Access, access, linked_in_scope};
use crate::metrics::{EventLabels, Metrics};
use crate::paging;
use crate::status::{from_store, invalid, invalid_field};
use crate::wakeup::Wakeups;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tally_core::operation::{DropReason, OpEvent, OpState, normalize_name};
use tally_core::scope::Scope;
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_server::OperationsService;
use tally_store::Store;
use tally_store::operations::{
    EventRecord, EventSource, EventVerdict, IncomingEvent, IngestResult, MAX_EVENT_ID,
    OperationCursor, OperationRecord, TransitionRecord,
};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// Transitions read per page of a watch stream.
const WATCH_PAGE: i64 = 100;
/// Transitions buffered between a stream's reader and its consumer.
const WATCH_BUFFER: usize = 32;

/// Longest accepted text per event field.
const MAX_STATE: usize = 64;
const MAX_OUTPUT_FILE: usize = 2048;
const MAX_ERROR_CODE: usize = 256;
const MAX_ERROR_MESSAGE: usize = 4096;

pub struct Operations {
    store: Store,
    metrics: Metrics,
    wakeups: Wakeups,
    stop: CancellationToken,
    poll: Duration,
}

impl Operations {
    pub fn new(
        store: Store,
        metrics: Metrics,
        wakeups: Wakeups,
        stop: CancellationToken,
        poll: Duration,
    ) -> Self {
        describe_metrics(&metrics);
        Self {
            store,
            metrics,
            wakeups,
            stop,
            poll,
        }
    }
}

impl Operations {
    /// Whether the caller reaches operation `name`: the ledger of the job
    /// it is linked to must be inside the caller's scope. Decided before
    /// the operation is read, so an operation of another team and one that
    /// does not exist get the same answer.
    async fn check(&self, access: &Access, name: &str) -> Result<(), Status> {
        if access.everything() {
            return Ok(());
        }
        let job = self.store.operation_job(name).await.map_err(from_store)?;
        access.operation(name, job.as_deref())
    }
}

/// Creates the operation metrics at zero for every verdict and reason, so
/// dashboards see the series before the first drop.
pub fn describe_metrics(metrics: &Metrics) {
    let _ = metrics.operation_events.get_or_create(&EventLabels {
        verdict: "applied",
        reason: "",
    });
    for reason in DropReason::all() {
        let verdict = match reason {
            DropReason::TerminalConflict => "recorded",
            DropReason::RegressFromTerminal
            | DropReason::LowerRank
            | DropReason::StaleOrEqualUpdateTime
            | DropReason::DuplicateEvent => "dropped",
        };
        let _ = metrics.operation_events.get_or_create(&EventLabels {
            verdict,
            reason: reason.as_str(),
        });
    }
}

/// Counts one ingested event (gRPC and webhook alike) and logs it.
pub fn record_ingest(metrics: &Metrics, event: &IncomingEvent, result: &IngestResult) {
    let verdict = result.verdict().as_str();
    let reason = result.decision.reason().map_or("", |r| r.as_str());
    metrics
        .operation_events
        .get_or_create(&EventLabels { verdict, reason })
        .inc();
    if result.cas_conflicts > 0 {
        metrics
            .operation_cas_conflicts
            .inc_by(u64::from(result.cas_conflicts));
    }
    tracing::info!(
        operation = %event.operation,
        source = event.source.as_str(),
        state = %event.event.state,
        verdict,
        reason,
        sequence = result.sequence,
        "operation event"
    );
}

type Reply<T> = Result<Response<T>, Status>;
type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl OperationsService for Operations {
    async fn ingest_event(
        &self,
        req: Request<pb::IngestEventRequest>,
    ) -> Reply<pb::IngestEventResponse> {
        let access = access(&req);
        let event = incoming(req.into_inner())?;
        self.check(&access, &event.operation).await?;
        let result = self.store.ingest_event(&event).await.map_err(from_store)?;
        record_ingest(&self.metrics, &event, &result);
        Ok(Response::new(pb::IngestEventResponse {
            verdict: verdict_to_proto(result.verdict()) as i32,
            reason: result
                .decision
                .reason()
                .map_or(String::new(), |r| r.as_str().to_string()),
            operation: result.operation.as_ref().map(operation_to_proto),
            sequence: result.sequence,
        }))
    }

    async fn get_operation(&self, req: Request<pb::GetOperationRequest>) -> Reply<pb::Operation> {
        let name = operation_name("name", &req.get_ref().name)?;
        self.check(&access(&req), &name).await?;
        let op = self.store.get_operation(&name).await.map_err(from_store)?;
        Ok(Response::new(operation_to_proto(&op)))
    }

    async fn list_operations(
        &self,
        req: Request<pb::ListOperationsRequest>,
    ) -> Reply<pb::ListOperationsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let mut states = Vec::with_capacity(req.states.len());
        let mut v = Violations::new();
        for (i, code) in req.states.iter().enumerate() {
            match state_from_proto(*code) {
                Some(state) => states.push(state),
                None => v.add(
                    format!("states[{i}]"),
                    "must be PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED or EXPIRED",
                ),
            }
        }
        v.finish().map_err(invalid)?;
        let size = paging::page_size(req.page_size)?;
        let mut codes: Vec<String> = req.states.iter().map(i32::to_string).collect();
        codes.sort();
        codes.dedup();
        let filter = paging::fingerprint(&codes.iter().map(String::as_str).collect::<Vec<_>>());
        let after = paging::decode(&req.page_token, "operations", &filter)?
            .map(|a| decode_cursor(&a))
            .transpose()?;
        let ops = self
            .store
            .list_operations(&states, after.as_ref(), size, &access.scope.ledgers)
            .await
            .map_err(from_store)?;
        let (page, got) = crate::responses::page(&ops, size, operation_to_proto);
        let last = page
            .len()
            .checked_sub(1)
            .map(|i| encode_cursor(&ops[i].cursor()));
        Ok(Response::new(pb::ListOperationsResponse {
            operations: page,
            next_page_token: paging::next_token("operations", &filter, got, size, last.as_deref()),
        }))
    }

    async fn list_operation_events(
        &self,
        req: Request<pb::ListOperationEventsRequest>,
    ) -> Reply<pb::ListOperationEventsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let name = operation_name("parent", &req.parent)?;
        self.check(&access, &name).await?;
        let size = paging::page_size(req.page_size)?;
        let list = format!("operation_events:{name}");
        let after = match paging::decode(&req.page_token, &list, "")? {
            None => 0,
            Some(a) => a.parse::<i64>().map_err(|_| {
                invalid_field("page_token", "is not a token from this list; start again")
            })?,
        };
        let events = self
            .store
            .list_operation_events(&name, after, size)
            .await
            .map_err(from_store)?;
        let last = events.last().map(|e| e.sequence.to_string());
        Ok(Response::new(pb::ListOperationEventsResponse {
            events: events.iter().map(event_to_proto).collect(),
            next_page_token: paging::next_token(&list, "", events.len(), size, last.as_deref()),
        }))
    }

    type WatchOperationsStream = Events<pb::OperationTransition>;

    async fn watch_operations(
        &self,
        req: Request<pb::WatchOperationsRequest>,
    ) -> Reply<Self::WatchOperationsStream> {
        let access = access(&req);
        let after = match req.get_ref().after_sequence {
            0 => self
                .store
                .last_operation_sequence()
                .await
                .map_err(from_store)?,
            -1 => 0,
            n if n > 0 => n,
            _ => {
                return Err(invalid_field(
                    "after_sequence",
                    "must be -1 (from the first stored), 0 (from now) or a sequence number",
                ));
            }
        };
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        // Only transitions of operations linked to the caller's ledgers.
        let scope = (!access.everything()).then(|| access.scope.clone());
        tokio::spawn(stream_transitions(
            self.store.clone(),
            self.wakeups.clone(),
            scope,
            after,
            self.poll,
            tx,
            self.stop.clone(),
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Feeds one watch stream: reads a page after `after`, sends it (waiting
/// for the consumer), and sleeps until woken or the poll interval passes.
/// Ends when the consumer goes away, on a database error (sent as the
/// stream's status; the client resumes from its last sequence), or when the
/// server stops (a clean end of stream).
async fn stream_transitions(
    store: Store,
    wakeups: Wakeups,
    scope: Option<Arc<Scope>>,
    mut after: i64,
    poll: Duration,
    tx: mpsc::Sender<Result<pb::OperationTransition, Status>>,
    stop: CancellationToken,
) {
    let mut woken = wakeups.subscribe();
    loop {
        // Marked before reading, so a commit during the read wakes the
        // next wait instead of being slept through.
        woken.mark_unchanged();
        let page = tokio::select! {
            _ = stop.cancelled() => return,
            page = store.operation_transitions(after, WATCH_PAGE) => page,
        };
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                let _ = tx.send(Err(from_store(e))).await;
                return;
            }
        };
        let full = page.len() as i64 == WATCH_PAGE;
        for t in page {
            after = t.sequence;
            if !shows(scope.as_deref(), t.operation.job.as_deref()) {
                continue;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                sent = tx.send(Ok(transition_to_proto(&t))) => if sent.is_err() { return },
            }
        }
        if full {
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tx.closed() => return,
            _ = woken.changed() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Whether a stream limited to `scope` shows a transition of an operation
/// linked to `job` (unlinked operations only to the whole server).
fn shows(scope: Option<&Scope>, job: Option<&str>) -> bool {
    scope.is_none_or(|scope| linked_in_scope(scope, job))
}

// ---- requests to store inputs ----

/// Any spelling of a batch name (`operations/batches/abc`,
/// `batches/abc`, `projects/p/locations/l/batches/abc`, …) in `field`.
pub fn operation_name(field: &str, text: &str) -> Result<String, Status> {
    normalize_name(text).map_err(|e| invalid_field(field, e.to_string()))
}

fn incoming(req: pb::IngestEventRequest) -> Result<IncomingEvent, Status> {
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

fn encode_cursor(c: &OperationCursor) -> String {
    format!("{}/{}", c.create_time_us, c.name)
}

fn decode_cursor(text: &str) -> Result<OperationCursor, Status> {
    let bad = || invalid_field("page_token", "is not a token from this list; start again");
    let (time, name) = text.split_once('/').ok_or_else(bad)?;
    Ok(OperationCursor {
        create_time_us: time.parse().map_err(|_| bad())?,
        name: name.to_string(),
    })
}

// ---- store records to messages ----

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

fn state_from_proto(code: i32) -> Option<OpState> {
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

fn verdict_to_proto(verdict: EventVerdict) -> pb::EventVerdict {
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
        create_time: Some(crate::convert::timestamp(op.create_time)),
    }
}

fn event_to_proto(e: &EventRecord) -> pb::OperationEventRecord {
    pb::OperationEventRecord {
        sequence: e.sequence,
        source: source_to_proto(e.source) as i32,
        raw_state: e.raw_state.clone(),
        state: state_to_proto(e.state) as i32,
        update_time: e.update_time_us.map(micros_timestamp),
        receive_time: Some(crate::convert::timestamp(e.receive_time)),
        verdict: verdict_to_proto(e.verdict) as i32,
        reason: e.reason.map_or(String::new(), |r| r.as_str().to_string()),
        event_id: e.event_id.clone().unwrap_or_default(),
    }
}

fn transition_to_proto(t: &TransitionRecord) -> pb::OperationTransition {
    pb::OperationTransition {
        sequence: t.sequence,
        operation: Some(operation_to_proto(&t.operation)),
        from_state: t
            .from
            .map_or(pb::OperationState::Unspecified, state_to_proto) as i32,
        to_state: state_to_proto(t.operation.state) as i32,
        source: source_to_proto(t.source) as i32,
        time: Some(crate::convert::timestamp(t.time)),
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

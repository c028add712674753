//! OperationsService: thin handlers over `tally-store`'s operations module.
//! Requests are checked in [`super::validate`] and messages translated in
//! [`super::convert`].
//!
//! IngestEvent answers a drop as a normal response: the reducer refusing to
//! move an operation backward is the system working, not an error. Bad
//! input (a name that is not a batch name, no state, no source, a malformed
//! time) is INVALID_ARGUMENT and writes nothing.
//!
//! WatchOperations streams applied transitions from the event log itself
//! ([`crate::tasks::tail`] does the following: bounded pages, woken by `NOTIFY`
//! with a poll as the fallback, resumed by sequence).

use super::convert::{
    decode_cursor, encode_cursor, event_to_proto, operation_to_proto, state_from_proto,
    transition_to_proto, verdict_to_proto,
};
use super::validate::{incoming, operation_name};
use crate::edge::caller::{Access, access, linked_in_scope};
use crate::edge::paging;
use crate::edge::status::{from_store, invalid, invalid_field};
use crate::metrics::{EventLabels, Metrics};
use crate::tasks::tail::{self, Source, Start, Tails};
use std::pin::Pin;
use std::sync::Arc;
use tally_core::operation::DropReason;
use tally_core::scope::Scope;
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_server::OperationsService;
use tally_store::Store;
use tally_store::event_log::Log;
use tally_store::operations::{IncomingEvent, IngestResult, TransitionRecord};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct Operations {
    store: Store,
    metrics: Metrics,
    /// Watch streams (they end when the server stops).
    tails: Tails,
}

impl Operations {
    pub fn new(store: Store, metrics: Metrics, tails: Tails) -> Self {
        describe_metrics(&metrics);
        Self {
            store,
            metrics,
            tails,
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
        let (page, got) = crate::edge::responses::page(&ops, size, operation_to_proto);
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
        let after = match tail::start(req.get_ref().after_sequence)? {
            Start::Now => self
                .store
                .last_operation_sequence()
                .await
                .map_err(from_store)?,
            Start::After(n) => n,
        };
        // Only transitions of operations linked to the caller's ledgers.
        let scope = (!access.everything()).then(|| access.scope.clone());
        let stream = self.tails.stream(Transitions { scope }, after, ());
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The operation transitions one WatchOperations stream shows.
struct Transitions {
    scope: Option<Arc<Scope>>,
}

impl Source for Transitions {
    type Entry = TransitionRecord;
    type Message = pb::OperationTransition;
    const LOG: Log = Log::Operations;
    const BUFFER: usize = 32;

    async fn page(
        &self,
        store: &Store,
        after: i64,
        limit: i64,
    ) -> tally_store::Result<Vec<TransitionRecord>> {
        store.operation_transitions(after, limit).await
    }

    fn seq(entry: &TransitionRecord) -> i64 {
        entry.sequence
    }

    fn show(&self, entry: &TransitionRecord) -> Option<pb::OperationTransition> {
        let job = entry.operation.job.as_deref();
        shows(self.scope.as_deref(), job).then(|| transition_to_proto(entry))
    }
}

/// Whether a stream limited to `scope` shows a transition of an operation
/// linked to `job` (unlinked operations only to the whole server).
fn shows(scope: Option<&Scope>, job: Option<&str>) -> bool {
    scope.is_none_or(|scope| linked_in_scope(scope, job))
}

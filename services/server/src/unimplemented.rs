//! OperationsService until its issue lands: registered so the API is whole,
//! answering UNIMPLEMENTED.

use std::pin::Pin;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_server::OperationsService;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct Operations;

type Reply<T> = Result<Response<T>, Status>;
type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn todo(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not implemented yet"))
}

#[tonic::async_trait]
impl OperationsService for Operations {
    async fn ingest_event(
        &self,
        _: Request<pb::IngestEventRequest>,
    ) -> Reply<pb::IngestEventResponse> {
        Err(todo("IngestEvent"))
    }
    async fn get_operation(&self, _: Request<pb::GetOperationRequest>) -> Reply<pb::Operation> {
        Err(todo("GetOperation"))
    }
    async fn list_operations(
        &self,
        _: Request<pb::ListOperationsRequest>,
    ) -> Reply<pb::ListOperationsResponse> {
        Err(todo("ListOperations"))
    }
    async fn list_operation_events(
        &self,
        _: Request<pb::ListOperationEventsRequest>,
    ) -> Reply<pb::ListOperationEventsResponse> {
        Err(todo("ListOperationEvents"))
    }
    type WatchOperationsStream = Events<pb::OperationTransition>;
    async fn watch_operations(
        &self,
        _: Request<pb::WatchOperationsRequest>,
    ) -> Reply<Self::WatchOperationsStream> {
        Err(todo("WatchOperations"))
    }
}

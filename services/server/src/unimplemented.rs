//! JobService until its issue lands: registered so the API is whole,
//! answering UNIMPLEMENTED.

use std::pin::Pin;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_server::JobService;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct Jobs;

type Reply<T> = Result<Response<T>, Status>;
type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn todo(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not implemented yet"))
}

#[tonic::async_trait]
impl JobService for Jobs {
    async fn create_job(&self, _: Request<pb::CreateJobRequest>) -> Reply<pb::Job> {
        Err(todo("CreateJob"))
    }
    async fn get_job(&self, _: Request<pb::GetJobRequest>) -> Reply<pb::Job> {
        Err(todo("GetJob"))
    }
    async fn list_jobs(&self, _: Request<pb::ListJobsRequest>) -> Reply<pb::ListJobsResponse> {
        Err(todo("ListJobs"))
    }
    async fn mark_submitted(&self, _: Request<pb::MarkSubmittedRequest>) -> Reply<pb::Job> {
        Err(todo("MarkSubmitted"))
    }
    async fn adopt_jobs(&self, _: Request<pb::AdoptJobsRequest>) -> Reply<pb::AdoptJobsResponse> {
        Err(todo("AdoptJobs"))
    }
    async fn finish_job(&self, _: Request<pb::FinishJobRequest>) -> Reply<pb::Job> {
        Err(todo("FinishJob"))
    }
    type WatchJobsStream = Events<pb::JobEvent>;
    async fn watch_jobs(&self, _: Request<pb::WatchJobsRequest>) -> Reply<Self::WatchJobsStream> {
        Err(todo("WatchJobs"))
    }
    async fn acquire_lock(
        &self,
        _: Request<pb::AcquireLockRequest>,
    ) -> Reply<pb::AcquireLockResponse> {
        Err(todo("AcquireLock"))
    }
    async fn renew_lock(&self, _: Request<pb::RenewLockRequest>) -> Reply<pb::Lock> {
        Err(todo("RenewLock"))
    }
    async fn release_lock(&self, _: Request<pb::ReleaseLockRequest>) -> Reply<()> {
        Err(todo("ReleaseLock"))
    }
}

//! JobService: thin handlers. Each checks its request (see
//! [`super::validate`]), makes one store call and encodes the answer
//! ([`super::convert`]). WatchJobs hands the stream to [`super::watch`].

use super::convert::{capacity_to_proto, held_to_proto, job_to_proto, lock_to_proto};
use super::media;
use super::validate;
use super::watch::{JobEvents, Open};
use crate::edge::caller::access;
use crate::edge::paging;
use crate::edge::status::{from_store, invalid_field};
use crate::ledger::convert::claim_to_proto;
use crate::ledger::golden;
use crate::ledger::validate as ledger_validate;
use crate::metrics::Metrics;
use crate::tasks::tail::{self, Start, Tails};
use std::pin::Pin;
use tally_core::names;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_server::JobService;
use tally_store::Store;
use tally_store::capacity::CapacityAsk;
use tally_store::holders::MAX_HOLDERS;
use tally_store::types::{CreateAttempt, JobOrigin, NotCreated};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct Jobs {
    store: Store,
    /// Watch streams (they end when the server stops).
    tails: Tails,
    metrics: Metrics,
}

impl Jobs {
    pub fn new(store: Store, tails: Tails, metrics: Metrics) -> Self {
        Self {
            store,
            tails,
            metrics,
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;
type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl JobService for Jobs {
    async fn report_golden_results(
        &self,
        req: Request<pb::ReportGoldenResultsRequest>,
    ) -> Reply<pb::ReportGoldenResultsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let answers = golden::answers(&req)?;
        let r = self
            .store
            .report_golden(&ledger, &job, token, &answers)
            .await
            .map_err(from_store)?;
        self.metrics
            .golden_recorded(&ledger, &r.drift.model, r.matched, r.mismatched);
        Ok(Response::new(pb::ReportGoldenResultsResponse {
            matched: r.matched as i32,
            mismatched: r.mismatched as i32,
            drift: Some(golden::drift_to_proto(&r.drift)),
        }))
    }
    async fn lookup_media_uploads(
        &self,
        req: Request<pb::LookupMediaUploadsRequest>,
    ) -> Reply<pb::LookupMediaUploadsResponse> {
        let (ledger, hashes) = media::lookup(req.get_ref())?;
        let access = access(&req);
        access.ledger(&ledger)?;
        let (uploads, stored_bytes) = self
            .store
            .lookup_media_uploads(&access.name, &req.get_ref().provider_account, &hashes)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::LookupMediaUploadsResponse {
            uploads: uploads.iter().map(media::to_proto).collect(),
            stored_bytes,
        }))
    }

    async fn record_media_upload(
        &self,
        req: Request<pb::RecordMediaUploadRequest>,
    ) -> Reply<pb::MediaUpload> {
        let (ledger, upload) = media::record(req.get_ref())?;
        let access = access(&req);
        access.ledger(&ledger)?;
        let got = self
            .store
            .record_media_upload(&access.name, &upload)
            .await
            .map_err(from_store)?;
        Ok(Response::new(media::to_proto(&got)))
    }

    async fn list_media_uploads(
        &self,
        req: Request<pb::ListMediaUploadsRequest>,
    ) -> Reply<pb::ListMediaUploadsResponse> {
        let ledger = ledger_validate::ledger("parent", &req.get_ref().parent)?;
        let access = access(&req);
        access.ledger(&ledger)?;
        let req = req.into_inner();
        let size = paging::page_size(req.page_size)?;
        let list = format!("media:{}", req.provider_account);
        let after = paging::decode(&req.page_token, &list, "")?;
        let uploads = self
            .store
            .list_media_uploads(&access.name, &req.provider_account, after.as_deref(), size)
            .await
            .map_err(from_store)?;
        let (page, got) = crate::edge::responses::page(&uploads, size, media::to_proto);
        let last = page.last().map(|u| u.sha256.clone());
        Ok(Response::new(pb::ListMediaUploadsResponse {
            next_page_token: paging::next_token(&list, "", got, size, last.as_deref()),
            uploads: page,
        }))
    }

    async fn forget_media_upload(&self, req: Request<pb::ForgetMediaUploadRequest>) -> Reply<()> {
        let (ledger, hash) = media::forget(req.get_ref())?;
        let access = access(&req);
        access.ledger(&ledger)?;
        let r = req.get_ref();
        self.store
            .forget_media_upload(&access.name, &r.provider_account, &hash, &r.file)
            .await
            .map_err(from_store)?;
        Ok(Response::new(()))
    }

    async fn acquire_capacity(
        &self,
        req: Request<pb::AcquireCapacityRequest>,
    ) -> Reply<pb::AcquireCapacityResponse> {
        let access = access(&req);
        let r = req.get_ref();
        let parts = validate::capacity(r)?;
        access.ledger(&parts.ledger)?;
        let ask = CapacityAsk {
            ledger: &parts.ledger,
            claim: parts.claim,
            account: parts.account,
            tokens: &r.tokens,
            rate_limited: parts.rate_limited,
            shed: r.shed,
            refused: parts.pause.map(|reason| (reason, r.reason.as_str())),
            actor: &access.name,
        };
        let got = self
            .store
            .acquire_capacity(&ask)
            .await
            .map_err(from_store)?;
        Ok(Response::new(capacity_to_proto(&got)))
    }

    async fn create_job(&self, req: Request<pb::CreateJobRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let (ledger, token) = ledger_validate::claim("claim", &req.get_ref().claim)?;
        let account = validate::provider_account(&req.get_ref().provider_account)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let origin = JobOrigin {
            account,
            team: &actor,
        };
        let job = self
            .store
            .create_job_in(&ledger, token, &actor, &origin)
            .await
            .map_err(from_store)?;
        let mut out = job_to_proto(&job);
        out.provider_token_limit = self.store.provider_quotas().tokens_of(&job.model);
        Ok(Response::new(out))
    }

    async fn get_job(&self, req: Request<pb::GetJobRequest>) -> Reply<pb::Job> {
        let (ledger, job) = validate::job("name", &req.get_ref().name)?;
        access(&req).ledger(&ledger)?;
        let job = self
            .store
            .get_job(&ledger, &job)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn list_jobs(&self, req: Request<pb::ListJobsRequest>) -> Reply<pb::ListJobsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = ledger_validate::ledger("parent", &req.parent)?;
        access.ledger(&ledger)?;
        let states = validate::states(&req.states)?;
        let size = paging::page_size(req.page_size)?;
        let list = format!("jobs:{ledger}");
        let codes: Vec<String> = states.iter().map(|s| s.code().to_string()).collect();
        let fp = paging::fingerprint(&[&codes.join(",")]);
        let after = match paging::decode(&req.page_token, &list, &fp)? {
            Some(a) => Some(a.parse::<i64>().map_err(|_| {
                invalid_field("page_token", "is not a token from this list; start again")
            })?),
            None => None,
        };
        let jobs = self
            .store
            .list_jobs(&ledger, &states, after, size)
            .await
            .map_err(from_store)?;
        let (page, got) = crate::edge::responses::page(&jobs, size, job_to_proto);
        let last = page.len().checked_sub(1).map(|i| jobs[i].id.to_string());
        Ok(Response::new(pb::ListJobsResponse {
            next_page_token: paging::next_token(&list, &fp, got, size, last.as_deref()),
            jobs: page,
        }))
    }

    async fn mark_creating(&self, req: Request<pb::MarkCreatingRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let (input_file, estimated_tokens, media) = validate::creating(&req)?;
        let attempt = CreateAttempt {
            estimated_tokens,
            media: &media,
        };
        let job = self
            .store
            .mark_creating(&ledger, &job, token, &input_file, &attempt, &actor)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn mark_not_created(&self, req: Request<pb::MarkNotCreatedRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let parts = validate::not_created(&req)?;
        let not = NotCreated {
            reason: &req.reason,
            cooldown: parts.cooldown,
            pause: parts.pause,
            batch_refused: req.batch_refused,
        };
        let job = self
            .store
            .mark_not_created(&ledger, &job, token, &not, &actor)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn flag_create_unresolved(
        &self,
        req: Request<pb::FlagCreateUnresolvedRequest>,
    ) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        validate::unresolved(&req)?;
        let job = self
            .store
            .flag_create_unresolved(&ledger, &job, token, &req.reason)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn mark_submitted(&self, req: Request<pb::MarkSubmittedRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let (batch, input_file) = validate::submission(&req)?;
        let job = self
            .store
            .mark_submitted(&ledger, &job, token, &batch, &input_file, &actor)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn adopt_jobs(&self, req: Request<pb::AdoptJobsRequest>) -> Reply<pb::AdoptJobsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let adopt = validate::adopt(&req)?;
        access.ledger(&adopt.ledger)?;
        let worker = if req.worker.is_empty() {
            &access.name
        } else {
            &req.worker
        };
        let taken_over = match &adopt.process {
            Some(process) => self
                .store
                .take_over(&adopt.ledger, worker, process, adopt.starting, &adopt.gone)
                .await
                .map_err(from_store)?,
            None => 0,
        };
        let r = self
            .store
            .adopt_jobs(
                &adopt.ledger,
                &req.worker,
                adopt.max,
                adopt.lease,
                &access.name,
            )
            .await
            .map_err(from_store)?;
        let held = self
            .store
            .held_jobs(&adopt.ledger, worker, MAX_HOLDERS as i64)
            .await
            .map_err(from_store)?;
        self.metrics.jobs_adopted.inc_by(r.adopted.len() as u64);
        Ok(Response::new(pb::AdoptJobsResponse {
            jobs: r
                .adopted
                .iter()
                .map(|a| pb::AdoptedJob {
                    job: Some(job_to_proto(&a.job)),
                    claim: Some(claim_to_proto(&a.claim)),
                    keys: a.keys.clone(),
                })
                .collect(),
            released_jobs: r.released_jobs as i32,
            held: held
                .iter()
                .map(|h| held_to_proto(&adopt.ledger, h))
                .collect(),
            taken_over: taken_over.min(i64::from(i32::MAX)) as i32,
        }))
    }

    async fn hand_over_job(&self, req: Request<pb::HandOverJobRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let job = self
            .store
            .hand_over_job(&ledger, &job, token, &access.name)
            .await
            .map_err(from_store)?;
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn finish_job(&self, req: Request<pb::FinishJobRequest>) -> Reply<pb::Job> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, job, token) = validate::job_and_claim(&req.name, &req.claim)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let finish = validate::finish(&req)?;
        let job = self
            .store
            .finish_job(&ledger, &job, token, &finish, &actor)
            .await
            .map_err(from_store)?;
        if let (true, Some(submitted), Some(ended)) =
            (job.closed_now, job.submit_time, job.end_time)
        {
            self.metrics
                .batch_finished(&job.model, (ended - submitted).as_seconds_f64());
        }
        Ok(Response::new(job_to_proto(&job)))
    }

    type WatchJobsStream = Events<pb::JobEvent>;

    async fn watch_jobs(&self, req: Request<pb::WatchJobsRequest>) -> Reply<Self::WatchJobsStream> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = names::parse_ledger_or_all(&req.parent)
            .map_err(|e| invalid_field("parent", e.to_string()))?;
        let start = tail::start(req.after_sequence)?;
        if let Some(l) = ledger {
            access.ledger(l)?;
        }
        let ledger_id = match ledger {
            Some(l) => Some(self.store.ledger_id(l).await.map_err(from_store)?),
            None => None,
        };
        let after = match start {
            Start::Now => self.store.last_job_event().await.map_err(from_store)?,
            Start::After(n) => n,
        };
        // `ledgers/-` shows only the ledgers the caller reaches.
        let scope = (!access.everything()).then(|| access.scope.clone());
        let source = JobEvents { ledger_id, scope };
        let stream = self
            .tails
            .stream(source, after, Open::new(self.metrics.clone()));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn acquire_lock(
        &self,
        req: Request<pb::AcquireLockRequest>,
    ) -> Reply<pb::AcquireLockResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (name, ttl) = validate::lock_and_ttl(&req.name, req.ttl.as_ref())?;
        access.lock(&name)?;
        validate::owner(&req.owner)?;
        // Without a given owner, the caller's name says who holds it.
        let owner = if req.owner.is_empty() {
            access.name
        } else {
            req.owner
        };
        let r = self
            .store
            .acquire_lock(&name, &owner, ttl)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::AcquireLockResponse {
            acquired: r.acquired,
            lock: Some(lock_to_proto(&r.lock)),
        }))
    }

    async fn renew_lock(&self, req: Request<pb::RenewLockRequest>) -> Reply<pb::Lock> {
        let access = access(&req);
        let req = req.into_inner();
        let (name, ttl) = validate::lock_and_ttl(&req.name, req.ttl.as_ref())?;
        access.lock(&name)?;
        let token = validate::lock_token(&req.token)?;
        let lock = self
            .store
            .renew_lock(&name, token, ttl)
            .await
            .map_err(from_store)?;
        Ok(Response::new(lock_to_proto(&lock)))
    }

    async fn release_lock(&self, req: Request<pb::ReleaseLockRequest>) -> Reply<()> {
        let access = access(&req);
        let req = req.into_inner();
        let name = names::parse_lock(&req.name)
            .map_err(|e| invalid_field("name", e.to_string()))?
            .to_string();
        access.lock(&name)?;
        let token = validate::lock_token(&req.token)?;
        self.store
            .release_lock(&name, token)
            .await
            .map_err(from_store)?;
        Ok(Response::new(()))
    }
}

//! What a job records at tally about its create, once the create's outcome
//! is known: the batch made (MarkSubmitted), or no batch and why
//! (MarkNotCreated, with what a refusal asks of tally); and how a create
//! ended for the job's task ([`CreateEnd`]).

use std::time::Duration;

use tally_client::with_retry;
use tally_proto::v1 as pb;

use crate::ctx::Ctx;

/// How a create ended.
#[derive(Debug)]
pub enum CreateEnd {
    /// The batch exists and is recorded: the job as MarkSubmitted left it.
    Submitted(Box<pb::Job>),
    /// No batch exists; the job is closed and its rows went back.
    NeverMade,
    /// Shutdown while the search was unresolved: the job waits for
    /// adoption (its rows are not released).
    LeftForAdoption,
}

/// Records the batch `batch` as the job's (retried; the same call again is
/// a no-op). Failing, the job stays CREATING and is found again on
/// adoption.
pub(crate) async fn mark_submitted(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    batch: &str,
) -> Result<pb::Job, tonic::Status> {
    let req = pb::MarkSubmittedRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        batch: batch.to_string(),
        input_file: job.input_file.clone(),
    };
    let got = with_retry(ctx.retry, "MarkSubmitted", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.mark_submitted(req).await }
    })
    .await;
    if let Err(s) = &got {
        // The job stays CREATING: whoever adopts it finds the batch.
        tracing::error!(job = %job.job_id, batch, error = %s, "batch made but not recorded; it will be found again on adoption");
    }
    got.map(tonic::Response::into_inner)
}

/// What MarkNotCreated tells tally beyond the reason.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Refusal {
    pub cooldown: Option<Duration>,
    pub lasting: Option<pb::ProviderRefusal>,
    /// The batch exists, and the provider refused it before it ran.
    pub batch_refused: bool,
}

/// Closes the job without a batch; its rows go back with no attempt, and
/// the refusal (if any) is recorded.
pub(crate) async fn mark_not_created(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    reason: &str,
    refusal: Refusal,
) -> Result<pb::Job, tonic::Status> {
    let req = pb::MarkNotCreatedRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        reason: reason.chars().take(1024).collect(),
        provider_cooldown: refusal
            .cooldown
            .and_then(|d| prost_types::Duration::try_from(d).ok()),
        provider_refusal: refusal.lasting.map_or(0, |r| r as i32),
        batch_refused: refusal.batch_refused,
    };
    with_retry(ctx.retry, "MarkNotCreated", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.mark_not_created(req).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Tells tally the job's lost create cannot be resolved within its
/// search's bound (`reason`): the job shows it to operators until the
/// search ends. A failure is logged: the search goes on either way.
pub(crate) async fn flag_create_unresolved(ctx: &Ctx, job: &pb::Job, claim: &str, reason: &str) {
    let req = pb::FlagCreateUnresolvedRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        reason: reason.chars().take(1024).collect(),
    };
    let got = with_retry(ctx.retry, "FlagCreateUnresolved", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.flag_create_unresolved(req).await }
    })
    .await;
    if let Err(s) = got {
        tracing::warn!(job = %job.job_id, error = s.message(), "could not flag the unresolved create on the job");
    }
}

//! A submitted job followed to its end: woken by the WatchOperations
//! stream (webhooks) and by a slow poller that feeds the provider's view
//! through IngestEvent; GetJob says what is true. A batch past
//! `--batch-deadline` is cancelled and followed to its end like any other;
//! a batch the provider no longer knows is taken for gone only after
//! `--gone-after`; polls refused for good pause the ledger and space out
//! ([`super::reads`]). Then it is reconciled ([`super::reconcile`]).

use std::collections::HashMap;
use std::sync::Arc;

use tally_client::{ingest_observation, with_retry};
use tally_proto::v1 as pb;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::end::{JobEnd, JobError};
use super::gone::GoneWatch;
use super::reads::Refused;
use super::reconcile::{self, finish};
use crate::ctx::{Answer, Ctx};
use crate::provider::ProviderError;
use crate::refusal::Read;

/// Waits for the job's batch to end, then reconciles it.
pub(super) async fn follow(
    ctx: &Arc<Ctx>,
    job: pb::Job,
    claim: &str,
    expect: HashMap<String, Answer>,
    stop: &CancellationToken,
) -> Result<JobEnd, JobError> {
    let operation = if job.operation.is_empty() {
        format!("operations/{}", job.batch)
    } else {
        job.operation.clone()
    };
    let mut wake = ctx.ops.subscribe();
    let mut next_poll = tokio::time::Instant::now() + ctx.args.poll_interval;
    let mut gone = GoneWatch::default();
    let mut refused = Refused::default();
    // Set once this worker cancelled the batch for its deadline: the batch
    // is still followed to its end, so what it answered before the cancel
    // is read and reported like any other partial output.
    let mut cancelled = String::new();
    let done = loop {
        let now = get_job(ctx, &job.name).await?;
        match now.state() {
            pb::JobState::Succeeded
            | pb::JobState::Failed
            | pb::JobState::Cancelled
            | pb::JobState::Expired => break now,
            pb::JobState::Reconciled => return Ok(JobEnd::Reconciled),
            pb::JobState::Unspecified
            | pb::JobState::Preparing
            | pb::JobState::Creating
            | pb::JobState::Submitted
            | pb::JobState::Running => {}
        }
        if now.claim != claim {
            tracing::warn!(job = %job.job_id, "job is fenced by another claim now; leaving it");
            return Ok(JobEnd::Lost);
        }
        if cancelled.is_empty() && past_deadline(ctx, &now) {
            cancelled = format!(
                "the batch did not finish within --batch-deadline ({}); cancelled",
                humantime::format_duration(ctx.args.batch_deadline)
            );
            tracing::warn!(job = %job.job_id, batch = %job.batch, "{cancelled}; following it until it ends");
            if let Err(e) = ctx.provider.cancel_batch(&job.batch).await {
                tracing::warn!(job = %job.job_id, batch = %job.batch, error = %e, "cancel failed");
            }
            next_poll = tokio::time::Instant::now();
        }
        // Until our operation moves, the poll is due, or we are told to stop.
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    tracing::info!(job = %job.job_id, batch = %job.batch, "shutting down; job left for adoption");
                    return Ok(JobEnd::LeftForAdoption);
                }
                got = wake.recv() => match got {
                    Ok(name) if name == operation => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => {
                        tokio::time::sleep_until(next_poll).await;
                    }
                },
                _ = tokio::time::sleep_until(next_poll) => {
                    let mut every = ctx.args.poll_interval;
                    match poll(ctx, &job.batch, claim, &mut refused).await? {
                        Polled::Seen => gone.seen(),
                        Polled::Failed => {}
                        Polled::Refused(wait) => every = wait,
                        Polled::NotFound(message) => {
                            if gone.not_found(std::time::Instant::now(), ctx.args.gone_after) {
                                let why = reconcile::gone_reason(&job.batch, ctx, &message);
                                tracing::warn!(job = %job.job_id, batch = %job.batch, "{why}");
                                return finish(ctx, &now, claim, pb::JobState::Failed, "", &why).await;
                            }
                            tracing::info!(job = %job.job_id, batch = %job.batch, "batch answered 404; asking again before taking it for gone");
                        }
                    }
                    next_poll = tokio::time::Instant::now() + every;
                    break;
                }
            }
        }
    };
    reconcile::reconcile(ctx, done, claim, expect, stop, &cancelled).await
}

/// The job as tally has it now.
pub(super) async fn get_job(ctx: &Ctx, name: &str) -> Result<pb::Job, Status> {
    with_retry(ctx.retry, "GetJob", || {
        let mut c = ctx.clients.jobs.clone();
        let req = pb::GetJobRequest {
            name: name.to_string(),
        };
        async move { c.get_job(req).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// The reconciliation poller: the provider's view, through the reducer.
/// A poll refused for good pauses the ledger ([`Refused`]).
async fn poll(
    ctx: &Ctx,
    batch: &str,
    claim: &str,
    refused: &mut Refused,
) -> Result<Polled, JobError> {
    let got = ctx.provider.get_batch(batch).await;
    if let Err(e) = &got
        && let Some(wait) = refused
            .met(ctx, claim, Read::Poll, e, ctx.args.poll_interval)
            .await?
    {
        return Ok(Polled::Refused(wait));
    }
    Ok(match got {
        Ok(observed) => {
            refused.answered();
            ctx.metrics.polled();
            let mut c = ctx.clients.operations.clone();
            match ingest_observation(&mut c, &observed.observation).await {
                Ok(r) => tracing::debug!(batch, verdict = r.verdict, reason = %r.reason, "polled"),
                Err(e) => tracing::warn!(batch, error = %e, "poll not ingested"),
            }
            Polled::Seen
        }
        // Deleted at the provider (by an operator, or gone after its
        // retention), or a 404 that proves nothing (another project's key):
        // the caller decides over a window.
        Err(ProviderError::Http {
            code: 404, message, ..
        }) => Polled::NotFound(message),
        Err(e) => {
            tracing::warn!(batch, error = %e, "poll failed");
            Polled::Failed
        }
    })
}

/// What a poll learned.
enum Polled {
    /// The provider's view went through the reducer.
    Seen,
    /// The poll failed for a reason that may pass.
    Failed,
    /// The provider answered 404: its message.
    NotFound(String),
    /// Refused for good (the ledger is paused): the next poll waits this.
    Refused(std::time::Duration),
}

/// Whether a submitted batch has outlived `--batch-deadline`.
fn past_deadline(ctx: &Ctx, job: &pb::Job) -> bool {
    let Some(submitted) = job
        .submit_time
        .as_ref()
        .and_then(|t| std::time::SystemTime::try_from(*t).ok())
    else {
        return false;
    };
    submitted
        .elapsed()
        .is_ok_and(|age| age > ctx.args.batch_deadline)
}

//! Making a job's batch without ever paying twice for its rows.
//!
//! Batch creation is not idempotent, and its answer can be lost (timeout,
//! reset, 5xx after the batch was made). So before the create call goes
//! out, tally records MarkCreating (the job becomes CREATING): from then on
//! nobody releases the job's rows (not this worker on an error, not the
//! sweeper when this worker dies, not ReleaseClaim) until a search of the
//! provider's whole batch list proves the batch made (by its tag,
//! `tally/{ledger}/{job id}`) or never made (a witness: [`crate::lookup`]).
//! Made, the batch is recorded (MarkSubmitted) and followed; never made,
//! MarkNotCreated gives the rows back without an attempt. Unproven, the
//! rows wait. A worker that adopts a CREATING job runs the same search.
//! Where batches carry no tag (Anthropic), the batches made in the
//! attempt's window are told apart by their results once they ended
//! ([`crate::lookup`]): the rows wait for every one of them. The search is
//! [`crate::job::search`]; what is recorded at tally, [`crate::job::marks`].

use tally_client::with_retry;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use crate::config::Failpoint;
use crate::ctx::Ctx;
use crate::job::end::JobError;
use crate::job::marks::{CreateEnd, Refusal, mark_not_created, mark_submitted};
use crate::provider::ProviderError;
use crate::refusal::Refusal as Kind;
use crate::waits::Next;

/// What a job sends in its batch.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// The rows' keys.
    pub keys: Vec<String>,
    /// Their estimated input tokens.
    pub tokens: u64,
    /// The enqueued-token limit tally admits the model under (0: none).
    pub token_limit: u64,
    /// SHA-256 of each media upload the batch references.
    pub media: Vec<String>,
    /// The input lines, for a provider that takes them inline in the
    /// create (empty otherwise: they were uploaded).
    pub lines: bytes::Bytes,
}

/// Records MarkCreating (retried; the same call again is a no-op), with the
/// batch's estimated tokens for admission.
pub async fn mark_creating(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    input_file: &str,
    sent: &Sent,
) -> Result<pb::Job, tonic::Status> {
    let req = pb::MarkCreatingRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        input_file: input_file.to_string(),
        estimated_tokens: i64::try_from(sent.tokens).unwrap_or(i64::MAX),
        media_sha256: sent.media.clone(),
    };
    with_retry(ctx.retry, "MarkCreating", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.mark_creating(req).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Sends the create for a CREATING job and records what became of it: a
/// batch made is recorded; a refusal waits, shrinks the next batch or
/// stops the ledger ([`crate::refusal`]); anything else is searched for.
pub async fn create(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    model: &str,
    mut sent: Sent,
    stop: &CancellationToken,
) -> Result<CreateEnd, JobError> {
    let display_name = crate::tags::display_name(&ctx.ledger, &job.job_id);
    let at_provider = tally_core::provider::route(model).model;
    // Inline input lines are let go once sent, before any search.
    let lines = std::mem::take(&mut sent.lines);
    // A create sent again (its input file was not visible yet) records its
    // attempt anew first: a search for its lost answer counts from then.
    let latest = std::sync::Mutex::new(job.clone());
    let created = {
        let (sent, latest) = (&sent, &latest);
        let resend = move || -> futures::future::BoxFuture<'_, bool> {
            Box::pin(async move {
                match mark_creating(ctx, job, claim, &job.input_file, sent).await {
                    Ok(marked) => {
                        *latest.lock().unwrap_or_else(|p| p.into_inner()) = marked;
                        true
                    }
                    Err(s) => {
                        tracing::warn!(job = %job.job_id, error = %s.message(), "the create's new attempt could not be recorded; not sending it again");
                        false
                    }
                }
            })
        };
        ctx.provider
            .create_batch(at_provider, &display_name, &job.input_file, &lines, &resend)
            .await
    };
    drop(lines);
    let latest = latest.into_inner().unwrap_or_else(|p| p.into_inner());
    let job = &latest;
    let e = match created {
        Ok(batch) => {
            ctx.args.failpoint(Failpoint::AfterCreate);
            ctx.metrics.batch_created(sent.keys.len() as u64);
            ctx.batch_made(model, sent.token_limit);
            return Ok(CreateEnd::Submitted(Box::new(
                mark_submitted(ctx, job, claim, &batch).await?,
            )));
        }
        Err(e) => e,
    };
    let Some(refusal) = ctx.provider.wire().classify(&e) else {
        tracing::warn!(job = %job.job_id, error = %e, "batch create unresolved; searching the provider for it");
        return crate::job::search::resolve(ctx, job, claim, stop).await;
    };
    refused(
        ctx,
        job,
        claim,
        model,
        &sent.keys,
        sent.tokens,
        "create",
        e,
        refusal,
    )
    .await?;
    Ok(CreateEnd::NeverMade)
}

/// What a definite refusal of the job's upload or create (`call`) asks
/// of tally, done before the rows go back so the same rows never go out
/// the same way again: the model cools down for every worker of the
/// account (and the next batch is smaller), a smaller batch, the row at
/// fault failed, or the ledger paused (answered as the error). The job
/// closes without a batch.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn refused(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    model: &str,
    keys: &[String],
    tokens: u64,
    call: &str,
    e: ProviderError,
    refusal: Kind,
) -> Result<(), JobError> {
    // The provider answered and made nothing.
    tracing::warn!(job = %job.job_id, error = %e, ?refusal, rows = keys.len(), tokens, "batch {call} refused");
    let mut reason = format!("the {call} was refused: {e}");
    let mut not = Refusal::default();
    let mut wait = None;
    match refusal {
        Kind::Wait(named) => {
            // The project's quota (enqueued tokens, rate): the model cools
            // down for every worker of the account, and this worker's next
            // batch of it is smaller in case its size was the problem.
            ctx.create_refused(model, tokens);
            match ctx.capacity_wait(model, named) {
                Next::Wait(d) => {
                    not.cooldown = Some(d);
                    wait = Some(d);
                }
                Next::Pause(n) => {
                    reason = format!(
                        "{reason} ({n} refusals in a row named no delay; resume the ledger when the provider takes work again)"
                    );
                    not.lasting = Some(pb::ProviderRefusal::Quota);
                }
            }
        }
        Kind::TooLarge => {
            ctx.create_refused(model, tokens);
            if let [key] = keys {
                // One row alone is too large: that row can never be sent.
                let why = format!("a batch of this row alone was refused as too large: {e}");
                let outcome = crate::job::settle::invalid_input(key, &why);
                crate::job::settle::report(ctx, claim, vec![outcome]).await?;
            }
        }
        Kind::Invalid(index) => {
            // The request the provider named is that row's fault; the
            // others go back as they are.
            if let Some(key) = keys.get(index) {
                let why = format!("the provider refused this row's request: {e}");
                let outcome = crate::job::settle::invalid_input(key, &why);
                crate::job::settle::report(ctx, claim, vec![outcome]).await?;
            } else {
                not.lasting = Some(tally_proto::v1::ProviderRefusal::Request);
            }
        }
        Kind::Stop(r) => not.lasting = Some(r),
        // Nothing to tell tally beyond the reason: the rows go back.
        Kind::Retry => {}
    }
    mark_not_created(ctx, job, claim, &reason, not).await?;
    crate::job::settle::delete_input(ctx, job).await;
    match refusal {
        Kind::Wait(_) => match wait {
            Some(d) => {
                ctx.hold_claims(d);
                Ok(())
            }
            None => Err(e.into()),
        },
        Kind::Retry => {
            ctx.hold_claims(ctx.cooldown(None));
            Ok(())
        }
        Kind::TooLarge => Ok(()),
        Kind::Invalid(index) if index < keys.len() => Ok(()),
        Kind::Invalid(_) | Kind::Stop(_) => Err(e.into()),
    }
}

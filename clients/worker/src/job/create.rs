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
//! ([`crate::lookup`]): the rows wait for every one of them.

use std::time::{Duration, SystemTime};

use tally_client::with_retry;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use crate::config::Failpoint;
use crate::ctx::Ctx;
use crate::job::end::JobError;
use crate::lookup::{self, Bounds, Listing, Proof};
use crate::provider::{Owner, ProviderError};
use crate::refusal::Refusal as Kind;

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
    let created = ctx
        .provider
        .create_batch(at_provider, &display_name, &job.input_file, &lines)
        .await;
    drop(lines);
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
        return resolve(ctx, job, claim, stop).await;
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
    let reason = format!("the {call} was refused: {e}");
    let mut not = Refusal::default();
    match refusal {
        Kind::Wait(named) => {
            // The project's quota (enqueued tokens, rate): the model cools
            // down for every worker of the account, and this worker's next
            // batch of it is smaller in case its size was the problem.
            ctx.create_refused(model, tokens);
            not.cooldown = Some(ctx.cooldown(named));
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
        Kind::Wait(named) => {
            ctx.hold_claims(ctx.cooldown(named));
            Ok(())
        }
        Kind::Retry => {
            ctx.hold_claims(ctx.cooldown(None));
            Ok(())
        }
        Kind::TooLarge => Ok(()),
        Kind::Invalid(index) if index < keys.len() => Ok(()),
        Kind::Invalid(_) | Kind::Stop(_) => Err(e.into()),
    }
}

/// Searches the provider for a CREATING job's batch until its making or
/// its absence is proven ([`crate::lookup`]); makes a probe batch when no
/// witness comes on its own. Unproven at shutdown, the job is left for
/// adoption with its rows held.
pub async fn resolve(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    stop: &CancellationToken,
) -> Result<CreateEnd, JobError> {
    let bounds = Bounds {
        request: ctx.args.http_timeout,
        skew: ctx.args.provider_clock_skew,
        window: ctx.args.create_lookup_window,
    };
    let attempted = job
        .create_attempt_time
        .as_ref()
        .and_then(|t| SystemTime::try_from(*t).ok())
        .unwrap_or_else(SystemTime::now);
    let names = crate::tags::batch_names(&ctx.ledger, &job.job_id);
    let mark = crate::tags::job_mark(&job.job_id);
    let window = bounds.made_between(attempted);
    let pause = (bounds.window / 10).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut probed: Option<SystemTime> = None;
    let mut said: Option<tokio::time::Instant> = None;
    loop {
        // Read the clock before the search: the window counts only for a
        // search that began after it passed.
        let searched_at = SystemTime::now();
        match search(ctx, &names, &mark, window).await {
            Ok(listing) => match lookup::judge(listing.clone(), attempted, searched_at, &bounds) {
                Proof::Made(found) => {
                    let batch = found.name;
                    tracing::info!(job = %job.job_id, batch = %batch, "batch found by its tag (or its results' custom_ids)");
                    return Ok(CreateEnd::Submitted(Box::new(
                        mark_submitted(ctx, job, claim, &batch).await?,
                    )));
                }
                Proof::NeverMade => {
                    let reason = format!(
                        "no batch named {} among the {} batches listed, and the list already shows a batch made after the attempt",
                        names[0], listing.listed
                    );
                    mark_not_created(ctx, job, claim, &reason, Refusal::default()).await?;
                    crate::job::settle::delete_input(ctx, job).await;
                    tracing::info!(job = %job.job_id, listed = listing.listed, "batch was never created; rows released without an attempt");
                    return Ok(CreateEnd::NeverMade);
                }
                Proof::Unproven => {
                    let due = probed.is_none_or(|t| {
                        t.elapsed()
                            .is_ok_and(|e| e >= bounds.window.max(Duration::from_secs(1)))
                    });
                    if due && searched_at >= bounds.probe_from(attempted) {
                        probed = Some(SystemTime::now());
                        probe(ctx, &job.model).await;
                    }
                    if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        said = Some(tokio::time::Instant::now());
                        tracing::info!(job = %job.job_id, listed = listing.listed, unended = listing.undecided, "create unresolved: no batch of the job's listed, and no batch made after the attempt listed yet (or a batch made when it was has not ended); the rows wait");
                    }
                }
            },
            // The provider cannot be asked, or not completely: the rows
            // stay held.
            Err(e) => {
                tracing::warn!(job = %job.job_id, error = %e, "could not list every batch; the rows wait")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => {
                tracing::info!(job = %job.job_id, "shutting down with the create unresolved; job left for adoption");
                return Ok(CreateEnd::LeftForAdoption);
            }
        }
    }
}

/// Reads the whole batch list for `names` (or, where batches carry no
/// tag, for ended batches of the window whose results carry `mark`); an
/// error when it cannot be read whole (a failed page, or more than
/// [`lookup::MAX_LIST_PAGES`] pages).
async fn search(
    ctx: &Ctx,
    names: &[String],
    mark: &str,
    window: (SystemTime, SystemTime),
) -> Result<Listing, ProviderError> {
    let tagged = ctx.provider.tags_batches();
    let mut listing = if tagged {
        Listing::default()
    } else {
        Listing::within(window)
    };
    let mut token = String::new();
    loop {
        if listing.pages >= lookup::MAX_LIST_PAGES {
            return Err(ProviderError::Protocol(format!(
                "the batch list is longer than {} pages; absence cannot be proven",
                lookup::MAX_LIST_PAGES
            )));
        }
        let page = ctx.provider.list_batches(&token).await?;
        listing.add_page(&page.items, names);
        if listing.found.is_some() {
            return Ok(listing);
        }
        match page.next {
            Some(t) => token = t,
            None if tagged => return Ok(listing),
            None => break,
        }
    }
    for batch in std::mem::take(&mut listing.untagged) {
        match ctx.provider.owner(&batch.name).await? {
            Owner::Unknown => listing.undecided += 1,
            Owner::Job(owner) if owner == mark => {
                listing.found = Some(batch);
                listing.undecided = 0;
                break;
            }
            Owner::Job(_) | Owner::Other => {}
        }
    }
    Ok(listing)
}

/// Makes a probe batch for `model` (a witness for the search; see
/// [`crate::lookup`]). Failures are logged: the search asks again.
async fn probe(ctx: &Ctx, model: &str) {
    let name = crate::tags::probe_name(&ctx.ledger, &uuid::Uuid::now_v7().to_string());
    let at_provider = tally_core::provider::route(model).model;
    match ctx.provider.create_probe(at_provider, &name).await {
        Ok(_) => {
            tracing::info!(probe = %name, "probe batch made: a witness for an unresolved create")
        }
        Err(e) => tracing::warn!(probe = %name, error = %e, "probe batch not made"),
    }
}

async fn mark_submitted(
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

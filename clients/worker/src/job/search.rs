//! The search for a lost create: a CREATING job's batch is looked for in
//! the provider's list until its making or its absence is proven
//! ([`crate::lookup`]). Made, the batch is recorded and followed; never
//! made, the rows go back without an attempt; unproven, they wait. What a
//! wait costs is bounded: each search reads at most `--max-list-pages`
//! pages (fewer where the list comes newest first), searches that read
//! many pages space out, a search makes at most [`lookup::MAX_PROBES`]
//! probes (none while this worker's last one may still be on its way to
//! the list), and a search past its bound is reported to the operator (on
//! the job, FlagCreateUnresolved: `tallyctl jobs list` and the server's
//! `tally_jobs_create_unresolved`; a warning naming the job;
//! `tally_worker_create_searches_unresolved`) instead of holding rows
//! silently; an operator may end it (`tallyctl jobs resolve-create`). A
//! list refused for good pauses the ledger ([`super::reads`]).

use std::time::{Duration, SystemTime};

use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;
use crate::job::end::JobError;
use crate::job::marks::{
    CreateEnd, Refusal, flag_create_unresolved, mark_not_created, mark_submitted,
};
use crate::job::reads::Refused;
use crate::lookup::{self, Bounds, Listing, Proof};
use crate::metrics::WorkerMetrics;
use crate::provider::{Owner, ProviderError};
use crate::refusal::Read;

/// The longest pause between two searches of one job.
const MAX_PAUSE: Duration = Duration::from_secs(300);

/// How often a search past its bound says so again.
const REMIND: Duration = Duration::from_secs(600);

/// Searches the provider for a CREATING job's batch until its making or
/// its absence is proven; makes a probe batch when no witness comes on its
/// own. Unproven at shutdown, the job is left for adoption with its rows
/// held.
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
    let quick = (bounds.window / 10).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut pause = quick;
    let mut probes = (0usize, None::<SystemTime>);
    let mut said: Option<tokio::time::Instant> = None;
    let mut flag = Flag::new(ctx.metrics.clone());
    let mut refused = Refused::default();
    loop {
        // An operator may end the search with what they found at the
        // provider (`tallyctl jobs resolve-create`).
        if let Some(end) = resolved_by_operator(ctx, job, claim).await? {
            return Ok(end);
        }
        // Read the clock before the search: the window counts only for a
        // search that began after it passed.
        let searched_at = SystemTime::now();
        let listing = search(ctx, &names, &mark, window).await;
        let proof = match &listing {
            Ok(l) => lookup::judge(l.clone(), attempted, searched_at, &bounds),
            Err(_) => Proof::Unproven,
        };
        match proof {
            Proof::Made(found) => {
                let batch = found.name;
                tracing::info!(job = %job.job_id, batch = %batch, "batch found by its tag (or its results' custom_ids)");
                return Ok(CreateEnd::Submitted(Box::new(
                    mark_submitted(ctx, job, claim, &batch).await?,
                )));
            }
            Proof::NeverMade => {
                let listed = listing.as_ref().map_or(0, |l| l.listed);
                let reason = format!(
                    "no batch named {} among the {listed} batches listed, and the list already shows a batch made after the attempt",
                    names[0]
                );
                mark_not_created(ctx, job, claim, &reason, Refusal::default()).await?;
                crate::job::settle::delete_input(ctx, job).await;
                tracing::info!(job = %job.job_id, listed, "batch was never created; rows released without an attempt");
                return Ok(CreateEnd::NeverMade);
            }
            Proof::Unproven | Proof::Unbounded => {}
        }
        let now = SystemTime::now();
        let last_probe = ctx.last_probe();
        if proof == Proof::Unproven
            && lookup::probe_due(attempted, now, &bounds, probes.0, last_probe)
        {
            probes = (probes.0 + 1, Some(now));
            probe(ctx, &job.model).await;
        }
        match &listing {
            Ok(l) if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) => {
                said = Some(tokio::time::Instant::now());
                tracing::info!(job = %job.job_id, listed = l.listed, pages = l.pages, newest_first = l.newest_first(), unended = l.undecided, probes = probes.0, "create unresolved: no batch of the job's listed, and no batch made after the attempt listed yet (or a batch made when it was has not ended); the rows wait");
            }
            Ok(_) => {}
            // The provider cannot be asked: the rows stay held.
            Err(e) => {
                tracing::warn!(job = %job.job_id, error = %e, "could not list the batches; the rows wait")
            }
        }
        let alarm = ctx.args.create_search_alarm;
        let seen = (probes.0, probes.1.or(last_probe));
        if let Some(why) = lookup::unresolved(&proof, attempted, now, &bounds, seen, alarm)
            && flag.raise(job, &names[0], why)
        {
            let reason = format!("{why} (the batch would be tagged {})", names[0]);
            flag_create_unresolved(ctx, job, claim, &reason).await;
        }
        // A search that read many pages costs the provider: the next waits
        // longer, up to MAX_PAUSE; a cheap one keeps the quick pace.
        let pages = listing.as_ref().map_or(0, |l| l.pages);
        pause = if pages > 10 || proof == Proof::Unbounded {
            (pause * 2).min(MAX_PAUSE)
        } else {
            quick
        };
        // A list refused for good pauses the ledger; the rows stay held.
        match &listing {
            Err(e) => {
                if let Some(wait) = refused.met(ctx, claim, Read::List, e, quick).await? {
                    pause = pause.max(wait);
                }
            }
            Ok(_) => refused.answered(),
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

/// How an operator ended the job's search, if they did: the batch they
/// named is followed; a job they closed (no batch made) has its rows back
/// already; a job another claim holds now is left to it.
async fn resolved_by_operator(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
) -> Result<Option<CreateEnd>, JobError> {
    let now = super::follow::get_job(ctx, &job.name).await?;
    if now.claim != claim {
        return Ok(Some(CreateEnd::LeftForAdoption));
    }
    Ok(match now.state() {
        pb::JobState::Creating | pb::JobState::Preparing | pb::JobState::Unspecified => None,
        pb::JobState::Cancelled if now.end_time.is_some() && now.batch.is_empty() => {
            tracing::info!(job = %job.job_id, error = %now.error, "an operator ended the search: no batch was made; the rows went back");
            crate::job::settle::delete_input(ctx, job).await;
            Some(CreateEnd::NeverMade)
        }
        _ => {
            tracing::info!(job = %job.job_id, batch = %now.batch, "an operator ended the search: the batch exists; following it");
            Some(CreateEnd::Submitted(Box::new(now)))
        }
    })
}

/// Whether a search was reported to the operator, and when last; counted
/// in `tally_worker_create_searches_unresolved` until the search ends,
/// however it ends.
struct Flag {
    metrics: WorkerMetrics,
    raised: bool,
    told: Option<tokio::time::Instant>,
}

impl Flag {
    fn new(metrics: WorkerMetrics) -> Self {
        Self {
            metrics,
            raised: false,
            told: None,
        }
    }

    /// Reports the search as past its bound (`why`): counted once per
    /// search, logged again every [`REMIND`]; true the first time (for the
    /// job to show it).
    fn raise(&mut self, job: &pb::Job, tag: &str, why: &str) -> bool {
        let first = !self.raised;
        if first {
            self.raised = true;
            self.metrics.create_search_flagged();
        }
        if self.told.is_none_or(|t| t.elapsed() >= REMIND) {
            self.told = Some(tokio::time::Instant::now());
            tracing::warn!(
                job = %job.job_id,
                tag,
                reason = why,
                "a lost create cannot be resolved within its bound; its rows stay held (never sent twice) and the search goes on at a slower pace. Operator: look for the batch tagged {tag} at the provider; if it exists it is found once listed. `tallyctl jobs list` shows the job CREATING, unresolved"
            );
        }
        first
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        if self.raised {
            self.metrics.create_search_resolved();
        }
    }
}

/// Reads the batch list for `names` (or, where batches carry no tag, for
/// ended batches of the window whose results carry `mark`): to its end,
/// to where its newest-first order bounds it, or to `--max-list-pages`
/// pages (then [`Listing::cut`]); an error when a page cannot be read.
async fn search(
    ctx: &Ctx,
    names: &[String],
    mark: &str,
    window: (SystemTime, SystemTime),
) -> Result<Listing, ProviderError> {
    let tagged = ctx.provider.tags_batches();
    let mut listing = if tagged {
        Listing::tagged(window)
    } else {
        Listing::within(window)
    };
    let mut token = String::new();
    loop {
        if listing.pages >= ctx.args.max_list_pages.max(1) {
            listing.cut = true;
            break;
        }
        let page = ctx.provider.list_batches(&token).await;
        ctx.metrics.create_search_page();
        let page = page?;
        listing.add_page(&page.items, names);
        if listing.found.is_some() {
            return Ok(listing);
        }
        match page.next {
            Some(_) if listing.bounded() => break,
            Some(t) => token = t,
            None => break,
        }
    }
    if tagged {
        return Ok(listing);
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
/// [`crate::lookup`]). Failures are logged: the search asks again, within
/// its probes.
async fn probe(ctx: &Ctx, model: &str) {
    let name = crate::tags::probe_name(&ctx.ledger, &uuid::Uuid::now_v7().to_string());
    let at_provider = tally_core::provider::route(model).model;
    ctx.probe_made(SystemTime::now());
    ctx.metrics.probe_made();
    match ctx.provider.create_probe(at_provider, &name).await {
        Ok(_) => {
            tracing::info!(probe = %name, "probe batch made: a witness for an unresolved create")
        }
        Err(e) => tracing::warn!(probe = %name, error = %e, "probe batch not made"),
    }
}

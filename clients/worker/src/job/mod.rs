//! One job's life, from a claim (or an adoption) to FinishJob:
//!
//! 1. CreateJob from the claim; the claim's heartbeat starts;
//! 2. prompts fetched, rows rendered into JSONL lines, packed under the
//!    row and byte bounds (rows that can never be sent are reported as
//!    invalid input; rows that did not fit are released, no attempt);
//! 3. upload, MarkCreating, create the batch (display name = the job id),
//!    and MarkSubmitted at once — before anything else happens to the
//!    batch (see [`crate::job::create`]: a create whose outcome is unknown is
//!    resolved by searching the provider, never by releasing the rows);
//! 4. wait until the job reaches a terminal state: woken by the
//!    WatchOperations stream (webhooks) and by a slow poller that feeds the
//!    provider's view through IngestEvent; GetJob says what is true;
//! 5. whatever state it ended in, read the batch, download and report
//!    whatever its responses file answered, then FinishJob (the server
//!    settles unreported rows): [`crate::job::reconcile`]. A batch past
//!    `--batch-deadline` is cancelled and followed to its end like any
//!    other.
//!
//! Shutdown: before MarkCreating the claim is released (no attempt); once
//! the batch may exist, the create runs to its answer and is recorded;
//! after that the job is left for adoption.
//!
//! Steps: `cached` (rows the result cache answers, settled before any job
//! is made), `render` (rows to requests and the batch's input), `create`
//! (never paying twice for a create) with `search` (a lost create's
//! search), `marks` (what is recorded of it) and `refused`, `follow` (waiting for
//! the batch's end) with `gone` and `reads` (its calls refused for
//! good), `reconcile` (its output to outcomes) with
//! `settle` and `golden`; `heartbeat` keeps the claim; `end` says how a
//! job ended. Before the batch may exist, rows go back in one place
//! ([`run_claim`]).

pub mod cached;
mod calls;
mod create;
mod end;
mod follow;
mod golden;
mod gone;
mod heartbeat;
mod marks;
mod online;
mod reads;
mod reconcile;
mod refused;
mod render;
mod search;
mod settle;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use crate::config::Failpoint;
use crate::ctx::{Answer, Ctx};
use crate::provider::ProviderError;
use follow::follow;
use heartbeat::Heartbeat;
use marks::{CreateEnd, Refusal, mark_not_created};
use reconcile::finish;
use render::{Prompts, Unsent};
use settle::report;

pub use end::{JobEnd, JobError};
pub use online::run_online;

/// CreateJob's answer on a paused ledger.
fn is_paused(s: &Status) -> bool {
    s.code() == Code::FailedPrecondition
        && tally_client::error_reason(s).as_deref() == Some("LEDGER_PAUSED")
}

/// How a claim's way to its batch ended.
enum Submit {
    /// The job's end.
    Ended(Result<JobEnd, JobError>),
    /// Give every row still held back unworked (no attempt), then end so.
    Release(&'static str, Result<JobEnd, JobError>),
}

/// Runs a fresh claim as a job, end to end. Every step that gives up on the
/// claim before its batch may exist gives its rows back here, and only here.
pub async fn run_claim(
    ctx: Arc<Ctx>,
    claim: pb::Claim,
    rows: Vec<pb::ClaimedRow>,
    stop: CancellationToken,
) -> Result<JobEnd, JobError> {
    match submit(&ctx, &claim, rows, &stop).await {
        Submit::Ended(end) => end,
        Submit::Release(why, end) => {
            match &end {
                Err(e) => {
                    tracing::warn!(claim = %claim_for_logs(&claim.name), error = %e, "{why}; releasing the claim")
                }
                Ok(_) => {
                    tracing::info!(claim = %claim_for_logs(&claim.name), "{why}; releasing the claim")
                }
            }
            release(&ctx, &claim.name, &[]).await;
            end
        }
    }
}

/// The claim's steps up to its batch: the job, its input, the upload, the
/// create, then following it.
async fn submit(
    ctx: &Arc<Ctx>,
    claim: &pb::Claim,
    rows: Vec<pb::ClaimedRow>,
    stop: &CancellationToken,
) -> Submit {
    let prompts = match Prompts::fetch(ctx, &rows).await {
        Ok(p) => p,
        Err(s) => return Submit::Release("a prompt is unavailable", Err(s.into())),
    };
    let model = if claim.model.is_empty() {
        rows[0].model.clone()
    } else {
        claim.model.clone()
    };
    // Before the job: a claim the cache answers whole needs none.
    let mut rows = match cached::settle_hits(ctx, claim, rows, &prompts, &model).await {
        Ok(rows) if rows.is_empty() => return Submit::Ended(Ok(JobEnd::Cached)),
        Ok(rows) => rows,
        Err(s) => {
            // As a failed upload: no claim again at once.
            ctx.hold_claims(ctx.cooldown(None));
            return Submit::Release("the result cache did not answer", Err(s.into()));
        }
    };
    let job = match new_job(ctx, claim).await {
        Ok(job) => job,
        Err(end) => return end,
    };
    let _heartbeat = Heartbeat::start(ctx, &claim.name);
    tracing::info!(job = %job.job_id, rows = rows.len(), claim = %claim_for_logs(&claim.name), "job created");
    let mut unsent = Unsent::default();
    let claimed = rows.len();
    let batch = render::batch(
        ctx,
        &job,
        &model,
        std::mem::take(&mut rows),
        &prompts,
        &mut unsent,
    )
    .await;
    ctx.batch_packed(claimed, batch.keys.len(), batch.full, batch.room);
    // Halted, the rows that wait stay in the claim: the job gives them all
    // back as it closes ([`media_halted`]).
    let halt = unsent.halt.take();
    if halt.is_some() {
        unsent.waiting.clear();
    }
    if let Err(e) = settle_unsent(ctx, &job.job_id, &claim.name, &mut unsent).await {
        return Submit::Ended(Err(e));
    }
    if let Some(halt) = halt {
        return media_halted(ctx, &job, &claim.name, batch, halt).await;
    }
    if batch.keys.is_empty() {
        let end = finish(
            ctx,
            &job,
            &claim.name,
            pb::JobState::Cancelled,
            "",
            "no row could be sent",
        )
        .await
        .map(|_| JobEnd::Reconciled);
        return Submit::Ended(end);
    }
    let render::Batch {
        mut body,
        keys,
        expect,
        tokens,
        media,
        ..
    } = batch;
    body.extend_from_slice(&crate::job::golden::lines(ctx, &job).await);
    let body = bytes::Bytes::from(body);

    if stop.is_cancelled() {
        return Submit::Release("shutting down", Ok(JobEnd::Released));
    }
    let mut sent = create::Sent {
        keys,
        tokens,
        token_limit: job.provider_token_limit.max(0) as u64,
        media: media.uploads.into_iter().collect(),
        lines: bytes::Bytes::new(),
    };
    let display_name = crate::tags::display_name(&ctx.ledger, &job.job_id);
    let file = match ctx.provider.upload_input(&display_name, &body).await {
        Ok(f) => f,
        Err(e) => return upload_failed(ctx, &job, &claim.name, &model, &sent, e).await,
    };
    if stop.is_cancelled() {
        return Submit::Release("shutting down", Ok(JobEnd::Released));
    }
    ctx.args.failpoint(Failpoint::AfterUpload);
    // Kept only where the requests go inline in the create.
    if ctx.provider.takes_requests_inline() {
        sent.lines = body;
    } else {
        drop(body);
    }
    // Recorded before the create goes out: from here the batch may exist,
    // and the rows are never released until the provider was searched.
    let job = match create::mark_creating(ctx, &job, &claim.name, &file, &sent).await {
        Ok(j) => j,
        Err(s) => return Submit::Release("MarkCreating failed", Err(s.into())),
    };
    ctx.args.failpoint(Failpoint::AfterMarkCreating);
    let job = match create::create(ctx, &job, &claim.name, &model, sent, stop).await {
        Ok(CreateEnd::Submitted(job)) => *job,
        Ok(CreateEnd::NeverMade) => return Submit::Ended(Ok(JobEnd::Released)),
        Ok(CreateEnd::LeftForAdoption) => return Submit::Ended(Ok(JobEnd::LeftForAdoption)),
        Err(e) => return Submit::Ended(Err(e)),
    };
    tracing::info!(job = %job.job_id, rows = expect.len(), batch = %job.batch, input_file = %file, "job submitted");
    Submit::Ended(follow(ctx, job, &claim.name, expect, stop).await)
}

/// CreateJob from the claim. Not `with_retry`: RESOURCE_EXHAUSTED here
/// means the ledger is at its job limit, and waiting for room while the
/// claim's lease runs out would cost its rows an attempt. Refused, the rows
/// go back at once (claimable again at once, or after the resume).
async fn new_job(ctx: &Ctx, claim: &pb::Claim) -> Result<pb::Job, Submit> {
    let mut created = Err(Status::unavailable("not tried"));
    for n in 1..=3 {
        let mut c = ctx.clients.jobs.clone();
        created = c
            .create_job(pb::CreateJobRequest {
                claim: claim.name.clone(),
                provider_account: ctx.account.clone(),
            })
            .await;
        match &created {
            Err(s) if matches!(s.code(), Code::Unavailable | Code::Aborted) => {
                tokio::time::sleep(ctx.retry.delay(n)).await;
            }
            Ok(_) | Err(_) => break,
        }
    }
    let s = match created {
        Ok(j) => return Ok(j.into_inner()),
        Err(s) => s,
    };
    tracing::info!(claim = %claim_for_logs(&claim.name), error = s.message(), "no job made from the claim");
    // A provider cool-down or full provider quota says when to come back:
    // no new claim before then (the ledger's job limit does not: a job
    // ending frees a place, and `room` sees it).
    if s.code() == Code::ResourceExhausted
        && matches!(
            tally_client::error_reason(&s).as_deref(),
            Some("PROVIDER_COOLDOWN" | "PROVIDER_QUOTA")
        )
    {
        ctx.hold_claims(tally_client::retry_delay(&s).unwrap_or(std::time::Duration::from_secs(5)));
    }
    let end = if s.code() == Code::ResourceExhausted || is_paused(&s) {
        Ok(JobEnd::Released)
    } else {
        Err(s.into())
    };
    Err(Submit::Release("no job made from the claim", end))
}

/// Reports the rows that can never be sent (or whose media failed) and
/// gives back the rows that wait.
async fn settle_unsent(
    ctx: &Ctx,
    work: &str,
    claim: &str,
    unsent: &mut Unsent,
) -> Result<(), JobError> {
    let (invalid, media) = (unsent.invalid.len(), unsent.failed.len());
    if invalid + media > 0 {
        tracing::warn!(work, invalid, media, "rows that cannot be sent reported");
        report(ctx, claim, unsent.outcomes()).await?;
    }
    if !unsent.waiting.is_empty() {
        tracing::info!(
            work,
            rows = unsent.waiting.len(),
            "rows that cannot go now released"
        );
        release(ctx, claim, &unsent.waiting).await;
    }
    Ok(())
}

/// A claim whose media could not be uploaded ([`render::Halt`]): the job
/// closes without a batch and its rows go back unattempted. Refused for
/// the caller (every row would meet it), the ledger pauses with the
/// provider's words (REFUSED), recorded on the job made CREATING first as
/// a refused input upload is; the storage full, this worker waits
/// `--refusal-cooldown` before its next claim.
async fn media_halted(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    batch: render::Batch,
    halt: render::Halt,
) -> Submit {
    let sent = create::Sent {
        keys: batch.keys,
        tokens: batch.tokens,
        token_limit: job.provider_token_limit.max(0) as u64,
        media: batch.media.uploads.into_iter().collect(),
        lines: bytes::Bytes::new(),
    };
    let (reason, refusal) = match halt {
        render::Halt::Refused(why) => (
            format!("a media upload was refused: {why}"),
            Refusal {
                lasting: Some(pb::ProviderRefusal::Request),
                ..Refusal::default()
            },
        ),
        render::Halt::Full(why) => {
            ctx.hold_claims(ctx.cooldown(None));
            (
                format!("the media storage is full: {why}"),
                Refusal::default(),
            )
        }
    };
    // Only a job that went to the provider may pause the ledger.
    let job = if refusal.lasting.is_some() {
        match create::mark_creating(ctx, job, claim, "", &sent).await {
            Ok(j) => j,
            Err(s) => return Submit::Release("MarkCreating failed", Err(s.into())),
        }
    } else {
        job.clone()
    };
    let end = mark_not_created(ctx, &job, claim, &reason, refusal).await;
    Submit::Ended(end.map(|_| JobEnd::Released).map_err(JobError::from))
}

/// A failed upload of the job's input file. A definite refusal is what
/// a refused create is (the cool-down, a smaller batch, or the ledger
/// paused: [`create::refused`]), recorded on the job made CREATING first
/// (tally takes a provider's refusal only from a job that went to the
/// provider; no batch can exist: no create was sent); anything else (no
/// answer, a 5xx) gives the rows back and this worker claims nothing for
/// `--refusal-cooldown`, so a provider that keeps failing is never asked
/// again at once.
async fn upload_failed(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    model: &str,
    sent: &create::Sent,
    e: ProviderError,
) -> Submit {
    let Some(refusal) = ctx.provider.wire().classify(&e) else {
        ctx.hold_claims(ctx.cooldown(None));
        return Submit::Release(
            "upload failed; waiting before the next claim",
            Err(e.into()),
        );
    };
    let job = match create::mark_creating(ctx, job, claim, "", sent).await {
        Ok(j) => j,
        Err(s) => return Submit::Release("MarkCreating failed", Err(s.into())),
    };
    let (keys, tokens) = (&sent.keys, sent.tokens);
    let refused =
        create::refused(ctx, &job, claim, model, keys, tokens, "upload", e, refusal).await;
    Submit::Ended(refused.map(|()| JobEnd::Released))
}

/// Takes over a job whose owner died after a create was attempted or after
/// submitting it: a CREATING job's batch is searched for first (found, it
/// is recorded; not found, the rows go back); then what its rows expect is
/// read, the new claim heartbeated, and the job followed to the end.
pub async fn run_adopted(
    ctx: Arc<Ctx>,
    adopted: pb::AdoptedJob,
    stop: CancellationToken,
) -> Result<JobEnd, JobError> {
    let (Some(job), Some(claim)) = (adopted.job, adopted.claim) else {
        return Ok(JobEnd::Lost);
    };
    let _heartbeat = Heartbeat::start(&ctx, &claim.name);
    let job = if job.state() == pb::JobState::Creating {
        tracing::info!(job = %job.job_id, "adopted a job whose create is unresolved; searching the provider");
        match search::resolve(&ctx, &job, &claim.name, &stop).await? {
            CreateEnd::Submitted(job) => *job,
            CreateEnd::NeverMade => return Ok(JobEnd::Released),
            CreateEnd::LeftForAdoption => return Ok(JobEnd::LeftForAdoption),
        }
    } else {
        job
    };
    tracing::info!(job = %job.job_id, rows = adopted.keys.len(), batch = %job.batch, adoptions = job.adoptions, "job adopted");
    let held: HashSet<&String> = adopted.keys.iter().collect();
    let mut expect: HashMap<String, Answer> = HashMap::new();
    // FULL: the payload says whether the request asked for JSON.
    let mut pages = RowPages::new(pb::RowFilter {
        job: job.name.clone(),
        ..Default::default()
    });
    while let Some(rows) = pages.next(&ctx).await? {
        for row in rows {
            if held.contains(&row.key) {
                let answer = Answer::of(ctx.provider.wire(), &row.payload, row.prompt.as_ref());
                expect.insert(row.key, answer);
            }
        }
    }
    follow(&ctx, job, &claim.name, expect, &stop).await
}

/// The ledger's rows that `filter` names, a page of at most 1,000 at a time
/// in the FULL view (payloads included).
pub(crate) struct RowPages {
    filter: pb::RowFilter,
    token: String,
    done: bool,
}

impl RowPages {
    pub(crate) fn new(filter: pb::RowFilter) -> Self {
        RowPages {
            filter,
            token: String::new(),
            done: false,
        }
    }

    /// The next page; `None` after the last.
    pub(crate) async fn next(&mut self, ctx: &Ctx) -> Result<Option<Vec<pb::Row>>, Status> {
        if self.done {
            return Ok(None);
        }
        let req = pb::ListRowsRequest {
            parent: ctx.ledger.clone(),
            filter: Some(self.filter.clone()),
            page_size: 1000,
            page_token: std::mem::take(&mut self.token),
            view: pb::RowView::Full as i32,
        };
        let page = with_retry(ctx.retry, "ListRows", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.list_rows(req).await }
        })
        .await?
        .into_inner();
        self.done = page.next_page_token.is_empty();
        self.token = page.next_page_token;
        Ok(Some(page.rows))
    }
}

/// Gives rows back unworked (every held row when `keys` is empty). Errors
/// are logged: the lease runs out and the sweeper does the same anyway.
async fn release(ctx: &Ctx, claim: &str, keys: &[String]) {
    let claim_name = claim;
    let claim = claim_for_logs(claim);
    // Named keys go in chunks the server takes in one call (its
    // --max-rows-per-call, learned from a refusal if it is below ours).
    let mut rest = keys;
    loop {
        let chunk = &rest[..rest.len().min(ctx.rows_per_call())];
        let req = pb::ReleaseClaimRequest {
            name: claim_name.to_string(),
            keys: chunk.to_vec(),
        };
        let got = with_retry(ctx.retry, "ReleaseClaim", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.release_claim(req).await }
        })
        .await;
        match got {
            Ok(r) => tracing::info!(%claim, released = r.into_inner().released, "claim released"),
            Err(s) if ctx.learn_rows_per_call(&s) => continue,
            Err(s) => {
                tracing::warn!(%claim, error = %s, "release failed; the lease will run out");
                return;
            }
        }
        rest = &rest[chunk.len()..];
        if rest.is_empty() {
            return;
        }
    }
}

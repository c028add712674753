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

mod create;
mod end;
mod golden;
mod gone;
mod heartbeat;
mod reconcile;
mod refused;
mod settle;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tally_client::{ingest_observation, with_retry};
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use crate::attach::{self, AttachFail};
use crate::config::Failpoint;
use crate::ctx::{Answer, Ctx, PromptResult, prompt_name};
use crate::jsonl;
use crate::prompt::InputError;
use crate::provider::ProviderError;
use create::CreateEnd;
use gone::GoneWatch;
use heartbeat::Heartbeat;
use reconcile::finish;
use settle::{invalid_input, report};

pub use end::{JobEnd, JobError};

/// CreateJob's answer on a paused ledger.
fn is_paused(s: &Status) -> bool {
    s.code() == Code::FailedPrecondition
        && tally_client::error_reason(s).as_deref() == Some("LEDGER_PAUSED")
}

/// Runs a fresh claim as a job, end to end.
pub async fn run_claim(
    ctx: Arc<Ctx>,
    claim: pb::Claim,
    mut rows: Vec<pb::ClaimedRow>,
    stop: CancellationToken,
) -> Result<JobEnd, JobError> {
    // Not `with_retry`: RESOURCE_EXHAUSTED here means the ledger is at its
    // job limit, and waiting for room while the claim's lease runs out
    // would cost its rows an attempt. Give them back at once instead.
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
    let job = match created {
        Ok(j) => j.into_inner(),
        Err(s) => {
            // The ledger is at its job limit, or was paused after the claim
            // was made (or the server sheds load): give the rows back
            // unworked, no attempt counted; they are claimable again at
            // once (after the resume).
            tracing::info!(claim = %claim_for_logs(&claim.name), error = s.message(), "no job made from the claim; releasing it");
            release(&ctx, &claim.name, &[]).await;
            // A provider cool-down or full provider quota says when to come
            // back: no new claim before then (the ledger's job limit does
            // not: a job ending frees a place, and `room` sees it).
            if s.code() == Code::ResourceExhausted
                && matches!(
                    tally_client::error_reason(&s).as_deref(),
                    Some("PROVIDER_COOLDOWN" | "PROVIDER_QUOTA")
                )
            {
                ctx.hold_claims(
                    tally_client::retry_delay(&s).unwrap_or(std::time::Duration::from_secs(5)),
                );
            }
            return if s.code() == Code::ResourceExhausted || is_paused(&s) {
                Ok(JobEnd::Released)
            } else {
                Err(s.into())
            };
        }
    };
    let _heartbeat = Heartbeat::start(&ctx, &claim.name);
    tracing::info!(job = %job.job_id, rows = rows.len(), claim = %claim_for_logs(&claim.name), "job created");

    // Prompts, each fetched once.
    let mut prompts: HashMap<String, PromptResult> = HashMap::new();
    for row in &rows {
        if let Some(p) = &row.prompt {
            let name = prompt_name(p);
            if let Entry::Vacant(slot) = prompts.entry(name) {
                match ctx.prompt(slot.key()).await {
                    Ok(found) => {
                        slot.insert(found);
                    }
                    Err(s) => {
                        tracing::warn!(job = %job.job_id, prompt = %slot.key(), error = %s, "prompt unavailable; releasing the claim");
                        release(&ctx, &claim.name, &[]).await;
                        return Err(s.into());
                    }
                }
            }
        }
    }

    // The batch's input file, rendered row by row into one buffer: a line
    // that does not fit is dropped at once, and each row's payload is let
    // go once rendered, so the claim and the file are not both held whole.
    let model = if claim.model.is_empty() {
        rows[0].model.clone()
    } else {
        claim.model.clone()
    };
    let token_limit = job.provider_token_limit.max(0) as u64;
    let wire = ctx.provider.wire();
    let at_provider = tally_core::provider::route(&model).model.to_owned();
    let mut packer = jsonl::Packer::new(jsonl::Limits {
        rows: ctx.args.max_rows_per_batch,
        bytes: ctx.args.max_bytes_per_batch,
        tokens: ctx.token_bound(&model, token_limit),
        hard_tokens: token_limit,
    });
    let mut body: Vec<u8> = Vec::new();
    let mut invalid: Vec<(String, String)> = Vec::new();
    let mut overflow: Vec<String> = Vec::new();
    let mut sent_keys: Vec<String> = Vec::new();
    let mut expect: HashMap<String, Answer> = HashMap::new();
    let mut job_media = attach::JobMedia::default();
    let ids = crate::tags::RequestIds::of(wire.derives_request_ids(), &job.job_id);
    // Rows whose media could not be read: reported (an attempt each).
    let mut failed: Vec<pb::RowOutcome> = Vec::new();
    for row in &mut rows {
        let payload = std::mem::take(&mut row.payload);
        let compiled = match row.prompt.as_ref().map(|p| &prompts[&prompt_name(p)]) {
            Some(Err(why)) => {
                invalid.push((row.key.clone(), why.clone()));
                continue;
            }
            Some(Ok(c)) => Some(Arc::clone(c)),
            None => None,
        };
        let spec = compiled.as_ref().map(|c| &c.spec);
        let mut request = match wire.build_request(&payload, spec, &at_provider) {
            Ok(req) => req,
            Err(e) => {
                invalid.push((row.key.clone(), e.to_string()));
                continue;
            }
        };
        match attach::attach(&ctx, &mut request, &mut job_media).await {
            Ok(()) => {}
            Err(AttachFail::Unreadable(why)) => {
                failed.push(media_failure(
                    &row.key,
                    pb::FailureKind::MediaUnreadable,
                    why,
                ));
                continue;
            }
            Err(AttachFail::Unavailable(why)) => {
                failed.push(media_failure(
                    &row.key,
                    pb::FailureKind::MediaUnavailable,
                    why,
                ));
                continue;
            }
            Err(AttachFail::StorageFull(why)) => {
                tracing::warn!(job = %job.job_id, row = %row.key, "{why}; the row waits");
                overflow.push(row.key.clone());
                continue;
            }
            Err(AttachFail::NotHere(why)) => {
                // The worker's flags, not the row: it goes back unattempted,
                // and the worker stops rather than claim it again.
                overflow.push(row.key.clone());
                ctx.stop_for_settings(why);
                continue;
            }
        }
        let start = body.len();
        let size = jsonl::write_line(&mut body, &wire.line_shape(), &ids.id(&row.key), &request);
        match packer.offer(size) {
            jsonl::Fit::Batch => {
                expect.insert(
                    row.key.clone(),
                    Answer::of(wire, &payload, row.prompt.as_ref()),
                );
                sent_keys.push(row.key.clone());
            }
            fit => {
                body.truncate(start);
                if fit == jsonl::Fit::Overflow {
                    overflow.push(row.key.clone());
                } else {
                    let why = if size > ctx.args.max_bytes_per_batch {
                        InputError::TooLarge {
                            size,
                            limit: ctx.args.max_bytes_per_batch,
                        }
                    } else {
                        InputError::TooManyTokens {
                            tokens: jsonl::tokens_of(size),
                            limit: token_limit,
                        }
                    };
                    invalid.push((row.key.clone(), why.to_string()));
                }
            }
        }
    }
    drop(rows);
    if !invalid.is_empty() || !failed.is_empty() {
        tracing::warn!(job = %job.job_id, invalid = invalid.len(), media = failed.len(), "rows that cannot be sent reported");
        let outcomes = invalid
            .iter()
            .map(|(key, why)| invalid_input(key, why))
            .chain(failed)
            .collect();
        report(&ctx, &claim.name, outcomes).await?;
    }
    if !overflow.is_empty() {
        tracing::info!(job = %job.job_id, rows = overflow.len(), "rows beyond the batch bounds released");
        release(&ctx, &claim.name, &overflow).await;
    }
    if sent_keys.is_empty() {
        finish(
            &ctx,
            &job,
            &claim.name,
            pb::JobState::Cancelled,
            "",
            "no row could be sent",
        )
        .await?;
        return Ok(JobEnd::Reconciled);
    }
    body.extend_from_slice(&crate::job::golden::lines(&ctx, &job).await);
    let body = bytes::Bytes::from(body);

    if stop.is_cancelled() {
        release(&ctx, &claim.name, &[]).await;
        return Ok(JobEnd::Released);
    }
    let mut sent = create::Sent {
        keys: sent_keys,
        tokens: packer.tokens(),
        token_limit,
        media: job_media.uploads.into_iter().collect(),
        lines: bytes::Bytes::new(),
    };
    let display_name = crate::tags::display_name(&ctx.ledger, &job.job_id);
    let file = match ctx.provider.upload_input(&display_name, &body).await {
        Ok(f) => f,
        Err(e) => return upload_failed(&ctx, &job, &claim.name, &model, &sent, e).await,
    };
    if stop.is_cancelled() {
        release(&ctx, &claim.name, &[]).await;
        return Ok(JobEnd::Released);
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
    let job = match create::mark_creating(&ctx, &job, &claim.name, &file, &sent).await {
        Ok(j) => j,
        Err(s) => {
            tracing::warn!(job = %job.job_id, error = %s, "MarkCreating failed; releasing the claim");
            release(&ctx, &claim.name, &[]).await;
            return Err(s.into());
        }
    };
    ctx.args.failpoint(Failpoint::AfterMarkCreating);
    let job = match create::create(&ctx, &job, &claim.name, &model, sent, &stop).await? {
        CreateEnd::Submitted(job) => *job,
        CreateEnd::NeverMade => return Ok(JobEnd::Released),
        CreateEnd::LeftForAdoption => return Ok(JobEnd::LeftForAdoption),
    };
    tracing::info!(job = %job.job_id, rows = expect.len(), batch = %job.batch, input_file = %file, "job submitted");
    follow(&ctx, job, &claim.name, expect, &stop).await
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
) -> Result<JobEnd, JobError> {
    let Some(refusal) = ctx.provider.wire().classify(&e) else {
        tracing::warn!(job = %job.job_id, error = %e, "upload failed; releasing the claim and waiting before the next claim");
        release(ctx, claim, &[]).await;
        ctx.hold_claims(ctx.cooldown(None));
        return Err(e.into());
    };
    let job = match create::mark_creating(ctx, job, claim, "", sent).await {
        Ok(j) => j,
        Err(s) => {
            tracing::warn!(job = %job.job_id, error = %s, "MarkCreating failed; releasing the claim");
            release(ctx, claim, &[]).await;
            return Err(s.into());
        }
    };
    let (keys, tokens) = (&sent.keys, sent.tokens);
    create::refused(ctx, &job, claim, model, keys, tokens, "upload", e, refusal).await?;
    Ok(JobEnd::Released)
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
        match create::resolve(&ctx, &job, &claim.name, &stop).await? {
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
    let mut page_token = String::new();
    loop {
        let req = pb::ListRowsRequest {
            parent: ctx.ledger.clone(),
            filter: Some(pb::RowFilter {
                job: job.name.clone(),
                ..Default::default()
            }),
            page_size: 1000,
            page_token: page_token.clone(),
            // FULL: the payload says whether the request asked for JSON.
            view: pb::RowView::Full as i32,
        };
        let page = with_retry(ctx.retry, "ListRows", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.list_rows(req).await }
        })
        .await?
        .into_inner();
        for row in page.rows {
            if held.contains(&row.key) {
                let answer = Answer::of(ctx.provider.wire(), &row.payload, row.prompt.as_ref());
                expect.insert(row.key, answer);
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    follow(&ctx, job, &claim.name, expect, &stop).await
}

/// Waits for the job's batch to end, then reconciles it.
async fn follow(
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
                    match poll(ctx, &job.batch).await {
                        Polled::Seen => gone.seen(),
                        Polled::Failed => {}
                        Polled::NotFound(message) => {
                            if gone.not_found(std::time::Instant::now(), ctx.args.gone_after) {
                                let why = reconcile::gone_reason(&job.batch, ctx, &message);
                                tracing::warn!(job = %job.job_id, batch = %job.batch, "{why}");
                                return finish(ctx, &now, claim, pb::JobState::Failed, "", &why).await;
                            }
                            tracing::info!(job = %job.job_id, batch = %job.batch, "batch answered 404; asking again before taking it for gone");
                        }
                    }
                    next_poll = tokio::time::Instant::now() + ctx.args.poll_interval;
                    break;
                }
            }
        }
    };
    reconcile::reconcile(ctx, done, claim, expect, stop, &cancelled).await
}

async fn get_job(ctx: &Ctx, name: &str) -> Result<pb::Job, Status> {
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
async fn poll(ctx: &Ctx, batch: &str) -> Polled {
    match ctx.provider.get_batch(batch).await {
        Ok(observed) => {
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
    }
}

/// What a poll learned.
enum Polled {
    /// The provider's view went through the reducer.
    Seen,
    /// The poll failed for a reason that may pass.
    Failed,
    /// The provider answered 404: its message.
    NotFound(String),
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

/// Gives rows back unworked (every held row when `keys` is empty). Errors
/// are logged: the lease runs out and the sweeper does the same anyway.
async fn release(ctx: &Ctx, claim: &str, keys: &[String]) {
    // Named keys go in chunks the server takes in one call (its
    // --max-rows-per-call, which --max-rows-per-report stays within).
    let chunks: Vec<&[String]> = if keys.is_empty() {
        vec![keys]
    } else {
        keys.chunks(ctx.args.max_rows_per_report.max(1)).collect()
    };
    let claim_name = claim;
    let claim = claim_for_logs(claim);
    for chunk in chunks {
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
            Err(s) => {
                tracing::warn!(%claim, error = %s, "release failed; the lease will run out");
                return;
            }
        }
    }
}

/// A row whose media could not be read, reported as such (`kind`:
/// MEDIA_UNREADABLE is PERMANENT, MEDIA_UNAVAILABLE RETRYABLE).
fn media_failure(key: &str, kind: pb::FailureKind, why: String) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.to_string(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: kind as i32,
            message: why,
            ..Default::default()
        })),
        usage: None,
        ..Default::default()
    }
}

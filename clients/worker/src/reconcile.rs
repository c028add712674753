//! A job whose batch has ended, from the provider's last word to FinishJob.
//!
//! The batch is read before any row is failed: whatever state it ended in
//! (a documented `batch.failed` webhook names no file, `batch.cancelled`
//! and `batch.expired` carry only the id), its responses file, if it has
//! one, is found by GET, downloaded, matched to the job's rows and
//! reported; only then does FinishJob return the rows it did not answer.
//! A GET that fails is asked again (the rows wait); a batch that answers
//! 404 is taken for gone only after `--gone-after` of 404s ([`GoneWatch`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde_json::Value;
use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use crate::ctx::{Ctx, PromptResult, prompt_name};
use crate::end::{JobEnd, JobError};
use crate::gemini::GeminiError;
use crate::gone::GoneWatch;
use crate::output::{self, Expect};

/// What a row's answer is checked against: its prompt's schema (by prompt
/// name) and whether JSON was asked for.
pub(crate) struct Answer {
    prompt: Option<String>,
    json: bool,
}

impl Answer {
    pub(crate) fn of(payload: &str, prompt: Option<&pb::PromptRef>) -> Answer {
        Answer {
            prompt: prompt.map(prompt_name),
            json: crate::prompt::asks_for_json(payload, prompt.is_some()),
        }
    }
}

/// Reconciles a job whose batch ended (`done`, as tally has it): reads the
/// batch, reports what its responses file answered, and finishes the job.
/// `note` is added to the job's error (why this worker cancelled it).
pub(crate) async fn reconcile(
    ctx: &Ctx,
    done: pb::Job,
    claim: &str,
    expect: HashMap<String, Answer>,
    stop: &CancellationToken,
    note: &str,
) -> Result<JobEnd, JobError> {
    let state = done.state();
    tracing::info!(job = %done.job_id, batch = %done.batch, state = ?state, "batch ended");
    let error = match (done.error.as_str(), note) {
        (e, "") => e.to_string(),
        ("", n) => n.to_string(),
        (e, n) => format!("{e}; {n}"),
    };
    let (ended, resource) = read_ended(ctx, &done, stop).await?;
    let output_file = match ended {
        Ended::Output(file) => {
            if state != pb::JobState::Succeeded {
                tracing::info!(job = %done.job_id, batch = %done.batch, file = %file, state = ?state, "batch ended with partial output");
            }
            file
        }
        Ended::NoOutput if state == pb::JobState::Succeeded => {
            return Err(GeminiError::Protocol(format!(
                "{} succeeded without a responses file",
                done.batch
            ))
            .into());
        }
        Ended::NoOutput => return finish(ctx, &done, claim, state, "", &error).await,
        Ended::Gone(why) => {
            tracing::warn!(job = %done.job_id, batch = %done.batch, "{why}");
            return finish(ctx, &done, claim, pb::JobState::Failed, "", &why).await;
        }
        Ended::Stopped => return Ok(JobEnd::LeftForAdoption),
    };
    let prompts = {
        let mut m: HashMap<String, PromptResult> = HashMap::new();
        for name in expect.values().filter_map(|a| a.prompt.as_ref()) {
            if let Entry::Vacant(slot) = m.entry(name.clone()) {
                slot.insert(ctx.prompt(name).await?);
            }
        }
        m
    };
    let expectations: HashMap<String, Expect<'_>> = expect
        .iter()
        .map(|(key, answer)| {
            let schema = answer
                .prompt
                .as_ref()
                .and_then(|p| prompts.get(p))
                .and_then(|r| r.as_ref().ok())
                .and_then(|c| c.validator.as_ref());
            let json = answer.json;
            (key.clone(), Expect { schema, json })
        })
        .collect();
    let mut matcher = output::Matcher::new(&expectations);
    match download_output(ctx, &done, &output_file, &mut matcher, stop).await? {
        Downloaded::Done => {}
        Downloaded::Stopped => return Ok(JobEnd::LeftForAdoption),
        Downloaded::GaveUp(why) => {
            // Bounded: the rows come back through job_failed (an infra
            // attempt each) instead of the job being adopted forever.
            return finish(ctx, &done, claim, pb::JobState::Failed, "", &why).await;
        }
    }
    let matched = matcher.finish();
    if !matched.unexpected.is_empty() || matched.unreadable > 0 {
        tracing::warn!(job = %done.job_id, unexpected = matched.unexpected.len(), unreadable = matched.unreadable, "output lines not matched to the job's rows");
    }
    if let Some(expected) = resource
        .as_ref()
        .and_then(|r| output::stats_mismatch(r, matched.lines()))
    {
        ctx.metrics.batch_stats_mismatch();
        tracing::warn!(job = %done.job_id, batch = %done.batch, expected, found = matched.lines(), "the batch's batchStats do not match the lines in its output");
    }
    crate::golden::report(ctx, &done, claim, matched.golden).await;
    let reported = matched.outcomes.len();
    if !report(ctx, claim, matched.outcomes).await? {
        return Ok(JobEnd::Lost);
    }
    tracing::info!(job = %done.job_id, batch = %done.batch, rows = expect.len(), reported, missing = expect.len().saturating_sub(reported), "outcomes reported");
    let error = if state == pb::JobState::Succeeded {
        ""
    } else {
        error.as_str()
    };
    finish(ctx, &done, claim, state, &output_file, error).await
}

/// What reading an ended batch found.
enum Ended {
    /// Its responses file (all of its answers, or those it gave before it
    /// failed, was cancelled or expired).
    Output(String),
    /// It has none.
    NoOutput,
    /// It answered 404 for `--gone-after`: why.
    Gone(String),
    /// Shutdown while asking: the job is left for adoption.
    Stopped,
}

/// Finds the responses file of an ended batch: the operation's (a webhook
/// or poll that named it), else the batch as GET answers it, asked again
/// until it answers. Also answers the batch resource when a GET got it
/// (its `batchStats` are checked against the output).
async fn read_ended(
    ctx: &Ctx,
    job: &pb::Job,
    stop: &CancellationToken,
) -> Result<(Ended, Option<Value>), JobError> {
    let operation = if job.operation.is_empty() {
        format!("operations/{}", job.batch)
    } else {
        job.operation.clone()
    };
    let op = with_retry(ctx.retry, "GetOperation", || {
        let mut c = ctx.clients.operations.clone();
        let req = pb::GetOperationRequest {
            name: operation.clone(),
        };
        async move { c.get_operation(req).await }
    })
    .await;
    match op {
        Ok(op) if !op.get_ref().output_file.is_empty() => {
            // Named already; the resource only for its stats.
            let resource = ctx.gemini.get_batch(&job.batch).await.ok();
            return Ok((Ended::Output(op.into_inner().output_file), resource));
        }
        Ok(_) => {}
        Err(s) if s.code() == Code::NotFound => {}
        Err(s) => return Err(s.into()),
    }
    let mut gone = GoneWatch::default();
    loop {
        match ctx.gemini.get_batch(&job.batch).await {
            Ok(resource) => {
                let ended = responses_file(&resource).map_or(Ended::NoOutput, Ended::Output);
                return Ok((ended, Some(resource)));
            }
            Err(GeminiError::Http {
                code: 404, message, ..
            }) => {
                if gone.not_found(std::time::Instant::now(), ctx.args.gone_after) {
                    return Ok((Ended::Gone(gone_reason(&job.batch, ctx, &message)), None));
                }
                tracing::info!(job = %job.job_id, batch = %job.batch, "ended batch answered 404; asking again before taking it for gone");
            }
            Err(e) => {
                gone.seen();
                tracing::warn!(job = %job.job_id, batch = %job.batch, error = %e, "ended batch could not be read; its rows wait");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(ctx.args.poll_interval) => {}
            () = stop.cancelled() => return Ok((Ended::Stopped, None)),
        }
    }
}

/// The responses file a batch resource names (`response` once done; the
/// `metadata.output` copy), if any.
pub(crate) fn responses_file(resource: &Value) -> Option<String> {
    resource["response"]["responsesFile"]
        .as_str()
        .or_else(|| resource["metadata"]["output"]["responsesFile"].as_str())
        .filter(|f| !f.is_empty())
        .map(str::to_owned)
}

/// Why a job failed because its batch stayed 404.
pub(crate) fn gone_reason(batch: &str, ctx: &Ctx, message: &str) -> String {
    format!(
        "the batch {batch} is gone at the provider (every GET answered 404 for {}: {message})",
        humantime::format_duration(ctx.args.gone_after)
    )
}

/// What became of a download of a batch's output.
enum Downloaded {
    /// Every line went to the matcher.
    Done,
    /// Shutdown while waiting: the job is left for adoption.
    Stopped,
    /// Not downloadable for `--output-wait`: why.
    GaveUp(String),
}

/// Downloads the output, waiting out a file that is not downloadable yet
/// (403/404 right after the batch finished) for at most `--output-wait`.
async fn download_output(
    ctx: &Ctx,
    job: &pb::Job,
    file: &str,
    matcher: &mut output::Matcher<'_, '_>,
    stop: &CancellationToken,
) -> Result<Downloaded, JobError> {
    let started = tokio::time::Instant::now();
    let wait = ctx.args.output_wait;
    let mut pause = std::time::Duration::from_secs(1);
    loop {
        match ctx.gemini.download(file, matcher).await {
            Ok(()) => return Ok(Downloaded::Done),
            Err(GeminiError::Http { code, message, .. }) if code == 403 || code == 404 => {
                if started.elapsed() >= wait {
                    let why = format!(
                        "the output {file} was not downloadable for {}: {code} {message}",
                        humantime::format_duration(wait)
                    );
                    tracing::warn!(job = %job.job_id, batch = %job.batch, "{why}");
                    return Ok(Downloaded::GaveUp(why));
                }
                tracing::info!(job = %job.job_id, file, code, retry_in = ?pause, "output not downloadable yet");
            }
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            () = tokio::time::sleep(pause.min(wait.saturating_sub(started.elapsed()))) => {}
            () = stop.cancelled() => return Ok(Downloaded::Stopped),
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(60));
    }
}

/// Reports outcomes in chunks of the configured size. False when the claim
/// no longer holds the rows (every verdict STALE).
pub(crate) async fn report(
    ctx: &Ctx,
    claim: &str,
    outcomes: Vec<pb::RowOutcome>,
) -> Result<bool, Status> {
    let mut all_stale = !outcomes.is_empty();
    for chunk in outcomes.chunks(ctx.args.max_rows_per_report) {
        let req = pb::ReportOutcomesRequest {
            claim: claim.to_string(),
            outcomes: chunk.to_vec(),
        };
        let r = with_retry(ctx.retry, "ReportOutcomes", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.report_outcomes(req).await }
        })
        .await?
        .into_inner();
        if r.stale > 0 {
            tracing::warn!(
                claim = %claim_for_logs(claim),
                stale = r.stale,
                "outcomes for rows the claim no longer holds"
            );
        }
        all_stale &= r.stale as usize == chunk.len();
        tracing::debug!(
            claim = %claim_for_logs(claim),
            succeeded = r.succeeded,
            retryable = r.retryable,
            permanent = r.permanent,
            duplicate = r.duplicate,
            "reported"
        );
    }
    Ok(!all_stale)
}

pub(crate) async fn finish(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    state: pb::JobState,
    output_file: &str,
    error: &str,
) -> Result<JobEnd, JobError> {
    let req = pb::FinishJobRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        final_state: state as i32,
        output_file: output_file.to_string(),
        error: error.to_string(),
    };
    let got = with_retry(ctx.retry, "FinishJob", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.finish_job(req).await }
    })
    .await;
    match got {
        Ok(j) => {
            let j = j.into_inner();
            tracing::info!(job = %j.job_id, batch = %j.batch, rows = j.counts.as_ref().map_or(0, |c| c.rows), final_state = ?state, summary = %j.summary, "job reconciled");
            delete_input(ctx, &j).await;
            Ok(JobEnd::Reconciled)
        }
        Err(s) if s.code() == Code::FailedPrecondition => {
            tracing::warn!(job = %job.job_id, error = s.message(), "job could not be finished by this worker");
            Ok(JobEnd::Lost)
        }
        Err(s) => Err(s.into()),
    }
}

/// Deletes a closed job's input file (the batch no longer needs it). A
/// failure is logged: the provider expires files after 48 hours anyway.
pub(crate) async fn delete_input(ctx: &Ctx, job: &pb::Job) {
    if job.input_file.is_empty() {
        return;
    }
    match ctx.gemini.delete_file(&job.input_file).await {
        Ok(()) => tracing::debug!(job = %job.job_id, file = %job.input_file, "input file deleted"),
        Err(e) => {
            tracing::warn!(job = %job.job_id, file = %job.input_file, error = %e, "input file not deleted")
        }
    }
}

/// A row that can never be sent: reported as the provider would answer an
/// invalid request (400 INVALID_ARGUMENT), which the server classifies as
/// permanent.
pub(crate) fn invalid_input(key: &str, why: &str) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.to_string(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: pb::FailureKind::ProviderError as i32,
            http_code: 400,
            status: "INVALID_ARGUMENT".into(),
            message: format!("invalid input: {why}"),
            ..Default::default()
        })),
        usage: None,
    }
}

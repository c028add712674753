//! A job whose batch has ended, from the provider's last word to FinishJob.
//!
//! The batch is read before any row is failed: whatever state it ended in
//! (a documented `batch.failed` webhook names no file, `batch.cancelled`
//! and `batch.expired` carry only the id; OpenAI's webhooks name no file
//! at all), the files holding its answers (Gemini's responses file;
//! OpenAI's output and error files), if it has any, are found by GET,
//! downloaded, matched to the job's rows and reported; only then does
//! FinishJob return the rows they did not answer. A batch the provider
//! refused before it ran (OpenAI: `failed` at validation) fails no row:
//! [`crate::job::refused`].
//! A GET that fails is asked again (the rows wait); a batch that answers
//! 404 is taken for gone only after `--gone-after` of 404s ([`GoneWatch`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use tally_client::with_retry;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::ctx::{Answer, Ctx, PromptResult};
use crate::job::end::{JobEnd, JobError};
use crate::job::gone::GoneWatch;
use crate::job::reads::Refused;
use crate::job::settle::{delete_input, report};
use crate::output::{self, Expect};
use crate::provider::{Observed, ProviderError};
use crate::refusal::Read;

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
    let (ended, resource) = read_ended(ctx, &done, claim, stop).await?;
    let files = match ended {
        Ended::Output(files) => {
            if state != pb::JobState::Succeeded {
                tracing::info!(job = %done.job_id, batch = %done.batch, files = ?files, state = ?state, "batch ended with partial output");
            }
            files
        }
        Ended::Refused(validation) => {
            return crate::job::refused::give_back(ctx, &done, claim, validation, &expect).await;
        }
        Ended::NoOutput if state == pb::JobState::Succeeded => {
            return Err(ProviderError::Protocol(format!(
                "{} succeeded without a responses file",
                done.batch
            ))
            .into());
        }
        Ended::NoOutput => return finish(ctx, &done, claim, state, "", &error).await,
        Ended::NothingAnswered => {
            tracing::warn!(job = %done.job_id, batch = %done.batch, "batch completed without answering any request: its rows are missing from its output");
            return finish(ctx, &done, claim, state, "", &error).await;
        }
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
    let wire = ctx.provider.wire();
    let golden: Vec<String> = done
        .golden_rows
        .iter()
        .map(|g| format!("{}{}", output::GOLDEN_PREFIX, g.key))
        .collect();
    let keys = crate::tags::RequestIds::of(wire.derives_request_ids(), &done.job_id).back(
        expect
            .keys()
            .map(String::as_str)
            .chain(golden.iter().map(String::as_str)),
    );
    let mut matcher = output::Matcher::of(&expectations, wire).with_keys(keys);
    for file in &files {
        match download_output(ctx, &done, claim, file, &mut matcher, stop).await? {
            Downloaded::Done => matcher.file_done(),
            Downloaded::Stopped => return Ok(JobEnd::LeftForAdoption),
            Downloaded::GaveUp(why) => {
                // Bounded: the rows come back through job_failed (an infra
                // attempt each) instead of the job being adopted forever.
                return finish(ctx, &done, claim, pb::JobState::Failed, "", &why).await;
            }
        }
    }
    let output_file = files.first().cloned().unwrap_or_default();
    let matched = matcher.finish();
    if let Some(refused) = wire.refused_every_request(&matched.outcomes) {
        return crate::job::refused::give_back(ctx, &done, claim, refused, &expect).await;
    }
    if !matched.unexpected.is_empty() || matched.unreadable > 0 {
        tracing::warn!(job = %done.job_id, unexpected = matched.unexpected.len(), unreadable = matched.unreadable, "output lines not matched to the job's rows");
    }
    if let Some(expected) = resource
        .as_ref()
        .and_then(|r| wire.expected_lines(r))
        .filter(|expected| *expected != matched.lines())
    {
        ctx.metrics.batch_stats_mismatch();
        tracing::warn!(job = %done.job_id, batch = %done.batch, expected, found = matched.lines(), "the batch's batchStats do not match the lines in its output");
    }
    crate::job::golden::report(ctx, &done, claim, matched.golden).await;
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
    finish_naming(
        ctx,
        &done,
        claim,
        state,
        &output_file,
        error,
        matched.unanswered,
    )
    .await
}

/// What reading an ended batch found.
enum Ended {
    /// The files of its answers (all of them, or those it gave before it
    /// failed, was cancelled or expired).
    Output(Vec<String>),
    /// The provider refused it before it ran.
    Refused(crate::refusal::Validation),
    /// It has none.
    NoOutput,
    /// It completed without answering any of its requests
    /// ([`crate::provider::Wire::answered_nothing`]): every row is missing
    /// from its output.
    NothingAnswered,
    /// It answered 404 for `--gone-after`: why.
    Gone(String),
    /// Shutdown while asking: the job is left for adoption.
    Stopped,
}

/// Finds the answer files of an ended batch: the operation's (a webhook or
/// poll that named a Gemini responses file), else the batch as GET answers
/// it, asked again until it answers. Also answers the batch when a GET got
/// it (its counts are checked against the output).
async fn read_ended(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    stop: &CancellationToken,
) -> Result<(Ended, Option<Observed>), JobError> {
    // Where the operation does not name every answer file (OpenAI keeps
    // failed lines in a second file no event names), always read with GET.
    let wire = ctx.provider.wire();
    if wire.operation_names_output() {
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
                let resource = ctx.provider.get_batch(&job.batch).await.ok();
                return Ok((Ended::Output(vec![op.into_inner().output_file]), resource));
            }
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => {}
            Err(s) => return Err(s.into()),
        }
    }
    let mut gone = GoneWatch::default();
    let mut refused = Refused::default();
    loop {
        let got = ctx.provider.get_batch(&job.batch).await;
        let mut wait = ctx.args.poll_interval;
        if let Err(e) = &got
            && let Some(longer) = refused.met(ctx, claim, Read::Poll, e, wait).await?
        {
            wait = longer;
        }
        match got {
            Ok(observed) => {
                let files = observed.answer_files();
                let refused = (files.is_empty()
                    && observed.observation.state == tally_core::operation::OpState::Failed)
                    .then(|| wire.validation(&observed.resource))
                    .flatten();
                let ended = match refused {
                    Some(v) => Ended::Refused(v),
                    None if files.is_empty() && wire.answered_nothing(&observed) => {
                        Ended::NothingAnswered
                    }
                    None if files.is_empty() => Ended::NoOutput,
                    None => Ended::Output(files),
                };
                return Ok((ended, Some(observed)));
            }
            Err(ProviderError::Http {
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
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return Ok((Ended::Stopped, None)),
        }
    }
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
/// (403/404 right after the batch finished) for at most `--output-wait`;
/// refused for good (a key revoked), the ledger pauses and the download
/// is asked again, spaced out, for as long as the worker runs
/// ([`super::reads`]): the rows stay with the job, never sent again.
async fn download_output(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    file: &str,
    matcher: &mut output::Matcher<'_, '_>,
    stop: &CancellationToken,
) -> Result<Downloaded, JobError> {
    let started = tokio::time::Instant::now();
    let wait = ctx.args.output_wait;
    let mut pause = std::time::Duration::from_secs(1);
    let mut refused = Refused::default();
    loop {
        let got = ctx.provider.download(file, matcher).await;
        if let Err(e) = &got
            && let Some(wait) = refused
                .met(ctx, claim, Read::Download, e, ctx.args.poll_interval)
                .await?
        {
            tokio::select! {
                () = tokio::time::sleep(wait) => continue,
                () = stop.cancelled() => return Ok(Downloaded::Stopped),
            }
        }
        match got {
            Ok(()) => return Ok(Downloaded::Done),
            Err(ProviderError::Http { code, message, .. }) if code == 403 || code == 404 => {
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

pub(crate) async fn finish(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    state: pb::JobState,
    output_file: &str,
    error: &str,
) -> Result<JobEnd, JobError> {
    finish_naming(ctx, job, claim, state, output_file, error, Vec::new()).await
}

/// [`finish`], naming the rows the provider never ran (`not_run`: they go
/// back without an attempt).
async fn finish_naming(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    state: pb::JobState,
    output_file: &str,
    error: &str,
    not_run: Vec<String>,
) -> Result<JobEnd, JobError> {
    let req = pb::FinishJobRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        final_state: state as i32,
        output_file: output_file.to_string(),
        error: error.to_string(),
        not_run,
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

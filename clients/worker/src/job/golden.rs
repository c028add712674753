//! Golden rows in the worker: a job CreateJob chose to carry them gets
//! their lines added to its batch (key `#golden/{key}`, never a row's key),
//! and their answers, found apart from the rows' in the output
//! (`output::match_output`), go to ReportGoldenResults. Best effort: a
//! golden row that cannot be sent, or a report that fails, is logged and
//! never holds back the job's rows.

use crate::ctx::{Ctx, prompt_name};
use crate::jsonl;
use crate::output::GOLDEN_PREFIX;
use tally_client::with_retry;
use tally_proto::v1 as pb;

/// The batch lines of `job`'s golden rows (none when it carries none), in
/// the provider's shape.
pub async fn lines(ctx: &Ctx, job: &pb::Job) -> Vec<u8> {
    let mut body = Vec::new();
    let wire = ctx.provider.wire();
    let model = tally_core::provider::route(&job.model).model;
    let ids = crate::tags::RequestIds::of(wire.derives_request_ids(), &job.job_id);
    for g in &job.golden_rows {
        let compiled = match &g.prompt {
            None => None,
            Some(p) => match ctx.prompt(&prompt_name(p)).await {
                Ok(Ok(c)) => Some(c),
                Ok(Err(why)) => {
                    tracing::warn!(job = %job.job_id, golden = %g.key, why, "golden row's prompt unusable; not sent");
                    continue;
                }
                Err(s) => {
                    tracing::warn!(job = %job.job_id, golden = %g.key, error = %s, "golden row's prompt unavailable; not sent");
                    continue;
                }
            },
        };
        match wire.build_request(&g.payload, compiled.as_ref().map(|c| &c.spec), model) {
            Ok(req) => {
                let key = format!("{GOLDEN_PREFIX}{}", g.key);
                jsonl::write_line(&mut body, &wire.line_shape(), &ids.id(&key), &req);
            }
            Err(e) => {
                tracing::warn!(job = %job.job_id, golden = %g.key, error = %e, "golden row cannot be sent")
            }
        }
    }
    if !job.golden_rows.is_empty() {
        tracing::info!(job = %job.job_id, golden = job.golden_rows.len(), "batch carries the ledger's golden rows");
    }
    body
}

/// Reports a job's golden answers; a failure is logged, not returned.
pub async fn report(ctx: &Ctx, job: &pb::Job, claim: &str, answers: Vec<pb::GoldenAnswer>) {
    if answers.is_empty() {
        return;
    }
    let req = pb::ReportGoldenResultsRequest {
        name: job.name.clone(),
        claim: claim.to_string(),
        answers,
    };
    let got = with_retry(ctx.retry, "ReportGoldenResults", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.report_golden_results(req).await }
    })
    .await;
    match got {
        Ok(r) => {
            let r = r.into_inner();
            let drift = r.drift.unwrap_or_default();
            if drift.drifted {
                tracing::warn!(job = %job.job_id, model = %drift.model, version = %drift.model_version,
                    mismatches = drift.mismatches, results = drift.results, "golden rows: the model's answers drifted");
            } else {
                tracing::info!(job = %job.job_id, matched = r.matched, mismatched = r.mismatched, "golden answers recorded");
            }
        }
        Err(s) => tracing::warn!(job = %job.job_id, error = %s, "golden answers not recorded"),
    }
}

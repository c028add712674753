//! What the worker tells tally about rows outside the reducer's path:
//! outcomes reported in chunks, a row that can never be sent, and a closed
//! job's input file let go. Shared by the create path ([`crate::create`]),
//! reconciliation ([`crate::reconcile`]) and refused batches
//! ([`crate::refused`]), none of which needs the others for it.

use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tonic::Status;

use crate::ctx::Ctx;

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

/// Deletes a closed job's input file (the batch no longer needs it). A
/// failure is logged: the provider expires files after 48 hours anyway.
pub(crate) async fn delete_input(ctx: &Ctx, job: &pb::Job) {
    if job.input_file.is_empty() {
        return;
    }
    match ctx.provider.delete_file(&job.input_file).await {
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
        ..Default::default()
    }
}

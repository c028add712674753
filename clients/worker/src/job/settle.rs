//! What the worker tells tally about rows outside the reducer's path:
//! outcomes reported in chunks, a row that can never be sent, and a closed
//! job's input file let go. Shared by the create path ([`crate::job::create`]),
//! reconciliation ([`crate::job::reconcile`]) and refused batches
//! ([`crate::job::refused`]), none of which needs the others for it.

use prost::Message;
use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tonic::Status;

use crate::ctx::Ctx;

/// The most encoded bytes of outcomes in one ReportOutcomes call: half the
/// server's default message limit (16 MiB), so a chunk of large answers (a
/// result and the provider's response, up to 1 MiB each) is never refused
/// whole for its size.
const MAX_REPORT_BYTES: usize = 8 << 20;

/// Reports outcomes in chunks of the configured size (and at most
/// [`MAX_REPORT_BYTES`]). False when the claim no longer holds the rows
/// (every verdict STALE).
pub(crate) async fn report(
    ctx: &Ctx,
    claim: &str,
    outcomes: Vec<pb::RowOutcome>,
) -> Result<bool, Status> {
    let mut all_stale = !outcomes.is_empty();
    let mut rest = &outcomes[..];
    while !rest.is_empty() {
        let chunk = &rest[..first_chunk(rest, ctx.rows_per_call(), MAX_REPORT_BYTES)];
        let req = pb::ReportOutcomesRequest {
            claim: claim.to_string(),
            outcomes: chunk.to_vec(),
            claim_next: None,
        };
        let r = match with_retry(ctx.retry, "ReportOutcomes", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.report_outcomes(req).await }
        })
        .await
        {
            Ok(r) => r.into_inner(),
            // More rows than the server takes in a call: nothing was
            // written; the same outcomes go again in smaller chunks.
            Err(s) if ctx.learn_rows_per_call(&s) => continue,
            Err(s) => return Err(s),
        };
        rest = &rest[chunk.len()..];
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

/// `outcomes` cut, in order, into calls of at most `max_rows` outcomes and
/// at most `max_bytes` encoded bytes (an outcome larger than that goes
/// alone).
/// How many of `outcomes` go in the next call: at most `max_rows`, and at
/// most `max_bytes` encoded unless one outcome alone is larger (it goes by
/// itself). At least one when `outcomes` is not empty.
fn first_chunk(outcomes: &[pb::RowOutcome], max_rows: usize, max_bytes: usize) -> usize {
    let mut bytes = 0;
    for (i, o) in outcomes.iter().enumerate() {
        // The outcome, its field tag and its length prefix.
        let len = o.encoded_len() + 6;
        if i > 0 && (i == max_rows || bytes + len > max_bytes) {
            return i;
        }
        bytes += len;
    }
    outcomes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls [`report`] makes of `outcomes` at fixed limits.
    fn chunks(
        outcomes: &[pb::RowOutcome],
        max_rows: usize,
        max_bytes: usize,
    ) -> Vec<&[pb::RowOutcome]> {
        let mut out = Vec::new();
        let mut rest = outcomes;
        while !rest.is_empty() {
            let n = first_chunk(rest, max_rows, max_bytes);
            out.push(&rest[..n]);
            rest = &rest[n..];
        }
        out
    }

    fn answered(key: &str, result_bytes: usize) -> pb::RowOutcome {
        pb::RowOutcome {
            key: key.into(),
            outcome: Some(pb::row_outcome::Outcome::Result("1".repeat(result_bytes))),
            ..Default::default()
        }
    }

    // Invariant: every outcome is reported once, in order, in calls of at
    // most `max_rows` outcomes and `max_bytes` bytes, one too large alone.
    #[test]
    fn reports_are_cut_by_rows_and_by_bytes() {
        let keys = |cs: &[&[pb::RowOutcome]]| -> Vec<Vec<String>> {
            cs.iter()
                .map(|c| c.iter().map(|o| o.key.clone()).collect())
                .collect()
        };
        let small: Vec<_> = (0..5).map(|i| answered(&i.to_string(), 10)).collect();
        assert_eq!(
            keys(&chunks(&small, 2, MAX_REPORT_BYTES)),
            [vec!["0", "1"], vec!["2", "3"], vec!["4"]]
        );
        let big = vec![
            answered("a", 600),
            answered("b", 600),
            answered("huge", 5000),
            answered("c", 10),
        ];
        let cut = chunks(&big, 100, 1300);
        assert_eq!(keys(&cut), [vec!["a", "b"], vec!["huge"], vec!["c"]]);
        assert!(
            cut.iter()
                .all(|c| c.len() == 1
                    || c.iter().map(|o| o.encoded_len() + 6).sum::<usize>() <= 1300)
        );
        assert!(chunks(&[], 10, 10).is_empty());
    }
}

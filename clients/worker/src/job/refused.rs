//! A batch the provider made and then refused before running any of its
//! requests (an OpenAI batch `failed` at validation, with `errors.data`).
//! Nothing reached the model and nothing was charged, so the rows are not
//! failed: they go back with no attempt (MarkNotCreated with
//! `batch_refused`), and what the refusal says is done first, so it never
//! loops ([`crate::refusal::validation`]):
//!
//! - the enqueued-token limit: the model cools down for every worker of
//!   the account, and this worker's next batch of it is smaller;
//! - too many requests or bytes: the next batch is smaller;
//! - errors naming lines: the rows at those lines (read back from the
//!   input file) are reported as invalid input (PERMANENT), the others go
//!   back; lines that cannot be matched to rows stop the ledger instead;
//! - anything else (an unknown model, an empty file): the ledger pauses
//!   with the provider's words.

use std::collections::HashMap;

use serde_json::Value;
use tally_proto::v1 as pb;

use crate::ctx::Ctx;
use crate::job::end::{JobEnd, JobError};
use crate::job::marks::{Refusal, mark_not_created};
use crate::job::settle::{invalid_input, report};
use crate::jsonl::LineSink;
use crate::refusal::Validation;

/// Gives back the rows of `job`, whose batch the provider refused as
/// `validation` says; `held` are the keys the job holds.
pub(crate) async fn give_back(
    ctx: &Ctx,
    job: &pb::Job,
    claim: &str,
    validation: Validation,
    held: &HashMap<String, crate::ctx::Answer>,
) -> Result<JobEnd, JobError> {
    let model = job.model.as_str();
    let mut not = Refusal {
        batch_refused: true,
        ..Refusal::default()
    };
    let reason = match validation {
        Validation::Wait => {
            let wait = ctx.cooldown(None);
            shrink(ctx, job).await;
            ctx.hold_claims(wait);
            not.cooldown = Some(wait);
            "the provider's enqueued-token limit for the model was reached".to_owned()
        }
        Validation::TooLarge => {
            shrink(ctx, job).await;
            "the batch was too large for the provider".to_owned()
        }
        Validation::Stop(refusal, words) => {
            not.lasting = Some(refusal);
            words
        }
        Validation::Lines(lines) => match keys_at(ctx, job, &lines).await {
            Some(bad) if !bad.is_empty() && bad.iter().all(|(k, _)| held.contains_key(k)) => {
                let n = bad.len();
                let outcomes = bad
                    .iter()
                    .map(|(key, why)| invalid_input(key, why))
                    .collect();
                report(ctx, claim, outcomes).await?;
                format!("{n} of its lines were refused; those rows are invalid input")
            }
            _ => {
                // Lines that name no row of the job: tally made the file,
                // so this is not the rows' fault and a retry would meet it
                // again.
                not.lasting = Some(pb::ProviderRefusal::Request);
                let first = lines.first().map_or("", |(_, why)| why.as_str());
                format!("the provider refused lines of the batch file that name no row: {first}")
            }
        },
    };
    tracing::warn!(job = %job.job_id, batch = %job.batch, model, reason, "the provider refused the batch before it ran; its rows go back without an attempt");
    match mark_not_created(ctx, job, claim, &reason, not).await {
        Ok(_) => {
            crate::job::settle::delete_input(ctx, job).await;
            Ok(JobEnd::Released)
        }
        Err(s) if s.code() == tonic::Code::FailedPrecondition => {
            tracing::warn!(job = %job.job_id, error = s.message(), "refused batch not given back by this worker");
            Ok(JobEnd::Lost)
        }
        Err(s) => Err(s.into()),
    }
}

/// The next batch of the job's model is smaller than this one was (its
/// estimated tokens, from the input file's size where the provider says).
async fn shrink(ctx: &Ctx, job: &pb::Job) {
    if let Some(bytes) = ctx.provider.file_bytes(&job.input_file).await {
        let tokens = crate::jsonl::tokens_of(usize::try_from(bytes).unwrap_or(usize::MAX));
        ctx.create_refused(&job.model, tokens);
    }
}

/// The row keys at `lines` (1-based) of the job's input file, with why
/// each was refused; `None` when the file cannot be read.
async fn keys_at(
    ctx: &Ctx,
    job: &pb::Job,
    lines: &[(u64, String)],
) -> Option<Vec<(String, String)>> {
    let mut sink = KeysAt {
        id_field: ctx.provider.wire().line_shape().id,
        wanted: lines.iter().cloned().collect(),
        line: 0,
        found: Vec::new(),
    };
    match ctx.provider.download(&job.input_file, &mut sink).await {
        Ok(()) => Some(sink.found),
        Err(e) => {
            tracing::warn!(job = %job.job_id, file = %job.input_file, error = %e, "the refused batch's input file cannot be read");
            None
        }
    }
}

/// Collects the request id (the field `id_field`) of wanted lines of an
/// input file.
struct KeysAt {
    id_field: &'static str,
    wanted: HashMap<u64, String>,
    line: u64,
    found: Vec<(String, String)>,
}

impl LineSink for KeysAt {
    fn reset(&mut self) {
        self.line = 0;
        self.found.clear();
    }

    fn line(&mut self, line: &[u8]) {
        self.line += 1;
        let Some(why) = self.wanted.get(&self.line) else {
            return;
        };
        let key = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| v[self.id_field].as_str().map(str::to_owned));
        if let Some(key) = key {
            self.found
                .push((key, format!("the provider refused its line: {why}")));
        }
    }

    fn too_long(&mut self) {
        self.line += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: the keys are those of the lines the provider named
    // (1-based), whatever the other lines hold.
    #[test]
    fn the_lines_named_are_read_back_to_their_keys() {
        let mut sink = KeysAt {
            id_field: "custom_id",
            wanted: [(2, "invalid_request: bad".to_string())]
                .into_iter()
                .collect(),
            line: 0,
            found: Vec::new(),
        };
        sink.line(br#"{"custom_id": "a"}"#);
        sink.too_long();
        sink.reset();
        sink.line(br#"{"custom_id": "a"}"#);
        sink.line(br#"{"custom_id": "b", "body": {}}"#);
        sink.line(br#"{"custom_id": "c"}"#);
        assert_eq!(sink.found.len(), 1);
        assert_eq!(sink.found[0].0, "b");
        assert!(sink.found[0].1.contains("invalid_request: bad"));
    }
}

//! A claim of a synchronous lane: no job and no batch. Each row is sent as
//! one call once tally grants the account's capacity for it
//! (AcquireCapacity: the requests and tokens per minute every worker and
//! replica share), its answer read as the batch output line it would have
//! been, and the outcomes reported in groups as the calls end
//! ([`super::calls`]).
//!
//! Never paying twice: the claim is the record that its rows may have gone
//! out. A call whose answer was lost is reported as an attempt
//! (`answer_lost`: the provider may have done and billed the work); a
//! worker that dies mid-call leaves the claim to run out (each row an
//! attempt). Only what the provider refused before doing any work goes
//! back unattempted: a 429 (the row waits in the claim, and every worker
//! of the account slows down), a shed flex call (the row goes back, for any
//! lane the ledger allows), a call that never connected.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use super::calls::{self, Call};
use super::end::{JobEnd, JobError};
use super::heartbeat::Heartbeat;
use super::render::{self, Prompts, Unsent};
use super::{release, settle_unsent};
use crate::attach::JobMedia;
use crate::ctx::Ctx;

/// Runs a synchronous claim to its end: every row reported or given back.
pub async fn run_online(
    ctx: Arc<Ctx>,
    claim: pb::Claim,
    rows: Vec<pb::ClaimedRow>,
    stop: CancellationToken,
) -> Result<JobEnd, JobError> {
    let _heartbeat = Heartbeat::start(&ctx, &claim.name);
    let name = claim_for_logs(&claim.name).to_string();
    let prompts = match Prompts::fetch(&ctx, &rows).await {
        Ok(p) => p,
        Err(s) => {
            tracing::warn!(claim = %name, error = %s, "a prompt is unavailable; releasing the claim");
            release(&ctx, &claim.name, &[]).await;
            return Err(s.into());
        }
    };
    let model = if claim.model.is_empty() {
        rows[0].model.clone()
    } else {
        claim.model.clone()
    };
    let rows = match super::cached::settle_hits(&ctx, &claim, rows, &prompts, &model).await {
        Ok(rows) if rows.is_empty() => return Ok(JobEnd::Cached),
        Ok(rows) => rows,
        Err(s) => {
            tracing::warn!(claim = %name, error = %s, "the result cache did not answer; releasing the claim");
            ctx.hold_claims(ctx.cooldown(None));
            release(&ctx, &claim.name, &[]).await;
            return Err(s.into());
        }
    };
    let at_provider = tally_core::provider::route(&model).model.to_owned();
    let (pending, mut unsent) = prepare(&ctx, rows, &prompts, &at_provider).await;
    settle_unsent(&ctx, &name, &claim.name, &mut unsent).await?;
    if let Some(halt) = unsent.halt.take() {
        // A media upload refused, or the storage full: the claim goes back
        // and this worker waits before its next.
        tracing::warn!(claim = %name, ?halt, "a media upload cannot be made; releasing the claim and waiting --refusal-cooldown");
        release(&ctx, &claim.name, &[]).await;
        ctx.hold_claims(ctx.cooldown(None));
        return Ok(JobEnd::Released);
    }
    calls::run(
        &ctx,
        &claim.name,
        &name,
        pending,
        &prompts,
        &at_provider,
        &stop,
    )
    .await
}

/// Each row's call, and the rows that cannot go.
async fn prepare(
    ctx: &Ctx,
    rows: Vec<pb::ClaimedRow>,
    prompts: &Prompts,
    model: &str,
) -> (VecDeque<Call>, Unsent) {
    let wire = ctx.provider.wire();
    let mut unsent = Unsent::default();
    let mut media = JobMedia::default();
    let mut calls = VecDeque::with_capacity(rows.len());
    let mut rows = rows.into_iter();
    while let Some(mut row) = rows.next() {
        let prepared = render::prepare(ctx, &mut row, prompts, model, &mut media).await;
        let Some((request, answer)) = unsent.sort(&row.key, prepared) else {
            if unsent.halted(rows.by_ref().map(|r| r.key)) {
                break;
            }
            continue;
        };
        let body = match wire.online_body(request, ctx.args.lane) {
            Ok(body) => body,
            Err(e) => {
                unsent.invalid.push((row.key, e.to_string()));
                continue;
            }
        };
        calls.push_back(Call {
            key: row.key,
            tokens: tokens_asked(wire, &body),
            body,
            answer,
        });
    }
    (calls, unsent)
}

/// The tokens a call asks the account's capacity for: its input, estimated
/// from the body's bytes (4 a token, the JSON around the prompt included),
/// plus the most output it asks for.
///
/// Invariant: the ask covers what the provider counts against the
/// account's tokens per minute when the call arrives, so grants within
/// tally's window never add up past the limit at the provider. The output
/// part is the provider's own figure: OpenAI counts `max_tokens` (the
/// larger of it and its input estimate, which the sum covers), Anthropic
/// `max_tokens` for output, the emulators input plus the output budget.
/// The input part is an estimate; for ordinary text it is above the
/// emulators' count (4 tokens for 3 words). Asking for the input alone
/// lets through a wave of calls with large output budgets that the
/// provider then refuses with 429s. A body with no output budget asks for
/// its input only.
fn tokens_asked(wire: &dyn crate::provider::Wire, body: &Value) -> i64 {
    let bytes = serde_json::to_vec(body).map_or(0, |b| b.len());
    let input = tally_core::quota::estimate_tokens(bytes as u64);
    let output = wire
        .online_max_output(body)
        .map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX));
    input.saturating_add(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::openai::{online::OnlineApi, wire};
    use crate::provider::{Wire, wire_of};
    use serde_json::json;
    use tally_core::lane::Lane;
    use tally_core::provider::Api;

    // Invariant: a call asks for its input estimate plus the most output it
    // may produce, in whichever name its provider and API give the budget.
    #[test]
    fn the_ask_counts_the_output_budget() {
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                          "max_completion_tokens": 500});
        for openai in [OnlineApi::Chat, OnlineApi::Responses] {
            let w = wire(openai);
            let body = w.online_body(chat.clone(), Lane::Flex).unwrap();
            let input = tally_core::quota::estimate_tokens(body.to_string().len() as u64);
            assert_eq!(tokens_asked(w, &body), input + 500, "{openai:?}");
        }
        let gemini = json!({"contents": [], "generationConfig": {"maxOutputTokens": 64}});
        let anthropic = json!({"messages": [], "max_tokens": 4096});
        for (api, body, output) in [(Api::Gemini, gemini, 64), (Api::Anthropic, anthropic, 4096)] {
            let input = tally_core::quota::estimate_tokens(body.to_string().len() as u64);
            assert_eq!(tokens_asked(wire_of(api), &body), input + output, "{api}");
        }
        let uncapped = json!({"model": "m", "messages": []});
        assert_eq!(
            tokens_asked(wire_of(Api::OpenAi), &uncapped),
            tally_core::quota::estimate_tokens(uncapped.to_string().len() as u64)
        );
    }
}

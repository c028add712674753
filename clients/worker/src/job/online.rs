//! A claim of a synchronous lane: no job and no batch. Each row is sent as
//! one call once tally grants the account's capacity for it
//! (AcquireCapacity: the requests and tokens per minute every worker and
//! replica share), its answer read as the batch output line it would have
//! been, and the outcomes reported wave by wave.
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
use std::time::Duration;

use serde_json::Value;
use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use super::end::{JobEnd, JobError};
use super::heartbeat::Heartbeat;
use super::render::{self, Prompts, Unsent};
use super::settle::report;
use super::{release, settle_unsent};
use crate::attach::JobMedia;
use crate::ctx::{Answer, Ctx};
use crate::provider::online::{self as calls, Refused};
use crate::provider::{OnlineAnswer, OnlineFail};

/// One row's call, ready to go.
struct Call {
    key: String,
    body: Value,
    answer: Answer,
    /// What capacity is asked for: see [`tokens_asked`].
    tokens: i64,
}

/// What the next AcquireCapacity tells tally of the last wave.
#[derive(Default)]
struct Met {
    /// The provider's 429 asked to wait this long.
    rate_limited: Option<Duration>,
    shed: bool,
    /// A refusal no retry fixes, with the provider's words.
    refused: Option<(pb::ProviderRefusal, String)>,
}

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
    let (mut pending, mut unsent) = prepare(&ctx, rows, &prompts, &at_provider).await;
    settle_unsent(&ctx, &name, &claim.name, &mut unsent).await?;
    let mut met = Met::default();
    while !pending.is_empty() {
        if stop.is_cancelled() {
            let keys: Vec<String> = pending.iter().map(|c| c.key.clone()).collect();
            release(&ctx, &claim.name, &keys).await;
            return Ok(JobEnd::Released);
        }
        let asks: Vec<i64> = pending
            .iter()
            .take(ctx.args.calls)
            .map(|c| c.tokens)
            .collect();
        let refused = met.refused.is_some();
        let grant = acquire(&ctx, &claim.name, asks, std::mem::take(&mut met)).await?;
        if refused {
            tracing::warn!(claim = %name, "the provider refused the calls for good; the ledger is paused and the rows go back");
            release(&ctx, &claim.name, &[]).await;
            return Ok(JobEnd::Released);
        }
        let granted = usize::try_from(grant.granted)
            .unwrap_or(0)
            .min(pending.len());
        if granted == 0 {
            let wait = grant
                .retry_after
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or(Duration::from_secs(1));
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        let wave: Vec<Call> = pending.drain(..granted).collect();
        let sent = futures::future::join_all(wave.into_iter().map(|call| {
            let ctx = Arc::clone(&ctx);
            let model = at_provider.clone();
            async move {
                let got = ctx
                    .provider
                    .call_online(&model, &call.body, ctx.args.call_timeout)
                    .await;
                (call, got)
            }
        }))
        .await;
        let mut outcomes = Vec::with_capacity(sent.len());
        let mut back = Vec::new();
        let mut unreachable = None;
        for (call, got) in sent {
            match got {
                Ok(answer) => outcomes.push(decode(&ctx, &prompts, &call, &answer)),
                Err(OnlineFail::Lost(why)) => outcomes.push(calls::lost(&call.key, &why)),
                Err(OnlineFail::Unsent(why)) => {
                    back.push(call.key);
                    unreachable = Some(why);
                }
                Err(OnlineFail::Refused(e)) => {
                    match calls::refused(ctx.provider.wire(), ctx.args.lane, &e) {
                        Refused::RateLimited(wait) => {
                            met.rate_limited = met.rate_limited.max(Some(ctx.cooldown(wait)));
                            pending.push_back(call);
                        }
                        Refused::Shed(wait) => {
                            met.shed = true;
                            met.rate_limited = met.rate_limited.max(wait);
                            back.push(call.key);
                        }
                        Refused::Stop(kind, words) => {
                            met.refused = Some((kind, words));
                            pending.push_front(call);
                        }
                        Refused::Row(failure) => outcomes.push(pb::RowOutcome {
                            key: call.key,
                            outcome: Some(pb::row_outcome::Outcome::Failure(failure)),
                            ..Default::default()
                        }),
                    }
                }
            }
        }
        ctx.metrics.online_calls(&outcomes, back.len());
        if !outcomes.is_empty() {
            report(&ctx, &claim.name, outcomes).await?;
        }
        if !back.is_empty() {
            release(&ctx, &claim.name, &back).await;
        }
        if let Some(why) = unreachable {
            // No connection: the rest go back too, and this worker claims
            // nothing for a while rather than ask again at once.
            tracing::warn!(claim = %name, error = %why, "the provider is unreachable; releasing the claim and waiting before the next");
            release(&ctx, &claim.name, &[]).await;
            ctx.hold_claims(ctx.cooldown(None));
            return Ok(JobEnd::Released);
        }
    }
    Ok(JobEnd::Reconciled)
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
    for mut row in rows {
        let prepared = render::prepare(ctx, &mut row, prompts, model, &mut media).await;
        let Some((request, answer)) = unsent.sort(&row.key, prepared) else {
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

/// An answer's outcome, as the provider's decoder reads the batch line it
/// would have been, with the provider's request id and granted tier.
fn decode(ctx: &Ctx, prompts: &Prompts, call: &Call, answer: &OnlineAnswer) -> pb::RowOutcome {
    let wire = ctx.provider.wire();
    let line = wire.online_line(&call.key, answer);
    let raw = line.to_string();
    let (request_id, tier) = wire.online_meta(answer);
    let mut outcome = wire
        .outcome(&call.key, &line, &raw, &prompts.expect(&call.answer))
        .unwrap_or_else(|| calls::lost(&call.key, "the provider answered without the request"));
    outcome.request_id = request_id.chars().take(256).collect();
    outcome.tier = tier.chars().take(64).collect();
    outcome
}

/// AcquireCapacity for `asks`, telling tally what the last wave met.
async fn acquire(
    ctx: &Ctx,
    claim: &str,
    asks: Vec<i64>,
    met: Met,
) -> Result<pb::AcquireCapacityResponse, JobError> {
    let (refused, reason) = match met.refused {
        Some((kind, words)) => (kind as i32, words.chars().take(1024).collect()),
        None => (0, String::new()),
    };
    let req = pb::AcquireCapacityRequest {
        claim: claim.to_string(),
        provider_account: ctx.account.clone(),
        tokens: asks,
        rate_limited: met
            .rate_limited
            .and_then(|d| prost_types::Duration::try_from(d).ok()),
        shed: met.shed,
        refused,
        reason,
    };
    Ok(with_retry(ctx.retry, "AcquireCapacity", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.acquire_capacity(req).await }
    })
    .await?
    .into_inner())
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

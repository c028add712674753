//! The calls of one synchronous claim, in flight: launched as tally grants
//! the account's capacity (up to `--calls` at once), each answer settled as
//! it comes, and the outcomes reported in groups (every [`GROUP`] rows, or
//! once the oldest has waited [`HOLD`], or when no call is out). A slow
//! call holds up no other: a freed slot is filled at once.
//!
//! What a refused call asks is told to tally with the next AcquireCapacity
//! ([`Met`]): a 429 (the row waits in the claim, every worker of the
//! account slows down), a shed flex call (the row goes back, for any lane
//! the ledger allows), a refusal for good (nothing more is launched; once
//! the calls out have ended the ledger is paused and the rows go back).
//! A call that never connected stops the launches too; the claim goes
//! back once the calls out have ended, and the worker waits.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tally_client::with_retry;
use tally_proto::v1 as pb;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::end::{JobEnd, JobError};
use super::release;
use super::render::Prompts;
use super::settle::report;
use crate::ctx::{Answer, Ctx};
use crate::provider::online::{self as online_calls, Refused};
use crate::provider::{OnlineAnswer, OnlineFail};
use crate::waits::Next;

/// Outcomes reported together at most.
const GROUP: usize = 32;
/// The longest an answer waits to be reported.
const HOLD: Duration = Duration::from_secs(1);

/// One row's call, ready to go.
pub(super) struct Call {
    pub key: String,
    pub body: Value,
    pub answer: Answer,
    /// What capacity is asked for (`super::online::tokens_asked`).
    pub tokens: i64,
}

/// What the next AcquireCapacity tells tally of the calls since the last.
#[derive(Default)]
struct Met {
    /// The provider's 429 asked to wait this long.
    rate_limited: Option<Duration>,
    shed: bool,
    /// A refusal no retry fixes, with the provider's words.
    refused: Option<(pb::ProviderRefusal, String)>,
}

/// What ended calls left to tell tally: outcomes to report, rows to give
/// back, and since when the oldest has waited.
#[derive(Default)]
struct Ended {
    outcomes: Vec<pb::RowOutcome>,
    back: Vec<String>,
    since: Option<Instant>,
    /// A call never connected: the provider cannot be reached.
    unreachable: Option<String>,
}

/// The claim's calls: what is still to go, and what the ended ones left.
struct Claim<'a> {
    ctx: &'a Arc<Ctx>,
    claim: &'a str,
    model: &'a str,
    prompts: &'a Prompts,
    pending: VecDeque<Call>,
    met: Met,
    ended: Ended,
    /// Until when the cool-down last told to tally holds the calls back:
    /// a 429 met by a call that was out beside it is that cool-down's,
    /// not told again (each round would otherwise wait twice).
    cooled_until: Option<Instant>,
}

/// Runs `pending`, the calls of claim `claim` to model `model`, to the
/// end: every row reported or given back.
pub(super) async fn run(
    ctx: &Arc<Ctx>,
    claim: &str,
    name: &str,
    pending: VecDeque<Call>,
    prompts: &Prompts,
    model: &str,
    stop: &CancellationToken,
) -> Result<JobEnd, JobError> {
    let mut c = Claim {
        ctx,
        claim,
        model,
        prompts,
        pending,
        met: Met::default(),
        ended: Ended::default(),
        cooled_until: None,
    };
    let mut out = FuturesUnordered::new();
    let mut next_ask = Instant::now();
    loop {
        let halted =
            stop.is_cancelled() || c.met.refused.is_some() || c.ended.unreachable.is_some();
        let room = ctx
            .args
            .calls
            .saturating_sub(out.len())
            .min(c.pending.len());
        if !halted && room > 0 && Instant::now() >= next_ask {
            let asks: Vec<i64> = c.pending.iter().take(room).map(|x| x.tokens).collect();
            if let Some(wait) = c.met.rate_limited {
                c.cooled_until = c.cooled_until.max(Some(Instant::now() + wait));
            }
            let grant = acquire(ctx, claim, asks, std::mem::take(&mut c.met)).await?;
            let granted = usize::try_from(grant.granted).unwrap_or(0).min(room);
            if granted == 0 {
                let wait = grant
                    .retry_after
                    .and_then(|d| Duration::try_from(d).ok())
                    .unwrap_or(Duration::from_secs(1));
                next_ask = Instant::now() + wait;
            }
            for call in c.pending.drain(..granted) {
                out.push(send(Arc::clone(ctx), model.to_owned(), call));
            }
        }
        if out.is_empty() {
            c.flush().await?;
            if halted || c.pending.is_empty() {
                break;
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep_until(next_ask) => {}
            }
            continue;
        }
        let room = ctx
            .args
            .calls
            .saturating_sub(out.len())
            .min(c.pending.len());
        let ask_again = !halted && room > 0;
        let report_by = c.ended.since.map(|t| t + HOLD);
        tokio::select! {
            Some((call, got)) = out.next() => {
                c.settle(call, got);
                // And every other call that has ended meanwhile.
                while let Some(Some((call, got))) = out.next().now_or_never() {
                    c.settle(call, got);
                }
            }
            () = tokio::time::sleep_until(next_ask), if ask_again => {}
            () = tokio::time::sleep_until(report_by.unwrap_or(next_ask)), if report_by.is_some() => {}
            () = stop.cancelled(), if !stop.is_cancelled() => {}
        }
        if c.ended.outcomes.len() + c.ended.back.len() >= GROUP
            || c.ended.since.is_some_and(|t| t.elapsed() >= HOLD)
            || out.is_empty()
        {
            c.flush().await?;
        }
    }
    c.end(name, stop).await
}

/// One call, with the call it was.
async fn send(
    ctx: Arc<Ctx>,
    model: String,
    call: Call,
) -> (Call, Result<OnlineAnswer, OnlineFail>) {
    let got = ctx
        .provider
        .call_online(&model, &call.body, ctx.args.call_timeout)
        .await;
    (call, got)
}

impl Claim<'_> {
    /// Notes what an ended call left: an outcome, a row to give back or to
    /// send again, or what the next AcquireCapacity tells tally.
    fn settle(&mut self, call: Call, got: Result<OnlineAnswer, OnlineFail>) {
        let ended = &mut self.ended;
        ended.since.get_or_insert_with(Instant::now);
        match got {
            Ok(answer) => {
                self.ctx.capacity_ok(self.model);
                ended
                    .outcomes
                    .push(decode(self.ctx, self.prompts, &call, &answer));
            }
            Err(OnlineFail::Lost(why)) => ended.outcomes.push(online_calls::lost(&call.key, &why)),
            Err(OnlineFail::Unsent(why)) => {
                ended.back.push(call.key);
                ended.unreachable = Some(why);
            }
            Err(OnlineFail::Refused(e)) => {
                let ctx = self.ctx;
                match online_calls::refused(ctx.provider.wire(), ctx.args.lane, &e) {
                    // A 429 naming no delay waits `--refusal-cooldown`,
                    // doubling in a row, and past the bound pauses the
                    // ledger ([`crate::waits`]), as at a batch create.
                    Refused::RateLimited(named) => {
                        match ctx.capacity_wait(self.model, named) {
                            Next::Wait(wait) if !self.cooled_for(wait) => {
                                self.met.rate_limited = self.met.rate_limited.max(Some(wait));
                            }
                            Next::Wait(_) => {}
                            Next::Pause(n) => {
                                self.met.refused = Some((
                                    pb::ProviderRefusal::Quota,
                                    format!(
                                        "{e} ({n} refusals in a row named no delay; resume the ledger when the provider takes work again)"
                                    ),
                                ));
                            }
                        }
                        self.pending.push_back(call);
                    }
                    Refused::Shed(wait) => {
                        self.met.shed = true;
                        self.met.rate_limited = self.met.rate_limited.max(wait);
                        ended.back.push(call.key);
                    }
                    Refused::Stop(kind, words) => {
                        self.met.refused = Some((kind, words));
                        self.pending.push_front(call);
                    }
                    Refused::Row(failure) => ended.outcomes.push(pb::RowOutcome {
                        key: call.key,
                        outcome: Some(pb::row_outcome::Outcome::Failure(failure)),
                        ..Default::default()
                    }),
                }
            }
        }
    }

    /// Whether the cool-down already told to tally covers a wait of
    /// `wait` from now.
    fn cooled_for(&self, wait: Duration) -> bool {
        const SLACK: Duration = Duration::from_millis(50);
        self.cooled_until
            .is_some_and(|c| c.saturating_duration_since(Instant::now()) + SLACK >= wait)
    }

    /// Reports the outcomes and gives back the rows the ended calls left.
    async fn flush(&mut self) -> Result<(), JobError> {
        let ended = std::mem::take(&mut self.ended.outcomes);
        let back = std::mem::take(&mut self.ended.back);
        self.ended.since = None;
        self.ctx.metrics.online_calls(&ended, back.len());
        if !ended.is_empty() {
            report(self.ctx, self.claim, ended).await?;
        }
        if !back.is_empty() {
            release(self.ctx, self.claim, &back).await;
        }
        Ok(())
    }

    /// Once no call is out: the claim done, or given back (a refusal for
    /// good told to tally first, or the provider unreachable, or the
    /// worker stopping).
    async fn end(mut self, name: &str, stop: &CancellationToken) -> Result<JobEnd, JobError> {
        let (ctx, claim) = (self.ctx, self.claim);
        if let Some((kind, words)) = self.met.refused.take() {
            refuse(ctx, claim, kind, words).await?;
            tracing::warn!(claim = %name, "the provider refused the calls for good; the ledger is paused and the rows go back");
            release(ctx, claim, &[]).await;
            return Ok(JobEnd::Released);
        }
        if let Some(why) = self.ended.unreachable.take() {
            // No connection: the rest go back too, and this worker claims
            // nothing for a while rather than ask again at once.
            tracing::warn!(claim = %name, error = %why, "the provider is unreachable; releasing the claim and waiting before the next");
            release(ctx, claim, &[]).await;
            ctx.hold_claims(ctx.cooldown(None));
            return Ok(JobEnd::Released);
        }
        if !self.pending.is_empty() || stop.is_cancelled() {
            let keys: Vec<String> = self.pending.iter().map(|x| x.key.clone()).collect();
            release(ctx, claim, &keys).await;
            return Ok(JobEnd::Released);
        }
        Ok(JobEnd::Reconciled)
    }
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
        .unwrap_or_else(|| {
            online_calls::lost(&call.key, "the provider answered without the request")
        });
    outcome.request_id = request_id.chars().take(256).collect();
    outcome.tier = tier.chars().take(64).collect();
    outcome
}

/// Tells tally the provider refused a call of claim `claim` for good
/// (`kind`, in the provider's `words`): the ledger pauses.
pub(super) async fn refuse(
    ctx: &Ctx,
    claim: &str,
    kind: pb::ProviderRefusal,
    words: String,
) -> Result<(), JobError> {
    let met = Met {
        refused: Some((kind, words)),
        ..Met::default()
    };
    acquire(ctx, claim, Vec::new(), met).await.map(drop)
}

/// AcquireCapacity for `asks`, telling tally what the calls since the last
/// met.
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

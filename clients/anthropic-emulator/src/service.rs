//! The service layer between the handlers and the pure modules: the shared
//! in-memory state behind one mutex, the operations the handlers call, and
//! the per-batch lifecycle task that ends a batch on the configured timing
//! (or at its expiry horizon) and writes its results.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use emulator_kit::emulator::Served;
use emulator_kit::lifecycle::{Lives, dwell, end_after};
use emulator_kit::mix::{hash_str, shuffled};
use emulator_kit::online::{Online, Tier, prompt_key};
use emulator_kit::serve::Created;
use emulator_kit::submissions::SubmissionLog;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::answer::{Answered, Cache, answer, cache_prefix, not_run, prompt_text};
use crate::batches::{Batch, Counts, Status};
use crate::config::{EmulatorConfig, Models, Timing};
use crate::error::{ApiError, ErrorType};
use crate::faults::{BatchFault, FaultPlanError, Faults, Refusal, share_of};
use crate::ids::{batch_id, message_id, request_id};
use crate::online;
use crate::page::Page;
use crate::requests::{BatchRequest, check_params, parse_create};
use crate::stats::{Outcome, Stats};

pub struct Shared {
    pub api_keys: Vec<String>,
    timing: Timing,
    models: Models,
    seed: u64,
    nonce: u64,
    requests_named: AtomicU64,
    state: Mutex<State>,
    pub served: Served,
}

struct State {
    /// Live batches by creation order (deleted ones are gone).
    batches: BTreeMap<u64, Batch>,
    by_id: HashMap<String, u64>,
    requests: HashMap<String, Vec<BatchRequest>>,
    /// Each ended batch's results, as JSONL.
    results: HashMap<String, String>,
    /// With `moving_counts`, the answers of each running batch's requests
    /// answered so far (the first ones, in request order).
    progress: HashMap<String, Vec<Answered>>,
    /// Batches in progress, to stop on cancel.
    running: Lives,
    /// Hashes of the cached prompt prefixes seen.
    cached: HashSet<u64>,
    faults: Faults,
    online: Online,
    stats: Stats,
    next_seq: u64,
}

/// How a batch ends; `None` finished counts come from the plan's shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Completed,
    Expired(Option<usize>),
    Canceled(Option<usize>),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Faults(#[from] FaultPlanError),
    #[error("at least one non-empty api key is needed")]
    NoApiKey,
}

emulator_kit::state_access!();

impl Shared {
    /// The state for `config`, answering at `base_url`.
    pub(crate) fn build(
        config: EmulatorConfig,
        base_url: String,
    ) -> Result<Arc<Self>, ConfigError> {
        if config.api_keys.is_empty() || config.api_keys.iter().any(String::is_empty) {
            return Err(ConfigError::NoApiKey);
        }
        let faults = Faults::compile(config.faults)?;
        Ok(Arc::new(Self {
            api_keys: config.api_keys,
            timing: config.timing,
            models: config.models,
            seed: config.seed,
            nonce: emulator_kit::ids::run_nonce(config.seed),
            served: Served::new(base_url),
            requests_named: AtomicU64::new(0),
            state: Mutex::new(State {
                batches: BTreeMap::new(),
                by_id: HashMap::new(),
                requests: HashMap::new(),
                results: HashMap::new(),
                progress: HashMap::new(),
                running: Lives::default(),
                cached: HashSet::new(),
                online: Online::configured(config.online, faults.plan().shared.online.clone()),
                faults,
                stats: Stats::default(),
                next_seq: 0,
            }),
        }))
    }
    pub(crate) fn key(&self) -> &str {
        &self.api_keys[0]
    }
}

impl Shared {
    /// `POST /v1/messages`: one synchronous request, answered as a batch
    /// request of it would be (the same checks and row faults), within the
    /// account's per-minute limits.
    pub(crate) async fn online(&self, params: Value) -> Response {
        let checked = check_params(&params, &self.models)
            .map_err(|(kind, message)| ApiError::new(kind, message))
            .and_then(|()| online::tier_of(&params));
        let tier = match checked {
            Ok(tier) => tier,
            Err(e) => return e.into_response(),
        };
        let prompt = prompt_text(&params);
        let (gate, limits) = {
            let mut state = self.lock();
            let tokens = emulator_kit::text::tokens(&prompt) + online::max_output(&params);
            let gate = state.online.gate(std::time::Instant::now(), tier, tokens);
            (gate, state.online.limits())
        };
        emulator_kit::serve::online_answer(
            gate,
            |refused| online::refusal(refused, limits).into_response(),
            |lost| self.answer_online(&params, &prompt, tier, lost),
            || ApiError::of(ErrorType::Api).into_response(),
        )
        .await
    }

    /// The model's answer to a synchronous request, counted as answered.
    fn answer_online(&self, params: &Value, prompt: &str, tier: Tier, lost: bool) -> Response {
        let mut state = self.lock();
        state.next_seq += 1;
        let seq = state.next_seq;
        let fault = state.faults.decide_row(&prompt_key(prompt), prompt);
        let cache = match cache_prefix(params) {
            Some((hash, tokens)) if state.cached.insert(hash) => Cache::Write(tokens),
            Some((_, tokens)) => Cache::Read(tokens),
            None => Cache::None,
        };
        state.online.answered(prompt, tier, lost);
        drop(state);
        let answered = answer(
            params,
            None,
            fault.as_ref(),
            self.seed,
            &message_id(self.nonce, seq),
            cache,
        );
        match answered.result["type"].as_str() {
            Some("succeeded") => {
                let mut message = answered.result["message"].clone();
                message["usage"]["service_tier"] = json!("standard");
                axum::Json(message).into_response()
            }
            _ => {
                let error = &answered.result["error"]["error"];
                let kind = serde_json::from_value(error["type"].clone()).unwrap_or(ErrorType::Api);
                ApiError::new(kind, error["message"].as_str().unwrap_or_default()).into_response()
            }
        }
    }

    /// A fresh `request-id` for a response.
    pub fn next_request_id(&self) -> String {
        let n = self.requests_named.fetch_add(1, Ordering::Relaxed);
        request_id(self.nonce ^ 0x5eed, n)
    }

    /// A create whose body was over the limit: 413, counted.
    pub fn too_large(&self) -> ApiError {
        self.lock().stats.create_rejections += 1;
        ApiError::of(ErrorType::RequestTooLarge)
    }

    // ---- operations ----

    pub fn create_batch(self: &Arc<Self>, body: &[u8]) -> Result<Created<Value>, ApiError> {
        let parsed = parse_create(body);
        let mut guard = self.lock();
        let state = &mut *guard;
        let refused = match parsed {
            Err(error) => Err(error),
            Ok(requests) => match state.faults.take_refusal() {
                Some(refusal) => Err(refusal_error(refusal)),
                None => Ok(requests),
            },
        };
        let requests = refused.inspect_err(|_| state.stats.create_rejections += 1)?;
        state.next_seq += 1;
        let seq = state.next_seq;
        let id = batch_id(self.nonce, seq);
        let now = Utc::now();
        let lag = Duration::from_millis(state.faults.plan().shared.list_lag_ms);
        let batch = Batch::new(
            id.clone(),
            seq,
            requests.len() as u64,
            now,
            later(now, self.timing.expires_after),
            later(now, lag),
        );
        let json = batch.to_json(&self.served.base_url, None);
        state.stats.batches_created += 1;
        let fault = state.faults.decide_batch(state.stats.batches_created);
        for request in &requests {
            state
                .stats
                .submissions
                .submit(&request.custom_id, &id, Outcome::Pending);
            if let Some(model) = request.model() {
                state
                    .stats
                    .models
                    .insert(request.custom_id.clone(), model.to_owned());
            }
        }
        state.batches.insert(seq, batch);
        state.by_id.insert(id.clone(), seq);
        state.requests.insert(id.clone(), requests);
        let stop = state.running.start(&id, &self.served.shutdown, None);
        let lost = state.faults.shared.take_lost_answer();
        if lost.is_some() {
            state.stats.create_answers_lost += 1;
        }
        drop(guard);
        self.served
            .tasks
            .spawn(run_batch(Arc::clone(self), id, fault, stop));
        Ok(match lost {
            Some(mode) => Created::Lost(mode),
            None => Created::Batch(json),
        })
    }

    pub fn get_batch(&self, id: &str) -> Result<Value, ApiError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        find(state, id)?;
        self.advance(state, id, Utc::now());
        let json = self.json_of(state, find(state, id)?);
        if state.faults.shared.take_get_not_found() {
            state.stats.gets_not_found += 1;
            return Err(no_batch(id));
        }
        Ok(json)
    }

    /// Newest first, as documented (or the plan's `list_order`); a batch
    /// under list lag is left out.
    pub fn list_batches(&self, page: &Page) -> Result<Value, ApiError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let now = Utc::now();
        let running: Vec<String> = state
            .batches
            .values()
            .filter(|b| b.status == Status::InProgress)
            .map(|b| b.id.clone())
            .collect();
        for id in running {
            self.advance(state, &id, now);
        }
        let state = &*state;
        let mut listed: Vec<&Batch> = state
            .batches
            .values()
            .filter(|b| b.listed_from <= now)
            .collect();
        let order = state.faults.plan().list_order.unwrap_or_default();
        order.arrange(&mut listed, |b| b.id.as_str(), self.seed);
        let ids: Vec<&str> = listed.iter().map(|b| b.id.as_str()).collect();
        let w = page.window(&ids)?;
        let data: Vec<Value> = listed[w.start..w.end]
            .iter()
            .map(|b| self.json_of(state, b))
            .collect();
        Ok(json!({
            "data": data,
            "has_more": w.has_more,
            "first_id": ids[w.start..w.end].first(),
            "last_id": ids[w.start..w.end].last(),
        }))
    }

    pub fn cancel_batch(self: &Arc<Self>, id: &str) -> Result<Value, ApiError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let seq = *state.by_id.get(id).ok_or_else(|| no_batch(id))?;
        self.advance(state, id, Utc::now());
        let batch = state.batches.get_mut(&seq).ok_or_else(|| no_batch(id))?;
        match batch.status {
            Status::InProgress => {}
            Status::Canceling => return Ok(batch.to_json(&self.served.base_url, None)),
            Status::Ended => {
                return Err(ApiError::invalid(format!(
                    "Message batch {id} has already ended and cannot be canceled."
                )));
            }
        }
        batch.status = Status::Canceling;
        batch.cancel_initiated_at = Some(Utc::now());
        let json = batch.to_json(&self.served.base_url, None);
        state.running.stop(id);
        drop(guard);
        let (shared, id) = (Arc::clone(self), id.to_owned());
        end_after(
            &self.served.tasks,
            &self.served.shutdown,
            self.timing.canceling,
            move || {
                shared.finish(&id, Ending::Canceled(None));
            },
        );
        Ok(json)
    }

    /// Only an ended batch can be deleted (the docs: cancel an in-progress
    /// one first).
    pub fn delete_batch(&self, id: &str) -> Result<Value, ApiError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let status = find(state, id)?.status;
        if status != Status::Ended {
            return Err(ApiError::invalid(format!(
                "Message batch {id} cannot be deleted while its processing_status is {}; cancel it and wait for it to end first.",
                status.as_str()
            )));
        }
        if let Some(seq) = state.by_id.remove(id) {
            state.batches.remove(&seq);
        }
        state.requests.remove(id);
        state.results.remove(id);
        state.stats.batches_deleted += 1;
        Ok(json!({"id": id, "type": "message_batch_deleted"}))
    }

    /// The results JSONL of an ended batch.
    pub fn results(&self, id: &str) -> Result<String, ApiError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let batch = find(state, id)?;
        let status = batch.status;
        if let Some(at) = batch.archived_at(self.results_kept(state), Utc::now()) {
            return Err(ApiError::not_found(format!(
                "The results of message batch {id} are no longer available: it was archived at {}.",
                at.to_rfc3339_opts(SecondsFormat::Secs, true)
            )));
        }
        let Some(text) = state.results.get(id).cloned() else {
            return Err(ApiError::invalid(format!(
                "Results for message batch {id} are not available yet: its processing_status is {}.",
                status.as_str()
            )));
        };
        state.stats.results_downloads += 1;
        Ok(text)
    }

    // ---- lifecycle ----

    /// Ends the batch: answers its first `finished` requests through the
    /// params check and the row faults, marks the rest canceled or expired,
    /// writes the results (shuffled) and the final counts.
    fn finish(&self, id: &str, ending: Ending) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(&seq) = state.by_id.get(id) else {
            return;
        };
        if state.batches[&seq].status == Status::Ended {
            return;
        }
        let requests = state.requests.get(id).cloned().unwrap_or_default();
        let n = requests.len();
        let plan = state.faults.plan();
        let (finished, never) = match ending {
            Ending::Completed => (n, Outcome::Expired),
            Ending::Expired(f) => (
                f.unwrap_or_else(|| share_of(plan.finished_on_expiry, n)),
                Outcome::Expired,
            ),
            Ending::Canceled(f) => (
                f.unwrap_or_else(|| share_of(plan.shared.finished_on_cancel, n)),
                Outcome::Canceled,
            ),
        };
        // Requests already answered while it ran stay answered.
        let mut answered = state.progress.remove(id).unwrap_or_default();
        let finished = finished.max(answered.len());
        for request in &requests[answered.len()..finished.min(n)] {
            let one = self.answer_request(state, request);
            answered.push(one);
        }
        let mut counts = Counts::default();
        let mut lines = Vec::with_capacity(n);
        let mut outcomes = Vec::with_capacity(n);
        let unanswered = std::iter::repeat_with(|| not_run(never));
        for (request, answered) in requests.iter().zip(answered.into_iter().chain(unanswered)) {
            counts.tally(answered.outcome);
            lines.push(
                json!({"custom_id": request.custom_id, "result": answered.result}).to_string(),
            );
            outcomes.push((request.custom_id.clone(), answered.outcome));
        }
        let mut text = shuffled(lines, self.seed ^ hash_str(id)).join("\n");
        text.push('\n');
        state.results.insert(id.to_owned(), text);
        let now = Utc::now();
        if let Some(batch) = state.batches.get_mut(&seq) {
            batch.status = Status::Ended;
            batch.ended_at = Some(now);
            batch.counts = counts;
            if let Ending::Canceled(_) = ending {
                batch.cancel_initiated_at.get_or_insert(now);
            }
        }
        match ending {
            Ending::Completed => {}
            Ending::Expired(_) => state.stats.batches_expired += 1,
            Ending::Canceled(_) => state.stats.batches_canceled += 1,
        }
        state.stats.submissions.settle(id, outcomes);
        state.running.end(id);
    }
}

impl Shared {
    /// How long after its creation an ended batch's results stay
    /// available.
    fn results_kept(&self, state: &State) -> Duration {
        state
            .faults
            .plan()
            .archive_after_ms
            .map_or(self.timing.results_kept, Duration::from_millis)
    }

    /// A batch's JSON as it stands (archived once its results are gone).
    fn json_of(&self, state: &State, batch: &Batch) -> Value {
        let archived = batch.archived_at(self.results_kept(state), Utc::now());
        batch.to_json(&self.served.base_url, archived)
    }

    /// Answers one request as the model would: the params check, then the
    /// row faults (a processing of the request) and the prompt cache.
    fn answer_request(&self, state: &mut State, request: &BatchRequest) -> Answered {
        state.next_seq += 1;
        let problem = check_params(&request.params, &self.models).err();
        let fault = state
            .faults
            .decide_row(&request.custom_id, &prompt_text(&request.params));
        let cache = match (&problem, cache_prefix(&request.params)) {
            (None, Some((hash, tokens))) if state.cached.insert(hash) => Cache::Write(tokens),
            (None, Some((_, tokens))) => Cache::Read(tokens),
            _ => Cache::None,
        };
        answer(
            &request.params,
            problem,
            fault.as_ref(),
            self.seed,
            &message_id(self.nonce, state.next_seq),
            cache,
        )
    }

    /// With `moving_counts`, answers the requests of running batch `id`
    /// due by `now` (an even share of its `in_progress` time each, the
    /// last one left for its end) and moves its counts.
    fn advance(&self, state: &mut State, id: &str, now: DateTime<Utc>) {
        if !state.faults.plan().moving_counts {
            return;
        }
        let Some(batch) = state.by_id.get(id).and_then(|seq| state.batches.get(seq)) else {
            return;
        };
        if batch.status != Status::InProgress {
            return;
        }
        let n = state.requests.get(id).map_or(0, Vec::len);
        let elapsed = (now - batch.created_at).to_std().unwrap_or_default();
        let due = due_by(elapsed, self.timing.in_progress, n);
        let done = state.progress.get(id).map_or(0, Vec::len);
        if due <= done {
            return;
        }
        let requests = state.requests.get(id).cloned().unwrap_or_default();
        let mut answered = state.progress.remove(id).unwrap_or_default();
        for request in &requests[done..due] {
            let one = self.answer_request(state, request);
            answered.push(one);
        }
        let mut counts = Counts {
            processing: (n - answered.len()) as u64,
            ..Counts::default()
        };
        for one in &answered {
            counts.tally(one.outcome);
        }
        state.progress.insert(id.to_owned(), answered);
        if let Some(batch) = state
            .by_id
            .get(id)
            .and_then(|seq| state.batches.get_mut(seq))
        {
            batch.counts = counts;
        }
    }
}

/// How many of a running batch's `n` requests are answered `elapsed` into
/// its `in_progress` time: an even share each, the last left for its end.
fn due_by(elapsed: Duration, in_progress: Duration, n: usize) -> usize {
    if in_progress.is_zero() {
        return n.saturating_sub(1);
    }
    let share = elapsed.as_secs_f64() / in_progress.as_secs_f64();
    ((share * n as f64).floor() as usize).min(n.saturating_sub(1))
}

fn later(now: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The `error_code` of an organization disabled for trust and safety.
const ORGANIZATION_ON_HOLD: &str = "organization_on_hold";

fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::Unauthorized => ApiError::of(ErrorType::Authentication),
        Refusal::Billing => ApiError::of(ErrorType::Billing),
        Refusal::Forbidden => ApiError::of(ErrorType::Permission),
        Refusal::Overloaded => ApiError::of(ErrorType::Overloaded),
        // The SDK types an organization on hold as a 400
        // (`OrganizationOnHoldError`), the spend caps as 429s.
        Refusal::SpendLimited(code) if code == ORGANIZATION_ON_HOLD => ApiError::new(
            ErrorType::InvalidRequest,
            "This organization has been disabled.",
        )
        .with_error_code(code),
        Refusal::SpendLimited(code) => ApiError::new(
            ErrorType::RateLimit,
            "This request would exceed your account's monthly spend limit. Please try again later.",
        )
        .with_error_code(code),
        Refusal::RateLimited(rl) => {
            let reset = later(Utc::now(), Duration::from_secs(rl.retry_after_secs));
            ApiError::of(ErrorType::RateLimit)
                .header("retry-after", rl.retry_after_secs.to_string())
                .header(
                    "anthropic-ratelimit-requests-limit",
                    rl.requests_limit.to_string(),
                )
                .header("anthropic-ratelimit-requests-remaining", "0")
                .header(
                    "anthropic-ratelimit-requests-reset",
                    reset.to_rfc3339_opts(SecondsFormat::Secs, true),
                )
        }
    }
}

fn no_batch(id: &str) -> ApiError {
    ApiError::not_found(format!("No message batch found with id '{id}'."))
}

fn find<'a>(state: &'a State, id: &str) -> Result<&'a Batch, ApiError> {
    state
        .by_id
        .get(id)
        .and_then(|seq| state.batches.get(seq))
        .ok_or_else(|| no_batch(id))
}

/// Ends one batch when its time comes: after `in_progress` (as its fault
/// says), or expired at the horizon if that comes first or it stays in
/// progress. Stops early when it is canceled or the emulator shuts down.
async fn run_batch(
    shared: Arc<Shared>,
    id: String,
    fault: Option<BatchFault>,
    stop: CancellationToken,
) {
    let Timing {
        in_progress,
        expires_after,
        ..
    } = shared.timing;
    let natural = match fault {
        Some(BatchFault::StaysInProgress) => None,
        Some(BatchFault::Expired { finished }) => Some(Ending::Expired(Some(finished))),
        Some(BatchFault::Canceled { finished }) => Some(Ending::Canceled(Some(finished))),
        None => Some(Ending::Completed),
    };
    let (wait, ending) = match natural {
        Some(ending) if in_progress < expires_after => (in_progress, ending),
        _ => (expires_after, Ending::Expired(None)),
    };
    if dwell(wait, &stop).await {
        shared.finish(&id, ending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: counts move evenly over the in_progress time and the
    // last request waits for the end, so a running batch always has one
    // processing.
    #[test]
    fn requests_fall_due_evenly_and_one_waits_for_the_end() {
        let run = Duration::from_millis(1000);
        let at = Duration::from_millis;
        assert_eq!(due_by(at(0), run, 10), 0);
        assert_eq!(due_by(at(250), run, 10), 2);
        assert_eq!(due_by(at(999), run, 10), 9);
        assert_eq!(due_by(at(5000), run, 10), 9);
        assert_eq!(due_by(at(5000), run, 0), 0);
        assert_eq!(due_by(at(1), Duration::ZERO, 3), 2);
    }
}

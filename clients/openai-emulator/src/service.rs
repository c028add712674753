//! The service layer between the handlers and the pure modules: the shared
//! in-memory state behind one mutex, the operations the handlers call, and
//! the per-batch lifecycle task that walks a batch through its states on
//! the configured timing and queues its webhook event.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use chrono::Utc;
use emulator_kit::delivery::{self, Attempt, Outbox};
use emulator_kit::emulator::Served;
use emulator_kit::lifecycle::{Lives, dwell, end_after};
use emulator_kit::online::{Online, Tier, prompt_key};
use emulator_kit::serve::Created;
use emulator_kit::signing::SecretError;
use emulator_kit::submissions::SubmissionLog;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::answer::{Answered, LineIds, answer, media_hashes, never_ran, prompt_text, tokens};
use crate::batches::{Batch, Counts, Status, Usage, answered_by};
use crate::config::{EmulatorConfig, ListOrder, Models, Timing};
use crate::error::ApiError;
use crate::faults::{BatchFault, CancelFinished, FaultPlanError, Faults, UploadRefused};
use crate::files::{BATCH_FILE_EXPIRY_SECS, EXPIRY_SECS, StoredFile, UPLOAD_PURPOSES};
use crate::ids::{completion_id, file_id, hex_id};
use crate::input::{InputRow, LineError, parse};
use crate::online;
use crate::stats::{Outcome, Stats};
use crate::webhooks::event_for;

/// Endpoints a batch may be made for.
pub const ENDPOINTS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/embeddings",
    "/v1/completions",
];

pub struct Shared {
    pub api_keys: Vec<String>,
    timing: Timing,
    models: Models,
    list_order: ListOrder,
    seed: u64,
    nonce: u64,
    outbox: Option<Outbox>,
    state: Mutex<State>,
    pub served: Served,
}

struct State {
    files: HashMap<String, StoredFile>,
    batches: Vec<Batch>,
    by_id: HashMap<String, usize>,
    rows: HashMap<String, Vec<InputRow>>,
    /// Each batch in progress: when it started, and its requests answered
    /// so far (the first ones, in input order).
    running: HashMap<String, Running>,
    runtime: Lives,
    faults: Faults,
    online: Online,
    stats: Stats,
    next_seq: u64,
    /// Batches the account held at start (the first `seeded` of `batches`).
    seeded: u64,
}

/// A batch in progress: when it went in progress, and the requests
/// answered so far, each its custom_id and line (None: left out of both
/// files).
struct Running {
    started_ms: i64,
    /// The most requests it answers before its end (an expiring batch's
    /// `answered`; else every one).
    cap: usize,
    answered: Vec<(String, Option<Answered>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Faults(#[from] FaultPlanError),
    #[error("webhook secret: {0}")]
    Secret(#[from] SecretError),
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("at least one non-empty api key is needed")]
    NoApiKey,
}

fn now_secs() -> i64 {
    Utc::now().timestamp()
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
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
        let nonce = emulator_kit::ids::run_nonce(config.seed);
        let batches = crate::seed::batches(config.seed_batches, nonce, now_secs());
        let by_id = batches
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id.clone(), i))
            .collect();
        let stats = Stats {
            batches_seeded: config.seed_batches,
            ..Stats::default()
        };
        let secret = config
            .webhook
            .as_ref()
            .map(|t| t.parse_secret())
            .transpose()?;
        let http = delivery::http_client()?;
        let served = Served::new(base_url);
        Ok(Arc::new_cyclic(|me: &Weak<Shared>| {
            let outbox = config.webhook.zip(secret).map(|(target, secret)| {
                let report = delivery::report_to(me.clone(), Shared::count_webhook);
                Outbox::new(
                    target,
                    secret,
                    http,
                    served.tasks.clone(),
                    served.shutdown.clone(),
                    report,
                )
            });
            Self {
                api_keys: config.api_keys,
                timing: config.timing,
                models: config.models,
                list_order: config.list_order,
                seed: config.seed,
                nonce,
                outbox,
                state: Mutex::new(State {
                    files: HashMap::new(),
                    next_seq: config.seed_batches,
                    seeded: config.seed_batches,
                    batches,
                    by_id,
                    rows: HashMap::new(),
                    running: HashMap::new(),
                    runtime: Lives::default(),
                    online: Online::configured(config.online, faults.plan().shared.online.clone()),
                    faults,
                    stats,
                }),
                served,
            }
        }))
    }
    pub(crate) fn key(&self) -> &str {
        &self.api_keys[0]
    }
}

impl Shared {
    fn count_webhook(&self, attempt: Attempt) {
        let s = &mut self.lock().stats;
        attempt.count(
            &mut s.webhooks_sent,
            &mut s.webhooks_failed,
            &mut s.webhooks_abandoned,
        );
    }

    /// A call to a path (or method) the API has not.
    pub(crate) fn count_unknown_route(&self) {
        self.lock().stats.unknown_routes += 1;
    }

    // ---- synchronous endpoints ----

    /// Answers one synchronous request of `endpoint`
    /// (`/v1/chat/completions` or `/v1/responses`).
    pub(crate) async fn online(&self, endpoint: &str, body: Value) -> Response {
        let started = std::time::Instant::now();
        let checked =
            online::validate(endpoint, &body, &self.models).and_then(|()| online::tier_of(&body));
        let tier = match checked {
            Ok(tier) => tier,
            Err(e) => return e.into_response(),
        };
        let prompt = prompt_text(&body);
        let model = body["model"].as_str().unwrap_or_default().to_owned();
        let (gate, limits) = {
            let mut state = self.lock();
            let tokens = tokens(&prompt) + online::max_output(&body);
            let gate = state.online.gate(std::time::Instant::now(), tier, tokens);
            (gate, state.online.limits())
        };
        emulator_kit::serve::online_answer(
            gate,
            |refused| online::refusal(refused, limits, &model).into_response(),
            |lost| {
                let mut answered = self.answer_online(endpoint, &body, &prompt, tier, lost);
                online::headers(&mut answered.1, &answered.0, started.elapsed(), limits);
                answered.1
            },
            || ApiError::server_error().into_response(),
        )
        .await
    }

    /// The model's answer to a synchronous request (its row faults as a
    /// batch line's), counted as answered; with its request id.
    fn answer_online(
        &self,
        endpoint: &str,
        body: &Value,
        prompt: &str,
        tier: Tier,
        lost: bool,
    ) -> (String, Response) {
        let mut state = self.lock();
        state.next_seq += 1;
        let seq = state.next_seq;
        let fault = state.faults.decide_row(&prompt_key(prompt), prompt);
        state.online.answered(prompt, tier, lost);
        *state
            .stats
            .online_by_endpoint
            .entry(endpoint.to_owned())
            .or_default() += 1;
        drop(state);
        let ids = LineIds {
            request: hex_id("req_", self.nonce ^ 2, seq),
            completion: completion_id(self.nonce, seq),
            request_id: hex_id("req_", self.nonce ^ 1, seq),
            created: now_secs(),
        };
        let request_id = ids.request_id.clone();
        let line = answer("", endpoint, body, fault.as_ref(), self.seed, &ids).map(|a| a.line);
        let Some(mut response) = line
            .map(|mut l| l["response"].take())
            .filter(|r| !r.is_null())
        else {
            return (request_id, ApiError::server_error().into_response());
        };
        let status = response["status_code"].as_u64().unwrap_or(500) as u16;
        let mut out = response["body"].take();
        if status == 200 {
            out["service_tier"] = json!(online::tier_name(tier));
        }
        let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK);
        (request_id, (status, axum::Json(out)).into_response())
    }

    // ---- files ----

    /// `POST /v1/files`: `expires_after_secs` is the upload's
    /// `expires_after[seconds]` (anchored at its creation), if it named one.
    pub fn upload(
        &self,
        filename: String,
        purpose: String,
        bytes: Vec<u8>,
        expires_after_secs: Option<i64>,
    ) -> Result<Value, ApiError> {
        if !UPLOAD_PURPOSES.contains(&purpose.as_str()) {
            return Err(ApiError::invalid(format!(
                "'{purpose}' is not one of {UPLOAD_PURPOSES:?} - 'purpose'"
            ))
            .param("purpose"));
        }
        if let Some(secs) = expires_after_secs.filter(|s| !EXPIRY_SECS.contains(s)) {
            return Err(ApiError::invalid(format!(
                "Invalid 'expires_after.seconds': integer out of range, expected {} to {}, got {secs}.",
                EXPIRY_SECS.start(),
                EXPIRY_SECS.end()
            ))
            .param("expires_after.seconds"));
        }
        let mut state = self.lock();
        let now = now_ms();
        let stored: u64 = state
            .files
            .values()
            .filter(|f| f.live(now))
            .map(|f| f.bytes.len() as u64)
            .sum();
        if let Some(refused) = state.faults.take_upload_refusal(bytes.len() as u64, stored) {
            state.stats.upload_rejections += 1;
            return Err(upload_refused(refused));
        }
        let expires_after = expires_after_secs
            .or_else(|| (purpose == "batch").then_some(BATCH_FILE_EXPIRY_SECS))
            .map(|secs| secs.saturating_mul(1000));
        state.next_seq += 1;
        let seq = state.next_seq;
        let file = StoredFile {
            id: file_id(self.nonce, seq),
            filename,
            purpose,
            bytes,
            created_at: now.div_euclid(1000),
            created_at_ms: now,
            expires_at_ms: expires_after.map(|ms| now.saturating_add(ms)),
            seq,
        };
        let json = file.to_json();
        state.files.insert(file.id.clone(), file);
        state.stats.uploads += 1;
        Ok(json)
    }

    pub fn get_file(&self, id: &str) -> Result<Value, ApiError> {
        live_file(&mut self.lock(), id).map(StoredFile::to_json)
    }

    pub fn file_content(&self, id: &str) -> Result<Vec<u8>, ApiError> {
        live_file(&mut self.lock(), id).map(|f| f.bytes.clone())
    }

    pub fn delete_file(&self, id: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        live_file(&mut state, id)?;
        state.files.remove(id);
        state.stats.files_deleted += 1;
        Ok(json!({"id": id, "object": "file", "deleted": true}))
    }

    pub fn list_files(
        &self,
        page: &Page,
        purpose: Option<&str>,
        ascending: bool,
    ) -> Result<Value, ApiError> {
        let state = self.lock();
        let now = now_ms();
        let mut files: Vec<&StoredFile> = state
            .files
            .values()
            .filter(|f| f.live(now) && purpose.is_none_or(|p| p == f.purpose))
            .collect();
        files.sort_by_key(|f| f.seq);
        if !ascending {
            files.reverse();
        }
        paginate(&files, |f| f.id.as_str(), page, 10_000, |f| f.to_json())
    }

    // ---- batches ----

    pub fn create_batch(self: &Arc<Self>, body: &Value) -> Result<Created<Value>, ApiError> {
        let request = check_create(body)?;
        let mut state = self.lock();
        let refusal = if state.faults.take_insufficient_quota() {
            Some(
                ApiError::new(
                    429,
                    "insufficient_quota",
                    "You exceeded your current quota, please check your plan and billing details.",
                )
                .code("insufficient_quota"),
            )
        } else {
            state.faults.shared.take_rate_limit().map(|rl| ApiError {
                retry_after: Some(Duration::from_secs(rl.retry_after_secs)),
                ..ApiError::new(
                    429,
                    "requests",
                    "Rate limit reached for requests to /v1/batches. Please try again later.",
                )
                .code("rate_limit_exceeded")
            })
        };
        let refusal = refusal.or_else(|| match state.files.get(&request.input_file_id) {
            None => Some(no_file(&request.input_file_id).param("input_file_id")),
            Some(f) if f.purpose != "batch" => Some(
                ApiError::invalid(format!(
                    "The input file {} must be uploaded with purpose 'batch'.",
                    f.id
                ))
                .param("input_file_id"),
            ),
            Some(_) => None,
        });
        let refusal = refusal.or_else(|| {
            let age_ms = state
                .files
                .get(&request.input_file_id)
                .map_or(0, |f| now_ms() - f.created_at_ms);
            let invisible = state
                .faults
                .take_file_invisible(&request.input_file_id, age_ms);
            invisible.then(|| {
                state.stats.creates_file_not_visible += 1;
                not_visible(&request.input_file_id)
            })
        });
        if let Some(error) = refusal {
            state.stats.create_rejections += 1;
            return Err(error);
        }
        state.next_seq += 1;
        let seq = state.next_seq;
        let id = hex_id("batch_", self.nonce, seq);
        let now = now_secs();
        let lag =
            state.faults.plan().shared.list_lag_ms + state.faults.list_lag_spread(seq, self.seed);
        let lag = i64::try_from(lag).unwrap_or(i64::MAX);
        let batch = Batch {
            id: id.clone(),
            seq,
            endpoint: request.endpoint,
            input_file_id: request.input_file_id,
            metadata: request.metadata,
            output_expires_after: request.output_expires_after,
            model: None,
            status: Status::Validating,
            created_at: now,
            listed_from_ms: now_ms().saturating_add(lag),
            in_progress_at: None,
            finalizing_at: None,
            completed_at: None,
            failed_at: None,
            expired_at: None,
            cancelling_at: None,
            cancelled_at: None,
            errors: Vec::new(),
            output_file_id: None,
            error_file_id: None,
            counts: Counts::default(),
            usage: Usage::default(),
        };
        let json = batch.to_json();
        let index = state.batches.len();
        state.by_id.insert(id.clone(), index);
        state.batches.push(batch);
        state.stats.batches_created += 1;
        let cancel = state.runtime.start(
            &id,
            &self.served.shutdown,
            self.outbox.as_ref().map(Outbox::queue),
        );
        let lost = state.faults.shared.take_lost_answer();
        if lost.is_some() {
            state.stats.create_answers_lost += 1;
        }
        drop(state);
        self.served
            .tasks
            .spawn(run_batch(Arc::clone(self), id, cancel));
        Ok(match lost {
            Some(mode) => Created::Lost(mode),
            None => Created::Batch(json),
        })
    }

    pub fn get_batch(&self, id: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        self.advance(&mut state, id, None);
        let json = find(&state, id)?.to_json();
        if state.faults.shared.take_get_not_found() {
            state.stats.gets_not_found += 1;
            return Err(no_batch(id));
        }
        Ok(json)
    }

    pub fn list_batches(&self, page: &Page) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let running: Vec<String> = state.running.keys().cloned().collect();
        for id in running {
            self.advance(&mut state, &id, None);
        }
        let now = now_ms();
        let mut batches: Vec<&Batch> = state
            .batches
            .iter()
            .filter(|b| b.listed_from_ms <= now)
            .collect();
        let order = state.faults.plan().list_order.unwrap_or(self.list_order);
        order.arrange(&mut batches, |b| b.id.as_str(), self.seed);
        // Only the page's batches are written out: a list of 100,000
        // batches answers a page at the cost of sorting ids.
        let answer = paginate(&batches, |b| b.id.as_str(), page, 20, |b| b.to_json());
        drop(batches);
        state.stats.batch_list_pages += 1;
        answer
    }

    pub fn cancel_batch(self: &Arc<Self>, id: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        self.advance(&mut state, id, None);
        let index = *state.by_id.get(id).ok_or_else(|| no_batch(id))?;
        let status = state.batches[index].status;
        match status {
            Status::Validating | Status::InProgress => {}
            Status::Cancelling => return Ok(state.batches[index].to_json()),
            Status::Finalizing
            | Status::Completed
            | Status::Failed
            | Status::Expired
            | Status::Cancelled => {
                let message = format!("Cannot cancel a batch with status '{}'.", status.as_str());
                return match state.faults.plan().cancel_finished {
                    CancelFinished::Conflict => {
                        Err(ApiError::new(409, "invalid_request_error", message))
                    }
                    CancelFinished::BadRequest => Err(ApiError::invalid(message)),
                    CancelFinished::Unchanged => Ok(state.batches[index].to_json()),
                };
            }
        }
        state.batches[index].transition(Status::Cancelling, now_secs());
        state.runtime.stop(id);
        let json = state.batches[index].to_json();
        let answered = if status == Status::InProgress {
            let rows = state.rows.get(id).map_or(0, Vec::len);
            state.faults.shared.finished_on_cancel(rows)
        } else {
            0
        };
        drop(state);
        let (shared, id) = (Arc::clone(self), id.to_owned());
        end_after(
            &self.served.tasks,
            &self.served.shutdown,
            self.timing.cancelling,
            move || {
                shared.finish(&id, Status::Cancelled, answered);
            },
        );
        Ok(json)
    }

    // ---- lifecycle ----

    /// End of `validating`: the input checked, the batch's fault decided.
    /// Returns the fault to play out if the batch goes in progress.
    fn validate(&self, id: &str) -> Option<Option<BatchFault>> {
        let mut state = self.lock();
        let index = *state.by_id.get(id)?;
        if state.batches[index].status != Status::Validating {
            return None;
        }
        let batch = &state.batches[index];
        let parsed = match state.files.get(&batch.input_file_id) {
            Some(file) => parse(&file.bytes, &batch.endpoint),
            None => Err(vec![LineError::new(
                "file_not_found",
                format!("The input file {} was not found.", batch.input_file_id),
                Some("input_file_id"),
                None,
            )]),
        };
        let (seq, metadata) = (batch.seq, batch.metadata.clone().unwrap_or_default());
        let nth = state.batches.iter().filter(|b| b.seq <= seq).count() as u64 - state.seeded;
        let input = match parsed {
            Ok(input) => input,
            Err(errors) => {
                self.fail(&mut state, index, errors);
                return None;
            }
        };
        let name = state.batches[index].id.clone();
        for row in &input.rows {
            state
                .stats
                .submissions
                .submit(&row.custom_id, &name, Outcome::Pending);
        }
        let input_tokens: u64 = input
            .rows
            .iter()
            .map(|r| tokens(&prompt_text(&r.body)))
            .sum();
        state.batches[index].model = Some(input.model.clone());
        state.batches[index].counts.total = input.rows.len() as u64;
        state.rows.insert(name.clone(), input.rows);
        let fault = state.faults.decide_batch(nth, &metadata, &input.model);
        let enqueued: u64 = state
            .batches
            .iter()
            .filter(|b| {
                b.id != name
                    && b.model.as_deref() == Some(input.model.as_str())
                    && matches!(b.status, Status::InProgress | Status::Finalizing)
            })
            .filter_map(|b| state.rows.get(&b.id))
            .flatten()
            .map(|r| tokens(&prompt_text(&r.body)))
            .sum();
        let over_limit = state
            .faults
            .plan()
            .enqueued_tokens
            .is_some_and(|t| enqueued + input_tokens > t.limit);
        let refused = if !self.models.allows(&input.model) {
            Some(vec![LineError::new(
                "model_not_found",
                format!(
                    "The model `{}` does not exist or you do not have access to it.",
                    input.model
                ),
                Some("body.model"),
                state.rows[&name].first().map(|r| r.line),
            )])
        } else if over_limit || fault == Some(BatchFault::TokenLimitExceeded) {
            state.stats.token_limit_failures += 1;
            Some(vec![LineError::new(
                "token_limit_exceeded",
                format!(
                    "Enqueued token limit reached for {} in organization org-emulator. Limit: {} enqueued tokens. Please try again once some in_progress batches have been completed.",
                    input.model,
                    state.faults.plan().enqueued_tokens.map_or(0, |t| t.limit)
                ),
                None,
                None,
            )])
        } else if let Some(BatchFault::Failed { errors }) = &fault {
            Some(if errors.is_empty() {
                vec![LineError::new(
                    "invalid_request",
                    "The batch failed.",
                    None,
                    None,
                )]
            } else {
                errors
                    .iter()
                    .map(|e| LineError::new(&e.code, e.message.clone(), e.param.as_deref(), e.line))
                    .collect()
            })
        } else {
            None
        };
        if let Some(errors) = refused {
            self.fail(&mut state, index, errors);
            return None;
        }
        if fault != Some(BatchFault::StaysValidating) {
            state.batches[index].transition(Status::InProgress, now_secs());
            let cap = match fault {
                Some(BatchFault::Expired { answered }) => answered,
                _ => usize::MAX,
            };
            let running = Running {
                started_ms: now_ms(),
                cap,
                answered: Vec::new(),
            };
            state.running.insert(name, running);
        }
        Some(fault)
    }

    fn fail(&self, state: &mut State, index: usize, errors: Vec<LineError>) {
        state.batches[index].errors = errors;
        let id = state.batches[index].id.clone();
        let rows = state.rows.get(&id).cloned().unwrap_or_default();
        state.stats.submissions.settle(
            &id,
            rows.iter().map(|r| (r.custom_id.clone(), Outcome::NotRun)),
        );
        state.stats.batches_failed += 1;
        self.end(state, index, Status::Failed);
    }

    fn start_finalizing(&self, id: &str) -> bool {
        let mut state = self.lock();
        let Some(&index) = state.by_id.get(id) else {
            return false;
        };
        if state.batches[index].status != Status::InProgress {
            return false;
        }
        // Its time in progress is over: every request is answered.
        self.advance(&mut state, id, Some(usize::MAX));
        state.batches[index].transition(Status::Finalizing, now_secs());
        true
    }

    /// Answers the requests of running batch `id` due by now (`upto`
    /// overrides: at most that many in all) and moves its counts, as the
    /// API's `request_counts` move while a batch is in progress: request
    /// `i` of `n` is answered `(i + 1) / n` of the way through the
    /// `in_progress` time, the last one at the batch's end (so a batch
    /// held in progress shows all but one answered).
    fn advance(&self, state: &mut State, id: &str, upto: Option<usize>) {
        let Some(&index) = state.by_id.get(id) else {
            return;
        };
        let Some(running) = state.running.get(id) else {
            return;
        };
        if state.batches[index].status != Status::InProgress {
            return;
        }
        let rows = state.rows.get(id).map_or(&[][..], Vec::as_slice);
        let elapsed = now_ms().saturating_sub(running.started_ms);
        let due = upto
            .unwrap_or_else(|| answered_by(rows.len(), elapsed, self.timing.in_progress))
            .min(running.cap)
            .min(rows.len());
        let from = running.answered.len();
        if due <= from {
            return;
        }
        let rows = rows[from..due].to_vec();
        let endpoint = state.batches[index].endpoint.clone();
        let now = now_secs();
        for row in &rows {
            let answered = self.answer_row(state, &endpoint, row, now);
            let counts = &mut state.batches[index].counts;
            match &answered.1 {
                Some(a) if a.error_file => counts.failed += 1,
                Some(_) => counts.completed += 1,
                None => {}
            }
            if let Some(running) = state.running.get_mut(id) {
                running.answered.push(answered);
            }
        }
    }

    /// Answers one request through the row faults (counting its
    /// processing and its media): its custom_id and line, None when the
    /// row is left out of both files.
    fn answer_row(
        &self,
        state: &mut State,
        endpoint: &str,
        row: &InputRow,
        now: i64,
    ) -> (String, Option<Answered>) {
        state.next_seq += 1;
        let seq = state.next_seq;
        let prompt = prompt_text(&row.body);
        let fault = state.faults.decide_row(&row.custom_id, &prompt);
        let files = &state.files;
        let media = media_hashes(&row.body, &|fid| files.get(fid).map(|f| f.bytes.clone()));
        if !media.is_empty() {
            state
                .stats
                .media
                .entry(row.custom_id.clone())
                .or_default()
                .extend(media);
        }
        let ids = LineIds {
            request: hex_id("batch_req_", self.nonce, seq),
            completion: completion_id(self.nonce, seq),
            request_id: hex_id("req_", self.nonce ^ 1, seq),
            created: now,
        };
        let answered = answer(
            &row.custom_id,
            endpoint,
            &row.body,
            fault.as_ref(),
            self.seed,
            &ids,
        );
        (row.custom_id.clone(), answered)
    }

    /// Keeps the requests answered while the batch ran, answers the rest
    /// of the first `answered` through the row faults, writes the others
    /// as never-run lines (for expired and cancelled batches), makes the
    /// output and error files and ends the batch in `to`.
    fn finish(&self, id: &str, to: Status, answered: usize) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(&index) = state.by_id.get(id) else {
            return;
        };
        if state.batches[index].status.is_terminal() {
            return;
        }
        let rows = state.rows.get(id).cloned().unwrap_or_default();
        let endpoint = state.batches[index].endpoint.clone();
        let ran = state
            .running
            .remove(id)
            .map_or_else(Vec::new, |r| r.answered);
        // A cancel or expiry keeps the requests already answered.
        let answered = answered.max(ran.len());
        let mut ran = ran.into_iter();
        let (mut output, mut errors) = (Vec::new(), Vec::new());
        let (mut counts, mut usage) = (
            Counts {
                total: rows.len() as u64,
                ..Counts::default()
            },
            Usage::default(),
        );
        let mut outcomes = Vec::new();
        let now = now_secs();
        for (i, row) in rows.iter().enumerate() {
            if i >= answered {
                state.next_seq += 1;
                let request = hex_id("batch_req_", self.nonce, state.next_seq);
                let code = if to == Status::Expired {
                    "batch_expired"
                } else {
                    "batch_cancelled"
                };
                errors.push(never_ran(&row.custom_id, &request, code));
                counts.failed += 1;
                let outcome = if to == Status::Expired {
                    Outcome::Expired
                } else {
                    Outcome::Cancelled
                };
                outcomes.push((row.custom_id.clone(), outcome));
                continue;
            }
            let (custom_id, answer) = match ran.next() {
                Some(done) => done,
                None => self.answer_row(state, &endpoint, row, now),
            };
            match answer {
                None => outcomes.push((custom_id, Outcome::Missing)),
                Some(a) => {
                    usage.input_tokens += a.input_tokens;
                    usage.output_tokens += a.output_tokens;
                    if a.error_file {
                        counts.failed += 1;
                        errors.push(a.line);
                    } else {
                        counts.completed += 1;
                        output.push(a.line);
                    }
                    outcomes.push((custom_id, a.outcome));
                }
            }
        }
        let output_file_id = self.store_lines(state, id, "output", &output);
        let error_file_id = self.store_lines(state, id, "error", &errors);
        let batch = &mut state.batches[index];
        batch.output_file_id = output_file_id;
        batch.error_file_id = error_file_id;
        batch.counts = counts;
        batch.usage = usage;
        state.stats.submissions.settle(id, outcomes);
        if to == Status::Cancelled {
            state.stats.batches_cancelled += 1;
        }
        self.end(state, index, to);
    }

    fn store_lines(
        &self,
        state: &mut State,
        id: &str,
        kind: &str,
        lines: &[Value],
    ) -> Option<String> {
        if lines.is_empty() {
            return None;
        }
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend_from_slice(line.to_string().as_bytes());
            bytes.push(b'\n');
        }
        state.next_seq += 1;
        let now = now_ms();
        let expiry_ms = state.faults.plan().output_expiry_ms.map_or_else(
            || {
                state
                    .by_id
                    .get(id)
                    .and_then(|&i| state.batches[i].output_expires_after)
                    .map(|secs| secs.saturating_mul(1000))
            },
            |ms| Some(i64::try_from(ms).unwrap_or(i64::MAX)),
        );
        let file = StoredFile {
            id: file_id(self.nonce, state.next_seq),
            filename: format!("{id}_{kind}.jsonl"),
            purpose: "batch_output".into(),
            bytes,
            created_at: now.div_euclid(1000),
            created_at_ms: now,
            expires_at_ms: expiry_ms.map(|ms| now.saturating_add(ms)),
            seq: state.next_seq,
        };
        let fid = file.id.clone();
        state.files.insert(fid.clone(), file);
        Some(fid)
    }

    /// Puts the batch in terminal state `to`, queues its event, ends its
    /// lifecycle task.
    fn end(&self, state: &mut State, index: usize, to: Status) {
        let now = now_secs();
        let batch = &mut state.batches[index];
        batch.transition(to, now);
        if let (Some(queue), Some(event)) = (state.runtime.end(&batch.id), event_for(batch, now)) {
            let _ = queue.send(event);
        }
    }
}

/// A checked create request.
struct CreateRequest {
    input_file_id: String,
    endpoint: String,
    metadata: Option<BTreeMap<String, String>>,
    output_expires_after: Option<i64>,
}

fn check_create(body: &Value) -> Result<CreateRequest, ApiError> {
    let missing = |p: &str| {
        ApiError::invalid(format!("Missing required parameter: '{p}'."))
            .param(p)
            .code("missing_required_parameter")
    };
    let input_file_id = body
        .get("input_file_id")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("input_file_id"))?;
    let endpoint = body
        .get("endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("endpoint"))?;
    if !ENDPOINTS.contains(&endpoint) {
        return Err(ApiError::invalid(format!(
            "Invalid value: '{endpoint}'. Supported values are: {}.",
            ENDPOINTS.join(", ")
        ))
        .param("endpoint")
        .code("invalid_value"));
    }
    let window = body
        .get("completion_window")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("completion_window"))?;
    if window != "24h" {
        return Err(ApiError::invalid(format!(
            "Invalid value: '{window}'. Supported values are: '24h'."
        ))
        .param("completion_window")
        .code("invalid_value"));
    }
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => {
            let bad = |msg: String| ApiError::invalid(msg).param("metadata");
            if m.len() > 16 {
                return Err(bad(format!(
                    "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with {} properties instead.",
                    m.len()
                )));
            }
            let mut out = BTreeMap::new();
            for (k, v) in m {
                if k.chars().count() > 64 {
                    return Err(bad(format!(
                        "Invalid 'metadata': string too long. Expected a key with maximum length 64, but got '{k}' instead."
                    )));
                }
                let Some(v) = v.as_str() else {
                    return Err(bad(format!(
                        "Invalid type for 'metadata.{k}': expected a string."
                    )));
                };
                if v.chars().count() > 512 {
                    return Err(bad(format!(
                        "Invalid 'metadata.{k}': string too long. Expected a string with maximum length 512."
                    )));
                }
                out.insert(k.clone(), v.to_owned());
            }
            Some(out)
        }
        Some(_) => {
            return Err(
                ApiError::invalid("Invalid type for 'metadata': expected an object.")
                    .param("metadata"),
            );
        }
    };
    Ok(CreateRequest {
        input_file_id: input_file_id.to_owned(),
        endpoint: endpoint.to_owned(),
        metadata,
        output_expires_after: output_expires_after(body)?,
    })
}

/// A create's `output_expires_after` (`{"anchor": "created_at", "seconds":
/// n}`, n from 1 hour to 30 days): the seconds, if given.
fn output_expires_after(body: &Value) -> Result<Option<i64>, ApiError> {
    let expiry = match body.get("output_expires_after") {
        None | Some(Value::Null) => return Ok(None),
        Some(expiry) => expiry,
    };
    let bad = |msg: String| ApiError::invalid(msg).param("output_expires_after");
    if expiry.get("anchor").and_then(Value::as_str) != Some("created_at") {
        return Err(bad(
            "Invalid 'output_expires_after.anchor': expected 'created_at'.".into(),
        ));
    }
    match expiry.get("seconds").and_then(Value::as_i64) {
        Some(secs) if EXPIRY_SECS.contains(&secs) => Ok(Some(secs)),
        _ => Err(bad(format!(
            "Invalid 'output_expires_after.seconds': expected an integer from {} to {}.",
            EXPIRY_SECS.start(),
            EXPIRY_SECS.end()
        ))),
    }
}

/// `after` and `limit` of a list call.
#[derive(Debug, Default)]
pub struct Page {
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// One page of `items` (each named by `id`) after `page.after`, written
/// out by `json`.
fn paginate<T>(
    items: &[T],
    id: impl Fn(&T) -> &str,
    page: &Page,
    default_limit: usize,
    json: impl Fn(&T) -> Value,
) -> Result<Value, ApiError> {
    let limit = page.limit.unwrap_or(default_limit);
    if limit == 0 || limit > default_limit.max(100) {
        return Err(ApiError::invalid(format!(
            "Invalid 'limit': integer out of range, expected 1 to {}.",
            default_limit.max(100)
        ))
        .param("limit"));
    }
    let start = match &page.after {
        Some(after) => items
            .iter()
            .position(|i| id(i) == after)
            .map_or(items.len(), |i| i + 1),
        None => 0,
    };
    let rest = &items[start.min(items.len())..];
    let shown = &rest[..limit.min(rest.len())];
    let data: Vec<Value> = shown.iter().map(&json).collect();
    let first = rest.first().map(|i| id(i).to_owned());
    let last = shown.last().map(|i| id(i).to_owned());
    Ok(
        json!({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": rest.len() > limit}),
    )
}

fn no_file(id: &str) -> ApiError {
    ApiError::not_found(format!("No such File object: {id}")).param("id")
}

/// The file `id` if it is stored and has not expired; an expired one is
/// dropped, and answers as a file that never was.
fn live_file<'a>(state: &'a mut State, id: &str) -> Result<&'a StoredFile, ApiError> {
    if state.files.get(id).is_some_and(|f| !f.live(now_ms())) {
        state.files.remove(id);
    }
    state.files.get(id).ok_or_else(|| no_file(id))
}

/// The error an upload refused by the plan, for its size or for a full
/// storage answers. The size and storage wordings are what users report;
/// the API reference documents the limits, not the answers.
fn upload_refused(refused: UploadRefused) -> ApiError {
    match refused {
        UploadRefused::Plan(r) => ApiError {
            code: r.code,
            ..ApiError::new(r.status, &r.kind, r.message)
        },
        UploadRefused::TooLarge { max } => ApiError::new(
            413,
            "invalid_request_error",
            format!("File is too large. The maximum file size is {max} bytes."),
        )
        .param("file"),
        UploadRefused::StorageFull { limit } => ApiError::invalid(format!(
            "You have exceeded your file storage quota. Organizations are limited to {} of files. Please delete old files or attempt with a smaller file size.",
            bytes_in_words(limit)
        )),
    }
}

/// `100 GB` for a whole number of gigabytes, else `N bytes`.
fn bytes_in_words(bytes: u64) -> String {
    const GB: u64 = 1_000_000_000;
    if bytes >= GB && bytes.is_multiple_of(GB) {
        format!("{} GB", bytes / GB)
    } else {
        format!("{bytes} bytes")
    }
}

/// The 400 users report from a create naming a file uploaded a moment
/// before (the API reference does not document it; the SDK raises it as
/// `BadRequestError`).
fn not_visible(id: &str) -> ApiError {
    ApiError::invalid(format!("Cannot find file {id}.")).param("input_file_id")
}

fn no_batch(id: &str) -> ApiError {
    ApiError::not_found(format!("No batch found with id '{id}'."))
}

fn find<'a>(state: &'a State, id: &str) -> Result<&'a Batch, ApiError> {
    state
        .by_id
        .get(id)
        .map(|&i| &state.batches[i])
        .ok_or_else(|| no_batch(id))
}

/// Walks one batch through its states. Ends early when it is cancelled or
/// the emulator shuts down.
async fn run_batch(shared: Arc<Shared>, id: String, cancel: CancellationToken) {
    let wait = |d: Duration| dwell(d, &cancel);
    let timing = shared.timing;
    if !wait(timing.validating).await {
        return;
    }
    let Some(fault) = shared.validate(&id) else {
        return;
    };
    match fault {
        Some(BatchFault::StaysValidating | BatchFault::StaysInProgress) => cancel.cancelled().await,
        Some(BatchFault::Expired { answered }) => {
            if wait(timing.in_progress).await {
                shared.finish(&id, Status::Expired, answered);
            }
        }
        Some(BatchFault::Failed { .. } | BatchFault::TokenLimitExceeded) | None => {
            if wait(timing.in_progress).await
                && shared.start_finalizing(&id)
                && wait(timing.finalizing).await
            {
                shared.finish(&id, Status::Completed, usize::MAX);
            }
        }
    }
}

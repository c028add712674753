//! The service layer between the HTTP handlers and the pure modules: the
//! shared in-memory state behind one mutex, the operations the handlers
//! call (upload, create, get, list, cancel, download), and the per-batch
//! lifecycle task that walks a batch through its states on a timer and
//! queues its webhook events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::batches::{self, Batch, BatchError, BatchKind, BatchState, Responses};
use crate::config::{EmulatorConfig, MAX_FILE_BYTES, Models, Timing, WebhookPayload};
use crate::error::ApiError;
use crate::faults::{FaultPlanError, Faults, JobFault, RowErrorFormat};
use crate::files::{Source, StoredFile, UploadError, UploadSession};
use crate::ids::{hash_str, resource_id};
use crate::online;
use crate::output::{
    InputRow, Style, answer_row, build_output, parse_inline, parse_input, prompt_text, token_count,
};
use crate::stats::{Outcome, Stats};
use crate::webhooks::event_for;
use emulator_kit::delivery::{self, Attempt, Outbox};
use emulator_kit::emulator::Served;
use emulator_kit::lifecycle::{Lives, dwell};
use emulator_kit::online::{Online, Tier, prompt_key};
use emulator_kit::serve::Created;
use emulator_kit::signing::SecretError;
use emulator_kit::submissions::SubmissionLog;

/// Lists answer at most this many batches per page.
const MAX_PAGE_SIZE: usize = 100;
const DEFAULT_PAGE_SIZE: usize = 20;

/// State shared by the handlers and the background tasks.
pub struct Shared {
    pub api_key: String,
    pub timing: Timing,
    /// Where events go and what they carry.
    webhook: Option<(Outbox, WebhookPayload)>,
    models: Models,
    file_storage_bytes: u64,
    seed: u64,
    /// Mixed into resource ids so two emulator runs never hand out the
    /// same batch or file name (a persistent client would confuse them).
    nonce: u64,
    state: Mutex<State>,
    pub served: Served,
}

struct State {
    files: HashMap<String, StoredFile>,
    uploads: HashMap<String, UploadSession>,
    /// In creation order: `batches[seq - 1]`.
    batches: Vec<Batch>,
    by_id: HashMap<String, usize>,
    runtime: Lives,
    faults: Faults,
    online: Online,
    stats: Stats,
    next_id: u64,
}

/// The outcome of one upload call on an existing session.
#[derive(Debug)]
pub enum UploadStep {
    /// Bytes accepted; the upload goes on.
    Active { received: u64 },
    /// Finalized: the `File` resource.
    Final(Value),
    /// Finalized "successfully" with an error body (the fault).
    FinalErrorBody(Value),
}

/// Why the emulator could not be built from a config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Faults(#[from] FaultPlanError),
    #[error("webhook secret: {0}")]
    Secret(#[from] SecretError),
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the api key must not be empty")]
    EmptyApiKey,
}

emulator_kit::state_access!();

impl Shared {
    /// The state for `config`, answering at `base_url`.
    pub(crate) fn build(
        config: EmulatorConfig,
        base_url: String,
    ) -> Result<Arc<Self>, ConfigError> {
        if config.api_key.is_empty() {
            return Err(ConfigError::EmptyApiKey);
        }
        let faults = Faults::compile(config.faults)?;
        let webhook = match config.webhook {
            Some(target) => {
                let (delivery, payload) = target.split();
                let secret = delivery.parse_secret()?;
                Some((delivery, secret, payload))
            }
            None => None,
        };
        let http = delivery::http_client()?;
        let served = Served::new(base_url);
        Ok(Arc::new_cyclic(|me: &Weak<Shared>| Self {
            api_key: config.api_key,
            timing: config.timing,
            webhook: webhook.map(|(delivery, secret, payload)| {
                let report = delivery::report_to(me.clone(), Shared::count_webhook);
                let outbox = Outbox::new(
                    delivery,
                    secret,
                    http.clone(),
                    served.tasks.clone(),
                    served.shutdown.clone(),
                    report,
                );
                (outbox, payload)
            }),
            models: config.models,
            file_storage_bytes: config.file_storage_bytes,
            seed: config.seed,
            nonce: emulator_kit::ids::run_nonce(config.seed),
            state: Mutex::new(State {
                online: Online::configured(config.online, faults.plan().shared.online.clone()),
                faults,
                files: HashMap::new(),
                uploads: HashMap::new(),
                batches: Vec::new(),
                by_id: HashMap::new(),
                runtime: Lives::default(),
                stats: Stats::default(),
                next_id: 0,
            }),
            served,
        }))
    }
    pub(crate) fn key(&self) -> &str {
        &self.api_key
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

    // ----- files -----

    /// Starts a resumable upload of `declared_len` bytes, within the 2 GB
    /// file limit and the project's storage quota (the live uploaded files;
    /// whether generated files count is undocumented: they do not here).
    pub fn start_upload(
        &self,
        display_name: String,
        mime_type: String,
        declared_len: u64,
    ) -> Result<String, ApiError> {
        if declared_len > MAX_FILE_BYTES {
            return Err(ApiError::invalid(format!(
                "File size {declared_len} exceeds the maximum of {MAX_FILE_BYTES} bytes (2 GB)."
            )));
        }
        let mut state = self.lock();
        if let Some(refusal) = state.faults.take_upload_refusal() {
            state.stats.upload_rejections += 1;
            tracing::info!(code = refusal.code, "fault: the upload is refused");
            return Err(ApiError::upload_refusal(
                refusal.code,
                refusal.status.as_deref(),
                refusal.message.as_deref(),
            ));
        }
        let ids: Vec<String> = state.files.keys().cloned().collect();
        for id in ids {
            let _ = live_file(&mut state, &id);
        }
        let stored: u64 = state
            .files
            .values()
            .filter(|f| f.source == Source::Uploaded)
            .map(|f| f.bytes.len() as u64)
            .sum();
        if stored.saturating_add(declared_len) > self.file_storage_bytes {
            state.stats.upload_rejections += 1;
            tracing::info!(
                stored,
                declared_len,
                limit = self.file_storage_bytes,
                "upload over the file storage quota: 429"
            );
            return Err(ApiError::quota_exhausted(
                "Resource has been exhausted (e.g. check quota).",
                "FileStorageBytesPerProject",
                60,
            ));
        }
        let id = self.next_id(&mut state);
        state.uploads.insert(
            id.clone(),
            UploadSession::new(display_name, mime_type, declared_len),
        );
        Ok(id)
    }

    pub fn upload_received(&self, upload_id: &str) -> Result<u64, ApiError> {
        let state = self.lock();
        let session = state
            .uploads
            .get(upload_id)
            .ok_or_else(|| ApiError::not_found("upload session not found"))?;
        Ok(session.received.len() as u64)
    }

    /// Appends `chunk` at `offset` (when `upload`), and finalizes (when
    /// `finalize`).
    pub fn upload_step(
        &self,
        upload_id: &str,
        offset: Option<u64>,
        chunk: &[u8],
        upload: bool,
        finalize: bool,
        base_url: &str,
    ) -> Result<UploadStep, ApiError> {
        let mut state = self.lock();
        let session = state
            .uploads
            .get_mut(upload_id)
            .ok_or_else(|| ApiError::not_found("upload session not found"))?;
        if upload {
            let offset =
                offset.ok_or_else(|| ApiError::invalid("X-Goog-Upload-Offset is required"))?;
            session.append(offset, chunk).map_err(upload_error)?;
        }
        if !finalize {
            return Ok(UploadStep::Active {
                received: session.received.len() as u64,
            });
        }
        session.check_complete().map_err(upload_error)?;
        let session = state
            .uploads
            .remove(upload_id)
            .expect("the session was just found");
        let jsonl = session.mime_type.eq_ignore_ascii_case("application/jsonl");
        if jsonl && state.faults.take_mime_refusal() {
            state.stats.mime_refusals += 1;
            tracing::info!(upload_id, "fault: application/jsonl refused with a 200");
            let error = ApiError::invalid("Unsupported MIME type: application/jsonl");
            return Ok(UploadStep::FinalErrorBody(error.body()));
        }
        if let Some(code) = state.faults.take_finalize_error() {
            state.stats.finalize_errors += 1;
            tracing::info!(upload_id, code, "fault: finalize answers an error body");
            let error = ApiError::new(code, "Failed to finalize the upload. Please retry.");
            return Ok(UploadStep::FinalErrorBody(error.body()));
        }
        let id = self.next_id(&mut state);
        let file = StoredFile {
            id: id.clone(),
            display_name: session.display_name,
            mime_type: session.mime_type,
            bytes: session.received,
            created: Utc::now(),
            source: Source::Uploaded,
        };
        let resource = file.resource(base_url);
        let is_input = file.mime_type == "application/jsonl" || file.mime_type == "text/plain";
        if !is_input {
            use sha2::Digest as _;
            let hash = hex::encode(sha2::Sha256::digest(&file.bytes));
            *state.stats.media_uploads.entry(hash).or_default() += 1;
        }
        state.files.insert(id, file);
        state.stats.uploads += 1;
        Ok(UploadStep::Final(json!({"file": resource})))
    }

    pub fn get_file(&self, id: &str, base_url: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        Ok(live_file(&mut state, id)?.resource(base_url))
    }

    /// The bytes of a generated file. Uploaded files cannot be downloaded
    /// (the SDKs say so and refuse before asking).
    pub fn download(&self, id: &str) -> Result<(String, Vec<u8>), ApiError> {
        let mut state = self.lock();
        let file = live_file(&mut state, id)?;
        if file.source == Source::Uploaded {
            return Err(ApiError::invalid(format!(
                "Only generated files can be downloaded; files/{id} was uploaded."
            )));
        }
        let found = (file.mime_type.clone(), file.bytes.clone());
        if let Some(code) = state.faults.take_output_unavailable() {
            state.stats.downloads_refused += 1;
            tracing::info!(file = id, code, "fault: output not downloadable");
            return Err(if code == 403 {
                file_not_found(id)
            } else {
                ApiError::not_found(format!("File files/{id} not found."))
            });
        }
        Ok(found)
    }

    /// `DELETE files/{id}`.
    pub fn delete_file(&self, id: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        state.files.remove(id).ok_or_else(|| file_not_found(id))?;
        state.stats.files_deleted += 1;
        Ok(())
    }

    /// `GET files`: newest first, `pageSize` at most 100.
    pub fn list_files(
        &self,
        page_size: Option<i64>,
        token: Option<&str>,
        base_url: &str,
    ) -> Result<Value, ApiError> {
        let size = page_size_of(page_size)?;
        let after = match token.filter(|t| !t.is_empty()) {
            Some(t) => Some(
                batches::parse_page_token(t)
                    .ok_or_else(|| ApiError::invalid("invalid pageToken"))?,
            ),
            None => None,
        };
        let state = self.lock();
        let mut files: Vec<&StoredFile> = state.files.values().collect();
        files.sort_by(|a, b| (b.created, &b.id).cmp(&(a.created, &a.id)));
        let start = after.map_or(0, |n| n as usize);
        let page: Vec<Value> = files
            .iter()
            .skip(start)
            .take(size)
            .map(|f| f.resource(base_url))
            .collect();
        let mut out = json!({});
        if !page.is_empty() {
            out["files"] = json!(page);
        }
        if start + size < files.len() {
            out["nextPageToken"] = json!(batches::page_token((start + size) as u64));
        }
        Ok(out)
    }

    // ----- batches -----

    /// `models/{model}:generateContent`: one synchronous request, answered
    /// as a batch line of it would be (the same row faults), in the tier it
    /// asks for, within the account's per-minute limits.
    pub(crate) async fn online(&self, version: &str, model: &str, body: Value) -> Response {
        let model = model.trim_start_matches("models/").to_owned();
        if !self.models.allows(&model, false) {
            return ApiError::not_found(format!(
                "models/{model} is not found for API version {version}, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."
            ))
            .into_response();
        }
        let tier = match online::tier_of(&body) {
            Ok(tier) => tier,
            Err(e) => return e.into_response(),
        };
        let prompt = prompt_text(&body);
        let (gate, limits) = {
            let mut state = self.lock();
            let tokens = token_count(&prompt) + online::max_output(&body);
            let gate = state.online.gate(std::time::Instant::now(), tier, tokens);
            (gate, state.online.limits())
        };
        emulator_kit::serve::online_answer(
            gate,
            |refused| online::refusal(refused, limits, &model).into_response(),
            |lost| self.answer_online(&model, body.clone(), &prompt, tier, lost),
            || ApiError::new(500, "Internal error encountered.").into_response(),
        )
        .await
    }

    /// The model's answer to a synchronous request (its row faults as a
    /// batch line's), counted as answered.
    fn answer_online(
        &self,
        model: &str,
        mut request: Value,
        prompt: &str,
        tier: Tier,
        lost: bool,
    ) -> Response {
        let mut state = self.lock();
        state.next_id += 1;
        let seq = state.next_id;
        let key = prompt_key(prompt);
        let verdict = state.faults.decide_row(&key, prompt);
        let changed = state
            .faults
            .model_changed(model, Utc::now().timestamp_millis())
            .map(str::to_owned);
        state.online.answered(prompt, tier, lost);
        // Its media are checked and read as a batch line's are (the same
        // files, the same refusals), and counted by the prompt's key.
        match crate::media::resolve(&request, &state.files) {
            Ok(r) => {
                if !r.media.is_empty() {
                    state
                        .stats
                        .media
                        .entry(key.clone())
                        .or_default()
                        .extend(r.media);
                }
                request = r.request;
            }
            Err((code, message)) => return ApiError::new(code, message).into_response(),
        }
        drop(state);
        if let Value::Object(fields) = &mut request {
            fields.remove("serviceTier");
            fields.remove("service_tier");
        }
        let row = InputRow {
            key,
            request,
            inline: None,
        };
        let style = Style {
            kind: BatchKind::Generate,
            grpc_errors: false,
            changed_model: changed.is_some(),
        };
        let version = changed.as_deref().unwrap_or(model);
        let Some((mut line, _)) = answer_row(&row, verdict, version, style) else {
            return ApiError::new(500, "Internal error encountered.").into_response();
        };
        if let Some(error) = line.get_mut("error").map(Value::take) {
            let code = error["code"].as_u64().unwrap_or(500) as u16;
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (status, axum::Json(json!({"error": error}))).into_response();
        }
        let mut answer = line["response"].take();
        answer["responseId"] = json!(resource_id(self.nonce ^ 3, seq));
        answer["usageMetadata"]["serviceTier"] = json!(online::tier_name(tier));
        let mut response = axum::Json(answer).into_response();
        response.headers_mut().insert(
            "x-gemini-service-tier",
            HeaderValue::from_static(online::tier_name(tier)),
        );
        response
    }

    /// `models/{model}:batchGenerateContent` (or `:asyncBatchEmbedContent`),
    /// from an uploaded file or inline requests.
    pub fn create_batch(
        self: &Arc<Self>,
        version: &str,
        model: &str,
        body: &Value,
        kind: BatchKind,
    ) -> Result<Created<Value>, ApiError> {
        let model = model.trim_start_matches("models/");
        if !self.models.allows(model, kind == BatchKind::Embed) {
            let method = match kind {
                BatchKind::Generate => "batchGenerateContent",
                BatchKind::Embed => "asyncBatchEmbedContent",
            };
            tracing::info!(
                model,
                method,
                "create for a model the project cannot batch: 404"
            );
            return Err(ApiError::not_found(format!(
                "models/{model} is not found for API version {version}, or is not supported for {method}. Call ListModels to see the list of available models and their supported methods."
            )));
        }
        let mut state = self.lock();
        if let Some(refusal) = state.faults.take_create_refusal() {
            state.stats.create_rejections += 1;
            tracing::info!(model, code = refusal.code, "fault: the create is refused");
            return Err(ApiError::refusal(
                refusal.code,
                refusal.status.as_deref(),
                refusal.message.as_deref(),
            ));
        }
        if let Some(billing) = state.faults.billing() {
            state.stats.create_rejections += 1;
            tracing::info!(
                model,
                code = billing.code,
                "fault: billing refuses the create"
            );
            return Err(ApiError::billing(billing.code));
        }
        if let Some(daily) = state.faults.daily_quota_used_up().cloned() {
            state.stats.create_rejections += 1;
            tracing::info!(model, "fault: the daily create quota is used up: 429");
            return Err(ApiError::quota_exhausted(
                "You exceeded your current quota, please check your plan and billing details.",
                &daily.quota_id,
                daily.retry_after_secs,
            ));
        }
        if let Some(fault) = state.faults.shared.take_rate_limit() {
            state.stats.create_rejections += 1;
            tracing::info!(model, "fault: batch create answers 429");
            let mut error = ApiError::quota_exhausted(
                "Resource has been exhausted (e.g. check quota).",
                "BatchEnqueuedTokensPerModelPerTier",
                fault.retry_after_secs,
            );
            if fault.retry_after_header {
                error.retry_after = Some(fault.retry_after_secs);
            }
            return Err(error);
        }
        let batch = body
            .get("batch")
            .and_then(Value::as_object)
            .ok_or_else(|| ApiError::invalid("`batch` is required"))?;
        if let Some(named) = batch.get("model") {
            let named = named
                .as_str()
                .ok_or_else(|| ApiError::invalid("`batch.model` must be a string"))?;
            if named.trim_start_matches("models/") != model {
                return Err(ApiError::invalid(format!(
                    "batch.model `{named}` does not match the model in the URL `models/{model}`"
                )));
            }
        }
        // The SDKs send no display name unless the user sets one (the
        // Developer API accepts that); it is empty then.
        let display_name = match batch
            .get("displayName")
            .or_else(|| batch.get("display_name"))
        {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(name)) => name.clone(),
            Some(_) => return Err(ApiError::invalid("`batch.displayName` must be a string")),
        };
        let input = batch
            .get("inputConfig")
            .or_else(|| batch.get("input_config"))
            .ok_or_else(|| ApiError::invalid("`batch.inputConfig` is required"))?;
        let file_name = input
            .get("fileName")
            .or_else(|| input.get("file_name"))
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| ApiError::invalid("`fileName` must be a string"))
            })
            .transpose()?;
        let rows = match (file_name, input.get("requests")) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "`batch.inputConfig` takes `fileName` or `requests`, not both",
                ));
            }
            (None, None) => {
                return Err(ApiError::invalid(
                    "`batch.inputConfig.fileName` or `batch.inputConfig.requests` is required",
                ));
            }
            (None, Some(requests)) => parse_inline(requests, kind),
            (Some(file_name), None) => {
                let file_id = file_name
                    .strip_prefix("files/")
                    .ok_or_else(|| ApiError::invalid("`fileName` must look like `files/<id>`"))?;
                let file = live_file(&mut state, file_id)?;
                parse_input(&file.bytes, kind)
            }
        }
        .map_err(|e| ApiError::invalid(e.to_string()))?;
        if let Some(quota) = state.faults.enqueued_tokens() {
            let tokens = |rows: &[crate::output::InputRow]| -> u64 {
                rows.iter()
                    .map(|r| crate::output::token_count(&crate::output::prompt_text(&r.request)))
                    .sum()
            };
            let enqueued: u64 = state
                .batches
                .iter()
                .filter(|b| b.model == model && !b.state.is_terminal())
                .map(|b| tokens(&b.rows))
                .sum();
            let asked = tokens(&rows);
            if enqueued + asked > quota.limit {
                state.stats.create_rejections += 1;
                tracing::info!(
                    model,
                    enqueued,
                    asked,
                    limit = quota.limit,
                    "batch create over the enqueued-token quota: 429"
                );
                return Err(ApiError::quota_exhausted(
                    "Resource has been exhausted (e.g. check quota).",
                    "BatchEnqueuedTokensPerModelPerTier",
                    quota.retry_after_secs,
                ));
            }
        }

        let seq = state.batches.len() as u64 + 1;
        let id = resource_id(self.nonce, seq | 1 << 40);
        let fault = state.faults.decide_job(seq, &display_name);
        let now = Utc::now();
        let name = format!("batches/{id}");
        for row in &rows {
            state
                .stats
                .submissions
                .submit(&row.key, &name, Outcome::Pending);
        }
        state.stats.batches_created += 1;
        state.faults.note_created();
        tracing::info!(batch = %name, display_name, rows = rows.len(), fault = ?fault, "batch created");
        let batch = Batch {
            seq,
            id: id.clone(),
            model: model.to_owned(),
            display_name,
            kind,
            input_file: file_name.map(str::to_owned),
            rows,
            fault: fault.clone(),
            state: BatchState::Pending,
            create_time: now,
            update_time: now,
            running_time: None,
            running_for: chrono::Duration::from_std(self.timing.running)
                .unwrap_or(chrono::Duration::MAX),
            end_time: None,
            output: None,
            deleted: false,
            successful: 0,
            failed: 0,
            error: None,
        };
        let operation = batch.operation(now);
        let index = state.batches.len();
        state.by_id.insert(id.clone(), index);
        state.batches.push(batch);
        let events = self.webhook.as_ref().map(|(outbox, _)| outbox.queue());
        let cancel = state.runtime.start(&id, &self.served.shutdown, events);
        let lost = state.faults.shared.take_lost_answer();
        if lost.is_some() {
            state.stats.create_answers_lost += 1;
        }
        drop(state);
        let shared = Arc::clone(self);
        self.served
            .tasks
            .spawn(async move { run_batch(shared, id, fault, cancel).await });
        if let Some(mode) = lost {
            tracing::info!(batch = %name, ?mode, "fault: the batch was made, its answer is lost");
            return Ok(Created::Lost(mode));
        }
        Ok(Created::Batch(operation))
    }

    pub fn get_batch(&self, id: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        if state.faults.shared.take_get_not_found() {
            state.stats.gets_not_found += 1;
            tracing::info!(batch = id, "fault: GET answers 404 for a batch that exists");
            return Err(batch_not_found(id));
        }
        let batch = find(&state, id)?;
        Ok(batch.operation(Utc::now()))
    }

    /// `DELETE batches/{id}`: forgotten, not cancelled.
    pub fn delete_batch(&self, id: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        let index = *state
            .by_id
            .get(id)
            .filter(|&&i| !state.batches[i].deleted)
            .ok_or_else(|| batch_not_found(id))?;
        state.batches[index].deleted = true;
        state.stats.batches_deleted += 1;
        Ok(())
    }

    /// `GET batches?pageSize=&pageToken=`.
    pub fn list_batches(
        &self,
        page_size: Option<i64>,
        token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let size = page_size_of(page_size)?;
        let after = match token.filter(|t| !t.is_empty()) {
            Some(t) => Some(
                batches::parse_list_token(t)
                    .ok_or_else(|| ApiError::invalid("invalid pageToken"))?,
            ),
            None => None,
        };
        let state = self.lock();
        let (lag, order) = (state.faults.shared.list_lag(), state.faults.list_order());
        let now = Utc::now();
        let (items, next) = batches::page(&state.batches, size, after, order, self.seed, |b| {
            b.create_time + lag <= now
        });
        let mut out = json!({
            "operations": items.iter().map(|b| b.operation(now)).collect::<Vec<_>>()
        });
        if let Some(next) = next {
            out["nextPageToken"] = json!(next);
        }
        Ok(out)
    }

    /// `batches/{id}:cancel`. Cancelling a finished batch changes nothing.
    pub fn cancel_batch(&self, id: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        find(&state, id)?;
        self.finish(&mut state, id, BatchState::Cancelled);
        Ok(json!({}))
    }

    // ----- lifecycle -----

    fn next_id(&self, state: &mut State) -> String {
        state.next_id += 1;
        resource_id(self.nonce, state.next_id)
    }

    /// PENDING → RUNNING. The provider sends no webhook event for it.
    fn start_running(&self, id: &str) {
        let mut state = self.lock();
        let State { batches, by_id, .. } = &mut *state;
        let Some(batch) = by_id.get(id).and_then(|&i| batches.get_mut(i)) else {
            return;
        };
        if batch.transition(BatchState::Running, Utc::now()) {
            tracing::debug!(batch = %batch.name(), "batch running");
        }
    }

    /// Moves a batch to a terminal state: builds the output on success,
    /// settles the submissions' outcomes, queues the webhook events and
    /// ends the batch's tasks. No-op if it is already terminal.
    fn finish(&self, state: &mut State, id: &str, to: BatchState) {
        let State {
            files,
            batches,
            by_id,
            runtime,
            faults,
            stats,
            ..
        } = state;
        let Some(batch) = by_id.get(id).and_then(|&i| batches.get_mut(i)) else {
            return;
        };
        if batch.state.is_terminal() {
            return;
        }
        let name = batch.name();
        let partial = matches!(batch.fault, Some(JobFault::Failed { partial: true, .. }));
        let outcomes: Vec<(String, Outcome)> = match to {
            BatchState::Succeeded => self.respond(batch, batch.rows.len(), files, faults, stats),
            // Part of the batch was answered before it failed.
            BatchState::Failed if partial => {
                let half = batch.rows.len() / 2;
                self.respond_part(batch, half, files, faults, stats, Outcome::JobFailed)
            }
            BatchState::Failed => every_row(batch, Outcome::JobFailed),
            BatchState::Expired => every_row(batch, Outcome::JobExpired),
            BatchState::Cancelled
                if batch.state == BatchState::Running
                    && faults.plan().shared.finished_on_cancel > 0.0 =>
            {
                let answered = faults.shared.finished_on_cancel(batch.rows.len());
                self.respond_part(batch, answered, files, faults, stats, Outcome::JobCancelled)
            }
            BatchState::Cancelled => every_row(batch, Outcome::JobCancelled),
            BatchState::Pending | BatchState::Running => return,
        };
        if to == BatchState::Failed
            && let Some(JobFault::Failed { message, .. }) = &batch.fault
        {
            batch.error = Some(BatchError {
                code: 13,
                message: message.clone(),
            });
        }
        batch.transition(to, Utc::now());
        tracing::info!(batch = %name, state = to.wire(), "batch finished");
        stats.submissions.settle(&name, outcomes);
        if let Some(queue) = runtime.end(id) {
            let payload = self
                .webhook
                .as_ref()
                .map_or(WebhookPayload::Documented, |(_, payload)| *payload);
            let _ = queue.send(event_for(batch, to, payload));
        }
    }

    /// Answers the first `upto` rows of `batch` (each by its row fault) and
    /// records them as its responses: a file for a file batch, inlined
    /// responses for an inline one. Returns the answered rows' outcomes.
    fn respond(
        &self,
        batch: &mut Batch,
        upto: usize,
        files: &mut HashMap<String, StoredFile>,
        faults: &mut Faults,
        stats: &mut Stats,
    ) -> Vec<(String, Outcome)> {
        // The media the rows reference are read now, as the provider runs
        // the batch: expired files are gone by then.
        if let Some(ttl) = faults.file_ttl() {
            let now = Utc::now();
            let before = files.len();
            files.retain(|_, f| f.created + ttl > now);
            stats.files_expired += (before - files.len()) as u64;
        }
        let mut refused: HashMap<String, u16> = HashMap::new();
        let rows: Vec<crate::output::InputRow> = batch.rows[..upto]
            .iter()
            .map(|row| {
                let mut row = row.clone();
                match crate::media::resolve(&row.request, files) {
                    Ok(r) => {
                        stats
                            .media
                            .entry(row.key.clone())
                            .or_default()
                            .extend(r.media);
                        row.request = r.request;
                    }
                    Err((code, message)) => {
                        tracing::info!(key = %row.key, code, message, "row's media refused");
                        refused.insert(row.key.clone(), code);
                    }
                }
                row
            })
            .collect();
        let seed = self.seed ^ hash_str(&batch.display_name) ^ batch.seq;
        let changed_to = faults
            .model_changed(&batch.model, Utc::now().timestamp_millis())
            .map(str::to_owned);
        let style = Style {
            kind: batch.kind,
            grpc_errors: faults.plan().row_errors == RowErrorFormat::Grpc,
            changed_model: changed_to.is_some(),
        };
        if let Some(version) = &changed_to {
            tracing::info!(batch = %batch.id, model = %batch.model, version, "fault: the model behind the alias changed");
        }
        let output = build_output(
            &rows,
            changed_to.as_deref().unwrap_or(&batch.model),
            seed,
            style,
            |row, prompt| match refused.get(&row.key) {
                Some(&code) => crate::faults::RowVerdict::Error(code),
                None => faults.decide_row(&row.key, prompt),
            },
        );
        batch.output = Some(if batch.input_file.is_some() {
            let out_id = resource_id(self.nonce, (1 << 41) | batch.seq);
            files.insert(
                out_id.clone(),
                StoredFile {
                    id: out_id.clone(),
                    display_name: format!("{}-responses", batch.display_name),
                    mime_type: "application/jsonl".to_owned(),
                    bytes: output.jsonl,
                    created: Utc::now(),
                    source: Source::Generated,
                },
            );
            Responses::File(format!("files/{out_id}"))
        } else {
            Responses::Inlined(output.lines)
        });
        batch.successful = output.successful;
        batch.failed = output.failed;
        output.outcomes
    }

    /// A batch that ended part-way: its first `answered` rows answered
    /// (and in its responses), the rest ended as `rest`.
    fn respond_part(
        &self,
        batch: &mut Batch,
        answered: usize,
        files: &mut HashMap<String, StoredFile>,
        faults: &mut Faults,
        stats: &mut Stats,
        rest: Outcome,
    ) -> Vec<(String, Outcome)> {
        let mut outcomes = self.respond(batch, answered, files, faults, stats);
        outcomes.extend(batch.rows[answered..].iter().map(|r| (r.key.clone(), rest)));
        outcomes
    }

    fn finish_by_id(&self, id: &str, to: BatchState) {
        let mut state = self.lock();
        self.finish(&mut state, id, to);
    }
}

fn every_row(batch: &Batch, outcome: Outcome) -> Vec<(String, Outcome)> {
    batch
        .rows
        .iter()
        .map(|r| (r.key.clone(), outcome))
        .collect()
}

fn upload_error(e: UploadError) -> ApiError {
    ApiError::invalid(e.to_string())
}

/// A file that still exists: stored, and not past the plan's TTL (a file
/// found expired is dropped).
fn live_file<'a>(state: &'a mut State, id: &str) -> Result<&'a StoredFile, ApiError> {
    let ttl = state.faults.file_ttl();
    let expired = match (state.files.get(id), ttl) {
        (Some(f), Some(ttl)) => f.created + ttl <= Utc::now(),
        _ => false,
    };
    if expired {
        state.files.remove(id);
        state.stats.files_expired += 1;
    }
    state.files.get(id).ok_or_else(|| file_not_found(id))
}

fn file_not_found(id: &str) -> ApiError {
    ApiError::new(
        403,
        format!("You do not have permission to access the File {id} or it may not exist."),
    )
}

fn batch_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Batch batches/{id} not found."))
}

/// A batch the client can see (not deleted).
fn find<'a>(state: &'a State, id: &str) -> Result<&'a Batch, ApiError> {
    state
        .by_id
        .get(id)
        .and_then(|&i| state.batches.get(i))
        .filter(|b| !b.deleted)
        .ok_or_else(|| batch_not_found(id))
}

/// A list call's page size: 0 or absent is the default, the maximum caps.
fn page_size_of(page_size: Option<i64>) -> Result<usize, ApiError> {
    match page_size {
        None | Some(0) => Ok(DEFAULT_PAGE_SIZE),
        Some(n) if n < 0 => Err(ApiError::invalid("pageSize must not be negative")),
        Some(n) => Ok((n as usize).min(MAX_PAGE_SIZE)),
    }
}

/// Walks one batch through its states on the configured timing. Ends early
/// when the batch is cancelled or the emulator shuts down.
async fn run_batch(
    shared: Arc<Shared>,
    id: String,
    fault: Option<JobFault>,
    cancel: CancellationToken,
) {
    let Timing { pending, running } = shared.timing;
    let wait = |d: Duration| dwell(d, &cancel);
    match fault {
        Some(JobFault::StaysPending) => {
            // Only a cancel (or shutdown) ends it.
            cancel.cancelled().await;
        }
        Some(JobFault::Expired) => {
            if wait(pending + running).await {
                shared.finish_by_id(&id, BatchState::Expired);
            }
        }
        Some(JobFault::Failed { .. }) => {
            if !wait(pending).await {
                return;
            }
            shared.start_running(&id);
            if wait(running).await {
                shared.finish_by_id(&id, BatchState::Failed);
            }
        }
        None => {
            if !wait(pending).await {
                return;
            }
            shared.start_running(&id);
            if wait(running).await {
                shared.finish_by_id(&id, BatchState::Succeeded);
            }
        }
    }
}

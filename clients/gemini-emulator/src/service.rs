//! The service layer between the HTTP handlers and the pure modules: the
//! shared in-memory state behind one mutex, the operations the handlers
//! call (upload, create, get, list, cancel, download), and the per-batch
//! lifecycle task that walks a batch through its states on a timer and
//! queues its webhook events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use tally_core::webhook::Secret;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::batches::{self, Batch, BatchError, BatchState};
use crate::config::{EmulatorConfig, Timing, WebhookTarget};
use crate::error::ApiError;
use crate::faults::{FaultPlan, FaultPlanError, Faults, JobFault};
use crate::files::{Source, StoredFile, UploadError, UploadSession};
use crate::ids::{hash_str, resource_id};
use crate::output::{build_output, parse_input};
use crate::stats::{Outcome, Stats, Submission};
use crate::webhooks::{EventQueue, event_for, spawn_delivery};

/// Lists answer at most this many batches per page.
const MAX_PAGE_SIZE: usize = 100;
const DEFAULT_PAGE_SIZE: usize = 20;

/// State shared by the handlers and the background tasks.
pub struct Shared {
    pub api_key: String,
    pub timing: Timing,
    webhook: Option<(WebhookTarget, Secret)>,
    seed: u64,
    /// Mixed into resource ids so two emulator runs never hand out the
    /// same batch or file name (a persistent client would confuse them).
    nonce: u64,
    pub base_url: String,
    state: Mutex<State>,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
    pub http: reqwest::Client,
}

#[derive(Default)]
struct State {
    files: HashMap<String, StoredFile>,
    uploads: HashMap<String, UploadSession>,
    /// In creation order: `batches[seq - 1]`.
    batches: Vec<Batch>,
    by_id: HashMap<String, usize>,
    runtime: HashMap<String, BatchRuntime>,
    faults: Option<Faults>,
    stats: Stats,
    next_id: u64,
}

/// What a live batch needs besides its data.
struct BatchRuntime {
    cancel: CancellationToken,
    events: Option<EventQueue>,
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
    Secret(#[from] tally_core::webhook::SecretError),
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the api key must not be empty")]
    EmptyApiKey,
}

impl Shared {
    pub fn new(config: EmulatorConfig, base_url: String) -> Result<Arc<Self>, ConfigError> {
        if config.api_key.is_empty() {
            return Err(ConfigError::EmptyApiKey);
        }
        let faults = Faults::compile(config.faults)?;
        let webhook = match config.webhook {
            Some(target) => {
                let secret = Secret::parse(&target.secret)?;
                Some((target, secret))
            }
            None => None,
        };
        // reqwest is built without a bundled TLS provider (see the
        // workspace manifest); install ring unless someone already chose.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let started = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
        Ok(Arc::new(Self {
            api_key: config.api_key,
            timing: config.timing,
            webhook,
            seed: config.seed,
            nonce: config.seed ^ started ^ u64::from(std::process::id()).rotate_left(32),
            base_url,
            state: Mutex::new(State {
                faults: Some(faults),
                ..State::default()
            }),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            http,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough data for
        // an emulator; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn with_stats(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.lock().stats);
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats.clone()
    }

    pub fn set_faults(&self, plan: FaultPlan) -> Result<(), FaultPlanError> {
        let faults = Faults::compile(plan)?;
        self.lock().faults = Some(faults);
        Ok(())
    }

    pub fn faults(&self) -> FaultPlan {
        self.lock()
            .faults
            .as_ref()
            .map(|f| f.plan().clone())
            .unwrap_or_default()
    }

    // ----- files -----

    pub fn start_upload(
        &self,
        display_name: String,
        mime_type: String,
        declared_len: u64,
    ) -> String {
        let mut state = self.lock();
        let id = self.next_id(&mut state);
        state.uploads.insert(
            id.clone(),
            UploadSession::new(display_name, mime_type, declared_len),
        );
        id
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
        if let Some(code) = state.faults.as_mut().and_then(Faults::take_finalize_error) {
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
        state.files.insert(id, file);
        state.stats.uploads += 1;
        Ok(UploadStep::Final(json!({"file": resource})))
    }

    pub fn get_file(&self, id: &str, base_url: &str) -> Result<Value, ApiError> {
        let state = self.lock();
        let file = state.files.get(id).ok_or_else(|| file_not_found(id))?;
        Ok(file.resource(base_url))
    }

    pub fn download(&self, id: &str) -> Result<(String, Vec<u8>), ApiError> {
        let state = self.lock();
        let file = state.files.get(id).ok_or_else(|| file_not_found(id))?;
        Ok((file.mime_type.clone(), file.bytes.clone()))
    }

    // ----- batches -----

    /// `models/{model}:batchGenerateContent`.
    pub fn create_batch(self: &Arc<Self>, model: &str, body: &Value) -> Result<Value, ApiError> {
        let mut state = self.lock();
        if let Some(retry_after) = state.faults.as_mut().and_then(Faults::take_create_429) {
            state.stats.create_rejections += 1;
            tracing::info!(model, "fault: batch create answers 429");
            let mut error = ApiError::new(
                429,
                "Resource has been exhausted (e.g. check quota). Too many batches in flight.",
            );
            error.retry_after = Some(retry_after);
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
        let display_name = match batch
            .get("displayName")
            .or_else(|| batch.get("display_name"))
        {
            Some(Value::String(name)) if !name.is_empty() => name.clone(),
            _ => return Err(ApiError::invalid("`batch.displayName` is required")),
        };
        let input = batch
            .get("inputConfig")
            .or_else(|| batch.get("input_config"))
            .ok_or_else(|| ApiError::invalid("`batch.inputConfig` is required"))?;
        if input.get("requests").is_some() {
            return Err(ApiError::invalid(
                "inline requests are not supported by the emulator; use inputConfig.fileName",
            ));
        }
        let file_name = input
            .get("fileName")
            .or_else(|| input.get("file_name"))
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid("`batch.inputConfig.fileName` is required"))?;
        let file_id = file_name
            .strip_prefix("files/")
            .ok_or_else(|| ApiError::invalid("`fileName` must look like `files/<id>`"))?;
        let file = state
            .files
            .get(file_id)
            .ok_or_else(|| file_not_found(file_id))?;
        let rows = parse_input(&file.bytes).map_err(|e| ApiError::invalid(e.to_string()))?;

        let seq = state.batches.len() as u64 + 1;
        let id = resource_id(self.nonce, seq | 1 << 40);
        let fault = state
            .faults
            .as_mut()
            .and_then(|f| f.decide_job(seq, &display_name));
        let now = Utc::now();
        let name = format!("batches/{id}");
        for row in &rows {
            state
                .stats
                .submissions
                .entry(row.key.clone())
                .or_default()
                .push(Submission {
                    batch: name.clone(),
                    outcome: Outcome::Pending,
                });
        }
        state.stats.batches_created += 1;
        tracing::info!(batch = %name, display_name, rows = rows.len(), fault = ?fault, "batch created");
        let batch = Batch {
            seq,
            id: id.clone(),
            model: model.to_owned(),
            display_name,
            input_file: file_name.to_owned(),
            rows,
            fault: fault.clone(),
            state: BatchState::Pending,
            create_time: now,
            update_time: now,
            running_time: None,
            end_time: None,
            output_file: None,
            successful: 0,
            failed: 0,
            error: None,
        };
        let operation = batch.operation();
        let index = state.batches.len();
        state.by_id.insert(id.clone(), index);
        state.batches.push(batch);
        let cancel = self.shutdown.child_token();
        let events = self
            .webhook
            .as_ref()
            .map(|(target, secret)| spawn_delivery(self, target.clone(), secret.clone()));
        state.runtime.insert(
            id.clone(),
            BatchRuntime {
                cancel: cancel.clone(),
                events,
            },
        );
        drop(state);
        let shared = Arc::clone(self);
        self.tasks
            .spawn(async move { run_batch(shared, id, fault, cancel).await });
        Ok(operation)
    }

    pub fn get_batch(&self, id: &str) -> Result<Value, ApiError> {
        let state = self.lock();
        let batch = find(&state, id)?;
        Ok(batch.operation())
    }

    /// `GET /v1beta/batches?pageSize=&pageToken=`.
    pub fn list_batches(
        &self,
        page_size: Option<i64>,
        token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let size = match page_size {
            None | Some(0) => DEFAULT_PAGE_SIZE,
            Some(n) if n < 0 => return Err(ApiError::invalid("pageSize must not be negative")),
            Some(n) => (n as usize).min(MAX_PAGE_SIZE),
        };
        let below = match token.filter(|t| !t.is_empty()) {
            Some(t) => Some(
                batches::parse_page_token(t)
                    .ok_or_else(|| ApiError::invalid("invalid pageToken"))?,
            ),
            None => None,
        };
        let state = self.lock();
        let (items, next) = batches::page(&state.batches, size, below);
        let mut out = json!({
            "operations": items.iter().map(|b| b.operation()).collect::<Vec<_>>()
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

    /// PENDING → RUNNING, announcing it if asked to.
    fn start_running(&self, id: &str) {
        let mut state = self.lock();
        let State {
            batches,
            by_id,
            runtime,
            ..
        } = &mut *state;
        let Some(batch) = by_id.get(id).and_then(|&i| batches.get_mut(i)) else {
            return;
        };
        if !batch.transition(BatchState::Running, Utc::now()) {
            return;
        }
        tracing::debug!(batch = %batch.name(), "batch running");
        if let (Some((target, _)), Some(rt)) = (&self.webhook, runtime.get(id))
            && target.running_events
            && !target.stale_running_after_terminal
            && let Some(queue) = &rt.events
        {
            let _ = queue.send(event_for(batch, BatchState::Running));
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
        let outcomes: Vec<(String, Outcome)> = match to {
            BatchState::Succeeded => {
                let seed = self.seed ^ hash_str(&batch.display_name) ^ batch.seq;
                let output =
                    build_output(&batch.rows, &batch.model, seed, |row, prompt| match faults
                        .as_mut()
                    {
                        Some(f) => f.decide_row(&row.key, prompt),
                        None => crate::faults::RowVerdict::Answer,
                    });
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
                batch.output_file = Some(format!("files/{out_id}"));
                batch.successful = output.successful;
                batch.failed = output.failed;
                output.outcomes
            }
            BatchState::Failed => every_row(batch, Outcome::JobFailed),
            BatchState::Expired => every_row(batch, Outcome::JobExpired),
            BatchState::Cancelled => every_row(batch, Outcome::JobCancelled),
            BatchState::Pending | BatchState::Running => return,
        };
        if to == BatchState::Failed
            && let Some(JobFault::Failed { message }) = &batch.fault
        {
            batch.error = Some(BatchError {
                code: 13,
                message: message.clone(),
            });
        }
        batch.transition(to, Utc::now());
        tracing::info!(batch = %name, state = to.wire(), "batch finished");
        for (key, outcome) in outcomes {
            if let Some(sub) = stats
                .submissions
                .get_mut(&key)
                .and_then(|subs| subs.iter_mut().rev().find(|s| s.batch == name))
            {
                sub.outcome = outcome;
            }
        }
        if let Some(rt) = runtime.get_mut(id) {
            if let Some(queue) = rt.events.take() {
                let _ = queue.send(event_for(batch, to));
                let stale = self
                    .webhook
                    .as_ref()
                    .is_some_and(|(t, _)| t.stale_running_after_terminal);
                if stale && batch.running_time.is_some() {
                    let _ = queue.send(event_for(batch, BatchState::Running));
                }
            }
            rt.cancel.cancel();
        }
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

fn file_not_found(id: &str) -> ApiError {
    ApiError::new(
        403,
        format!("You do not have permission to access the File {id} or it may not exist."),
    )
}

fn find<'a>(state: &'a State, id: &str) -> Result<&'a Batch, ApiError> {
    state
        .by_id
        .get(id)
        .and_then(|&i| state.batches.get(i))
        .ok_or_else(|| ApiError::not_found(format!("Batch batches/{id} not found.")))
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
    let wait = |d: Duration| {
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(d) => true,
                () = cancel.cancelled() => false,
            }
        }
    };
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

//! What every task of one worker shares: the tally clients, the provider
//! client, the settings, the prompt cache, and the wake-up channel fed by
//! the WatchOperations stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tally_client::{Clients, RetryPolicy, with_retry};
use tally_proto::v1 as pb;
use tokio::sync::{Mutex, broadcast};
use tonic::{Code, Status};

use crate::bounds::TokenBounds;
use crate::config::WorkerArgs;
use crate::media::MediaReader;
use crate::metrics::WorkerMetrics;
use crate::prompt::PromptSpec;
use crate::provider::Provider;

/// A prompt ready to use: its spec and its compiled response schema.
pub struct Compiled {
    pub spec: PromptSpec,
    pub validator: Option<jsonschema::Validator>,
}

/// A prompt that cannot be used for reasons that will not pass (unknown,
/// or its schema does not compile): its rows are invalid input.
pub type PromptResult = Result<Arc<Compiled>, String>;

pub struct Ctx {
    pub clients: Clients,
    pub provider: Provider,
    pub args: WorkerArgs,
    /// `ledgers/{id}`.
    pub ledger: String,
    pub worker: String,
    pub retry: RetryPolicy,
    pub metrics: WorkerMetrics,
    prompts: Mutex<HashMap<String, PromptResult>>,
    /// Names of operations that just moved (`operations/batches/…`).
    pub ops: broadcast::Sender<String>,
    /// No claim is made before this (a shared provider cool-down, or the
    /// ledger's job limit, said to wait).
    claims_held_until: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// The provider account, as CreateJob names it ([`Provider::account`]).
    pub account: String,
    /// Token bounds per model learned from refused creates.
    bounds: std::sync::Mutex<TokenBounds>,
    /// How many rows a batch claim asks for.
    claim_fit: std::sync::Mutex<crate::bounds::ClaimFit>,
    /// Batch claims out whose batch is not packed yet.
    unpacked: Arc<Unpacking>,
    /// Refusals naming no delay, in a row, per model.
    unnamed_waits: std::sync::Mutex<crate::waits::UnnamedWaits>,
    /// Where rows' media are read from.
    pub media: MediaReader,
    /// Set when the worker's own settings keep it from running a row (its
    /// media are where it may not read): the worker then stops.
    settings_problem: std::sync::Mutex<Option<String>>,
    /// When this worker last made a probe batch (a witness for every
    /// search of an earlier attempt: [`crate::lookup::probe_due`]).
    last_probe: std::sync::Mutex<Option<std::time::SystemTime>>,
    /// The most rows sent in one report or release: `--max-rows-per-report`
    /// until the server says it takes fewer ([`Ctx::learn_rows_per_call`]).
    rows_per_call: AtomicUsize,
}

impl Ctx {
    pub fn new(
        clients: Clients,
        provider: Provider,
        args: WorkerArgs,
        metrics: WorkerMetrics,
        media: MediaReader,
    ) -> Self {
        let (ops, _) = broadcast::channel(1024);
        Self {
            media,
            account: provider.account(),
            bounds: std::sync::Mutex::new(TokenBounds::default()),
            claim_fit: std::sync::Mutex::default(),
            unpacked: Arc::default(),
            unnamed_waits: std::sync::Mutex::default(),
            settings_problem: std::sync::Mutex::new(None),
            last_probe: std::sync::Mutex::new(None),
            rows_per_call: AtomicUsize::new(args.max_rows_per_report.max(1)),
            clients,
            provider,
            ledger: args.ledger_name(),
            worker: args.worker_name(),
            args,
            retry: RetryPolicy {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(5),
                tries: 10,
            },
            metrics,
            claims_held_until: std::sync::Mutex::new(None),
            prompts: Mutex::new(HashMap::new()),
            ops,
        }
    }

    /// The most rows one report or release carries.
    pub fn rows_per_call(&self) -> usize {
        self.rows_per_call.load(Ordering::Relaxed)
    }

    /// True when `status` is the server refusing a call for carrying more
    /// rows than it takes and the worker now sends fewer: the caller splits
    /// the same rows again and goes on (nothing was written).
    pub fn learn_rows_per_call(&self, status: &Status) -> bool {
        let Some(limit) = tally_client::rows_per_call_limit(status) else {
            return false;
        };
        let before = self.rows_per_call.fetch_min(limit, Ordering::Relaxed);
        if limit < before {
            tracing::warn!(
                limit,
                flag = self.args.max_rows_per_report,
                "the server takes at most {limit} rows per call (its --max-rows-per-call); \
                 reports go in chunks of {limit}: set --max-rows-per-report to {limit} or less"
            );
        }
        limit < before
    }

    /// How long a model cools down after a capacity refusal: the delay
    /// the provider named, else `--refusal-cooldown`.
    pub fn cooldown(&self, named: Option<Duration>) -> Duration {
        named.unwrap_or(self.args.refusal_cooldown)
    }

    /// Stops the worker (after its jobs in flight): a row it claimed needs
    /// what its settings do not give it (`why`, the first such reason,
    /// names the flag). Claiming again would only give the rows back again.
    pub fn stop_for_settings(&self, why: String) {
        let mut p = self
            .settings_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if p.is_none() {
            tracing::error!(problem = %why, "this worker cannot run the ledger's rows as it is set up; the rows go back without an attempt and it stops: fix its flags and start it again");
            *p = Some(why);
        }
    }

    /// Why the worker must stop, once [`Ctx::stop_for_settings`] said so.
    pub fn settings_problem(&self) -> Option<String> {
        self.settings_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes no claim for `wait` (capped at an hour), or until a later
    /// hold already set.
    pub fn hold_claims(&self, wait: Duration) {
        let until = tokio::time::Instant::now() + wait.min(Duration::from_secs(3600));
        let mut held = self
            .claims_held_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if held.is_none_or(|h| h < until) {
            *held = Some(until);
        }
    }

    /// When this worker last made a probe batch, by any search.
    pub fn last_probe(&self) -> Option<std::time::SystemTime> {
        *self.last_probe.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A probe batch was made at `at`.
    pub fn probe_made(&self, at: std::time::SystemTime) {
        let mut last = self.last_probe.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|l| l < at) {
            *last = Some(at);
        }
    }

    /// How long claims are still held back (zero: claim away).
    pub fn claims_held_for(&self) -> Duration {
        let held = *self
            .claims_held_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        held.map_or(Duration::ZERO, |h| {
            h.saturating_duration_since(tokio::time::Instant::now())
        })
    }

    /// The most estimated tokens the next batch of `model` may carry under
    /// the provider `limit` (0: none): see [`crate::bounds`].
    pub fn token_bound(&self, model: &str, limit: u64) -> u64 {
        self.bounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bound(model, limit)
    }

    /// The rows the next claim asks for: `--claim-size` (one wave of calls
    /// on a synchronous lane), fewer while batches fill before their
    /// claims' rows run out ([`crate::bounds::ClaimFit`]).
    pub fn rows_per_claim(&self) -> i32 {
        let size = self.args.rows_per_claim();
        if self.args.lane.is_sync() {
            return size;
        }
        let fit = self
            .claim_fit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rows(usize::try_from(size).unwrap_or(1));
        i32::try_from(fit).unwrap_or(size)
    }

    /// Whether another claim may be made now: until a batch has been
    /// packed (and so what a claim takes is known), one batch claim at a
    /// time is out before its batch ([`crate::bounds::ClaimFit::known`]).
    pub fn may_claim(&self) -> bool {
        self.args.lane.is_sync()
            || self.unpacked.out.load(Ordering::Acquire) == 0
            || self
                .claim_fit
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .known()
    }

    /// A batch claim is out until the guard drops (its job ends).
    pub fn claim_out(&self) -> Unpacked {
        self.unpacked.out.fetch_add(1, Ordering::AcqRel);
        Unpacked(Arc::clone(&self.unpacked))
    }

    /// Resolves once a batch was packed or a claim ended since the last
    /// call: what [`Ctx::may_claim`] waits for.
    pub async fn packed(&self) {
        self.unpacked.packed.notified().await;
    }

    /// A batch took `sent` of its claim's `claimed` rows (see
    /// [`crate::bounds::ClaimFit::packed`]).
    pub fn batch_packed(&self, claimed: usize, sent: usize, full: bool, room: bool) {
        let size = usize::try_from(self.args.rows_per_claim()).unwrap_or(1);
        self.claim_fit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .packed(claimed, sent, full, room, size);
        self.unpacked.packed.notify_one();
    }

    /// A create of `sent` tokens was refused for size or quota.
    pub fn create_refused(&self, model: &str, sent: u64) {
        self.bounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refused(model, sent);
    }

    /// A batch of `model` was made.
    pub fn batch_made(&self, model: &str, limit: u64) {
        self.bounds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .created(model, limit);
        self.capacity_ok(model);
    }

    /// The provider took work of `model` (a batch made, a call answered):
    /// a run of refusals naming no delay is over.
    pub fn capacity_ok(&self, model: &str) {
        self.unnamed_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .made(model);
    }

    /// What a capacity refusal of a create of `model` asks: the delay the
    /// provider named, else `--refusal-cooldown` doubled by the refusals
    /// naming none in a row, until the ledger pauses ([`crate::waits`]).
    pub fn capacity_wait(&self, model: &str, named: Option<Duration>) -> crate::waits::Next {
        match named {
            Some(d) => crate::waits::Next::Wait(d),
            None => self
                .unnamed_waits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .refused(model, self.args.refusal_cooldown, std::time::Instant::now()),
        }
    }

    /// The lease asked for on claims and heartbeats: `--lease`, else the
    /// ledger's for a batch (it runs for hours), and for a synchronous lane
    /// one call's time and two heartbeats (a worker that dies mid-call
    /// leaves its rows to another soon).
    pub fn lease(&self) -> Option<prost_types::Duration> {
        let sync = self
            .args
            .lane
            .is_sync()
            .then(|| self.args.call_timeout + self.args.heartbeat_interval.saturating_mul(2));
        self.args.lease.or(sync).map(|d| prost_types::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        })
    }

    /// The prompt `prompts/{id}/versions/{v}`, fetched once. `Err(status)`
    /// for a failure that may pass (retry the rows later); `Ok(Err(_))`
    /// when the prompt itself is unusable.
    pub async fn prompt(&self, name: &str) -> Result<PromptResult, Status> {
        if let Some(p) = self.prompts.lock().await.get(name) {
            return Ok(p.clone());
        }
        let got = with_retry(self.retry, "GetPrompt", || {
            let mut c = self.clients.ledgers.clone();
            let req = pb::GetPromptRequest {
                name: name.to_string(),
            };
            async move { c.get_prompt(req).await }
        })
        .await;
        let result: PromptResult = match got {
            Ok(p) => compile(&p.into_inner()),
            Err(s) if matches!(s.code(), Code::NotFound | Code::InvalidArgument) => {
                Err(format!("prompt {name} cannot be used: {}", s.message()))
            }
            Err(s) => return Err(s),
        };
        self.prompts
            .lock()
            .await
            .insert(name.to_string(), result.clone());
        Ok(result)
    }
}

fn compile(p: &pb::Prompt) -> PromptResult {
    let mut spec =
        PromptSpec::from_registry(&p.template, &p.response_schema, &p.system_instruction)
            .map_err(|e| format!("prompt {}: {e}", p.name))?;
    spec.media = p.media.clone();
    let validator = match &spec.response_schema {
        None => None,
        Some(schema) => Some(
            jsonschema::validator_for(schema)
                .map_err(|e| format!("prompt {}: response schema does not compile: {e}", p.name))?,
        ),
    };
    Ok(Arc::new(Compiled { spec, validator }))
}

/// `prompts/{id}/versions/{v}` of a row's prompt reference.
pub fn prompt_name(p: &pb::PromptRef) -> String {
    format!("prompts/{}/versions/{}", p.name, p.version)
}

/// What a row's answer is checked against: its prompt's schema (by prompt
/// name) and whether JSON was asked for.
pub(crate) struct Answer {
    pub(crate) prompt: Option<String>,
    pub(crate) json: bool,
}

impl Answer {
    pub(crate) fn of(
        wire: &dyn crate::provider::Wire,
        payload: &str,
        prompt: Option<&pb::PromptRef>,
    ) -> Answer {
        Answer {
            prompt: prompt.map(prompt_name),
            json: wire.asks_for_json(payload, prompt.is_some()),
        }
    }
}

/// A batch claim out ([`Ctx::claim_out`]): counted until dropped.
pub struct Unpacked(Arc<Unpacking>);

/// Batch claims out before their batch, and a wake-up for the loop that
/// waits to claim.
#[derive(Default)]
struct Unpacking {
    out: AtomicUsize,
    packed: tokio::sync::Notify,
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        self.0.out.fetch_sub(1, Ordering::AcqRel);
        self.0.packed.notify_one();
    }
}

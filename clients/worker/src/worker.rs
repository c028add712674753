//! The worker loop: adopt orphaned jobs, claim rows while the ledger has
//! room for another job, run each job in its own task, and stop in order.
//! A WatchOperations subscription wakes the job tasks when their batch
//! moves (the webhook path); each task also polls slowly on its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tally_client::with_retry;
use tally_proto::v1 as pb;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::Instrument as _;

use crate::config::WorkerArgs;
use crate::ctx::Ctx;
use crate::holders;
use crate::janitor;
use crate::job::{self, JobEnd};
use crate::metrics::{InFlight, WorkerMetrics};
use crate::provider::{ApiKey, Provider, ProviderError};

/// How long shutdown waits for job tasks (a batch being created is
/// recorded before its task ends).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("bad settings: {0}")]
    Config(String),
    #[error(transparent)]
    Connect(#[from] tally_client::ConnectError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("tally: {0}")]
    Rpc(#[from] Status),
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunReport {
    pub jobs_started: u64,
    pub jobs_adopted: u64,
    pub jobs_reconciled: u64,
    pub jobs_released: u64,
    pub jobs_failed: u64,
    /// Orphaned input files the janitor deleted.
    pub files_deleted: u64,
    /// Reconciled batches (and ended probes) the janitor deleted.
    pub batches_deleted: u64,
    /// Media uploads the janitor deleted.
    pub media_deleted: u64,
    /// `--cache-dry-run`: what the result cache would answer (nothing
    /// else was done).
    pub cache_estimate: Option<job::cached::Estimate>,
}

impl RunReport {
    fn swept(&mut self, s: janitor::Swept) {
        self.files_deleted += s.files as u64;
        self.batches_deleted += s.batches as u64;
        self.media_deleted += s.media as u64;
    }
}

/// Runs the worker until `shutdown` completes (or, with
/// `--exit-when-idle`, until the ledger has no work left). On shutdown it
/// stops claiming, releases the claims of jobs not yet submitted, leaves
/// submitted jobs for adoption, and returns.
pub async fn run_until(
    args: WorkerArgs,
    api_key: ApiKey,
    shutdown: impl Future<Output = ()>,
) -> Result<RunReport, WorkerError> {
    let listener = match args.metrics_addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| WorkerError::Config(format!("--metrics-addr {addr}: {e}")))?,
        ),
        None => None,
    };
    run_serving(args, api_key, shutdown, listener).await
}

/// [`run_until`], serving `/metrics`, `/livez` and `/healthz` on
/// `listener` when given (instead of binding `--metrics-addr`): tests and
/// the demo bind port 0 and read the address first.
pub async fn run_serving(
    args: WorkerArgs,
    api_key: ApiKey,
    shutdown: impl Future<Output = ()>,
    listener: Option<tokio::net::TcpListener>,
) -> Result<RunReport, WorkerError> {
    args.validate().map_err(WorkerError::Config)?;
    let target = args.target();
    if let Some(warning) = target.plaintext_token_warning() {
        tracing::warn!("{warning}");
    }
    let clients = target.connect()?;
    let metrics = WorkerMetrics::new();
    let api = args.api().map_err(WorkerError::Config)?;
    let mut provider = Provider::new(api, &args.providers, api_key, args.http_timeout)?;
    provider.set_errors(metrics.provider_errors());
    metrics.set_provider(&args.provider, api.as_str());
    let stop = CancellationToken::new();
    let listener_stop = CancellationToken::new();
    let listener = listener.map(|l| serve_metrics(l, &args, &metrics, listener_stop.clone()));
    if let Some(bad) = args.media_allow_buckets.iter().find(|b| {
        let b = b.trim().trim_end_matches('/');
        !matches!(b.split_once("://"), Some(("gs" | "s3", name)) if !name.is_empty() && !name.contains('/'))
    }) {
        return Err(WorkerError::Config(format!(
            "--media-allow-bucket {bad:?}: give gs://bucket or s3://bucket"
        )));
    }
    let media = crate::media::MediaReader::new(
        crate::media::MediaPlaces {
            root: args.media_root.clone(),
            allowed_hosts: args
                .media_allow_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            allowed_buckets: args
                .media_allow_buckets
                .iter()
                .map(|b| b.trim().trim_end_matches('/').to_owned())
                .collect(),
            max_bytes: args.media_max_bytes,
        },
        args.http_timeout,
    )
    .map_err(WorkerError::Config)?;
    let ctx = Arc::new(Ctx::new(clients, provider, args, metrics, media));
    if ctx.args.cache_dry_run {
        let estimate = job::cached::estimate(&ctx).await?;
        tracing::info!(ledger = %ctx.ledger, rows = estimate.rows, hits = estimate.hits, saved_usd = estimate.saved_usd, "result cache dry run");
        listener_stop.cancel();
        if let Some(l) = listener {
            let _ = l.await;
        }
        return Ok(RunReport {
            cache_estimate: Some(estimate),
            ..RunReport::default()
        });
    }
    let ledger = with_retry(ctx.retry, "GetLedger", || {
        let mut c = ctx.clients.ledgers.clone();
        let req = pb::GetLedgerRequest {
            name: ctx.ledger.clone(),
        };
        async move { c.get_ledger(req).await }
    })
    .await?
    .into_inner();
    let ledger_max = ledger
        .policy
        .as_ref()
        .map_or(4, |p| p.max_active_jobs.max(1) as usize);
    let sync = ctx.args.lane.is_sync();
    let max_local = if sync {
        // A synchronous claim is one wave of calls: one being sent, the
        // next being prepared.
        2
    } else if ctx.args.max_jobs > 0 {
        ctx.args.max_jobs
    } else {
        ledger_max
    };
    let idle_pause = ctx.args.poll_interval.min(Duration::from_secs(5));
    tracing::info!(ledger = %ctx.ledger, worker = %ctx.worker, provider = %ctx.args.provider, api = %ctx.provider.api(), lane = %ctx.args.lane, max_jobs = max_local, ledger_max_active_jobs = ledger_max, "worker started");

    let watcher = tokio::spawn(watch_operations(Arc::clone(&ctx), stop.clone()));
    let mut jobs: JoinSet<Result<JobEnd, job::JobError>> = JoinSet::new();
    let mut report = RunReport::default();
    let mut next_sweep = tokio::time::Instant::now();
    let mut paused = PauseLog::default();
    let mut adopter = Adopter::new();
    let mut filling = FillLog::default();
    tokio::pin!(shutdown);
    let mut stopped_for: Option<String> = None;
    loop {
        while let Some(done) = jobs.try_join_next() {
            tally(&ctx, &mut report, Some(done));
        }
        if let Some(why) = ctx.settings_problem() {
            stopped_for = Some(why);
            break;
        }
        if tokio::time::Instant::now() >= next_sweep {
            report.swept(janitor::sweep(&ctx).await);
            next_sweep = tokio::time::Instant::now() + ctx.args.janitor_interval;
        }
        let mut worked = false;
        // A synchronous lane makes no jobs: it asks once, at start, to take
        // over what a previous process of its name held.
        if (!sync || adopter.starting) && jobs.len() < max_local {
            match adopter.adopt(&ctx, max_local - jobs.len()).await {
                Ok(adopted) => {
                    ctx.metrics.tally_answered();
                    for a in adopted {
                        worked = true;
                        report.jobs_adopted += 1;
                        ctx.metrics.job_adopted();
                        let span = tracing::debug_span!(target: tally_telemetry::traces::TARGET, "job", ledger = %ctx.ledger, adopted = true);
                        let task = job::run_adopted(Arc::clone(&ctx), a, stop.clone());
                        jobs.spawn(in_flight(ctx.metrics.job_started(), task).instrument(span));
                    }
                }
                Err(s) => tracing::warn!(error = %s, "AdoptJobs failed"),
            }
        }
        if jobs.len() < max_local
            && ctx.claims_held_for().is_zero()
            && ctx.may_claim()
            && (sync || room(&ctx, ledger_max).await)
        {
            // One span (one trace, when traces are exported) from the claim
            // to the job's FinishJob.
            let span = tracing::debug_span!(target: tally_telemetry::traces::TARGET, "job", ledger = %ctx.ledger, claim = tracing::field::Empty);
            let claimed = claim(&ctx).instrument(span.clone()).await;
            if claimed.is_ok() {
                ctx.metrics.tally_answered();
            }
            match claimed {
                Ok(Claimed::Rows(c, rows)) => {
                    paused.update(None);
                    filling.update(None);
                    worked = true;
                    report.jobs_started += 1;
                    span.record(
                        "claim",
                        tally_core::names::claim_for_logs(&c.name).to_string(),
                    );
                    let guard = ctx.metrics.job_started();
                    if sync {
                        let task = job::run_online(Arc::clone(&ctx), c, rows, stop.clone());
                        jobs.spawn(in_flight(guard, task).instrument(span));
                    } else {
                        let out = ctx.claim_out();
                        let task = job::run_claim(Arc::clone(&ctx), c, rows, stop.clone());
                        let task = async move {
                            let _out = out;
                            task.await
                        };
                        jobs.spawn(in_flight(guard, task).instrument(span));
                    }
                }
                Ok(Claimed::Nothing) => {
                    paused.update(None);
                    filling.update(None);
                }
                Ok(Claimed::Paused(p)) => paused.update(Some(p)),
                Ok(Claimed::Filling(f)) => {
                    paused.update(None);
                    filling.update(Some(&f));
                }
                Err(s) => tracing::warn!(error = %s, "ClaimRows failed"),
            }
        }
        if !worked && jobs.is_empty() && ctx.args.exit_when_idle && idle(&ctx).await {
            // Every job is closed: whatever input files are left of them
            // (and old enough) are orphans.
            report.swept(janitor::sweep(&ctx).await);
            tracing::info!(ledger = %ctx.ledger, "no work left; exiting");
            break;
        }
        let pause = if worked { Duration::ZERO } else { idle_pause };
        tokio::select! {
            _ = &mut shutdown => {
                ctx.metrics.stopping();
                tracing::info!("shutting down: no more claims; unsubmitted claims are released");
                break;
            }
            _ = tokio::time::sleep(pause) => {}
            // A claim held back until a first batch is packed goes at once.
            () = ctx.packed(), if !sync => {}
            Some(done) = jobs.join_next(), if !jobs.is_empty() => tally(&ctx, &mut report, Some(done)),
        }
    }
    stop.cancel();
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while let Some(done) = jobs.join_next().await {
            tally(&ctx, &mut report, Some(done));
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(jobs = jobs.len(), "job tasks did not end in time");
        jobs.abort_all();
    }
    // What is still at the provider is adopted by the next worker at once.
    let handed = hand_over_own(&ctx).await;
    if handed > 0 {
        tracing::info!(jobs = handed, "handed over the jobs still at the provider");
    }
    watcher.abort();
    listener_stop.cancel();
    if let Some(listener) = listener {
        let _ = listener.await;
    }
    tracing::info!(?report, "worker stopped");
    match stopped_for {
        Some(why) => Err(WorkerError::Config(format!(
            "{why}: the rows that need it went back without an attempt; start the worker with the flag it names"
        ))),
        None => Ok(report),
    }
}

fn tally(
    ctx: &Ctx,
    report: &mut RunReport,
    done: Option<Result<Result<JobEnd, job::JobError>, tokio::task::JoinError>>,
) {
    let end = match done {
        None => return,
        Some(Ok(Ok(JobEnd::Reconciled))) => {
            report.jobs_reconciled += 1;
            "reconciled"
        }
        Some(Ok(Ok(JobEnd::Released))) => {
            report.jobs_released += 1;
            "released"
        }
        Some(Ok(Ok(JobEnd::Cached))) => "cached",
        Some(Ok(Ok(JobEnd::LeftForAdoption))) => "left_for_adoption",
        Some(Ok(Ok(JobEnd::Lost))) => "lost",
        Some(Ok(Err(e))) => {
            report.jobs_failed += 1;
            tracing::warn!(error = %e, "job task failed; its rows come back by lease or adoption");
            "failed"
        }
        Some(Err(e)) => {
            report.jobs_failed += 1;
            tracing::error!(error = %e, "job task panicked");
            "failed"
        }
    };
    ctx.metrics.job_finished(end);
}

/// A job task, counted in `tally_worker_jobs_in_flight` while it runs.
async fn in_flight<T>(guard: InFlight, task: impl Future<Output = T>) -> T {
    let out = task.await;
    drop(guard);
    out
}

/// Serves the worker's metrics and health on `listener` until `stop`.
fn serve_metrics(
    listener: tokio::net::TcpListener,
    args: &WorkerArgs,
    metrics: &WorkerMetrics,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /livez and /healthz");
    }
    tokio::spawn(tally_telemetry::http_listener::serve(
        listener,
        metrics.router(),
        args.http.clone(),
        "metrics",
        stop,
    ))
}

/// What this worker knows of the ledger's holders between AdoptJobs calls.
struct Adopter {
    process: Option<pb::WorkerProcess>,
    /// No AdoptJobs has answered since this process started.
    starting: bool,
    waiting: holders::Waiting,
}

impl Adopter {
    fn new() -> Self {
        Adopter {
            process: holders::this_process(),
            starting: true,
            waiting: holders::Waiting::default(),
        }
    }

    /// Adopts up to `max` jobs: those whose lease ran out, and (when this
    /// worker can name its process) those of a previous process of its name
    /// and of holders on this host it finds gone, asked for again at once.
    async fn adopt(&mut self, ctx: &Ctx, max: usize) -> Result<Vec<pb::AdoptedJob>, Status> {
        let mut req = pb::AdoptJobsRequest {
            parent: ctx.ledger.clone(),
            worker: ctx.worker.clone(),
            max_jobs: max.min(100) as i32,
            lease: ctx.lease(),
            process: self.process.clone(),
            starting: self.starting && self.process.is_some(),
            gone: Vec::new(),
        };
        let mut r = adopt_call(ctx, &req).await?;
        self.starting = false;
        if r.taken_over > 0 {
            tracing::info!(
                claims = r.taken_over,
                "took over the claims of this worker's previous process"
            );
        }
        if let Some(me) = &self.process {
            let gone = holders::gone_holders(me, &r.held);
            if !gone.is_empty() && r.jobs.len() < max {
                tracing::info!(holders = ?gone.iter().map(|g| g.pid).collect::<Vec<_>>(), "holders on this host are gone; taking over their jobs");
                req.starting = false;
                req.max_jobs = (max - r.jobs.len()).min(100) as i32;
                req.gone = gone;
                let again = adopt_call(ctx, &req).await?;
                r.jobs.extend(again.jobs);
                r.held = again.held;
            }
        }
        self.waiting.note(&r.held);
        Ok(r.jobs)
    }
}

async fn adopt_call(
    ctx: &Ctx,
    req: &pb::AdoptJobsRequest,
) -> Result<pb::AdoptJobsResponse, Status> {
    let r = with_retry(ctx.retry, "AdoptJobs", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.adopt_jobs(req).await }
    })
    .await?;
    Ok(r.into_inner())
}

/// At a stop: ends the lease of every open job this worker still owns
/// (batches still at the provider), so the next worker adopts them at once
/// instead of waiting out the lease. Returns how many it handed over.
pub async fn hand_over_own(ctx: &Ctx) -> usize {
    let req = pb::ListJobsRequest {
        parent: ctx.ledger.clone(),
        states: [
            pb::JobState::Creating,
            pb::JobState::Submitted,
            pb::JobState::Running,
            pb::JobState::Succeeded,
            pb::JobState::Failed,
            pb::JobState::Cancelled,
            pb::JobState::Expired,
        ]
        .iter()
        .map(|s| *s as i32)
        .collect(),
        page_size: 1000,
        page_token: String::new(),
    };
    let jobs = match with_retry(ctx.retry, "ListJobs", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.list_jobs(req).await }
    })
    .await
    {
        Ok(r) => r.into_inner().jobs,
        Err(s) => {
            tracing::warn!(error = %s, "ListJobs failed; jobs left to their lease");
            return 0;
        }
    };
    let mut handed = 0;
    for job in jobs
        .into_iter()
        .filter(|j| j.end_time.is_none() && j.owner == ctx.worker)
    {
        let req = pb::HandOverJobRequest {
            name: job.name.clone(),
            claim: job.claim.clone(),
        };
        let mut c = ctx.clients.jobs.clone();
        match c.hand_over_job(req).await {
            Ok(_) => {
                handed += 1;
                tracing::info!(job = %job.job_id, batch = %job.batch, "job handed over: the next worker adopts it at once");
            }
            Err(s) => {
                tracing::warn!(job = %job.job_id, error = %s, "HandOverJob failed; the job waits out its lease")
            }
        }
    }
    handed
}

/// Whether the ledger has fewer open jobs than its limit (a hint: CreateJob
/// enforces the limit; this only avoids claiming rows it would refuse).
async fn room(ctx: &Ctx, max: usize) -> bool {
    let open = [
        pb::JobState::Preparing,
        pb::JobState::Creating,
        pb::JobState::Submitted,
        pb::JobState::Running,
        pb::JobState::Succeeded,
        pb::JobState::Failed,
        pb::JobState::Cancelled,
        pb::JobState::Expired,
    ];
    let req = pb::ListJobsRequest {
        parent: ctx.ledger.clone(),
        states: open.iter().map(|s| *s as i32).collect(),
        page_size: max.clamp(1, 1000) as i32,
        page_token: String::new(),
    };
    let got = with_retry(ctx.retry, "ListJobs", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.list_jobs(req).await }
    })
    .await;
    match got {
        // CANCELLED jobs that are closed (never submitted) do not count.
        Ok(r) => {
            r.into_inner()
                .jobs
                .iter()
                .filter(|j| j.end_time.is_none())
                .count()
                < max
        }
        Err(s) => {
            tracing::warn!(error = %s, "ListJobs failed");
            false
        }
    }
}

/// What a claim got.
enum Claimed {
    Rows(pb::Claim, Vec<pb::ClaimedRow>),
    /// Nothing runnable now.
    Nothing,
    /// The ledger is paused: nothing is handed out until it is resumed.
    Paused(pb::LedgerPause),
    /// Held back so that the batch fills.
    Filling(pb::FillWait),
}

/// Says once why a partial batch waits (and again when the reason
/// changes), however many polls see it.
#[derive(Default)]
struct FillLog {
    reason: Option<String>,
}

impl FillLog {
    fn update(&mut self, now: Option<&pb::FillWait>) {
        let reason = now.map(|f| f.reason.clone());
        if reason == self.reason {
            return;
        }
        if let Some(f) = now {
            let within = f.retry_after.as_ref().map_or(0, |d| d.seconds.max(0));
            tracing::info!(runnable = f.runnable_rows, within_s = within, reason = %f.reason,
                "batch filling: waiting for more rows before the next batch ({}; the ledger's batch_fill bounds the wait)",
                tally_core::fill::WaitFor::describe(&f.reason));
        }
        self.reason = reason;
    }
}

/// Says once that the ledger is paused, and once that it was resumed,
/// however many polls see it (a paused ledger is "nothing to do", not an
/// error: the loop backs off as when idle).
#[derive(Default)]
struct PauseLog {
    paused: bool,
}

impl PauseLog {
    fn update(&mut self, now: Option<pb::LedgerPause>) {
        match (self.paused, now) {
            (false, Some(p)) => {
                let reason = pb::LedgerPauseReason::try_from(p.reason)
                    .map_or("unknown", |r| r.as_str_name());
                tracing::info!(reason, actor = %p.actor, message = %p.message, "ledger paused; claiming nothing until it is resumed (jobs already out run to their end)");
                self.paused = true;
            }
            (true, None) => {
                tracing::info!("ledger resumed; claiming again");
                self.paused = false;
            }
            (true, Some(_)) | (false, None) => {}
        }
    }
}

/// Claims a batch of rows; a retry after a lost answer carries the same
/// request id, so it returns the same claim instead of leasing more.
async fn claim(ctx: &Ctx) -> Result<Claimed, Status> {
    let req = pb::ClaimRowsRequest {
        parent: ctx.ledger.clone(),
        max_rows: ctx.rows_per_claim(),
        lease: ctx.lease(),
        worker: ctx.worker.clone(),
        request_id: uuid::Uuid::new_v4().to_string(),
        model: ctx.args.model.clone(),
        // What our client accepts; the server hands out fewer rows rather
        // than an answer we could not receive (the rest stay runnable).
        max_response_bytes: tally_client::MAX_MESSAGE_BYTES as i64,
        provider: ctx.args.provider.clone(),
        // One batch claim is one provider batch: let it fill. A synchronous
        // claim goes at once.
        fill_batch: !ctx.args.lane.is_sync(),
        lane: i32::from(ctx.args.lane.code()),
    };
    let r = with_retry(ctx.retry, "ClaimRows", || {
        let mut c = ctx.clients.ledgers.clone();
        let req = req.clone();
        async move { c.claim_rows(req).await }
    })
    .await?
    .into_inner();
    Ok(match (r.claim, r.pause, r.filling) {
        (Some(c), _, _) => Claimed::Rows(c, r.rows),
        (None, Some(p), _) => Claimed::Paused(p),
        (None, None, Some(f)) => Claimed::Filling(f),
        (None, None, None) => Claimed::Nothing,
    })
}

/// No row pending, runnable later, or running, and no job open.
async fn idle(ctx: &Ctx) -> bool {
    let req = pb::SummarizeLedgerRequest {
        name: ctx.ledger.clone(),
        ..Default::default()
    };
    let got = with_retry(ctx.retry, "SummarizeLedger", || {
        let mut c = ctx.clients.ledgers.clone();
        let req = req.clone();
        async move { c.summarize_ledger(req).await }
    })
    .await;
    match got {
        Ok(s) => {
            let s = s.into_inner();
            s.pending == 0 && s.running == 0 && s.retryable == 0 && s.active_jobs == 0
        }
        Err(e) => {
            tracing::warn!(error = %e, "SummarizeLedger failed");
            false
        }
    }
}

/// Follows WatchOperations and announces every operation that moved;
/// reconnects from the last sequence seen.
async fn watch_operations(ctx: Arc<Ctx>, stop: CancellationToken) {
    let mut after = 0i64;
    loop {
        let mut c = ctx.clients.operations.clone();
        let opened = tokio::select! {
            _ = stop.cancelled() => return,
            r = c.watch_operations(pb::WatchOperationsRequest { after_sequence: after }) => r,
        };
        match opened {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    let next = tokio::select! {
                        _ = stop.cancelled() => return,
                        m = stream.message() => m,
                    };
                    match next {
                        Ok(Some(t)) => {
                            after = after.max(t.sequence);
                            if let Some(op) = t.operation {
                                let _ = ctx.ops.send(op.name);
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            tracing::debug!(error = %s, "operation watch ended; reconnecting");
                            break;
                        }
                    }
                }
            }
            Err(s) => tracing::warn!(error = %s, "WatchOperations failed"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

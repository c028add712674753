//! What the worker's end-to-end tests share: a tally server on a private
//! database with its webhook listener, the worker binary as a child process,
//! and paging helpers. Each test file uses what it needs.

use std::process::Stdio;
use std::time::Duration;

use gemini_emulator::{Emulator, EmulatorConfig, FaultPlan, Timing, WebhookTarget};
use tally_client::Clients;
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_server::config::ServeArgs;
use tokio::process::{Child, Command};

pub const SECRET: &str = "whsec_dGFsbHktd29ya2VyLWUyZS1zaWduaW5nLXNlY3JldCE=";
pub const API_KEY: &str = "e2e-key";

pub fn secs_f(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A running tally server: its database, gRPC URL and webhook URL.
pub struct Stack {
    /// Kept for the server's life: dropping it drops the database.
    _db: TestDb,
    pub server: tally_server::startup::server::Running,
    pub grpc: String,
    pub hook: String,
}

/// Starts tally on a fresh database, with webhooks signed by [`SECRET`].
pub async fn start_server(max_rows_per_call: usize) -> Stack {
    start_server_with(max_rows_per_call, |_| {}).await
}

/// [`start_server`] with `configure` applied to the server's flags last.
pub async fn start_server_with(
    max_rows_per_call: usize,
    configure: impl FnOnce(&mut ServeArgs),
) -> Stack {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.http_addr = Some("127.0.0.1:0".parse().unwrap());
    args.webhook.secrets = vec![SECRET.into()];
    args.limits.max_rows_per_call = max_rows_per_call;
    args.watch_poll_interval = Duration::from_millis(200);
    args.db_max_connections = 16;
    configure(&mut args);
    let server = tally_server::startup::server::start(args)
        .await
        .expect("server starts");
    let grpc = format!("http://{}", server.grpc_addr);
    let hook = format!(
        "http://{}/webhooks/gemini",
        server.http_addr.expect("webhook listener")
    );
    Stack {
        _db: db,
        server,
        grpc,
        hook,
    }
}

/// The worker binary against `grpc` and `gemini`, with fast polls and a
/// short lease (3 s) so a dead worker's jobs are adopted quickly; `extra`
/// adds or overrides flags.
pub fn spawn_worker(grpc: &str, gemini: &str, ledger: &str, name: &str, extra: &[&str]) -> Child {
    worker_command(grpc, gemini, ledger, name, extra)
        .spawn()
        .expect("spawn tally-worker")
}

/// The command [`spawn_worker`] runs, to adjust before spawning (e.g. to
/// read the worker's log from a pipe).
pub fn worker_command(
    grpc: &str,
    gemini: &str,
    ledger: &str,
    name: &str,
    extra: &[&str],
) -> Command {
    worker_command_leased(grpc, gemini, ledger, name, Some(TEST_LEASE), extra)
}

/// [`worker_command`] with the lease `lease` (`None`: the ledger's, 30
/// minutes unless it says otherwise).
pub fn worker_command_leased(
    grpc: &str,
    gemini: &str,
    ledger: &str,
    name: &str,
    lease: Option<&str>,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tally-worker"));
    cmd.args(worker_flags(grpc, gemini, ledger, name, lease))
        .args(extra)
        .env("GEMINI_API_KEY", API_KEY)
        .env(
            "RUST_LOG",
            std::env::var("WORKER_LOG").unwrap_or_else(|_| "warn,tally_worker=info".into()),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// The lease test workers take: short, so that tests of a dead worker's
/// lease running out are quick.
const TEST_LEASE: &str = "3s";

/// The flags every test worker gets: fast polls, and `lease` when given.
fn worker_flags<'a>(
    grpc: &'a str,
    gemini: &'a str,
    ledger: &'a str,
    name: &'a str,
    lease: Option<&'a str>,
) -> Vec<&'a str> {
    let mut flags = vec![
        "--server",
        grpc,
        "--ledger",
        ledger,
        "--gemini-base-url",
        gemini,
        "--worker-name",
        name,
        "--poll-interval",
        "1s",
        "--heartbeat-interval",
        "500ms",
    ];
    if let Some(lease) = lease {
        flags.extend(["--lease", lease]);
    }
    flags
}

/// A worker running rows at the OpenAI emulator (`openai`: its base URL,
/// `/v1` included), with the flags of [`spawn_worker`] and `extra`.
pub fn spawn_openai_worker(
    grpc: &str,
    openai: &str,
    ledger: &str,
    name: &str,
    extra: &[&str],
) -> Child {
    spawn_api_worker(grpc, "openai", openai, ledger, name, extra)
}

/// A worker running rows at the emulator of `api` (`openai` or
/// `anthropic`) at `base` (its base URL as the worker's flag takes it),
/// with the flags of [`spawn_worker`] and `extra`.
pub fn spawn_api_worker(
    grpc: &str,
    api: &str,
    base: &str,
    ledger: &str,
    name: &str,
    extra: &[&str],
) -> Child {
    spawn_api_worker_leased(grpc, api, base, ledger, name, TEST_LEASE, extra)
}

/// [`spawn_api_worker`] with the lease `lease`.
pub fn spawn_api_worker_leased(
    grpc: &str,
    api: &str,
    base: &str,
    ledger: &str,
    name: &str,
    lease: &str,
    extra: &[&str],
) -> Child {
    let url_flag = format!("--{api}-base-url");
    worker_command_leased(grpc, base, ledger, name, Some(lease), &[])
        .args(["--provider", api, &url_flag, base])
        .args(extra)
        .env(format!("{}_API_KEY", api.to_ascii_uppercase()), API_KEY)
        .spawn()
        .expect("spawn tally-worker")
}

/// The settings [`worker_command`] gives the binary, for a worker run in
/// this process ([`tally_worker::run_serving`]).
/// The create path's short settings (ten rows a claim and a batch, a short
/// lookup window and HTTP timeout, no clock skew), as the create-path
/// tests of each provider run their workers.
pub const CREATE_FLAGS: [&str; 10] = [
    "--claim-size",
    "10",
    "--max-rows-per-batch",
    "10",
    "--create-lookup-window",
    "4s",
    "--http-timeout",
    "3s",
    "--provider-clock-skew",
    "0s",
];

pub fn worker_args(
    grpc: &str,
    gemini: &str,
    ledger: &str,
    name: &str,
    extra: &[&str],
) -> tally_worker::WorkerArgs {
    use clap::Parser as _;
    let flags = worker_flags(grpc, gemini, ledger, name, Some(TEST_LEASE));
    let argv = std::iter::once("tally-worker")
        .chain(flags)
        .chain(extra.iter().copied());
    tally_worker::WorkerArgs::try_parse_from(argv).expect("worker flags parse")
}

pub async fn list_jobs(c: &Clients, ledger: &str) -> Vec<pb::Job> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .jobs
            .clone()
            .list_jobs(pb::ListJobsRequest {
                parent: format!("ledgers/{ledger}"),
                states: vec![],
                page_size: 1000,
                page_token: token,
            })
            .await
            .expect("list jobs")
            .into_inner();
        out.extend(r.jobs);
        if r.next_page_token.is_empty() {
            return out;
        }
        token = r.next_page_token;
    }
}

pub async fn all_rows(c: &Clients, ledger: &str) -> Vec<pb::Row> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .ledgers
            .clone()
            .list_rows(pb::ListRowsRequest {
                parent: format!("ledgers/{ledger}"),
                filter: None,
                page_size: 1000,
                page_token: token,
                view: pb::RowView::Full as i32,
            })
            .await
            .expect("list rows")
            .into_inner();
        out.extend(r.rows);
        if r.next_page_token.is_empty() {
            return out;
        }
        token = r.next_page_token;
    }
}

/// Registers `summarize`/`v1`: a one-line summary as JSON with a schema.
/// The schema carries `additionalProperties`, a JSON-Schema-only keyword:
/// the provider (and the emulator) refuse it in `responseSchema` (an
/// OpenAPI subset) and take it in `responseJsonSchema`, so a worker that
/// sent the schema in the wrong field would fail every row of every
/// end-to-end test.
pub async fn register_prompt(c: &Clients) {
    c.ledgers
        .clone()
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "summarize".into(),
            version: "v1".into(),
            template: "Summarize {{ text }} in one line.".into(),
            response_schema: serde_json::json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}, "score": {"type": "integer"}},
                "required": ["summary", "score"],
                "additionalProperties": false
            })
            .to_string(),
            system_instruction: String::new(),
            ..Default::default()
        })
        .await
        .expect("register prompt");
}

/// Creates `ledgers/{ledger}` for `model` (at most 4 jobs at once). A
/// retryable row waits one second, not the default 30 (jittered): what the
/// tests check is that it comes back, and half a minute per retry was most
/// of the suite's time.
pub async fn create_ledger(c: &Clients, ledger: &str, model: &str, budgets: pb::AttemptBudgets) {
    create_ledger_with(c, ledger, test_policy(model, budgets)).await;
}

/// The policy of the tests' ledgers: 1 s backoffs, and partial batches that
/// wait for more rows only briefly (the emulator's batches take a second;
/// the defaults are fit for a real provider's turnaround).
pub fn test_policy(model: &str, budgets: pb::AttemptBudgets) -> pb::LedgerPolicy {
    let second = prost_types::Duration {
        seconds: 1,
        nanos: 0,
    };
    pb::LedgerPolicy {
        model: model.into(),
        max_active_jobs: 4,
        backoff: Some(pb::Backoff {
            initial: Some(second),
            max: Some(second),
            multiplier: 1.0,
            jitter: 0.0,
        }),
        budgets: Some(budgets),
        batch_fill: Some(pb::BatchFill {
            max_wait: Some(secs_f(Duration::from_secs(3))),
            quiet: Some(secs_f(Duration::from_millis(300))),
            min_rows: 0,
        }),
        ..Default::default()
    }
}

pub async fn create_ledger_with(c: &Clients, ledger: &str, policy: pb::LedgerPolicy) {
    c.ledgers
        .clone()
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: ledger.into(),
            policy: Some(policy),
        })
        .await
        .expect("create ledger");
}

/// Enrolls `rows` documents `{prefix}00`… on the `summarize` prompt, each
/// for `model` (empty: the ledger's).
pub async fn enroll_documents(c: &Clients, ledger: &str, prefix: &str, rows: usize, model: &str) {
    let rows: Vec<pb::RowInput> = (0..rows)
        .map(|i| pb::RowInput {
            key: format!("{prefix}{i:02}"),
            payload: serde_json::json!({"text": format!("document {i}")}).to_string(),
            prompt: Some(pb::PromptRef {
                name: "summarize".into(),
                version: "v1".into(),
            }),
            model: model.into(),
            ..Default::default()
        })
        .collect();
    for chunk in rows.chunks(100) {
        c.ledgers
            .clone()
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{ledger}"),
                rows: chunk.to_vec(),
            })
            .await
            .expect("enroll");
    }
}

/// tally, the emulator (fast batches, webhooks delivered twice) and a
/// ledger of `rows` rows `row-00`… on the `summarize` prompt.
pub struct World {
    pub stack: Stack,
    pub emulator: Emulator,
    pub c: Clients,
}

impl World {
    pub async fn start(
        ledger: &str,
        rows: usize,
        faults: FaultPlan,
        budgets: pb::AttemptBudgets,
    ) -> World {
        let timing = Timing {
            pending: Duration::from_millis(200),
            running: Duration::from_millis(300),
        };
        World::start_with(ledger, rows, faults, budgets, timing).await
    }

    /// [`World::start`] with the emulator's batches taking `timing`.
    pub async fn start_with(
        ledger: &str,
        rows: usize,
        faults: FaultPlan,
        budgets: pb::AttemptBudgets,
        timing: Timing,
    ) -> World {
        World::start_configured(ledger, rows, faults, budgets, timing, |_| {}).await
    }

    /// [`World::start_with`] with `server` applied to tally's flags.
    pub async fn start_configured(
        ledger: &str,
        rows: usize,
        faults: FaultPlan,
        budgets: pb::AttemptBudgets,
        timing: Timing,
        server: impl FnOnce(&mut ServeArgs),
    ) -> World {
        let policy = test_policy("gemini-2.5-flash", budgets);
        World::start_policy(ledger, rows, faults, timing, policy, server).await
    }

    /// The world with its ledger under `policy`.
    pub async fn start_policy(
        ledger: &str,
        rows: usize,
        faults: FaultPlan,
        timing: Timing,
        policy: pb::LedgerPolicy,
        server: impl FnOnce(&mut ServeArgs),
    ) -> World {
        let stack = start_server_with(100, server).await;
        let mut target = WebhookTarget::new(stack.hook.clone(), SECRET);
        target.duplicate = true;
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_key: API_KEY.into(),
                faults,
                timing,
                webhook: Some(target),
                seed: 11,
                ..EmulatorConfig::default()
            },
        )
        .await
        .expect("emulator starts");
        let c = tally_client::connect(&stack.grpc, None).expect("connect");
        create_ledger_with(&c, ledger, policy).await;
        register_prompt(&c).await;
        if rows > 0 {
            enroll_documents(&c, ledger, "row-", rows, "").await;
        }
        World { stack, emulator, c }
    }

    /// A worker on `ledger` against this world's tally and emulator.
    pub fn worker(&self, ledger: &str, name: &str, extra: &[&str]) -> Child {
        spawn_worker(
            &self.stack.grpc,
            &self.emulator.base_url(),
            ledger,
            name,
            extra,
        )
    }

    pub async fn stop(self) {
        self.emulator.shutdown().await;
        self.stack.server.stop().await.expect("server stops");
    }
}

/// The first open job of `owner` that is at the provider (SUBMITTED or
/// RUNNING), waited for (a minute at most): a worker killed then leaves a
/// submitted, unreconciled job.
pub async fn submitted_job_of(c: &Clients, ledger: &str, owner: &str) -> pb::Job {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = list_jobs(c, ledger).await;
        if let Some(j) = jobs.iter().find(|j| {
            j.owner == owner
                && j.end_time.is_none()
                && matches!(j.state(), pb::JobState::Submitted | pb::JobState::Running)
        }) {
            return j.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{owner} never had a submitted job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (a minute at most) for a worker started with `--failpoint
/// point` to die there.
pub async fn dies_at(mut worker: Child, point: &str) {
    let status = tokio::time::timeout(Duration::from_secs(60), worker.wait())
        .await
        .expect("the worker reaches its failpoint within 60s")
        .expect("the worker reaped");
    assert!(!status.success(), "the worker died at {point}: {status:?}");
}

/// Waits (five minutes at most) for a worker that must exit 0. The bound
/// only guards against a hang (a worker that never exits fails the test,
/// and is killed): the longest of these runs takes about a minute alone,
/// more on a loaded CI machine.
pub async fn exits_ok(mut worker: Child, what: &str) {
    let Ok(status) = tokio::time::timeout(Duration::from_secs(300), worker.wait()).await else {
        let _ = worker.start_kill();
        panic!("{what} finishes within 300s");
    };
    let status = status.expect("worker reaped");
    assert!(status.success(), "{what} exits 0: {status:?}");
}

/// The first job made.
pub fn first_job(jobs: &[pb::Job]) -> &pb::Job {
    jobs.iter()
        .min_by_key(|j| j.create_time.as_ref().map(|t| (t.seconds, t.nanos)))
        .expect("a job")
}

/// Every batch the provider made is recorded on a job: none was made
/// behind tally's back (and paid for with nothing to show), but for the
/// one-request probes a search makes as witnesses (their request's key is
/// `tally-probe`). Answers how many batches jobs record.
pub fn assert_no_orphan_batch(jobs: &[pb::Job], stats: &gemini_emulator::Stats) -> usize {
    assert_batches_recorded(
        jobs,
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
    )
}

/// [`assert_no_orphan_batch`] from a provider's counts: `created` batches,
/// `probes` of them one-request probes.
pub fn assert_batches_recorded(jobs: &[pb::Job], created: u64, probes: usize) -> usize {
    let recorded: std::collections::HashSet<&str> = jobs
        .iter()
        .map(|j| j.batch.as_str())
        .filter(|b| !b.is_empty())
        .collect();
    assert_eq!(
        recorded.len() as u64 + probes as u64,
        created,
        "every batch made is recorded on a job ({probes} probes): {recorded:?}"
    );
    recorded.len()
}

/// The key of a probe batch's one request.
pub const PROBE_KEY: &str = "tally-probe";

/// Polls `check` every 100 ms until it holds; fails naming `what` after
/// `within`.
pub async fn until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The summary of `ledgers/{ledger}`.
pub async fn summary(c: &Clients, ledger: &str) -> pb::LedgerSummary {
    c.ledgers
        .clone()
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            ..Default::default()
        })
        .await
        .expect("summary")
        .into_inner()
}

/// Resumes `ledgers/{ledger}`.
pub async fn resume(c: &Clients, ledger: &str) {
    c.ledgers
        .clone()
        .resume_ledger(pb::ResumeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            etag: String::new(),
        })
        .await
        .expect("resume");
}

/// A worker running in this process (so tests can stop it cleanly).
pub struct InProcess {
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<Result<tally_worker::RunReport, tally_worker::WorkerError>>,
}

impl World {
    /// A worker on `ledger` run in this process, with `extra` flags.
    pub fn worker_in_process(&self, ledger: &str, name: &str, extra: &[&str]) -> InProcess {
        let args = worker_args(
            &self.stack.grpc,
            &self.emulator.base_url(),
            ledger,
            name,
            extra,
        );
        // In-process workers log where their subprocess siblings do (to
        // stderr, at WORKER_LOG) when it is set; the test process installs
        // no subscriber otherwise.
        if let Ok(filter) = std::env::var("WORKER_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let handle = tokio::spawn(tally_worker::run_until(
            args,
            tally_worker::ApiKey::new(API_KEY.into()),
            async move { stopped.cancelled().await },
        ));
        InProcess { stop, handle }
    }
}

impl InProcess {
    /// Whether the worker's task has ended (it should not before `stop`).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops the worker; it must stop cleanly.
    pub async fn stop(self) -> tally_worker::RunReport {
        self.stop.cancel();
        self.handle
            .await
            .unwrap()
            .expect("the worker stops cleanly")
    }
}

/// How one kind of row in a fault run must end: its key prefix, how many
/// there are, and the status and rule each must end with.
pub struct Expected<'a> {
    pub prefix: &'a str,
    pub count: usize,
    pub status: pb::RowStatus,
    pub rule: &'a str,
}

/// Checks that every row of each kind ended as it must; answers the count
/// of rows by kind, status and rule (for the run's summary).
pub fn check_kinds(
    rows: &[pb::Row],
    kinds: &[Expected<'_>],
) -> std::collections::BTreeMap<(String, String, String), usize> {
    let mut by_status = std::collections::BTreeMap::new();
    let mut wrong = Vec::new();
    for k in kinds {
        let mine: Vec<&pb::Row> = rows
            .iter()
            .filter(|r| r.key.starts_with(k.prefix))
            .collect();
        assert_eq!(mine.len(), k.count, "{}", k.prefix);
        for r in mine {
            if r.status() != k.status || r.rule != k.rule {
                wrong.push(format!("{} {:?} ({})", r.key, r.status(), r.rule));
            }
            *by_status
                .entry((
                    k.prefix.to_owned(),
                    format!("{:?}", r.status()),
                    r.rule.clone(),
                ))
                .or_default() += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "every row ends as its fault says; by kind, status and rule: {by_status:?}; wrong: {wrong:?}"
    );
    by_status
}

/// Waits (up to `within`) for `ledger` to pause and its jobs out to close;
/// its summary then, and the pause.
pub async fn paused(
    w: &World,
    ledger: &str,
    within: Duration,
) -> (pb::LedgerSummary, pb::LedgerPause) {
    until(within, "the ledger pauses", || async {
        summary(&w.c, ledger).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    until(Duration::from_secs(30), "the jobs out close", || async {
        summary(&w.c, ledger).await.active_jobs == 0
    })
    .await;
    let s = summary(&w.c, ledger).await;
    let pause = s.pause.clone().expect("a pause");
    (s, pause)
}

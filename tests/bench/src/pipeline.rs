//! The whole pipeline (issue 35, item 4): the server under test, `workers`
//! tally-workers (in this process) and one provider's emulator (Gemini,
//! OpenAI or Anthropic) answering every batch at once (zero latency, no
//! faults), over a ledger of `rows` rows on a prompt, from the first claim
//! until every worker has exited idle (every row SUCCEEDED). Against it, the
//! raw claim+report loop (batches of 500, as many workers) over the same
//! number of rows, until none is left.
//!
//! What it measures is the control plane's share of a batch night: the
//! worker's rendering, JSONL, upload, create, poll, download, parsing and
//! reports, and the server's claims and settlements, with the provider's
//! own time taken out.

use crate::grpc::{self, Client};
use crate::raw;
use crate::workload;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

const API_KEY: &str = "bench-key";
/// Rows per claim and per provider batch.
const BATCH: i32 = 500;

pub struct Measured {
    pub rows: u64,
    pub tally: Duration,
    pub raw: Duration,
}

/// The provider a pipeline phase runs its rows at, through its emulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    Gemini,
    Openai,
    Anthropic,
}

impl Provider {
    /// The `--provider` the worker takes.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Gemini => "gemini",
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The ledger's model: one each emulator takes batches for.
    pub fn model(self) -> &'static str {
        match self {
            Provider::Gemini => "gemini-2.5-flash",
            Provider::Openai => "gpt-4o-mini",
            Provider::Anthropic => "claude-haiku-4-5",
        }
    }
}

/// A running emulator of one provider, every batch answered at once.
enum Emulator {
    Gemini(gemini_emulator::Emulator),
    Openai(openai_emulator::Emulator),
    Anthropic(anthropic_emulator::Emulator),
}

impl Emulator {
    async fn start(provider: Provider) -> anyhow::Result<Emulator> {
        let addr = "127.0.0.1:0".parse()?;
        let key = vec![API_KEY.to_owned()];
        Ok(match provider {
            Provider::Gemini => Emulator::Gemini(
                gemini_emulator::Emulator::start(
                    addr,
                    gemini_emulator::EmulatorConfig {
                        api_key: API_KEY.into(),
                        timing: gemini_emulator::Timing {
                            pending: Duration::ZERO,
                            running: Duration::ZERO,
                        },
                        ..Default::default()
                    },
                )
                .await?,
            ),
            Provider::Openai => Emulator::Openai(
                openai_emulator::Emulator::start(
                    addr,
                    openai_emulator::EmulatorConfig {
                        api_keys: key,
                        timing: openai_emulator::Timing {
                            validating: Duration::ZERO,
                            in_progress: Duration::ZERO,
                            finalizing: Duration::ZERO,
                            cancelling: Duration::ZERO,
                        },
                        ..Default::default()
                    },
                )
                .await?,
            ),
            Provider::Anthropic => Emulator::Anthropic(
                anthropic_emulator::Emulator::start(
                    addr,
                    anthropic_emulator::EmulatorConfig {
                        api_keys: key,
                        timing: anthropic_emulator::Timing {
                            in_progress: Duration::ZERO,
                            canceling: Duration::ZERO,
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                )
                .await?,
            ),
        })
    }

    /// The base URL as the worker's `--{provider}-base-url` takes it
    /// (OpenAI's with its `/v1`, as the SDK's).
    fn worker_url(&self) -> String {
        match self {
            Emulator::Gemini(e) => e.base_url(),
            Emulator::Openai(e) => format!("{}/v1", e.base_url()),
            Emulator::Anthropic(e) => e.base_url(),
        }
    }

    async fn shutdown(self) {
        match self {
            Emulator::Gemini(e) => e.shutdown().await,
            Emulator::Openai(e) => e.shutdown().await,
            Emulator::Anthropic(e) => e.shutdown().await,
        }
    }
}

pub async fn run(
    addr: &str,
    pool: &PgPool,
    provider: Provider,
    rows: u64,
    workers: usize,
    clients: usize,
) -> anyhow::Result<Measured> {
    let ledger = format!("pipeline-{}-{workers}", provider.name());
    let keys = Arc::new(workload::keys(&ledger, 0..rows));

    raw::setup(pool, &ledger).await?;
    raw::enroll(pool, &ledger, keys.clone(), clients, 1000).await?;
    let mut client = grpc::connect(addr).await?;
    prepare(&mut client, &ledger, provider.model(), workers).await?;
    let prompt = pb::PromptRef {
        name: "summarize".into(),
        version: "v1".into(),
    };
    grpc::enroll_with(addr, &ledger, keys, clients, 1000, Some(prompt)).await?;
    // Both sides in steady state: without statistics of the rows just
    // enrolled, the planner reads the whole table for a report's keys until
    // autovacuum analyzes it (the first half of a run, at 100,000 rows).
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    crate::checkpoint(pool).await;

    let (_, raw_t) = raw::claim_report(
        pool,
        &ledger,
        workers,
        i64::from(BATCH),
        Duration::from_secs(3600),
    )
    .await?;
    let emulator = Emulator::start(provider).await?;
    let start = Instant::now();
    let mut running = Vec::new();
    for w in 0..workers {
        let args = worker_args(addr, provider, &emulator.worker_url(), &ledger, w)?;
        running.push(tokio::spawn(tally_worker::run_until(
            args,
            tally_worker::ApiKey::new(API_KEY.into()),
            std::future::pending(),
        )));
    }
    for r in running {
        r.await?
            .map_err(|e| anyhow::anyhow!("a worker failed: {e}"))?;
    }
    let tally = start.elapsed();
    emulator.shutdown().await;

    grpc::all_succeeded(&mut client, &ledger, rows).await?;
    Ok(Measured {
        rows,
        tally,
        raw: raw_t,
    })
}

/// The ledger (as many open jobs as four a worker) and its prompt.
async fn prepare(
    client: &mut Client,
    ledger: &str,
    model: &str,
    workers: usize,
) -> anyhow::Result<()> {
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: ledger.into(),
            policy: Some(pb::LedgerPolicy {
                model: model.into(),
                max_active_jobs: i32::try_from(4 * workers)?,
                ..Default::default()
            }),
        })
        .await?;
    grpc::register_summarize(client).await
}

fn worker_args(
    server: &str,
    provider: Provider,
    base_url: &str,
    ledger: &str,
    n: usize,
) -> anyhow::Result<tally_worker::WorkerArgs> {
    let batch = BATCH.to_string();
    let extra = [
        "--claim-size",
        &batch,
        "--max-rows-per-batch",
        &batch,
        // The emulator answers at once: the worker's own poll and
        // heartbeat pace the run, as a provider's latency would.
        "--poll-interval",
        "50ms",
        "--heartbeat-interval",
        "5s",
    ];
    idle_worker(
        server,
        provider,
        base_url,
        ledger,
        &format!("bench-{n}"),
        &extra,
    )
}

/// A worker on `ledger` at `provider`'s emulator that exits once the ledger
/// is idle, with `extra` flags.
pub fn idle_worker(
    server: &str,
    provider: Provider,
    base_url: &str,
    ledger: &str,
    name: &str,
    extra: &[&str],
) -> anyhow::Result<tally_worker::WorkerArgs> {
    use clap::Parser as _;
    let url_flag = format!("--{}-base-url", provider.name());
    let argv = [
        "tally-worker",
        "--server",
        server,
        "--ledger",
        ledger,
        "--provider",
        provider.name(),
        &url_flag,
        base_url,
        "--worker-name",
        name,
        "--exit-when-idle",
    ];
    let argv = argv.iter().chain(extra);
    Ok(tally_worker::WorkerArgs::try_parse_from(argv)?)
}

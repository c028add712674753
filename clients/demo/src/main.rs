//! tally-demo: the whole product in one command. It starts tally on a
//! private PostgreSQL (kept under --data-dir between runs), the Gemini
//! emulator (or, with `--provider openai`, the OpenAI one) with faults
//! mixed in, and one worker; enrolls a generated dataset; shows live
//! progress; and ends with the ledger summary.
//!
//! Layout: `dataset` the rows it enrolls, `provider` the emulator it
//! starts, `report` the summary it ends with.
//!
//! Run it twice: the second run finds every row already enrolled and
//! terminal, so it enrolls nothing and sends nothing to the provider.

mod dataset;
mod provider;
mod report;

use anyhow::{Context, Result};
use base64::Engine;
use clap::Parser;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tonic::Code;
use tonic::transport::Channel;

#[derive(Parser)]
#[command(
    name = "tally-demo",
    version = tally_version::LONG,
    about = "tally end to end: server, emulator, worker"
)]
struct Args {
    /// Home of the demo's private PostgreSQL, kept between runs.
    #[arg(long, default_value = "./.tally-demo")]
    data_dir: PathBuf,
    /// An existing PostgreSQL to use instead of the private one.
    #[arg(long)]
    database_url: Option<String>,
    /// The provider the rows run at (emulated in-process).
    #[arg(long, value_enum, default_value = "gemini")]
    provider: provider::Which,
    /// The ledger the demo fills (default `demo`, or `demo-openai` /
    /// `demo-anthropic` with `--provider openai` / `anthropic`).
    #[arg(long)]
    ledger: Option<String>,
    /// Most rows in one provider batch (smaller: more jobs).
    #[arg(long, default_value_t = 40)]
    batch_rows: usize,
    /// Where tally serves /metrics (port 0: any free port; printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_addr: std::net::SocketAddr,
    /// Where the worker serves /metrics, /livez and /healthz (off unless
    /// set).
    #[arg(long)]
    worker_metrics_addr: Option<std::net::SocketAddr>,
    /// Export traces over OTLP/gRPC to this collector (server and worker:
    /// one trace per job).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let traces = tally_telemetry::traces::init(tally_telemetry::traces::Logs {
        json: false,
        filter: tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "error".into()),
        otlp_endpoint: args.otlp_endpoint.clone(),
        service: "tally-demo",
    })
    .map_err(anyhow::Error::msg)?;
    let result = run(args).await;
    traces.shutdown().await;
    result
}

async fn run(args: Args) -> Result<()> {
    println!(
        "starting tally (private PostgreSQL under {})…",
        args.data_dir.display()
    );
    let secret = webhook_secret();
    let server = start_server(&args, &secret).await?;
    let http = server
        .http_addr
        .context("the webhook listener did not start")?;
    println!("tally metrics on http://{}/metrics", server.metrics_addr);

    let emulator = provider::Emulated::start(args.provider, http, &secret).await?;
    println!("{}", emulator.describe());

    let grpc = format!("http://{}", server.grpc_addr);
    let mut ledgers = LedgerServiceClient::connect(grpc.clone()).await?;
    let ledger_id = args
        .ledger
        .clone()
        .unwrap_or_else(|| args.provider.ledger().to_owned());
    let ledger = format!("ledgers/{ledger_id}");
    prepare(&mut ledgers, &ledger_id, args.provider.model()).await?;
    let enrolled = enroll(&mut ledgers, &ledger).await?;
    println!(
        "enrolled {} new rows ({} already present) into {ledger}",
        enrolled.enrolled, enrolled.already_present
    );

    let batch_rows = args.batch_rows.to_string();
    let mut argv: Vec<String> = [
        "tally-worker",
        "--server",
        &grpc,
        "--ledger",
        &ledger_id,
        "--claim-size",
        &batch_rows,
        "--max-rows-per-batch",
        &batch_rows,
        "--poll-interval",
        "2s",
        "--heartbeat-interval",
        "10s",
        "--worker-name",
        "demo-worker",
        "--exit-when-idle",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(emulator.worker_flags());
    let worker_args = tally_worker::WorkerArgs::try_parse_from(argv)?;
    let key = tally_worker::ApiKey::new(emulator.api_key());
    let listener = match args.worker_metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--worker-metrics-addr {addr}"))?;
            println!("worker metrics on http://{}/metrics", l.local_addr()?);
            Some(l)
        }
        None => None,
    };
    let mut worker = tokio::spawn(tally_worker::run_serving(
        worker_args,
        key,
        std::future::pending::<()>(),
        listener,
    ));
    let finished = loop {
        tokio::select! {
            done = &mut worker => break done,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                progress(&mut ledgers, &ledger).await;
            }
        }
    };
    progress(&mut ledgers, &ledger).await;
    println!();
    let run = finished
        .context("the worker task panicked")?
        .context("the worker stopped with an error")?;
    tracing::info!(?run, "worker done");

    let summary = ledgers
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: ledger.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let succeeded = rows(&mut ledgers, &ledger, pb::RowStatus::Succeeded).await?;
    let permanent = rows(&mut ledgers, &ledger, pb::RowStatus::Permanent).await?;
    let blocked = rows(&mut ledgers, &ledger, pb::RowStatus::Blocked).await?;
    let provider = emulator.counts();
    print!(
        "{}",
        report::render(&report::Outcome {
            summary: &summary,
            succeeded: &succeeded,
            permanent: &permanent,
            blocked: &blocked,
            provider: &provider,
            enrolled_now: enrolled.enrolled,
            already_present: enrolled.already_present,
        })
    );
    if enrolled.enrolled == 0 && provider.batches_created == 0 {
        println!(
            "\nNothing was enrolled or sent to the provider this time: every row was already enrolled and final."
        );
    } else {
        println!(
            "\nRun the same command again: every row is already enrolled and final, so nothing is enrolled or sent again."
        );
    }
    // The programs by name: on PATH from the wheel, `cargo run --release
    // -p NAME --` (or target/release/NAME) from a checkout.
    let database = match &args.database_url {
        Some(url) => format!("--database-url {url}"),
        None => format!("--data-dir {}", args.data_dir.display()),
    };
    println!(
        "To look around, serve the demo's database and ask tallyctl (from a checkout: cargo run --release -p tally-server -- …):\n  tally-server --auth disabled {database}\n  tallyctl rows {ledger_id} --status permanent"
    );
    emulator.shutdown().await;
    server.stop().await?;
    Ok(())
}

/// A fresh Standard Webhooks secret for this run (server and emulator).
fn webhook_secret() -> String {
    let bytes: [u8; 24] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

async fn start_server(args: &Args, secret: &str) -> Result<tally_server::startup::server::Running> {
    let data_dir = args.data_dir.display().to_string();
    let metrics_addr = args.metrics_addr.to_string();
    let mut argv = vec![
        "tally-server",
        "--auth",
        "disabled",
        "--grpc-addr",
        "127.0.0.1:0",
        "--metrics-addr",
        &metrics_addr,
        "--http-addr",
        "127.0.0.1:0",
        "--webhook-secret",
        secret,
        "--data-dir",
        &data_dir,
        "--sweep-interval",
        "1s",
    ];
    if let Some(url) = &args.database_url {
        argv.extend(["--database-url", url]);
    }
    let cli = tally_server::config::Cli::try_parse_from(argv)?;
    tally_server::startup::server::start(cli.serve)
        .await
        .context("starting tally")
}

/// The ledger and its prompt; both may exist from an earlier run.
async fn prepare(client: &mut LedgerServiceClient<Channel>, id: &str, model: &str) -> Result<()> {
    let secs = |s: i64, ms: i32| prost_types::Duration {
        seconds: s,
        nanos: ms * 1_000_000,
    };
    let created = client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.to_string(),
            policy: Some(pb::LedgerPolicy {
                model: model.into(),
                budgets: Some(pb::AttemptBudgets {
                    provider: 3,
                    content: 1,
                    infra: 3,
                }),
                lease: Some(secs(60, 0)),
                backoff: Some(pb::Backoff {
                    initial: Some(secs(0, 500)),
                    max: Some(secs(2, 0)),
                    multiplier: 2.0,
                    jitter: 0.1,
                }),
                max_active_jobs: 3,
                ..Default::default()
            }),
        })
        .await;
    ok_or_exists(created.map(|_| ()))?;
    let registered = client
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: dataset::PROMPT_ID.into(),
            version: dataset::PROMPT_VERSION.into(),
            template: dataset::TEMPLATE.into(),
            response_schema: dataset::SCHEMA.into(),
            system_instruction: String::new(),
            ..Default::default()
        })
        .await;
    ok_or_exists(registered.map(|_| ()))
}

fn ok_or_exists(r: Result<(), tonic::Status>) -> Result<()> {
    match r {
        Err(s) if s.code() != Code::AlreadyExists => Err(s.into()),
        _ => Ok(()),
    }
}

async fn enroll(
    client: &mut LedgerServiceClient<Channel>,
    ledger: &str,
) -> Result<pb::EnrollRowsResponse> {
    let rows = dataset::rows()
        .into_iter()
        .map(|r| pb::RowInput {
            key: r.key,
            payload: r.payload,
            depends_on: r.depends_on,
            prompt: Some(pb::PromptRef {
                name: dataset::PROMPT_ID.into(),
                version: dataset::PROMPT_VERSION.into(),
            }),
            model: String::new(),
            ..Default::default()
        })
        .collect();
    let answer = client
        .enroll_rows(pb::EnrollRowsRequest {
            parent: ledger.to_string(),
            rows,
        })
        .await?
        .into_inner();
    anyhow::ensure!(
        answer.conflicts == 0,
        "{} rows conflict with what {ledger} already holds (an older demo dataset?); use another --ledger",
        answer.conflicts
    );
    Ok(answer)
}

/// One progress line (rewritten in place on a terminal).
async fn progress(client: &mut LedgerServiceClient<Channel>, ledger: &str) {
    let Ok(s) = client
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: ledger.to_string(),
            ..Default::default()
        })
        .await
    else {
        return;
    };
    let s = s.into_inner();
    let line = format!("{} active_jobs={}", s.summary_line, s.active_jobs);
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let _ = write!(out, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Every row with `status` (ListRows, all pages).
async fn rows(
    client: &mut LedgerServiceClient<Channel>,
    ledger: &str,
    status: pb::RowStatus,
) -> Result<Vec<pb::Row>> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_rows(pb::ListRowsRequest {
                parent: ledger.to_string(),
                filter: Some(pb::RowFilter {
                    statuses: vec![status as i32],
                    ..Default::default()
                }),
                page_size: 1000,
                page_token,
                view: pb::RowView::Basic as i32,
            })
            .await?
            .into_inner();
        out.extend(page.rows);
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

//! The `gemini-emulator` binary: flags and environment to an
//! [`EmulatorConfig`], tracing, and a clean stop on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use emulator_kit::startup;
use gemini_emulator::{
    Emulator, EmulatorConfig, FaultPlan, Models, Timing, WebhookPayload, WebhookTarget,
};

/// A local stand-in for the Gemini Batch API with deterministic fault injection.
#[derive(Debug, Parser)]
#[command(name = "gemini-emulator", version = tally_version::LONG)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "GEMINI_EMULATOR_ADDR", default_value = "127.0.0.1:8090")]
    addr: SocketAddr,
    /// The API key clients must send (x-goog-api-key header or ?key=).
    #[arg(
        long,
        env = "GEMINI_API_KEY",
        default_value = "emulator-key",
        hide_env_values = true
    )]
    api_key: String,
    /// A fault plan as JSON (see the crate docs for the format).
    #[arg(long, env = "GEMINI_EMULATOR_FAULTS")]
    faults: Option<PathBuf>,
    /// How long a batch stays PENDING (e.g. 200ms, 5s).
    #[arg(long, env = "GEMINI_EMULATOR_PENDING", default_value = "200ms", value_parser = humantime::parse_duration)]
    pending: Duration,
    /// How long a batch stays RUNNING before it finishes.
    #[arg(long, env = "GEMINI_EMULATOR_RUNNING", default_value = "500ms", value_parser = humantime::parse_duration)]
    running: Duration,
    /// Seed of the output shuffle.
    #[arg(long, env = "GEMINI_EMULATOR_SEED", default_value_t = 0)]
    seed: u64,
    /// Where to POST signed batch webhooks (needs --webhook-secret).
    #[arg(long, env = "GEMINI_EMULATOR_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// The webhook signing secret, whsec_<base64>.
    #[arg(long, env = "GEMINI_EMULATOR_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// Deliver every webhook event twice (same webhook-id).
    #[arg(long, env = "GEMINI_EMULATOR_WEBHOOK_DUPLICATE")]
    webhook_duplicate: bool,
    /// Deliver every webhook event once more this long after the first
    /// time (out of order with later events), e.g. 5s.
    #[arg(long, env = "GEMINI_EMULATOR_WEBHOOK_REDELIVER_AFTER", value_parser = humantime::parse_duration)]
    webhook_redeliver_after: Option<Duration>,
    /// What batch events carry: `documented` (as the provider documents
    /// them: only `batch.succeeded` names the responses file) or `rich`
    /// (every terminal event names its file and error).
    #[arg(long, env = "GEMINI_EMULATOR_WEBHOOK_PAYLOAD", default_value = "documented", value_parser = WebhookPayload::parse)]
    webhook_payload: WebhookPayload,
    /// The generation models batches may be made for, comma-separated, or
    /// `*` for any; default the Gemini models that take batches. Any other
    /// answers the provider's 404.
    #[arg(long, env = "GEMINI_EMULATOR_MODELS", value_parser = Models::parse)]
    models: Option<Models>,
    /// The project's file storage quota in bytes (uploads past it answer
    /// 429); default 20 GiB, the documented limit.
    #[arg(long, env = "GEMINI_EMULATOR_FILE_STORAGE_BYTES", default_value_t = gemini_emulator::config::FILE_STORAGE_BYTES)]
    file_storage_bytes: u64,
    #[command(flatten)]
    online: startup::OnlineArgs,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "GEMINI_EMULATOR_LOG_JSON")]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    startup::init_tracing(args.log_json);
    let faults = startup::fault_plan(args.faults.as_deref(), FaultPlan::from_json)?;
    let webhook = startup::webhook_target(args.webhook_url, args.webhook_secret)?.map(|target| {
        WebhookTarget {
            duplicate: args.webhook_duplicate,
            redeliver_after: args.webhook_redeliver_after,
            payload: args.webhook_payload,
            ..target
        }
    });
    let config = EmulatorConfig {
        api_key: args.api_key,
        faults,
        timing: Timing {
            pending: args.pending,
            running: args.running,
        },
        webhook,
        seed: args.seed,
        models: args.models.unwrap_or_default(),
        file_storage_bytes: args.file_storage_bytes,
        online: args.online.config(),
    };
    let emulator = Emulator::start(args.addr, config)
        .await
        .with_context(|| format!("starting on {}", args.addr))?;
    emulator.serve_until_signal().await;
    Ok(())
}

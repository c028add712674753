//! The `openai-emulator` binary: flags and environment to an
//! [`EmulatorConfig`], tracing, and a clean stop on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use emulator_kit::startup;
use openai_emulator::{
    DEFAULT_API_KEY, Emulator, EmulatorConfig, FaultPlan, ListOrder, Models, Timing, WebhookTarget,
};

/// A local stand-in for the OpenAI Files and Batch API with deterministic fault injection.
#[derive(Debug, Parser)]
#[command(name = "openai-emulator", version = tally_version::LONG)]
struct Args {
    /// Address to listen on (port 0 picks one; the `ready` log line names it).
    #[arg(long, env = "OPENAI_EMULATOR_LISTEN", default_value = "127.0.0.1:8091")]
    listen: SocketAddr,
    /// An API key clients may send as `Authorization: Bearer KEY` (repeatable).
    #[arg(long = "api-key", env = "OPENAI_API_KEY", default_value = DEFAULT_API_KEY, hide_env_values = true, value_delimiter = ',')]
    api_keys: Vec<String>,
    /// A fault plan as JSON (see the README).
    #[arg(long, env = "OPENAI_EMULATOR_FAULTS")]
    faults: Option<PathBuf>,
    /// How long a batch stays `validating` (e.g. 200ms).
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    validating: Duration,
    /// How long a batch stays `in_progress`.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    in_progress: Duration,
    /// How long a batch stays `finalizing`.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    finalizing: Duration,
    /// How long a batch stays `cancelling`.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    cancelling: Duration,
    /// Seed of the answers' text.
    #[arg(long, env = "OPENAI_EMULATOR_SEED", default_value_t = 0)]
    seed: u64,
    /// Models batch lines may name, comma-separated, or `*` for any.
    #[arg(long, env = "OPENAI_EMULATOR_MODELS", value_parser = Models::parse)]
    models: Option<Models>,
    /// Where to POST signed `batch.*` webhooks (needs --webhook-secret).
    #[arg(long, env = "OPENAI_EMULATOR_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// The webhook signing secret, whsec_<base64>.
    #[arg(long, env = "OPENAI_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// Deliver every webhook event twice (same webhook-id).
    #[arg(long)]
    webhook_duplicate: bool,
    /// Deliver every webhook event once more this long after the first time.
    #[arg(long, value_parser = humantime::parse_duration)]
    webhook_redeliver_after: Option<Duration>,
    /// Batches the account already holds at start (completed, another
    /// client's), for searches through a long list.
    #[arg(long, env = "OPENAI_EMULATOR_SEED_BATCHES", default_value_t = 0)]
    seed_batches: u64,
    #[command(flatten)]
    online: startup::OnlineArgs,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "OPENAI_EMULATOR_LOG_JSON")]
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
            ..target
        }
    });
    let config = EmulatorConfig {
        api_keys: args.api_keys,
        faults,
        timing: Timing {
            validating: args.validating,
            in_progress: args.in_progress,
            finalizing: args.finalizing,
            cancelling: args.cancelling,
        },
        webhook,
        seed: args.seed,
        models: args
            .models
            .unwrap_or_else(openai_emulator::config::known_models),
        list_order: ListOrder::default(),
        online: args.online.config(),
        seed_batches: args.seed_batches,
    };
    let emulator = Emulator::start(args.listen, config)
        .await
        .with_context(|| format!("starting on {}", args.listen))?;
    emulator.serve_until_signal().await;
    Ok(())
}

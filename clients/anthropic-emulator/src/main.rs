//! The `anthropic-emulator` binary: flags and environment to an
//! [`EmulatorConfig`], tracing, and a clean stop on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anthropic_emulator::{DEFAULT_API_KEY, Emulator, EmulatorConfig, FaultPlan, Models, Timing};
use anyhow::Context;
use clap::Parser;
use emulator_kit::startup;

/// A local stand-in for the Anthropic Message Batches API with deterministic fault injection.
#[derive(Debug, Parser)]
#[command(name = "anthropic-emulator", version = tally_version::LONG)]
struct Args {
    /// Address to listen on (port 0 picks one; the `ready` log line names it).
    #[arg(
        long,
        env = "ANTHROPIC_EMULATOR_LISTEN",
        default_value = "127.0.0.1:8092"
    )]
    listen: SocketAddr,
    /// An API key clients may send as `x-api-key` or a bearer token (repeatable).
    #[arg(long = "api-key", env = "ANTHROPIC_API_KEY", default_value = DEFAULT_API_KEY, hide_env_values = true, value_delimiter = ',')]
    api_keys: Vec<String>,
    /// A fault plan as JSON (see the README).
    #[arg(long, env = "ANTHROPIC_EMULATOR_FAULTS")]
    faults: Option<PathBuf>,
    /// How long a batch stays `in_progress` (e.g. 500ms).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    in_progress: Duration,
    /// How long a canceled batch stays `canceling`.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    canceling: Duration,
    /// A batch still in progress this long after its creation expires.
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    expires_after: Duration,
    /// An ended batch's results stay available this long after its
    /// creation, then it is archived.
    #[arg(long, default_value = "29d", value_parser = humantime::parse_duration)]
    results_kept: Duration,
    /// Seed of the answers' text and the results' order.
    #[arg(long, env = "ANTHROPIC_EMULATOR_SEED", default_value_t = 0)]
    seed: u64,
    /// Models requests may name, comma-separated, or `*` for any.
    #[arg(long, env = "ANTHROPIC_EMULATOR_MODELS", default_value = "*", value_parser = Models::parse)]
    models: Models,
    #[command(flatten)]
    online: startup::OnlineArgs,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "ANTHROPIC_EMULATOR_LOG_JSON")]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    startup::init_tracing(args.log_json);
    let faults = startup::fault_plan(args.faults.as_deref(), FaultPlan::from_json)?;
    let config = EmulatorConfig {
        api_keys: args.api_keys,
        faults,
        timing: Timing {
            in_progress: args.in_progress,
            canceling: args.canceling,
            expires_after: args.expires_after,
            results_kept: args.results_kept,
        },
        seed: args.seed,
        models: args.models,
        online: args.online.config(),
    };
    let emulator = Emulator::start(args.listen, config)
        .await
        .with_context(|| format!("starting on {}", args.listen))?;
    emulator.serve_until_signal().await;
    Ok(())
}

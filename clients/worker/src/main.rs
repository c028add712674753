//! The `tally-worker` binary: flags, logging, the provider's API key from
//! `GEMINI_API_KEY` / `OPENAI_API_KEY` or its key file flag, and [`tally_worker::run_until`] until SIGTERM or
//! ctrl-c (exit 0), or until the ledger is idle with `--exit-when-idle`.

use clap::Parser as _;
use tally_telemetry::traces::Logs;
use tally_worker::{WorkerArgs, run_until};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let args = WorkerArgs::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let traces = tally_telemetry::traces::init(Logs {
            json: args.log_format == "json",
            filter,
            otlp_endpoint: args
                .otlp_endpoint
                .as_ref()
                .map(tally_worker::config::UrlArg::to_string_unredacted),
            service: "tally-worker",
        })
        .map_err(anyhow::Error::msg)?;
        let result = run(args).await;
        traces.shutdown().await;
        result
    })
}

async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let args = args.with_secret_files().map_err(anyhow::Error::msg)?;
    let key = args
        .api_key(std::env::var(args.api_key_env()).ok())
        .map_err(anyhow::Error::msg)?;
    let report = run_until(args, key, shutdown_signal()).await?;
    if let Some(e) = &report.cache_estimate {
        // The dry run's answer, for scripts (`jq`) and the Python client.
        println!(
            "{}",
            serde_json::json!({
                "rows": e.rows,
                "hits": e.hits,
                "misses": e.misses,
                "saved_usd": e.saved_usd,
                "later": e.later,
                "elsewhere": e.elsewhere,
            })
        );
        return Ok(());
    }
    tracing::info!(?report, "done");
    Ok(())
}

/// SIGTERM or ctrl-c.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

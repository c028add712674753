use clap::Parser;
use tally_server::config::{Cli, Command, LogFormat, ServeArgs};
use tally_server::startup::server;
use tally_telemetry::traces::{Logs, Tracing};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let traces = init_logs(cli.serve_args())?;
    let result = run(&cli).await;
    traces.shutdown().await;
    result
}

async fn run(cli: &Cli) -> anyhow::Result<()> {
    match &cli.command {
        Some(Command::Migrate(args)) => server::migrate(args).await,
        Some(Command::Token(t)) => {
            let issued = tally_server::edge::auth::tokens::issue_from_args(t, chrono::Utc::now())
                .map_err(anyhow::Error::msg)?;
            println!(
                "token for {} (shown once; tally keeps only its hash):",
                t.name
            );
            println!("  {}", issued.token);
            println!("add this entry to the \"tokens\" list of the tokens file:");
            println!("  {}", issued.line);
            Ok(())
        }
        Some(Command::Health(h)) => match tally_server::startup::health_check::check(h).await {
            Ok(()) => {
                println!("SERVING");
                Ok(())
            }
            Err(why) => {
                eprintln!("not serving: {why}");
                std::process::exit(1)
            }
        },
        Some(Command::Serve(_)) | None => {
            let running = server::start(cli.serve_args().clone()).await?;
            let stop = running.stop_token();
            tokio::spawn(async move {
                wait_for_signal().await;
                stop.cancel();
            });
            running.wait().await
        }
    }
}

fn init_logs(args: &ServeArgs) -> anyhow::Result<Tracing> {
    let filter = EnvFilter::try_from_env("TALLY_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,h2=warn,tower=warn"));
    tally_telemetry::traces::init(Logs {
        json: args.log_format == LogFormat::Json,
        filter,
        otlp_endpoint: args.otlp_endpoint.clone(),
        service: "tally-server",
    })
    .map_err(anyhow::Error::msg)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

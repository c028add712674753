//! Configuration: every flag also reads a `TALLY_*` environment variable.
//! Durations are human-readable (`30s`, `5m`). Read once at start, strictly:
//! a bad value stops the server with a message instead of a guess.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// tally: a control plane for large, unattended LLM batch inference.
#[derive(Debug, Parser)]
#[command(name = "tally-server", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable, colored on a terminal.
    Pretty,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address.
    #[arg(long, env = "TALLY_GRPC_ADDR", default_value = "127.0.0.1:50051")]
    pub grpc_addr: SocketAddr,

    /// HTTP listen address for provider webhooks (`/webhooks/gemini`).
    #[arg(long, env = "TALLY_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,

    /// Prometheus metrics listen address (`/metrics`).
    #[arg(long, env = "TALLY_METRICS_ADDR", default_value = "127.0.0.1:9090")]
    pub metrics_addr: SocketAddr,

    /// PostgreSQL URL. Without one, tally starts a private PostgreSQL under
    /// --data-dir.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// Home of the private PostgreSQL (used only without --database-url).
    #[arg(long, env = "TALLY_DATA_DIR", default_value = "./.tally")]
    pub data_dir: PathBuf,

    /// PostgreSQL bin directory for the private server (searched for when
    /// unset).
    #[arg(long, env = "TALLY_PG_BIN")]
    pub pg_bin: Option<PathBuf>,

    /// Database connections in the pool.
    #[arg(long, env = "TALLY_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,

    /// Log format: pretty or json.
    #[arg(long, env = "TALLY_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,

    /// How often health checks the database.
    #[arg(long, env = "TALLY_HEALTH_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub health_interval: Duration,

    /// How long shutdown waits for in-flight calls before giving up.
    #[arg(long, env = "TALLY_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// How often expired claims are swept (their rows rescued).
    #[arg(long, env = "TALLY_SWEEP_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub sweep_interval: Duration,

    /// How often watch streams look for new events when no notification
    /// woke them (notifications are only a hint).
    #[arg(long, env = "TALLY_WATCH_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub watch_poll_interval: Duration,

    #[command(flatten)]
    pub limits: Limits,
}

/// Request limits (see the README's Security section).
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most rows in one EnrollRows or ReportOutcomes call, and keys in one
    /// ReleaseClaim or RedriveRows call.
    #[arg(long, env = "TALLY_MAX_ROWS_PER_CALL", default_value_t = 10_000)]
    pub max_rows_per_call: usize,

    /// Most rows one ClaimRows may lease.
    #[arg(long, env = "TALLY_MAX_CLAIM_ROWS", default_value_t = 10_000)]
    pub max_claim_rows: i32,

    /// Largest decoded request message, in bytes.
    #[arg(long, env = "TALLY_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rows_per_call: 10_000,
            max_claim_rows: 10_000,
            max_message_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Parses `30s`, `5m`, `1h 30m`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (use forms like 30s, 5m, 1h)"))
}

impl ServeArgs {
    /// Defaults for tests and embedding: every port 0 (the OS picks).
    pub fn for_tests(database_url: String) -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        Self {
            grpc_addr: any,
            http_addr: any,
            metrics_addr: any,
            database_url: Some(database_url),
            data_dir: PathBuf::from("./.tally"),
            pg_bin: None,
            db_max_connections: 8,
            log_format: LogFormat::Pretty,
            health_interval: Duration::from_millis(200),
            shutdown_grace: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(1),
            watch_poll_interval: Duration::from_millis(500),
            limits: Limits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documentation() {
        let cli = Cli::try_parse_from(["tally-server"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.grpc_addr.to_string(), "127.0.0.1:50051");
        assert_eq!(cli.serve.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(cli.serve.metrics_addr.to_string(), "127.0.0.1:9090");
        assert_eq!(cli.serve.data_dir, PathBuf::from("./.tally"));
        assert_eq!(cli.serve.limits.max_rows_per_call, 10_000);
    }

    #[test]
    fn durations_are_human_and_bad_ones_are_refused() {
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
        assert!(Cli::try_parse_from(["tally-server", "--health-interval", "x"]).is_err());
    }

    #[test]
    fn migrate_is_a_subcommand() {
        let cli =
            Cli::try_parse_from(["tally-server", "migrate", "--database-url", "postgres://x"])
                .unwrap();
        assert!(matches!(cli.command, Some(Command::Migrate)));
    }
}

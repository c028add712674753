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

    /// HTTP listen address for provider webhooks (`/webhooks/gemini`),
    /// default 127.0.0.1:8080. The listener runs only when a
    /// --webhook-secret is set; setting this without one is refused.
    #[arg(long, env = "TALLY_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,

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

    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// The webhook listener's address when secrets are set and no
/// --http-addr is.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";

/// Provider webhooks (see docs-webhooks.md).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Webhook signing secret, `whsec_<base64>`; repeat the flag (or
    /// separate with commas in TALLY_WEBHOOK_SECRETS) to accept several at
    /// once while rotating. Without any, no webhook listener runs.
    #[arg(
        long = "webhook-secret",
        env = "TALLY_WEBHOOK_SECRETS",
        value_delimiter = ',',
        hide_env_values = true,
        value_name = "WHSEC"
    )]
    pub secrets: Vec<SecretText>,

    /// How far a webhook's timestamp may be from our clock, either way.
    #[arg(long = "webhook-tolerance", env = "TALLY_WEBHOOK_TOLERANCE", default_value = "5m", value_parser = parse_duration)]
    pub tolerance: Duration,

    /// Largest webhook body accepted, in bytes; larger ones are answered 413.
    #[arg(long = "webhook-max-body-bytes", env = "TALLY_WEBHOOK_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
}

impl Default for WebhookArgs {
    fn default() -> Self {
        Self {
            secrets: Vec::new(),
            tolerance: Duration::from_secs(5 * 60),
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// A secret as given on the command line: never printed, not even by
/// `Debug`, and parsed (with errors that do not quote it) only when the
/// server starts.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(..)")
    }
}

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(SecretText(text.to_string()))
    }
}

impl From<&str> for SecretText {
    fn from(text: &str) -> Self {
        SecretText(text.to_string())
    }
}

/// The webhook listener as configured: where, and the secrets it accepts.
#[derive(Debug, Clone)]
pub struct WebhookListener {
    pub addr: SocketAddr,
    pub secrets: Vec<tally_core::webhook::Secret>,
    pub tolerance: Duration,
    pub max_body_bytes: usize,
}

/// Most that --webhook-max-body-bytes may be.
const MAX_WEBHOOK_BODY: usize = 64 * 1024 * 1024;

impl ServeArgs {
    /// Decides whether the webhook listener runs. It runs exactly when at
    /// least one secret is configured; an --http-addr without a secret is
    /// refused rather than served unauthenticated or silently ignored, and
    /// so is any secret that does not parse (the error names its position,
    /// never its text).
    pub fn webhook_listener(&self) -> Result<Option<WebhookListener>, String> {
        let w = &self.webhook;
        if w.secrets.is_empty() {
            return match self.http_addr {
                Some(addr) => Err(format!(
                    "--http-addr {addr} is set but no --webhook-secret (TALLY_WEBHOOK_SECRETS) is: \
                     refusing to accept unsigned webhooks; set a whsec_ secret or drop --http-addr"
                )),
                None => Ok(None),
            };
        }
        let n = w.secrets.len();
        let secrets = w
            .secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                tally_core::webhook::Secret::parse(&s.0)
                    .map_err(|e| format!("webhook secret {} of {n} is not usable: {e}", i + 1))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if w.tolerance < Duration::from_secs(1) || w.tolerance > Duration::from_secs(3600) {
            return Err("--webhook-tolerance must be between 1s and 1h".into());
        }
        if w.max_body_bytes == 0 || w.max_body_bytes > MAX_WEBHOOK_BODY {
            return Err(format!(
                "--webhook-max-body-bytes must be between 1 and {MAX_WEBHOOK_BODY}"
            ));
        }
        let addr = self
            .http_addr
            .unwrap_or_else(|| DEFAULT_HTTP_ADDR.parse().expect("literal address"));
        Ok(Some(WebhookListener {
            addr,
            secrets,
            tolerance: w.tolerance,
            max_body_bytes: w.max_body_bytes,
        }))
    }
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
            http_addr: None,
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
            webhook: WebhookArgs::default(),
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
        assert_eq!(cli.serve.http_addr, None);
        assert!(cli.serve.webhook_listener().unwrap().is_none());
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

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn the_webhook_listener_runs_only_with_a_secret() {
        let with = Cli::try_parse_from(["tally-server", "--webhook-secret", SECRET]).unwrap();
        let listener = with.serve.webhook_listener().unwrap().unwrap();
        assert_eq!(listener.addr.to_string(), DEFAULT_HTTP_ADDR);
        assert_eq!(listener.secrets.len(), 1);
        assert_eq!(listener.tolerance, Duration::from_secs(300));
        assert_eq!(listener.max_body_bytes, 1024 * 1024);

        let rotating = Cli::try_parse_from([
            "tally-server",
            "--webhook-secret",
            SECRET,
            "--webhook-secret",
            "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
            "--http-addr",
            "0.0.0.0:8081",
        ])
        .unwrap();
        let listener = rotating.serve.webhook_listener().unwrap().unwrap();
        assert_eq!(listener.secrets.len(), 2);
        assert_eq!(listener.addr.to_string(), "0.0.0.0:8081");

        let bare = Cli::try_parse_from(["tally-server", "--http-addr", "0.0.0.0:8081"]).unwrap();
        let err = bare.serve.webhook_listener().unwrap_err();
        assert!(err.contains("no --webhook-secret"), "{err}");
    }

    #[test]
    fn bad_secrets_are_refused_without_being_quoted() {
        let cli = Cli::try_parse_from([
            "tally-server",
            "--webhook-secret",
            SECRET,
            "--webhook-secret",
            "hunter2-not-a-secret",
        ])
        .unwrap();
        let err = cli.serve.webhook_listener().unwrap_err();
        assert!(err.contains("webhook secret 2 of 2"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(!format!("{:?}", cli.serve).contains("hunter2"));
        assert!(!format!("{:?}", cli.serve).contains("MfKQ9r8"));
    }

    #[test]
    fn migrate_is_a_subcommand() {
        let cli =
            Cli::try_parse_from(["tally-server", "migrate", "--database-url", "postgres://x"])
                .unwrap();
        assert!(matches!(cli.command, Some(Command::Migrate)));
    }
}

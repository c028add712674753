//! Configuration: every flag also reads a `TALLY_*` environment variable.
//! Durations are human-readable (`30s`, `5m`). Read once at start, strictly:
//! a bad value stops the server with a message instead of a guess.

pub mod health;
pub mod roles;

use clap::{Args, Parser, Subcommand, ValueEnum};
use roles::Role;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tally_core::webhook::Secret;

/// tally: a control plane for large, unattended LLM batch inference.
///
/// `tally-server [FLAGS]` serves; `tally-server migrate [FLAGS]` applies
/// migrations and exits; `tally-server token …` issues a bearer token;
/// `tally-server health` asks a running server whether it is SERVING.
#[derive(Debug, Parser)]
#[command(
    name = "tally-server",
    version = tally_version::LONG,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl Cli {
    /// The server flags, whether given before no subcommand or after
    /// `serve`/`migrate`.
    pub fn serve_args(&self) -> &ServeArgs {
        match &self.command {
            Some(Command::Serve(args) | Command::Migrate(args)) => args,
            Some(Command::Token(_) | Command::Health(_)) | None => &self.serve,
        }
    }
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the server (the default).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(ServeArgs),
    /// Issue a new bearer token: prints it once, with the line (its hash) to
    /// add to the tokens file.
    Token(TokenArgs),
    /// Ask a running server's gRPC health whether it is SERVING: exit 0 if
    /// so, 1 otherwise (for a container's HEALTHCHECK).
    Health(crate::config::health::HealthArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// Who the token is for; recorded as the actor of what they do.
    #[arg(long)]
    pub name: String,
    /// Its roles, comma-separated: enroller, worker, operator.
    #[arg(long, value_enum, value_delimiter = ',', required = true)]
    pub roles: Vec<Role>,
    /// The ledgers (and locks and prompts) it reaches, comma-separated:
    /// exact ids, prefixes such as `acme-*`, or `*` for the whole server.
    #[arg(long, value_delimiter = ',', required = true)]
    pub ledgers: Vec<String>,
    /// Prompts of other teams it may read but not register
    /// (comma-separated ids or prefixes such as `shared-*`).
    #[arg(long, value_delimiter = ',')]
    pub shared_prompts: Vec<String>,
    /// How long until it expires (`90d`, `12h`); it never expires without
    /// this or --expire-time.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "expire_time")]
    pub expires_in: Option<std::time::Duration>,
    /// When it expires, as an RFC 3339 time (`2027-03-01T00:00:00Z`).
    #[arg(long)]
    pub expire_time: Option<String>,
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
    /// --webhook-secret is set; without one nothing listens here.
    #[arg(long, env = "TALLY_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,

    /// Prometheus metrics listen address (`/metrics`).
    #[arg(long, env = "TALLY_METRICS_ADDR", default_value = "127.0.0.1:9090")]
    pub metrics_addr: SocketAddr,

    /// PostgreSQL URL. Without one, tally starts a private PostgreSQL under
    /// --data-dir.
    /// Its password is never shown (`--help` hides the variable's value,
    /// logs and errors redact it).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// File holding the PostgreSQL URL (a mounted secret), instead of
    /// --database-url.
    #[arg(long, env = "DATABASE_URL_FILE", conflicts_with = "database_url")]
    pub database_url_file: Option<PathBuf>,

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

    /// Export traces over OTLP/gRPC to this collector (for example
    /// `http://otel-collector:4317`): a span per RPC and per group of store
    /// statements, joined to the calling worker's trace. Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// How often health checks the database.
    #[arg(long, env = "TALLY_HEALTH_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub health_interval: Duration,

    /// How long shutdown waits for in-flight calls before giving up.
    #[arg(long, env = "TALLY_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// How often the runnable queue's dead entries are checked (and the
    /// queue vacuumed when they pile up), and the statistics of the
    /// fastest-growing tables (each analyzed once it doubled).
    #[arg(long, env = "TALLY_QUEUE_VACUUM_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub queue_vacuum_interval: Duration,

    /// How often the backlog metrics (rows by ledger and status, oldest
    /// runnable age, open jobs) are read from the database.
    #[arg(long, env = "TALLY_BACKLOG_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub backlog_interval: Duration,

    /// How often expired claims are swept (their rows rescued).
    #[arg(long, env = "TALLY_SWEEP_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub sweep_interval: Duration,

    /// Signing secret (`whsec_…`) for review-threshold alerts POSTed to
    /// ledgers' alert URLs (Standard Webhooks). Unset: no alerts are sent.
    #[arg(long, env = "TALLY_ALERT_SECRET", value_parser = parse_alert_secret, hide_env_values = true)]
    pub alert_secret: Option<Secret>,

    /// File holding the alert signing secret, instead of --alert-secret.
    #[arg(long, env = "TALLY_ALERT_SECRET_FILE", conflicts_with = "alert_secret")]
    pub alert_secret_file: Option<PathBuf>,

    /// Let alerts and webhook consumers reach loopback, link-local, private
    /// and other non-public addresses (a receiver on this host or network).
    /// Off: such URLs are refused when a policy or consumer is set, and when
    /// a name resolves to one.
    #[arg(long, env = "TALLY_ALERTS_ALLOW_PRIVATE_HOSTS")]
    pub alerts_allow_private_hosts: bool,

    /// How often ledgers' PERMANENT counts are checked against their review
    /// thresholds, and due alerts delivered.
    #[arg(long, env = "TALLY_ALERT_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub alert_interval: Duration,

    /// How often an open watch stream (WatchJobs, WatchOperations) reads its
    /// event table even without a NOTIFY (notifications are lost while a
    /// listener reconnects).
    #[arg(long, env = "TALLY_WATCH_POLL_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub watch_poll_interval: Duration,

    /// How often a ReceiveResults that waits for results (a long poll)
    /// reads the results log again.
    #[arg(long, env = "TALLY_CONSUMER_POLL_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub consumer_poll_interval: Duration,

    /// How often the webhook sender looks for webhook consumers with
    /// results to POST.
    #[arg(long, env = "TALLY_WEBHOOK_SEND_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub webhook_send_interval: Duration,

    #[command(flatten)]
    pub purge: PurgeArgs,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub webhook: WebhookArgs,

    #[command(flatten)]
    pub provider: ProviderArgs,

    #[command(flatten)]
    pub http: HttpLimits,

    #[command(flatten)]
    pub security: Security,
}

pub use tally_telemetry::http_listener::HttpLimits;

/// The provider's quotas CreateJob admits jobs against, as configured for
/// the account's tier (see services/server/README.md, "Provider quotas").
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// Most batches at the provider at once, across every ledger and model
    /// (Gemini: 100 per project); 0: no limit.
    #[arg(long, env = "TALLY_PROVIDER_MAX_BATCHES", default_value_t = tally_core::quota::DEFAULT_MAX_BATCHES)]
    pub provider_max_batches: u32,

    /// Most input tokens enqueued at the provider per model: `N` for every
    /// model, `MODEL=N` for one (repeat the flag, or separate with commas);
    /// 0: no limit. Default 3000000 for every model (Gemini's Tier 1
    /// figure for the Flash models; Pro and higher tiers allow more).
    #[arg(
        long,
        env = "TALLY_PROVIDER_ENQUEUED_TOKENS",
        value_delimiter = ',',
        value_name = "[MODEL=]TOKENS"
    )]
    pub provider_enqueued_tokens: Vec<String>,

    /// The share of each limit each team (the principal whose workers make
    /// the jobs) holds in a provider account, in percent (1-100; 100: the
    /// whole). Only a team's own jobs count against it; teams sharing one
    /// provider key set shares that add up to 100.
    #[arg(long, env = "TALLY_PROVIDER_TEAM_SHARE", default_value_t = 100, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub provider_team_share: u8,

    /// Requests per minute the synchronous lanes may send to one provider
    /// account: `N` for every model, `MODEL=N` for one (repeat, or separate
    /// with commas); 0: no limit. Default: the provider's Tier 1 figure
    /// (Gemini 1000, OpenAI 500, Anthropic 50).
    #[arg(
        long,
        env = "TALLY_PROVIDER_RPM",
        value_delimiter = ',',
        value_name = "[MODEL=]RPM"
    )]
    pub provider_rpm: Vec<String>,

    /// Tokens per minute likewise, as the worker asks for them: each
    /// call's input (estimated) plus the most output it may produce (its
    /// max output tokens), which is what OpenAI counts. Default: the
    /// provider's Tier 1 figure (Gemini 1000000, OpenAI 200000, Anthropic
    /// 30000).
    #[arg(
        long,
        env = "TALLY_PROVIDER_TPM",
        value_delimiter = ',',
        value_name = "[MODEL=]TPM"
    )]
    pub provider_tpm: Vec<String>,
}

impl Default for ProviderArgs {
    fn default() -> Self {
        Self {
            provider_max_batches: tally_core::quota::DEFAULT_MAX_BATCHES,
            provider_enqueued_tokens: Vec::new(),
            provider_team_share: 100,
            provider_rpm: Vec::new(),
            provider_tpm: Vec::new(),
        }
    }
}

impl ProviderArgs {
    /// The quotas the flags describe; the error names the bad value.
    pub fn quotas(&self) -> Result<tally_core::quota::ProviderQuotas, String> {
        let mut q = tally_core::quota::ProviderQuotas {
            max_batches: self.provider_max_batches,
            team_share: self.provider_team_share,
            ..Default::default()
        };
        if q.max_batches > tally_core::quota::MAX_BATCHES_LIMIT {
            return Err(format!(
                "--provider-max-batches {}: at most {}",
                q.max_batches,
                tally_core::quota::MAX_BATCHES_LIMIT
            ));
        }
        for spec in &self.provider_enqueued_tokens {
            q.set_tokens(spec)
                .map_err(|e| format!("--provider-enqueued-tokens {e}"))?;
        }
        Ok(q)
    }

    /// The synchronous lanes' limits the flags describe; the error names
    /// the bad value.
    pub fn sync_limits(&self) -> Result<tally_core::capacity::SyncLimits, String> {
        use tally_core::capacity::Measure;
        let mut l = tally_core::capacity::SyncLimits::default();
        for spec in &self.provider_rpm {
            l.set(Measure::Requests, spec)
                .map_err(|e| format!("--provider-rpm {e}"))?;
        }
        for spec in &self.provider_tpm {
            l.set(Measure::Tokens, spec)
                .map_err(|e| format!("--provider-tpm {e}"))?;
        }
        Ok(l)
    }
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

    /// File holding webhook signing secrets, one a line (instead of, or as
    /// well as, --webhook-secret); repeat for several files.
    #[arg(
        long = "webhook-secret-file",
        env = "TALLY_WEBHOOK_SECRETS_FILE",
        value_delimiter = ',',
        value_name = "PATH"
    )]
    pub secret_files: Vec<PathBuf>,

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
            secret_files: Vec::new(),
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
    /// least one secret is configured, so unsigned webhooks are never
    /// accepted: without a secret there is no listener at all, whatever
    /// --http-addr says (the server warns when it is set). A secret that
    /// does not parse, or an absurd tolerance or body limit, is refused (the
    /// error names the secret's position, never its text).
    pub fn webhook_listener(&self) -> Result<Option<WebhookListener>, String> {
        let w = &self.webhook;
        if w.secrets.is_empty() {
            return Ok(None);
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

/// The secret in the file `path`, given to `flag`: its text without the
/// trailing newline. The error names the flag and the path, never the
/// contents.
pub fn read_secret_file(flag: &str, path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.trim().is_empty() {
        return Err(format!("{flag} {}: the file is empty", path.display()));
    }
    Ok(secret)
}

impl ServeArgs {
    /// The flags with every secret given as a file read into its place
    /// (--database-url-file, --alert-secret-file, --webhook-secret-file;
    /// the tokens have --tokens-file). Done once at start; a file that
    /// cannot be read, or does not hold a usable secret, stops the server.
    pub fn with_secret_files(mut self) -> Result<Self, String> {
        if let Some(path) = self.database_url_file.take() {
            self.database_url = Some(read_secret_file("--database-url-file", &path)?);
        }
        if let Some(path) = self.alert_secret_file.take() {
            let text = read_secret_file("--alert-secret-file", &path)?;
            self.alert_secret = Some(parse_alert_secret(&text).map_err(|e| {
                format!(
                    "--alert-secret-file {}: not a signing secret: {e}",
                    path.display()
                )
            })?);
        }
        for path in std::mem::take(&mut self.webhook.secret_files) {
            let text = read_secret_file("--webhook-secret-file", &path)?;
            self.webhook.secrets.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(SecretText::from),
            );
        }
        Ok(self)
    }

    /// Which addresses alerts may reach.
    /// Refuses polling intervals short enough to spin on the database.
    pub fn check_intervals(&self) -> Result<(), String> {
        let floor = Duration::from_millis(10);
        for (flag, d) in [
            ("--consumer-poll-interval", self.consumer_poll_interval),
            ("--webhook-send-interval", self.webhook_send_interval),
        ] {
            if d < floor {
                return Err(format!("{flag} must be at least 10ms"));
            }
        }
        Ok(())
    }

    pub fn alert_reach(&self) -> tally_core::outbound::Reach {
        if self.alerts_allow_private_hosts {
            tally_core::outbound::Reach::AnyHost
        } else {
            tally_core::outbound::Reach::PublicOnly
        }
    }

    /// Refuses `--auth disabled` on a gRPC address other than loopback:
    /// without authentication anyone who can reach the port may call every
    /// RPC, so only this machine may be able to reach it.
    pub fn check_auth_reach(&self) -> Result<(), String> {
        let addr = self.grpc_addr;
        if self.security.auth == AuthMode::Disabled && !addr.ip().to_canonical().is_loopback() {
            return Err(format!(
                "--auth disabled is allowed only on a loopback address, and --grpc-addr is \
                 {addr}: listen on 127.0.0.1 (or [::1]), or keep --auth tokens and give \
                 callers tokens (--tokens-file, TALLY_TOKENS; `tally-server token` issues them)"
            ));
        }
        Ok(())
    }
}

/// The background purge of deleted ledgers (see services/server/README.md,
/// "Deleting a ledger").
#[derive(Debug, Clone, Args)]
pub struct PurgeArgs {
    /// How often this replica looks for ledgers to purge when it has not
    /// just deleted one itself (a delete through this replica starts its
    /// purge at once).
    #[arg(long, env = "TALLY_PURGE_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub purge_interval: Duration,

    /// Most entries one purge transaction deletes (rows with their attempts
    /// count as rows).
    #[arg(long, env = "TALLY_PURGE_BATCH", default_value_t = 2000,
          value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub purge_batch: i64,

    /// Pause between two purge batches, leaving the database to other
    /// work (0s: none).
    #[arg(long, env = "TALLY_PURGE_PAUSE", default_value = "0s", value_parser = parse_duration)]
    pub purge_pause: Duration,

    /// How long a deleted ledger keeps its name after its contents are
    /// gone: longer than any call that read the ledger before the delete
    /// can still be writing (the request timeout), so nothing it writes
    /// is left behind.
    #[arg(long, env = "TALLY_PURGE_SETTLE", default_value = "30s", value_parser = parse_duration)]
    pub purge_settle: Duration,

    /// The oldest answer the result cache keeps, whatever a ledger's
    /// `max_age` (older ones are purged).
    #[arg(long, env = "TALLY_RESULT_CACHE_MAX_AGE", default_value = "90d", value_parser = parse_duration)]
    pub result_cache_max_age: Duration,

    /// Most answers the result cache keeps (the oldest go first).
    #[arg(long, env = "TALLY_RESULT_CACHE_MAX_ENTRIES", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(i64).range(0..))]
    pub result_cache_max_entries: i64,

    /// Most bytes of requests and answers the result cache keeps (the
    /// oldest go first).
    #[arg(long, env = "TALLY_RESULT_CACHE_MAX_BYTES", default_value_t = 10 << 30,
          value_parser = clap::value_parser!(i64).range(0..))]
    pub result_cache_max_bytes: i64,
}

impl PurgeArgs {
    /// The result cache's bounds.
    pub fn cache_bounds(&self) -> tally_store::cache::Bounds {
        tally_store::cache::Bounds {
            max_age: self.result_cache_max_age,
            max_entries: self.result_cache_max_entries,
            max_bytes: self.result_cache_max_bytes,
        }
    }
}

impl Default for PurgeArgs {
    fn default() -> Self {
        Self {
            purge_interval: Duration::from_secs(5),
            purge_batch: 2000,
            purge_pause: Duration::ZERO,
            purge_settle: Duration::from_secs(30),
            result_cache_max_age: Duration::from_secs(90 * 24 * 3600),
            result_cache_max_entries: 1_000_000,
            result_cache_max_bytes: 10 << 30,
        }
    }
}

/// Request limits (see services/server/README.md, "Limits").
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most rows in one EnrollRows or ReportOutcomes call, and keys in one
    /// ReleaseClaim or RedriveRows call.
    #[arg(long, env = "TALLY_MAX_ROWS_PER_CALL", default_value_t = 10_000)]
    pub max_rows_per_call: usize,

    /// Most rows one ClaimRows may lease.
    #[arg(long, env = "TALLY_MAX_CLAIM_ROWS", default_value_t = 10_000)]
    pub max_claim_rows: i32,

    /// Largest request of the bulk methods (EnrollRows, ReportOutcomes,
    /// ReleaseClaim, RedriveRows, RegisterPrompt, IngestEvent), in bytes.
    /// With --max-request-memory-bytes, sized so two at once fit the
    /// chart's 256 MiB memory limit (deploy/README.md, "Memory").
    #[arg(long, env = "TALLY_MAX_MESSAGE_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Largest request of every other method, in bytes.
    #[arg(long, env = "TALLY_MAX_SMALL_MESSAGE_BYTES", default_value_t = 1024 * 1024)]
    pub max_small_message_bytes: usize,

    /// Request memory held at once across all calls, from the moment a
    /// request's length is known until it is answered: its wire bytes plus
    /// three times its decoded size (measured; deploy/README.md, "Memory").
    /// A request that does not fit now is refused RESOURCE_EXHAUSTED with a
    /// RetryInfo; one larger than all of it, without one.
    #[arg(long, env = "TALLY_MAX_REQUEST_MEMORY_BYTES", default_value_t = 160 * 1024 * 1024)]
    pub max_request_memory_bytes: usize,

    /// Unary calls in flight across all connections; more are refused with
    /// RESOURCE_EXHAUSTED at once (load shedding).
    #[arg(long, env = "TALLY_MAX_CONCURRENT_CALLS", default_value_t = 256)]
    pub max_concurrent_calls: usize,

    /// Open streams (watches, reflection) across all connections; more are
    /// refused with RESOURCE_EXHAUSTED. Separate from calls, so idle watches
    /// cannot starve unary calls.
    #[arg(long, env = "TALLY_MAX_CONCURRENT_STREAMS", default_value_t = 1024)]
    pub max_concurrent_streams: usize,

    /// Calls and streams in flight on one connection; more are refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "TALLY_MAX_CALLS_PER_CONNECTION", default_value_t = 64)]
    pub max_calls_per_connection: usize,

    /// Longest a unary call may run before it is answered DEADLINE_EXCEEDED.
    #[arg(long, env = "TALLY_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Longest a server stream stays open; it then ends with UNAVAILABLE
    /// (reason STREAM_MAX_AGE) and the client resumes from its last sequence.
    #[arg(long, env = "TALLY_MAX_STREAM_AGE", default_value = "30m", value_parser = parse_duration)]
    pub max_stream_age: Duration,

    /// Open streams of unauthenticated callers (health Watch, and
    /// reflection with --reflection open); more are refused with
    /// RESOURCE_EXHAUSTED. Separate from --max-concurrent-streams, so
    /// tokenless watchers cannot take authenticated callers' stream slots.
    #[arg(long, env = "TALLY_MAX_ANONYMOUS_STREAMS", default_value_t = 32)]
    pub max_anonymous_streams: usize,

    /// Longest a response message may wait for its client to take it
    /// (HTTP/2 flow control): a client that stops reading is disconnected
    /// after this and its calls' slots freed. A message must move at
    /// --max-response-bytes per this time at least.
    #[arg(long, env = "TALLY_WRITE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub write_timeout: Duration,

    /// Largest response message, in bytes. ClaimRows hands out rows up to
    /// the client's `max_response_bytes` but never more than this; list
    /// pages stop at 4 MiB (gRPC's default receive limit). At least 4 MiB.
    #[arg(long, env = "TALLY_MAX_RESPONSE_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_response_bytes: usize,

    /// Calls and streams one principal (a token's name, a certificate's
    /// subject) may have in flight over all its connections; more are
    /// refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TALLY_MAX_CALLS_PER_PRINCIPAL", default_value_t = 128)]
    pub max_calls_per_principal: usize,

    /// Calls per second one principal may make (a burst of as many);
    /// more are refused with RESOURCE_EXHAUSTED and a RetryInfo.
    #[arg(long, env = "TALLY_PRINCIPAL_CALL_RATE", default_value_t = 1000)]
    pub principal_call_rate: u32,

    /// Request bytes per second one principal may send (a burst of one
    /// second or one largest request); more are refused like calls.
    #[arg(long, env = "TALLY_PRINCIPAL_BYTE_RATE", default_value_t = 64 * 1024 * 1024)]
    pub principal_byte_rate: usize,

    /// Open connections to the gRPC port; one more is closed at once.
    #[arg(long, env = "TALLY_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,

    /// Longest a gRPC connection may take to finish its TLS handshake and
    /// make its first call; then it is closed.
    #[arg(long, env = "TALLY_CONNECTION_START_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub connection_start_timeout: Duration,

    /// How often an HTTP/2 keepalive ping is sent on each gRPC connection.
    #[arg(long, env = "TALLY_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub http2_keepalive_interval: Duration,

    /// A connection whose keepalive ping is not answered within this is
    /// closed.
    #[arg(long, env = "TALLY_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http2_keepalive_timeout: Duration,

    /// A gRPC connection is asked to go away (HTTP/2 GOAWAY) after this,
    /// and closed --request-timeout later; clients reconnect.
    #[arg(long, env = "TALLY_MAX_CONNECTION_AGE", default_value = "1h", value_parser = parse_duration)]
    pub max_connection_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rows_per_call: 10_000,
            max_claim_rows: 10_000,
            max_message_bytes: 16 * 1024 * 1024,
            max_small_message_bytes: 1024 * 1024,
            max_request_memory_bytes: 160 * 1024 * 1024,
            max_concurrent_calls: 256,
            max_concurrent_streams: 1024,
            max_calls_per_connection: 64,
            request_timeout: Duration::from_secs(30),
            max_stream_age: Duration::from_secs(30 * 60),
            max_response_bytes: 16 * 1024 * 1024,
            max_anonymous_streams: 32,
            write_timeout: Duration::from_secs(30),
            max_calls_per_principal: 128,
            principal_call_rate: 1000,
            principal_byte_rate: 64 * 1024 * 1024,
            max_connections: 1024,
            connection_start_timeout: Duration::from_secs(10),
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(3600),
        }
    }
}

/// Who may call what, and over which transport (see docs-security.md).
#[derive(Debug, Clone, Args)]
pub struct Security {
    /// Authentication: `tokens` (bearer tokens and client certificates) or
    /// `disabled` (local use only: anyone may call every RPC).
    #[arg(long, env = "TALLY_AUTH", value_enum, default_value = "tokens")]
    pub auth: AuthMode,

    /// JSON file of token hashes and client-certificate subjects with their
    /// roles (`tally-server token` prints entries for it).
    #[arg(long, env = "TALLY_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,

    /// The same JSON inline; merged with --tokens-file.
    #[arg(long, env = "TALLY_TOKENS", hide_env_values = true)]
    pub tokens: Option<String>,

    /// gRPC reflection (what grpcurl uses to list and describe services):
    /// off (the default: the API's shape is not handed to anyone who can
    /// reach the port), authenticated (any valid caller) or open (no token).
    #[arg(long, env = "TALLY_REFLECTION", value_enum, default_value = "off")]
    pub reflection: ReflectionMode,

    /// PEM certificate chain of the server; with --tls-key turns TLS on.
    #[arg(long, env = "TALLY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "TALLY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: only clients with a certificate signed by one of
    /// them may connect (mTLS); the certificate's subject CN names the caller.
    #[arg(long, env = "TALLY_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,

    /// Roles of a client certificate whose subject the tokens file does not
    /// list (comma-separated; none by default).
    #[arg(long, env = "TALLY_MTLS_ROLES", value_enum, value_delimiter = ',')]
    pub mtls_roles: Vec<Role>,

    /// The ledgers such a certificate reaches (comma-separated ids,
    /// prefixes such as `acme-*`, or `*` for the whole server); required
    /// with --mtls-roles, never implied.
    #[arg(long, env = "TALLY_MTLS_LEDGERS", value_delimiter = ',')]
    pub mtls_ledgers: Vec<String>,

    /// Plaintext address serving only gRPC health, for Kubernetes probes
    /// (which cannot speak TLS). Off when unset.
    #[arg(long, env = "TALLY_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Every call but health needs a bearer token or a client certificate.
    Tokens,
    /// No authentication: for a developer's machine only.
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReflectionMode {
    /// Anyone may list services and describe messages.
    Open,
    /// Any authenticated caller, whatever its roles.
    Authenticated,
    /// Not served.
    Off,
}

impl Security {
    /// No authentication, no TLS: what tests and `--auth disabled` use.
    pub fn disabled() -> Self {
        Self {
            auth: AuthMode::Disabled,
            tokens_file: None,
            tokens: None,
            reflection: ReflectionMode::Off,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            mtls_roles: Vec::new(),
            mtls_ledgers: Vec::new(),
            health_addr: None,
        }
    }
}

/// Parses a `whsec_<base64>` signing secret.
pub fn parse_alert_secret(text: &str) -> Result<Secret, String> {
    Secret::parse(text).map_err(|e| e.to_string())
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
            database_url_file: None,
            data_dir: PathBuf::from("./.tally"),
            pg_bin: None,
            db_max_connections: 8,
            log_format: LogFormat::Pretty,
            otlp_endpoint: None,
            health_interval: Duration::from_millis(200),
            shutdown_grace: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(1),
            queue_vacuum_interval: Duration::from_secs(2),
            backlog_interval: Duration::from_millis(200),
            alert_secret: None,
            alert_secret_file: None,
            alerts_allow_private_hosts: false,
            alert_interval: Duration::from_millis(100),
            watch_poll_interval: Duration::from_millis(500),
            consumer_poll_interval: Duration::from_millis(50),
            webhook_send_interval: Duration::from_millis(100),
            purge: PurgeArgs {
                purge_interval: Duration::from_millis(200),
                purge_settle: Duration::ZERO,
                ..PurgeArgs::default()
            },
            limits: Limits::default(),
            webhook: WebhookArgs::default(),
            provider: ProviderArgs::default(),
            http: HttpLimits::default(),
            security: Security::disabled(),
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
    fn security_defaults_match_the_documentation() {
        let cli = Cli::try_parse_from(["tally-server"]).unwrap();
        let (s, l) = (&cli.serve.security, &cli.serve.limits);
        assert_eq!(s.auth, AuthMode::Tokens);
        assert_eq!(
            s.reflection,
            ReflectionMode::Off,
            "reflection is off by default"
        );
        assert!(s.tls_cert.is_none() && s.health_addr.is_none() && s.mtls_roles.is_empty());
        let d = Limits::default();
        assert_eq!(l.max_concurrent_calls, d.max_concurrent_calls);
        assert_eq!(l.max_concurrent_streams, d.max_concurrent_streams);
        assert_eq!(l.max_calls_per_connection, d.max_calls_per_connection);
        assert_eq!(l.request_timeout, d.request_timeout);
        assert_eq!(l.max_stream_age, d.max_stream_age);
        assert_eq!(l.max_message_bytes, d.max_message_bytes);
    }

    #[test]
    fn token_subcommand_takes_a_name_roles_and_ledgers() {
        let cli = Cli::try_parse_from([
            "tally-server",
            "token",
            "--name",
            "alice",
            "--roles",
            "operator,worker",
            "--ledgers",
            "acme-*,acme",
            "--expires-in",
            "30d",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Token(t)) => {
                assert_eq!(t.name, "alice");
                assert_eq!(t.roles, [Role::Operator, Role::Worker]);
                assert_eq!(t.ledgers, ["acme-*", "acme"]);
                assert_eq!(t.expires_in, Some(Duration::from_secs(30 * 86400)));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["tally-server", "token", "--name", "a"]).is_err());
        assert!(
            Cli::try_parse_from(["tally-server", "token", "--name", "a", "--roles", "worker"])
                .is_err(),
            "the scope is never implied"
        );
        assert!(
            Cli::try_parse_from([
                "tally-server",
                "token",
                "--name",
                "a",
                "--roles",
                "admin",
                "--ledgers",
                "*"
            ])
            .is_err()
        );
    }

    // Invariant: the provider quota flags default to Gemini's documented
    // figures, take per-model overrides, and refuse bad values by name.
    #[test]
    fn provider_quota_flags() {
        let cli = Cli::try_parse_from(["tally-server"]).unwrap();
        assert_eq!(
            cli.serve.provider.quotas().unwrap(),
            tally_core::quota::ProviderQuotas::default()
        );
        let cli = Cli::try_parse_from([
            "tally-server",
            "--provider-max-batches",
            "7",
            "--provider-enqueued-tokens",
            "1000,gemini-2.5-pro=5000",
        ])
        .unwrap();
        let q = cli.serve.provider.quotas().unwrap();
        assert_eq!(q.max_batches, 7);
        assert_eq!(q.tokens_of("gemini-2.5-flash"), 1000);
        assert_eq!(q.tokens_of("gemini-2.5-pro"), 5000);
        let cli = Cli::try_parse_from(["tally-server", "--provider-enqueued-tokens", "pro=lots"])
            .unwrap();
        let e = cli.serve.provider.quotas().unwrap_err();
        assert!(
            e.starts_with("--provider-enqueued-tokens \"pro=lots\""),
            "{e}"
        );
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
        assert!(bare.serve.webhook_listener().unwrap().is_none());
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
    fn alert_secrets_are_parsed_strictly_and_never_printed() {
        let ok = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let cli = Cli::try_parse_from(["tally-server", "--alert-secret", ok]).unwrap();
        assert!(cli.serve.alert_secret.is_some());
        assert!(!format!("{:?}", cli.serve).contains("MfKQ9r8G"));
        assert!(Cli::try_parse_from(["tally-server", "--alert-secret", "hunter2"]).is_err());
        let none = Cli::try_parse_from(["tally-server"]).unwrap();
        assert!(none.serve.alert_secret.is_none());
        assert_eq!(none.serve.alert_interval, Duration::from_secs(30));
    }

    #[test]
    fn migrate_is_a_subcommand_with_the_server_flags() {
        let cli =
            Cli::try_parse_from(["tally-server", "migrate", "--database-url", "postgres://x"])
                .unwrap();
        assert!(matches!(cli.command, Some(Command::Migrate(_))));
        assert_eq!(
            cli.serve_args().database_url.as_deref(),
            Some("postgres://x")
        );
        let plain = Cli::try_parse_from(["tally-server", "--grpc-addr", "0.0.0.0:1"]).unwrap();
        assert_eq!(plain.serve_args().grpc_addr.to_string(), "0.0.0.0:1");
    }

    #[test]
    fn auth_disabled_is_refused_on_non_loopback_addresses() {
        // Invariant: `--auth disabled` starts only on a loopback gRPC
        // address; the refusal names the address and the ways out.
        let parse = |addr: &str, auth: &str| {
            Cli::try_parse_from(["tally-server", "--grpc-addr", addr, "--auth", auth])
                .unwrap()
                .serve
        };
        for addr in [
            "0.0.0.0:50051",
            "[::]:50051",
            "10.1.2.3:50051",
            "[::ffff:10.0.0.1]:1",
        ] {
            let err = parse(addr, "disabled").check_auth_reach().unwrap_err();
            assert!(err.contains(addr), "{err}");
            assert!(
                err.contains("127.0.0.1") && err.contains("--tokens-file"),
                "{err}"
            );
        }
        for addr in [
            "127.0.0.1:50051",
            "127.8.9.10:1",
            "[::1]:50051",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(parse(addr, "disabled").check_auth_reach(), Ok(()));
        }
        assert_eq!(parse("0.0.0.0:50051", "tokens").check_auth_reach(), Ok(()));
    }

    /// Invariant: every flag that takes a secret also takes it from a
    /// file; the file's text (without its newline) is the secret, and an
    /// unreadable or empty file stops the start naming the flag and path,
    /// never the contents. A value and a file for the same secret conflict.
    #[test]
    fn secrets_can_come_from_files() {
        let dir = std::env::temp_dir().join(format!("tally-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.to_str().unwrap().to_string()
        };
        let db = write("db", "postgres://tally:pw@db/tally\n");
        let alert = write("alert", &format!("{SECRET}\n"));
        let hooks = write(
            "hooks",
            "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n\nwhsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        );
        // Parsed without DATABASE_URL's value (the test database's, where
        // tests run with one), which --database-url-file conflicts with.
        let parse = |args: &[&str]| {
            use clap::{CommandFactory as _, FromArgMatches as _};
            let matches = Cli::command()
                .mut_arg("database_url", |a| a.env(None))
                .try_get_matches_from(std::iter::once("tally-server").chain(args.iter().copied()))
                .unwrap();
            Cli::from_arg_matches(&matches).unwrap()
        };
        let cli = parse(&[
            "--database-url-file",
            &db,
            "--alert-secret-file",
            &alert,
            "--webhook-secret-file",
            &hooks,
        ]);
        let args = cli.serve.with_secret_files().unwrap();
        assert_eq!(
            args.database_url.as_deref(),
            Some("postgres://tally:pw@db/tally")
        );
        assert!(args.alert_secret.is_some());
        assert_eq!(args.webhook_listener().unwrap().unwrap().secrets.len(), 2);

        let empty = write("empty", "\n");
        let cli = Cli::try_parse_from(["tally-server", "--alert-secret-file", &empty]).unwrap();
        let e = cli.serve.with_secret_files().unwrap_err();
        assert!(
            e.starts_with("--alert-secret-file") && e.contains("empty"),
            "{e}"
        );
        let wrong = write("wrong", "hunter2\n");
        let cli = Cli::try_parse_from(["tally-server", "--alert-secret-file", &wrong]).unwrap();
        let e = cli.serve.with_secret_files().unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        let cli = parse(&["--database-url-file", "/nonexistent/x"]);
        assert!(
            cli.serve
                .with_secret_files()
                .unwrap_err()
                .contains("/nonexistent/x")
        );
        assert!(
            Cli::try_parse_from([
                "tally-server",
                "--database-url",
                "postgres://x",
                "--database-url-file",
                &db
            ])
            .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn help_never_shows_the_value_of_a_secret_variable() {
        // Invariant: every flag whose variable can hold a secret hides its
        // value in `--help` (the binary's own --help is checked in
        // tests/server/security/secrets.rs).
        use clap::CommandFactory as _;
        let secret = [
            "DATABASE_URL",
            "TALLY_TOKENS",
            "TALLY_ALERT_SECRET",
            "TALLY_WEBHOOK_SECRETS",
        ];
        let mut seen = Vec::new();
        let mut cmd = Cli::command();
        cmd.build();
        for arg in cmd.get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            if secret.contains(&env) {
                assert!(arg.is_hide_env_values_set(), "{env} is shown by --help");
                seen.push(env);
            }
        }
        seen.sort_unstable();
        let mut want = secret.to_vec();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn purge_defaults_match_their_default_impl() {
        let cli = Cli::try_parse_from(["tally-server"]).unwrap();
        let (p, d) = (&cli.serve.purge, PurgeArgs::default());
        assert_eq!(p.purge_interval, d.purge_interval);
        assert_eq!(p.purge_batch, d.purge_batch);
        assert_eq!(p.purge_pause, d.purge_pause);
        assert_eq!(p.purge_settle, d.purge_settle);
        assert!(Cli::try_parse_from(["tally-server", "--purge-batch", "0"]).is_err());
    }
}

//! The worker's flags: each also reads a `TALLY_*` (or the provider's own)
//! environment variable; durations in human form (`30s`, `5m`). Each
//! provider's base URL and key file are its folder's flags
//! (`crate::provider::ProviderFlags`). The provider's API key is read from
//! its variable (`GEMINI_API_KEY`, …) or the file its key-file flag names:
//! never a flag value (it would show in `ps`), never printed. tally's token
//! likewise comes from `TALLY_TOKEN` or `--token-file`. `Debug` of the flags
//! shows neither the token nor a URL's credentials.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use crate::arg::{SecretArg, UrlArg, read_secret_file};
use tally_core::lane::Lane;
use tally_core::provider::Api;

/// tally-worker: claims rows from a tally ledger, runs them as batch jobs
/// at one provider (Gemini, OpenAI, or an OpenAI-compatible server) and
/// reports what became of each row.
#[derive(Debug, Clone, Parser)]
#[command(name = "tally-worker", version = tally_version::LONG, about)]
pub struct WorkerArgs {
    /// tally gRPC address (http:// or https://).
    #[arg(long, env = "TALLY_SERVER", default_value = "http://127.0.0.1:50051")]
    pub server: UrlArg,

    /// Bearer token for tally (a token with the worker role).
    #[arg(long, env = "TALLY_TOKEN", hide_env_values = true)]
    pub token: Option<SecretArg>,

    /// File holding the bearer token (a mounted secret), instead of
    /// --token.
    #[arg(long, env = "TALLY_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// Each provider's base URL and key file.
    #[command(flatten)]
    pub providers: crate::provider::ProviderFlags,

    /// The provider this worker runs rows at: it claims only rows whose
    /// model runs there (`gemini`, `openai`, `anthropic`, or the name of an
    /// OpenAI-compatible server, as rows name it in `{provider}/{model}`).
    #[arg(long, env = "TALLY_WORKER_PROVIDER", default_value = "gemini")]
    pub provider: String,

    /// The API the provider speaks (`gemini` or `openai`); default the
    /// provider's name when it names one. Required for a named
    /// OpenAI-compatible server (`--provider vllm --provider-api openai`).
    #[arg(long, env = "TALLY_WORKER_PROVIDER_API")]
    pub provider_api: Option<String>,

    /// PEM file of the CA that signed tally's certificate (https only;
    /// without it, the system's root certificates are trusted).
    #[arg(long, env = "TALLY_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, env = "TALLY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "TALLY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// Server name to verify in tally's certificate (default: the --server
    /// host).
    #[arg(long, env = "TALLY_TLS_DOMAIN")]
    pub tls_domain: Option<String>,

    /// The ledger to work on (its id, or `ledgers/{id}`).
    #[arg(long, env = "TALLY_LEDGER")]
    pub ledger: String,

    /// Only claim rows for this model; empty takes the model of the oldest
    /// ready row.
    #[arg(long, env = "TALLY_WORKER_MODEL", default_value = "")]
    pub model: String,

    /// The lane this worker sends rows in: `batch` (provider batches), or a
    /// synchronous tier: `flex` (OpenAI, Gemini), `standard`, `priority`
    /// (OpenAI, Gemini). The ledger must allow the lane.
    #[arg(long, env = "TALLY_WORKER_LANE", default_value = "batch", value_parser = parse_lane)]
    pub lane: Lane,

    /// Synchronous lanes: most calls in flight at once (each row one call;
    /// the account's requests and tokens per minute, shared through tally,
    /// bound them too).
    #[arg(long, env = "TALLY_WORKER_CALLS", default_value_t = 16)]
    pub calls: usize,

    /// Synchronous lanes: the longest one call may take before its answer
    /// counts as lost (and its attempt as spent). Flex may take many
    /// minutes: OpenAI advises raising its SDK's 10-minute timeout to 15,
    /// and Google targets 1 to 15 minutes for Gemini Flex.
    #[arg(long, env = "TALLY_WORKER_CALL_TIMEOUT", default_value = "15m", value_parser = parse_duration)]
    pub call_timeout: Duration,

    /// Rows asked for in one claim (capped by --max-rows-per-batch).
    #[arg(long, env = "TALLY_WORKER_CLAIM_SIZE", default_value_t = 1000)]
    pub claim_size: i32,

    /// Most rows in one provider batch.
    #[arg(
        long,
        env = "TALLY_WORKER_MAX_ROWS_PER_BATCH",
        default_value_t = 10_000
    )]
    pub max_rows_per_batch: usize,

    /// Largest input file of one batch, in bytes; a row larger than this on
    /// its own is reported as invalid input.
    #[arg(long, env = "TALLY_WORKER_MAX_BYTES_PER_BATCH", default_value_t = 100 * 1024 * 1024)]
    pub max_bytes_per_batch: usize,

    /// Most outcomes in one ReportOutcomes call (a server that takes fewer
    /// per call says so, and the worker sends that many).
    #[arg(long, env = "TALLY_WORKER_MAX_ROWS_PER_REPORT", default_value_t = 1000)]
    pub max_rows_per_report: usize,

    /// How often a live batch is polled at the provider (the fallback when
    /// webhooks do not arrive), and how often an idle worker looks for work.
    #[arg(long, env = "TALLY_WORKER_POLL_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// How often the claims of live jobs are extended.
    #[arg(long, env = "TALLY_WORKER_HEARTBEAT_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,

    /// Lease asked for on claims and heartbeats; default the ledger's.
    #[arg(long, env = "TALLY_WORKER_LEASE", value_parser = parse_duration)]
    pub lease: Option<Duration>,

    /// Jobs this worker runs at once; 0 takes the ledger's max_active_jobs.
    #[arg(long, env = "TALLY_WORKER_MAX_JOBS", default_value_t = 0)]
    pub max_jobs: usize,

    /// Name recorded with claims and attempts; default
    /// `tally-worker-<host>-<pid>`. A worker that starts under a name takes
    /// over at once what an earlier process of that name still holds.
    #[arg(long, env = "TALLY_WORKER_NAME")]
    pub worker_name: Option<String>,

    /// Exit once the ledger has no pending, runnable or running work and
    /// no active jobs (for tests and demos).
    #[arg(long, env = "TALLY_WORKER_EXIT_WHEN_IDLE")]
    pub exit_when_idle: bool,

    /// Claim nothing: render the ledger's PENDING and RETRYABLE rows as
    /// they would be sent, ask the result cache which it would answer
    /// (EstimateFromCache, which writes nothing), print that as JSON and
    /// exit.
    #[arg(long, env = "TALLY_WORKER_CACHE_DRY_RUN")]
    pub cache_dry_run: bool,

    /// The longest a new batch may take to show in the provider's list, in
    /// whatever order the list fills: a search concludes that no batch was
    /// made only once this passed after the latest time the attempt's batch
    /// could have been made, and the list shows a batch made after the
    /// attempt (a witness: see `lookup.rs`). The rows go back only then.
    #[arg(long, env = "TALLY_WORKER_CREATE_LOOKUP_WINDOW", default_value = "5m", value_parser = parse_duration)]
    pub create_lookup_window: Duration,

    /// Most pages of the provider's batch list one search for a lost create
    /// reads. A list that comes newest first is read only a page past the
    /// attempt's window; one that does not, and is longer than this,
    /// proves nothing: the rows wait and the operator is told.
    #[arg(long, env = "TALLY_WORKER_MAX_LIST_PAGES", default_value_t = crate::lookup::MAX_LIST_PAGES)]
    pub max_list_pages: usize,

    /// A search for a lost create still unresolved this long after the
    /// attempt is reported to the operator (a warning naming the job, and
    /// `tally_worker_create_searches_unresolved`); its rows keep waiting.
    #[arg(long, env = "TALLY_WORKER_CREATE_SEARCH_ALARM", default_value = "30m", value_parser = parse_duration)]
    pub create_search_alarm: Duration,

    /// How far the provider's clock may be from tally's. A search after a
    /// lost create takes a batch listed with a `createTime` later than the
    /// attempt plus `--http-timeout` plus this as proof that the list has
    /// caught up with the attempt (see `lookup.rs`).
    #[arg(long, env = "TALLY_WORKER_PROVIDER_CLOCK_SKEW", default_value = "1m", value_parser = parse_duration)]
    pub provider_clock_skew: Duration,

    /// How long a model cools down (for every worker of the account) after
    /// the provider refused a batch for capacity without naming a delay: a
    /// 429 with no `retry-after`, OpenAI's enqueued-token limit (a batch
    /// `failed` with `token_limit_exceeded`). The rows go back with no
    /// attempt and wait this long (1s to 10m); each such refusal of a
    /// create in a row doubles it (up to 10m), and the seventh in a row
    /// pauses the ledger (reason QUOTA) with the provider's words.
    #[arg(long, env = "TALLY_WORKER_REFUSAL_COOLDOWN", default_value = "60s", value_parser = parse_duration)]
    pub refusal_cooldown: Duration,

    /// A batch whose job was reconciled this long ago is deleted at the
    /// provider (with its output file), so the batch list every search
    /// reads stays short; 0 keeps every batch.
    #[arg(long, env = "TALLY_WORKER_BATCH_RETENTION", default_value = "1h", value_parser = parse_duration)]
    pub batch_retention: Duration,

    /// The directory rows' local media paths (and `file://` URIs) are read
    /// under; without it no local file is read. Paths resolve inside it
    /// only (no `..`, no symbolic link out).
    #[arg(long, env = "TALLY_WORKER_MEDIA_ROOT")]
    pub media_root: Option<std::path::PathBuf>,

    /// A host rows' `https://` media may be read from (repeat, or separate
    /// with commas); no other host is read, and no redirect is followed.
    #[arg(
        long = "media-allow-host",
        env = "TALLY_WORKER_MEDIA_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub media_allow_hosts: Vec<String>,

    /// A bucket rows' object-storage media may be read from, as
    /// `gs://bucket` or `s3://bucket` (repeat, or separate with commas); no
    /// other bucket is read, whatever the credentials reach.
    #[arg(
        long = "media-allow-bucket",
        env = "TALLY_WORKER_MEDIA_ALLOW_BUCKETS",
        value_delimiter = ','
    )]
    pub media_allow_buckets: Vec<String>,

    /// Largest media file read, in bytes; a larger one makes its row
    /// PERMANENT (`media_unreadable`).
    #[arg(long, env = "TALLY_WORKER_MEDIA_MAX_BYTES", default_value_t = 100 * 1024 * 1024)]
    pub media_max_bytes: u64,

    /// Media files up to this many bytes go inline in the request; larger
    /// ones are uploaded once and referenced.
    #[arg(long, env = "TALLY_WORKER_MEDIA_INLINE_MAX", default_value_t = 256 * 1024)]
    pub media_inline_max: u64,

    /// An upload is reused only while it has this long to live at the
    /// provider (a batch may take a day; Gemini keeps files 48 hours).
    #[arg(long, env = "TALLY_WORKER_MEDIA_MIN_LIFE", default_value = "26h", value_parser = parse_duration)]
    pub media_min_life: Duration,

    /// Bytes of media uploads the provider account may hold (Gemini: 20
    /// GiB a project, input files included: keep room for them); a row
    /// whose upload would pass it waits, no attempt.
    #[arg(long, env = "TALLY_WORKER_PROVIDER_STORAGE_BYTES", default_value_t = 16 * 1024 * 1024 * 1024)]
    pub provider_storage_bytes: u64,

    /// How long a finished batch's output that is not downloadable (403 or
    /// 404 right after the batch finished) is waited for; then the job
    /// fails with that reason and its rows are retried.
    #[arg(long, env = "TALLY_WORKER_OUTPUT_WAIT", default_value = "30m", value_parser = parse_duration)]
    pub output_wait: Duration,

    /// A batch still not finished this long after it was submitted is
    /// cancelled at the provider and its job finished EXPIRED (its rows are
    /// retried). The provider expires batches after 48 hours, but batches
    /// stuck far beyond that are reported.
    #[arg(long, env = "TALLY_WORKER_BATCH_DEADLINE", default_value = "72h", value_parser = parse_duration)]
    pub batch_deadline: Duration,

    /// A batch is taken for gone (deleted at the provider) only when every
    /// GET of it answered 404 for this long (and at least 3 times): one 404
    /// proves little (a key of another project answers the same). Its job
    /// then fails and its rows are retried.
    #[arg(long, env = "TALLY_WORKER_GONE_AFTER", default_value = "10m", value_parser = parse_duration)]
    pub gone_after: Duration,

    /// How often this ledger's orphaned input files are looked for (and
    /// once more before `--exit-when-idle` exits).
    #[arg(long, env = "TALLY_WORKER_JANITOR_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub janitor_interval: Duration,

    /// An input file younger than this is never deleted as an orphan (its
    /// upload may still be on its way to MarkCreating).
    #[arg(long, env = "TALLY_WORKER_ORPHAN_AGE", default_value = "1h", value_parser = parse_duration)]
    pub orphan_age: Duration,

    /// Test only: die (abort, like kill -9) at this point of the create path.
    #[arg(long, env = "TALLY_WORKER_FAILPOINT", hide = true, value_enum)]
    pub failpoint: Option<Failpoint>,

    /// Timeout of one provider HTTP request.
    #[arg(long, env = "TALLY_WORKER_HTTP_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub http_timeout: Duration,

    /// Serve `/metrics`, `/livez` and `/healthz` on this address (for
    /// example `0.0.0.0:9091`); off when not set.
    #[arg(long, env = "TALLY_WORKER_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Limits of the metrics listener.
    #[command(flatten)]
    pub http: tally_telemetry::http_listener::HttpLimits,

    /// Log format: pretty or json.
    #[arg(long, env = "TALLY_LOG_FORMAT", default_value = "pretty")]
    pub log_format: String,

    /// Export traces over OTLP/gRPC to this collector (for example
    /// `http://otel-collector:4317`): one trace per job, from its claim to
    /// its FinishJob, joined by the server's spans of each call. Off when
    /// unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<UrlArg>,
}

/// Points of the create path where a test can make the worker die.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Failpoint {
    /// The input file is uploaded; nothing recorded, no create sent.
    AfterUpload,
    /// MarkCreating is recorded; the create is not sent.
    AfterMarkCreating,
    /// The provider answered the create; MarkSubmitted is not sent.
    AfterCreate,
}

/// The APIs tally speaks, for an error.
fn spoken() -> String {
    let names: Vec<&str> = Api::ALL.iter().map(|a| a.as_str()).collect();
    names.join(", ")
}

impl WorkerArgs {
    /// The flags with the token read from --token-file, if given.
    pub fn with_secret_files(mut self) -> Result<Self, String> {
        if let Some(path) = self.token_file.take() {
            self.token = Some(SecretArg(read_secret_file("--token-file", &path)?));
        }
        Ok(self)
    }

    /// The provider's API key: from its key file flag, else `env_key` (the
    /// variable [`WorkerArgs::api_key_env`] names).
    pub fn api_key(&self, env_key: Option<String>) -> Result<crate::ApiKey, String> {
        let at = self.providers.endpoint(self.api()?);
        let key = match at.key_file {
            Some(path) => read_secret_file(at.key_file_flag, path)?,
            None => env_key
                .filter(|k| !k.is_empty())
                .ok_or_else(|| format!("{} is not set (nor {})", at.key_env, at.key_file_flag))?,
        };
        Ok(crate::ApiKey::new(key))
    }

    /// The variable holding the provider's API key (the default
    /// provider's when the API is not known).
    pub fn api_key_env(&self) -> &'static str {
        let api = self.api().unwrap_or_default();
        self.providers.endpoint(api).key_env
    }

    /// The API the provider speaks: `--provider-api`, else the provider's
    /// own name.
    pub fn api(&self) -> Result<Api, String> {
        match &self.provider_api {
            Some(name) => Api::parse(name).ok_or_else(|| {
                format!(
                    "--provider-api {name:?}: not an API tally speaks ({})",
                    spoken()
                )
            }),
            None => Api::parse(&self.provider).ok_or_else(|| {
                format!(
                    "--provider {:?} names no API: say which one it speaks with --provider-api ({})",
                    self.provider,
                    spoken()
                )
            }),
        }
    }

    /// How to reach tally: the address, the token and the TLS flags.
    pub fn target(&self) -> tally_client::Target {
        tally_client::Target {
            server: self.server.to_string_unredacted(),
            token: self.token.as_ref().map(|t| t.expose().to_string()),
            tls: tally_client::Tls {
                ca: self.tls_ca.clone(),
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
                domain: self.tls_domain.clone(),
            },
        }
    }

    /// Dies at `point` if the test asked for it there.
    pub fn failpoint(&self, point: Failpoint) {
        if self.failpoint == Some(point) {
            eprintln!("failpoint {point:?}: aborting");
            std::process::abort();
        }
    }

    /// `ledgers/{id}` whichever way it was given.
    pub fn ledger_name(&self) -> String {
        if self.ledger.starts_with("ledgers/") {
            self.ledger.clone()
        } else {
            format!("ledgers/{}", self.ledger)
        }
    }

    pub fn worker_name(&self) -> String {
        self.worker_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                let host = crate::holders::host_name().unwrap_or_default();
                let host: String = host.chars().take(96).collect();
                match host.as_str() {
                    "" => format!("tally-worker-{}", std::process::id()),
                    h => format!("tally-worker-{h}-{}", std::process::id()),
                }
            })
    }

    /// Rows asked for in one claim.
    pub fn rows_per_claim(&self) -> i32 {
        if self.lane.is_sync() {
            // A synchronous claim is one wave of calls.
            return i32::try_from(self.calls).unwrap_or(i32::MAX).max(1);
        }
        let cap = i32::try_from(self.max_rows_per_batch).unwrap_or(i32::MAX);
        self.claim_size.clamp(1, cap.max(1))
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.ledger.trim().is_empty() {
            return Err("--ledger is required".into());
        }
        if !tally_core::provider::is_provider_name(&self.provider) {
            return Err(format!(
                "--provider {:?}: lowercase letters, digits and `-`, at most {} characters",
                self.provider,
                tally_core::provider::MAX_PROVIDER
            ));
        }
        let limits = crate::provider::wire_of(self.api()?).batch_limits();
        if let Some(crate::provider::wire::BatchLimits {
            what,
            requests,
            bytes,
            shown,
        }) = limits
        {
            if self.max_rows_per_batch > requests {
                return Err(format!(
                    "--max-rows-per-batch {}: {what} holds at most {requests} requests",
                    self.max_rows_per_batch
                ));
            }
            if self.max_bytes_per_batch > bytes {
                return Err(format!(
                    "--max-bytes-per-batch {}: {what} is at most {bytes} bytes ({shown})",
                    self.max_bytes_per_batch
                ));
            }
        }
        if self.max_rows_per_batch == 0 || self.max_bytes_per_batch == 0 {
            return Err("--max-rows-per-batch and --max-bytes-per-batch must be positive".into());
        }
        if self.max_rows_per_report == 0 {
            return Err("--max-rows-per-report must be positive".into());
        }
        if self.poll_interval.is_zero() || self.heartbeat_interval.is_zero() {
            return Err("--poll-interval and --heartbeat-interval must be positive".into());
        }
        let api = self.api()?;
        if !self.lane.offered_by(api) {
            return Err(format!(
                "--lane {}: the {api} API has no such lane (it offers {})",
                self.lane,
                Lane::ALL
                    .iter()
                    .filter(|l| l.offered_by(api))
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.lane.is_sync() && !(1..=1000).contains(&self.calls) {
            return Err(format!("--calls {}: from 1 to 1000", self.calls));
        }
        if self.call_timeout.is_zero() {
            return Err("--call-timeout must be positive".into());
        }
        if let Some(lease) = self.lease
            && lease <= self.heartbeat_interval
        {
            return Err("--lease must be longer than --heartbeat-interval".into());
        }
        let (least, most) = (tally_core::job::MIN_COOLDOWN, tally_core::job::MAX_COOLDOWN);
        if !(least..=most).contains(&self.refusal_cooldown) {
            let show = |d: Duration| humantime::format_duration(d).to_string();
            return Err(format!(
                "--refusal-cooldown {}: must be from {} to {} (the cool-down tally keeps for a model)",
                show(self.refusal_cooldown),
                show(least),
                show(most)
            ));
        }
        tally_telemetry::http_listener::check(&self.http)
    }
}

/// A lane by name.
fn parse_lane(text: &str) -> Result<Lane, String> {
    Lane::parse(text).ok_or_else(|| {
        format!(
            "{text:?} is not a lane: {}",
            Lane::ALL.map(Lane::name).join(", ")
        )
    })
}

/// Parses `30s`, `5m`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (use forms like 30s, 5m, 1h)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a synchronous call waits 15 minutes by default, the most
    // the providers document for flex, so a flex answer on time is never
    // counted lost (and paid for again).
    #[test]
    fn a_call_waits_as_long_as_flex_is_documented_to_take() {
        let args = WorkerArgs::try_parse_from(["tally-worker", "--ledger", "d", "--lane", "flex"])
            .unwrap();
        assert_eq!(args.call_timeout, Duration::from_secs(15 * 60));
    }

    #[test]
    fn flags_parse_and_validate() {
        let a = WorkerArgs::try_parse_from([
            "tally-worker",
            "--ledger",
            "docs",
            "--claim-size",
            "500",
            "--max-rows-per-batch",
            "100",
            "--poll-interval",
            "250ms",
            "--heartbeat-interval",
            "1s",
            "--lease",
            "3s",
        ])
        .unwrap();
        assert_eq!(a.ledger_name(), "ledgers/docs");
        assert_eq!(a.rows_per_claim(), 100);
        assert_eq!(a.poll_interval, Duration::from_millis(250));
        assert!(a.validate().is_ok());
        let bad = WorkerArgs {
            lease: Some(Duration::from_millis(500)),
            ..a.clone()
        };
        assert!(bad.validate().is_err());
        for (cooldown, ok) in [(0, false), (1, true), (600, true), (601, false)] {
            let c = WorkerArgs {
                refusal_cooldown: Duration::from_secs(cooldown),
                ..a.clone()
            };
            assert_eq!(c.validate().is_ok(), ok, "--refusal-cooldown {cooldown}s");
        }
    }

    /// Invariant: Debug of the flags shows neither tally's token nor the
    /// credentials of a URL, and the token and API key can come from files.
    #[test]
    fn debug_redacts_tokens_and_url_credentials_and_secrets_come_from_files() {
        let a = WorkerArgs::try_parse_from([
            "tally-worker",
            "--ledger",
            "docs",
            "--token",
            "tally_TOPSECRET",
            "--server",
            "https://svc:pw-123@tally:50051",
            "--gemini-base-url",
            "https://proxy.example/?key=AIzaLEAK",
            "--otlp-endpoint",
            "http://otel:otelpass@collector:4317",
        ])
        .unwrap();
        let shown = format!("{a:?}");
        for secret in ["TOPSECRET", "pw-123", "AIzaLEAK", "otelpass"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(a.target().server, "https://svc:pw-123@tally:50051");
        assert_eq!(a.target().token.as_deref(), Some("tally_TOPSECRET"));

        let dir = std::env::temp_dir().join(format!("tally-worker-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "tally_FROMFILE\n").unwrap();
        let key = dir.join("key");
        std::fs::write(&key, "AIzaFROMFILE\n").unwrap();
        let a = WorkerArgs::try_parse_from([
            "tally-worker",
            "--ledger",
            "docs",
            "--token-file",
            token.to_str().unwrap(),
            "--gemini-api-key-file",
            key.to_str().unwrap(),
        ])
        .unwrap()
        .with_secret_files()
        .unwrap();
        assert_eq!(a.target().token.as_deref(), Some("tally_FROMFILE"));
        assert!(format!("{:?}", a.api_key(None).unwrap()).contains(".."));
        let missing = WorkerArgs::try_parse_from(["tally-worker", "--ledger", "d"]).unwrap();
        assert!(
            missing
                .api_key(None)
                .unwrap_err()
                .contains("GEMINI_API_KEY")
        );
        std::fs::write(&key, "\n").unwrap();
        assert!(a.api_key(None).unwrap_err().contains("empty"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // Invariant: a worker runs one provider, speaking a known API, within
    // that API's documented limits; its key comes from that API's variable.
    #[test]
    fn the_provider_and_its_api() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["tally-worker", "--ledger", "d"];
            args.extend_from_slice(extra);
            WorkerArgs::try_parse_from(args).unwrap()
        };
        let default = parse(&[]);
        assert_eq!(
            (default.provider.as_str(), default.api()),
            ("gemini", Ok(Api::Gemini))
        );
        assert_eq!(default.api_key_env(), "GEMINI_API_KEY");
        let openai = parse(&["--provider", "openai"]);
        assert_eq!(openai.api(), Ok(Api::OpenAi));
        assert_eq!(openai.api_key_env(), "OPENAI_API_KEY");
        assert!(openai.api_key(None).unwrap_err().contains("OPENAI_API_KEY"));
        assert!(openai.validate().is_ok());
        let named = parse(&["--provider", "vllm"]);
        assert!(named.validate().unwrap_err().contains("--provider-api"));
        let named = parse(&["--provider", "vllm", "--provider-api", "openai"]);
        assert!(named.validate().is_ok());
        assert!(parse(&["--provider", "Bad Name"]).validate().is_err());
        let too_many = parse(&["--provider", "openai", "--max-rows-per-batch", "50001"]);
        assert!(too_many.validate().unwrap_err().contains("50000"));
        let too_big = parse(&["--provider", "openai", "--max-bytes-per-batch", "300000000"]);
        assert!(too_big.validate().unwrap_err().contains("200 MB"));
    }

    #[test]
    fn help_never_shows_the_token() {
        // Invariant: the variable holding tally's token is hidden in
        // `--help`, and the TLS flags reach the connection unchanged.
        use clap::CommandFactory as _;
        let mut cmd = WorkerArgs::command();
        cmd.build();
        let token = cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == "TALLY_TOKEN"))
            .expect("a TALLY_TOKEN flag");
        assert!(token.is_hide_env_values_set());
        let a = WorkerArgs::try_parse_from([
            "tally-worker",
            "--ledger",
            "docs",
            "--server",
            "https://tally:50051",
            "--tls-ca",
            "/etc/tally/ca.pem",
        ])
        .unwrap();
        let t = a.target();
        assert_eq!(t.server, "https://tally:50051");
        assert_eq!(t.tls.ca, Some(PathBuf::from("/etc/tally/ca.pem")));
    }
}

//! The command line (clap derive). Global flags read `TALLY_*` variables;
//! durations are human (`30s`, `5m`). Every command and flag has one doc
//! line, which is its `--help`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// tallyctl: operate a tally server (ledgers, rows, jobs, operations, locks,
/// prompts) and plan page datasets.
#[derive(Debug, Parser)]
#[command(
    name = "tallyctl",
    version = tally_version::LONG,
    about,
    long_about = None,
    after_help = AFTER_HELP,
)]
pub struct Cli {
    /// The tally server's gRPC address (http:// or https://) [default:
    /// the profile's, else http://127.0.0.1:50051].
    #[arg(long, env = "TALLY_SERVER", global = true)]
    pub server: Option<String>,

    /// Bearer token sent as `authorization: Bearer <token>` on every call.
    #[arg(long, env = "TALLY_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,

    /// File holding the bearer token (instead of --token).
    #[arg(
        long,
        env = "TALLY_TOKEN_FILE",
        global = true,
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,

    /// PEM file of the CA that signed the server's certificate (https only;
    /// without it, the system's root certificates are trusted).
    #[arg(long, env = "TALLY_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, env = "TALLY_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "TALLY_TLS_KEY", global = true)]
    pub tls_key: Option<PathBuf>,

    /// Server name to verify in its certificate (default: the --server host).
    #[arg(long, env = "TALLY_TLS_DOMAIN", global = true)]
    pub tls_domain: Option<String>,

    /// Named profile of the config file (server, token file, CA, timeout).
    #[arg(long, env = "TALLYCTL_PROFILE", global = true, value_name = "NAME")]
    pub profile: Option<String>,

    /// How long one call may wait for the server's answer [default: the
    /// profile's, else 30s]; streams (watch) are bounded only while they
    /// open.
    #[arg(long, env = "TALLY_TIMEOUT", global = true, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Print JSON for scripts instead of tables (errors go to stderr as
    /// JSON); the same as `-o json`.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// Shown after `--help`: exit codes and where settings come from.
pub const AFTER_HELP: &str = "\
Exit codes:
  0    ok
  1    usage or input error: bad flags, config file, input file or line
       (nothing, or only what came before the bad line, was sent); also
       CONFLICT rows with --fail-on-conflict (enroll, plan --enroll)
  2    the server answered with an error, or could not be reached in time
       (its gRPC code and message are printed, and the address)
  3    rows ended PERMANENT (status, watch with --fail-on-permanent)
  4    the lock is held by someone else (locks acquire)
  130  interrupted (export, after printing its resume cursor)

Settings: each from its flag, else its TALLY_* variable, else the profile
(--profile, TALLYCTL_PROFILE or the file's default_profile) of the config
file ($TALLYCTL_CONFIG, else ~/.config/tally/config.toml), else the default.
Shell completions: tallyctl completion bash|zsh|fish.";

/// `-o` and `--no-headers`, on every command that lists or shows
/// resources.
#[derive(Debug, Clone, Copy, Args, Default)]
pub struct OutputArgs {
    /// Output format: table (default), wide (more columns), json, jsonl
    /// (one object per line), yaml.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<crate::output::Format>,
    /// Print tables without their header line.
    #[arg(long)]
    pub no_headers: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ledgers and their policy.
    #[command(subcommand)]
    Ledgers(LedgersCmd),
    /// Enroll rows from a JSONL file (`-` for stdin), in chunks: tally's
    /// rows, or OpenAI / Anthropic batch requests (--format).
    Enroll(EnrollArgs),
    /// A ledger's summary: counts, attempts, tokens, cost, PERMANENT by rule.
    #[command(visible_alias = "summary")]
    Status(StatusArgs),
    /// Rows: list (filtered) and get (one, with its attempts history).
    Rows(RowsCmd),
    /// Old spelling of `rows get`.
    #[command(hide = true)]
    Row(RowArgs),
    /// Put PERMANENT/BLOCKED rows back to PENDING (budgets renewed).
    Redrive(RedriveArgs),
    /// Jobs: list (a ledger's) and get (one).
    Jobs(JobsCmd),
    /// Old spelling of `jobs get`.
    #[command(hide = true)]
    Job(JobArgs),
    /// Live progress per job and for the ledger until every row is terminal.
    Watch(WatchArgs),
    /// Provider operations: list and get (optionally with the event log).
    Operations(OperationsCmd),
    /// Old spelling of `operations get`.
    #[command(hide = true)]
    Operation(OperationArgs),
    /// Named run locks.
    #[command(subcommand)]
    Locks(LocksCmd),
    /// Prompt templates.
    #[command(subcommand)]
    Prompts(PromptsCmd),
    /// Golden rows: known-answer requests that catch the model behind an
    /// alias changing (set from a JSONL file, get with their drift).
    #[command(subcommand)]
    Golden(GoldenCmd),
    /// Plan (and optionally enroll) a page dataset from its files.
    Plan(PlanArgs),
    /// Stream a ledger's rows with their results as JSONL, OpenAI batch
    /// output, CSV or Parquet (resumable with --after).
    Export(ExportArgs),
    /// A ledger's finished results through a named consumer, as JSONL,
    /// each acknowledged once its line is written (resumes where the
    /// consumer left off; a kill loses nothing).
    Consume(ConsumeArgs),
    /// Print a shell completion script (e.g. `source <(tallyctl
    /// completion bash)`).
    Completion(CompletionArgs),
}

impl Command {
    /// The command's `-o`/`--no-headers`, when it has them.
    pub fn output_args(&self) -> Option<OutputArgs> {
        match self {
            Command::Ledgers(l) => match l {
                LedgersCmd::List { out }
                | LedgersCmd::Get { out, .. }
                | LedgersCmd::Create { out, .. }
                | LedgersCmd::Update { out, .. }
                | LedgersCmd::Pause { out, .. }
                | LedgersCmd::Resume { out, .. } => Some(*out),
                LedgersCmd::CacheDryRun(a) => Some(a.out),
                LedgersCmd::Delete { .. } | LedgersCmd::Archive { .. } => None,
            },
            Command::Status(a) => Some(a.out),
            Command::Rows(r) => Some(match &r.verb {
                Some(RowsVerb::List(a)) => a.out,
                Some(RowsVerb::Get(a)) => a.out,
                None => r.legacy.out,
            }),
            Command::Row(a) => Some(a.out),
            Command::Jobs(j) => Some(match &j.verb {
                Some(JobsVerb::List(a)) => a.out,
                Some(JobsVerb::Get(a) | JobsVerb::HandOver(a)) => a.out,
                Some(JobsVerb::ResolveCreate(a)) => a.out,
                None => j.legacy.out,
            }),
            Command::Job(a) => Some(a.out),
            Command::Operations(o) => Some(match &o.verb {
                Some(OperationsVerb::List(a)) => a.out,
                Some(OperationsVerb::Get(a)) => a.out,
                None => o.legacy.out,
            }),
            Command::Operation(a) => Some(a.out),
            Command::Prompts(p) => match p {
                PromptsCmd::Register { out, .. }
                | PromptsCmd::Page { out, .. }
                | PromptsCmd::Get { out, .. } => Some(*out),
            },
            Command::Golden(g) => match g {
                GoldenCmd::Set { out, .. } | GoldenCmd::Get { out, .. } => Some(*out),
            },
            Command::Enroll(_)
            | Command::Redrive(_)
            | Command::Watch(_)
            | Command::Locks(_)
            | Command::Plan(_)
            | Command::Export(_)
            | Command::Consume(_)
            | Command::Completion(_) => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `rows list|get`; `rows LEDGER [filters]` (the old spelling) still
/// lists.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RowsCmd {
    #[command(subcommand)]
    pub verb: Option<RowsVerb>,
    #[command(flatten)]
    pub legacy: RowsLegacy,
}

/// The old `rows LEDGER [filters]`: [`RowsArgs`] with the ledger optional
/// (clap cannot tell an absent `Option<RowsArgs>` whose fields are
/// flattened structs).
#[derive(Debug, Args)]
pub struct RowsLegacy {
    /// Ledger id.
    pub ledger: Option<String>,
    #[command(flatten)]
    pub filter: RowFilterArgs,
    /// Most rows to print (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Payload, result and whole error messages too.
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl RowsLegacy {
    /// The `rows list` arguments, when a ledger was given.
    pub fn into_list(self) -> Option<RowsArgs> {
        Some(RowsArgs {
            ledger: self.ledger?,
            filter: self.filter,
            limit: self.limit,
            full: self.full,
            out: self.out,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum RowsVerb {
    /// List a ledger's rows, filtered.
    List(RowsArgs),
    /// One row with its attempts history.
    Get(RowArgs),
}

/// `jobs list|get`; `jobs LEDGER` (the old spelling) still lists.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct JobsCmd {
    #[command(subcommand)]
    pub verb: Option<JobsVerb>,
    #[command(flatten)]
    pub legacy: JobsLegacy,
}

/// The old `jobs LEDGER [--state …]`: [`JobsArgs`] with the ledger
/// optional.
#[derive(Debug, Args)]
pub struct JobsLegacy {
    /// Ledger id.
    pub ledger: Option<String>,
    /// Only jobs in this state (repeatable).
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<String>,
    /// Most jobs to print (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl JobsLegacy {
    /// The `jobs list` arguments, when a ledger was given.
    pub fn into_list(self) -> Option<JobsArgs> {
        Some(JobsArgs {
            ledger: self.ledger?,
            states: self.states,
            limit: self.limit,
            out: self.out,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum JobsVerb {
    /// List a ledger's jobs.
    List(JobsArgs),
    /// One job.
    Get(JobArgs),
    /// End a job's lease now, so the next worker adopts it at once (a job
    /// whose worker died; a worker that still runs is fenced and loses
    /// nothing).
    HandOver(JobArgs),
    /// Ends a CREATING job's lost-create search by what the operator found
    /// at the provider: `--batch NAME` (the batch exists: the job follows
    /// it) or `--never-made` (no such batch: the rows go back without an
    /// attempt). For a job `jobs list` shows `CREATING (unresolved)`.
    ResolveCreate(ResolveCreateArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("found").required(true).args(["batch", "never_made"])))]
pub struct ResolveCreateArgs {
    /// `ledgers/{ledger}/jobs/{job}` or `{ledger}/{job}`.
    pub name: String,
    /// The provider's batch made for the job, found by its tag: its id
    /// (`batch_abc`, `msgbatch_abc`) or name (`batches/abc`).
    #[arg(long)]
    pub batch: Option<String>,
    /// The provider has no batch of the job: nothing was made.
    #[arg(long)]
    pub never_made: bool,
    /// What was found, recorded as the job's error (with --never-made).
    #[arg(long, default_value = "")]
    pub reason: String,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `operations list|get`; bare `operations [--state …]` (the old
/// spelling) still lists.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OperationsCmd {
    #[command(subcommand)]
    pub verb: Option<OperationsVerb>,
    #[command(flatten)]
    pub legacy: OperationsArgs,
}

#[derive(Debug, Subcommand)]
pub enum OperationsVerb {
    /// List provider operations.
    List(OperationsArgs),
    /// One operation, optionally with its event log.
    Get(OperationArgs),
}

/// The command line as tallyctl parses it and prints its help: the derive,
/// with the old spellings' arguments hidden from `rows`, `jobs` and
/// `operations` (their `list` verb shows them).
pub fn command() -> clap::Command {
    use clap::CommandFactory as _;
    let hide = |c: clap::Command| c.mut_args(|a| a.hide(true));
    Cli::command()
        .mut_subcommand("rows", hide)
        .mut_subcommand("jobs", hide)
        .mut_subcommand("operations", hide)
}

/// Parses the command line (see [`command`]).
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches as _;
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// `ledgers cache-dry-run`.
#[derive(Debug, Args)]
pub struct CacheDryRunArgs {
    /// Ledger id.
    pub ledger: String,
    /// The tally-worker that renders the rows (default: the one beside
    /// tallyctl, else `tally-worker` on PATH).
    #[arg(long, env = "TALLY_WORKER_BIN")]
    pub worker_bin: Option<std::path::PathBuf>,
    /// The worker's flags after `--`: its provider and base URL, as it runs
    /// (its key comes from its environment, as always).
    #[arg(last = true)]
    pub worker_args: Vec<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum LedgersCmd {
    /// List every ledger.
    List {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Show one ledger and its policy.
    Get {
        /// Ledger id (`reviews-nightly` or `ledgers/reviews-nightly`).
        ledger: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Create a ledger; unset policy fields take the server's defaults.
    Create {
        /// Ledger id: 1-63 of [a-z0-9-], starting with a letter.
        ledger: String,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Change the policy fields given (only those).
    Update {
        /// Ledger id.
        ledger: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Fail with ABORTED if the ledger changed since this etag was read.
        #[arg(long)]
        etag: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Delete a ledger and everything in it. The ledger disappears from
    /// every call at once; its contents are purged in the background.
    /// Refused while claims are live or jobs open, unless --force.
    Delete {
        /// Ledger id.
        ledger: String,
        /// Delete even with live claims and open jobs: the claims are
        /// expired (late reports answer NOT_FOUND) and the jobs abandoned.
        /// Batches still running at the provider are NOT cancelled and may
        /// still be billed: cancel them first.
        #[arg(long)]
        force: bool,
        /// Wait until the purge has finished, showing its progress.
        #[arg(long)]
        wait: bool,
        /// How often --wait polls the ledger.
        #[arg(long, default_value = "1s")]
        interval: String,
        /// Fail with ABORTED if the ledger changed since this etag was read.
        #[arg(long)]
        etag: Option<String>,
    },
    /// Pause a ledger: no more claims or jobs; claims and jobs already out
    /// run to their end (reports are accepted, batches reconciled). Rows
    /// can still be enrolled; they wait for `resume`. Pausing a paused
    /// ledger changes nothing.
    Pause {
        /// Ledger id.
        ledger: String,
        /// Why (shown with the pause, with your name and the time).
        #[arg(long)]
        reason: String,
        /// Fail with ABORTED if the ledger changed since this etag was read.
        #[arg(long)]
        etag: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Resume a paused ledger (whatever paused it): claims are handed out
    /// again. Resuming an active ledger changes nothing.
    Resume {
        /// Ledger id.
        ledger: String,
        /// Fail with ABORTED if the ledger changed since this etag was read.
        #[arg(long)]
        etag: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Export every row to a new file, then delete the ledger: the delete
    /// is sent only after the export is complete and fsynced, and only if
    /// the ledger did not change while it was exported. Refused while rows
    /// are RUNNING or jobs open (stop the workers, or let them finish).
    /// What the result cache would answer of the ledger's unclaimed rows:
    /// a tally-worker renders them as it would send them and asks tally;
    /// nothing is claimed, sent or written. Give the worker's provider
    /// flags after `--`.
    CacheDryRun(CacheDryRunArgs),
    Archive {
        /// Ledger id.
        ledger: String,
        /// The archive file; must not exist yet.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Archive format.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: crate::export::ExportFormat,
        /// Wait until the purge has finished, showing its progress.
        #[arg(long)]
        wait: bool,
    },
}

#[derive(Debug, Clone, Args, Default)]
pub struct PolicyArgs {
    /// Model for rows that do not name one.
    #[arg(long)]
    pub model: Option<String>,
    /// Attempts allowed for transient provider errors.
    #[arg(long)]
    pub provider_budget: Option<i32>,
    /// Attempts allowed for unusable answers (empty, schema failures).
    #[arg(long)]
    pub content_budget: Option<i32>,
    /// Attempts allowed for our side's failures (lease expiry, failed jobs).
    #[arg(long)]
    pub infra_budget: Option<i32>,
    /// Default claim lease (e.g. 30m).
    #[arg(long)]
    pub lease: Option<String>,
    /// Delay before a failed row's first retry (e.g. 30s; default 30s).
    #[arg(long)]
    pub backoff_initial: Option<String>,
    /// Longest delay between retries (e.g. 1h; default 1h).
    #[arg(long)]
    pub backoff_max: Option<String>,
    /// Growth of the delay per retry (1 to 10; default 2).
    #[arg(long)]
    pub backoff_multiplier: Option<f64>,
    /// Spread of each delay, a fraction (0 to 1; default 0.2).
    #[arg(long)]
    pub backoff_jitter: Option<f64>,
    /// Longest a partial batch waits for more rows (e.g. 10m, the default;
    /// 0s: claims take what is runnable at once).
    #[arg(long)]
    pub batch_fill_wait: Option<String>,
    /// A partial batch waits while rows arrived this recently (default 5s).
    #[arg(long)]
    pub batch_fill_quiet: Option<String>,
    /// Concurrently active jobs allowed.
    #[arg(long)]
    pub max_active_jobs: Option<i32>,
    /// PERMANENT count that triggers an alert (0: none).
    #[arg(long)]
    pub review_threshold: Option<i64>,
    /// Where alerts are POSTed (empty: none).
    #[arg(long)]
    pub alert_url: Option<String>,
    /// Price of a model in USD per million tokens,
    /// `MODEL[@LANE]=INPUT,OUTPUT[,CACHED_INPUT[,THINKING]]` (cached input
    /// defaults to the input price, thinking to the output price; without
    /// `@LANE` the batch price; repeatable; on update it replaces the whole
    /// table).
    #[arg(long = "price", value_name = "MODEL[@LANE]=IN,OUT[,CACHED[,THINK]]")]
    pub prices: Vec<String>,
    /// The lanes the ledger's rows may take, comma-separated: `batch`,
    /// `flex`, `standard`, `priority` (default batch alone).
    #[arg(long, value_delimiter = ',', value_name = "LANE,…")]
    pub lanes: Vec<String>,
    /// When every row should be final: an RFC 3339 time, or a duration
    /// from now (`2h`); `none` removes it. With one, deep chains go by the
    /// cheapest synchronous lane that still finishes them in time.
    #[arg(long, value_name = "TIME|DURATION|none")]
    pub deadline: Option<String>,
    /// How long one link takes in a lane before the ledger has history:
    /// `LANE=DURATION` (repeatable; e.g. `batch=20m`; unnamed lanes keep
    /// their defaults: batch 1h, flex 1m, standard 10s, priority 5s).
    #[arg(long = "turnaround", value_name = "LANE=DURATION")]
    pub turnarounds: Vec<String>,
    /// Serve rows whose exact request was answered before from the result
    /// cache, answers at most this old (`30d`); `off` turns it off (see
    /// services/server/README.md, "Result cache").
    #[arg(long, value_name = "MAX_AGE|off")]
    pub result_cache: Option<String>,
    /// Whose cached answers the ledger is served: `team` (the default) or
    /// `shared` (also what other sharing teams answered; shares its own).
    #[arg(long, value_name = "team|shared", requires = "result_cache")]
    pub result_cache_scope: Option<String>,
    /// When a row asked again answers differently, ask again the succeeded
    /// rows whose prompts used its old answer (`on`), or only mark them
    /// (`off`, the default).
    #[arg(long, value_name = "on|off")]
    pub rerun_dependants: Option<String>,
    /// Spend cap in USD (needs a --price for every model the rows use).
    /// Any spend-cap flag sets the whole cap: limits not given are none.
    #[arg(long)]
    pub max_cost_usd: Option<f64>,
    /// Spend cap in input tokens.
    #[arg(long)]
    pub max_input_tokens: Option<i64>,
    /// Spend cap in output tokens (thinking tokens count as output).
    #[arg(long)]
    pub max_output_tokens: Option<i64>,
    /// Fraction of a spend limit at which a warning alert is sent (default
    /// 0.8).
    #[arg(long)]
    pub spend_warn_fraction: Option<f64>,
    /// Output tokens a row is estimated at before its report (default
    /// 1024; set it near the prompt's max_output_tokens).
    #[arg(long)]
    pub output_tokens_per_row: Option<i64>,
    /// Remove the spend cap.
    #[arg(long, conflicts_with_all = ["max_cost_usd", "max_input_tokens", "max_output_tokens", "spend_warn_fraction", "output_tokens_per_row"])]
    pub no_spend_cap: bool,
}

#[derive(Debug, Args)]
pub struct EnrollArgs {
    /// Ledger id.
    pub ledger: String,
    /// JSONL file, one row per line (`-`: standard input).
    pub file: PathBuf,
    /// The file's format: tally's own rows, OpenAI batch input lines, or
    /// Anthropic Message Batches requests (kept as written for a ledger of
    /// that provider's model, converted to Gemini requests for a Gemini
    /// ledger).
    #[arg(long, value_enum, default_value = "tally")]
    pub format: crate::formats::InputFormat,
    /// Rows per EnrollRows call.
    #[arg(long, default_value_t = 1000)]
    pub chunk: usize,
    /// Report bad lines and go on instead of stopping at the first.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// Exit 1 when any row was a CONFLICT (same key, other content).
    #[arg(long)]
    pub fail_on_conflict: bool,
    /// Check every line, send nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Ledger id.
    pub ledger: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: crate::export::ExportFormat,
    /// Write to this file (default: standard output). Created or truncated;
    /// with --after, continued (except Parquet, which needs a new file).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only rows with this status (repeatable).
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
    /// Only rows whose latest verdict came from this rule.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only rows for this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Only rows of this prompt (`name` or `name@version`).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Continue after this cursor (printed by an interrupted or failed
    /// export; give the same filters).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Rows per ListRows call (1-1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub page_size: i32,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Ledger id.
    pub ledger: String,
    /// Consumer id (its cursor and leases are the server's: every instance
    /// started with the same one shares them).
    pub consumer: String,
    /// Create the consumer first if it does not exist (starting at --start).
    #[arg(long)]
    pub create: bool,
    /// Where a consumer made by --create starts.
    #[arg(long, value_enum, default_value = "beginning", requires = "create")]
    pub start: ConsumeStart,
    /// Results per receive (1-1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch: u32,
    /// Acknowledge after this many lines are written (1: after each line;
    /// a kill may repeat up to this many lines).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub ack_every: u32,
    /// How long each receive waits for results (at most 20s).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub wait: std::time::Duration,
    /// Lease what is received for this long (default: the consumer's
    /// visibility timeout).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub visibility: Option<std::time::Duration>,
    /// Stop once a receive that waited finds nothing.
    #[arg(long)]
    pub until_empty: bool,
    /// Stop after this many lines.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Each line carries its row's payload too.
    #[arg(long)]
    pub include_payload: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsumeStart {
    /// Every result the ledger's log holds.
    Beginning,
    /// Only results logged from now on.
    Now,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Ledger id.
    pub ledger: String,
    /// Exit 3 when any row is PERMANENT.
    #[arg(long)]
    pub fail_on_permanent: bool,
    /// Also forecast the unfinished rows: when they finish and what they
    /// cost under the ledger's routing and with every row in batch.
    #[arg(long)]
    pub forecast: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Clone, Args, Default)]
pub struct RowFilterArgs {
    /// Only rows with this status (repeatable: pending, running, retryable,
    /// succeeded, permanent, blocked).
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
    /// Only rows whose latest verdict came from this rule.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only rows for this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Only rows of this prompt (name).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Only rows of this prompt version.
    #[arg(long)]
    pub prompt_version: Option<String>,
    /// Only rows whose latest job is this (`{job}` or its full name).
    #[arg(long)]
    pub job: Option<String>,
    /// Only rows this job was made with, even those a later job carried
    /// again (`{job}` or its full name).
    #[arg(long)]
    pub in_job: Option<String>,
    /// Only rows served from the result cache an answer cached before
    /// golden rows saw its model drift.
    #[arg(long)]
    pub stale_cache: bool,
    /// Only SUCCEEDED rows answered from a dependency's result that has
    /// changed since (ask them again with `redrive --include-succeeded`).
    #[arg(long)]
    pub inputs_changed: bool,
}

#[derive(Debug, Args)]
pub struct RowsArgs {
    /// Ledger id.
    pub ledger: String,
    #[command(flatten)]
    pub filter: RowFilterArgs,
    /// Most rows to print (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Payload, result and whole error messages too.
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct RowArgs {
    /// Ledger id.
    pub ledger: String,
    /// The row's key.
    pub key: String,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// Ledger id.
    pub ledger: String,
    /// These keys (comma-separated).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["statuses", "rule", "model", "prompt", "prompt_version", "job", "in_job", "inputs_changed"])]
    pub keys: Vec<String>,
    #[command(flatten)]
    pub filter: RowFilterArgs,
    /// Count what would happen, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also ask SUCCEEDED rows again (their results are kept as
    /// superseded). With --dry-run: how many, the dependants at risk and
    /// what it costs.
    #[arg(long)]
    pub include_succeeded: bool,
    /// Why (recorded with the redrive).
    #[arg(long, default_value = "")]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Ledger id.
    pub ledger: String,
    /// Only jobs in this state (repeatable).
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<String>,
    /// Most jobs to print (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct JobArgs {
    /// `ledgers/{ledger}/jobs/{job}` or `{ledger}/{job}`.
    pub name: String,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Ledger id.
    pub ledger: String,
    /// Exit 3 when rows ended PERMANENT.
    #[arg(long)]
    pub fail_on_permanent: bool,
    /// How often the ledger summary is polled.
    #[arg(long, default_value = "1s")]
    pub interval: String,
}

#[derive(Debug, Args)]
pub struct OperationsArgs {
    /// Only operations in this state (repeatable).
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<String>,
    /// Most operations to print (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct OperationArgs {
    /// `operations/batches/abc` or any spelling of the batch name.
    pub name: String,
    /// The event log too (source, verdict, reason of every event).
    #[arg(long)]
    pub events: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum LocksCmd {
    /// Take a lock; exits 4 (printing the holder) when someone else has it.
    Acquire {
        /// Lock id or `locks/{id}`.
        name: String,
        /// Who is taking it (recorded; shown to others).
        #[arg(long, default_value_t = default_owner())]
        owner: String,
        /// How long it is held without renewal.
        #[arg(long, default_value = "10m")]
        ttl: String,
    },
    /// Extend a held lock.
    Renew {
        /// Lock id or `locks/{id}`.
        name: String,
        /// The token the acquire printed.
        #[arg(long, env = "TALLY_LOCK_TOKEN", hide_env_values = true)]
        token: String,
        /// New time to live from now.
        #[arg(long, default_value = "10m")]
        ttl: String,
    },
    /// Release a held lock.
    Release {
        /// Lock id or `locks/{id}`.
        name: String,
        /// The token the acquire printed.
        #[arg(long, env = "TALLY_LOCK_TOKEN", hide_env_values = true)]
        token: String,
    },
}

fn default_owner() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "tallyctl".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        format!("{user}/tallyctl")
    } else {
        format!("{user}@{host}/tallyctl")
    }
}

#[derive(Debug, Subcommand)]
pub enum PromptsCmd {
    /// Register an immutable prompt version.
    Register {
        /// Prompt id: 1-63 of [a-z0-9_-].
        id: String,
        /// Version: 1-63 of [A-Za-z0-9._-].
        version: String,
        /// Jinja-compatible template file.
        #[arg(long)]
        template_file: PathBuf,
        /// JSON Schema file the answer must match.
        #[arg(long)]
        schema_file: Option<PathBuf>,
        /// System instruction file.
        #[arg(long)]
        system_file: Option<PathBuf>,
        /// A template variable that is a media reference (a file sent after
        /// the prompt's text, e.g. a page image); repeat for several. Each
        /// row's value of it is `{"uri", "sha256", "mime_type"?}`; `tallyctl
        /// enroll --media-root` fills in the hash of a path.
        #[arg(long = "media", value_name = "VARIABLE")]
        media: Vec<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Register (or find) a ledger's page prompt, `LEDGER@pages-v1`: the
    /// prompt `tallyctl plan --enroll` uses when none is named, with the page
    /// image as its media variable `image`.
    Page {
        /// The ledger (its id is the prompt's).
        ledger: String,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Show one prompt version (`name@version` or `prompts/{p}/versions/{v}`).
    Get {
        /// The prompt.
        name: String,
        #[command(flatten)]
        out: OutputArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum GoldenCmd {
    /// Replace a ledger's golden rows with a JSONL file's (`-`: stdin), one
    /// object a line: `{"key", "payload" (object), "prompt": "name@version"
    /// (optional), "expected" (the answer's JSON), "fields": ["/label"]
    /// (optional: compare only these)}`. An empty file turns them off.
    Set {
        ledger: String,
        file: PathBuf,
        /// The first job and every Nth carry them (default 10).
        #[arg(long, default_value_t = 10)]
        every_nth_job: i32,
        /// Latest results the mismatch rate is read over (default 20).
        #[arg(long, default_value_t = 20)]
        window: i32,
        /// Drift above this fraction of a full window (default 0.2).
        #[arg(long, default_value_t = 0.2)]
        max_mismatch_fraction: f64,
        /// Drift pauses the ledger (reason model_drift), besides the alert.
        #[arg(long)]
        pause_on_drift: bool,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// A ledger's golden rows and what their latest results say.
    Get {
        ledger: String,
        #[command(flatten)]
        out: OutputArgs,
    },
}

/// What the payload carries of the first-pass result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FirstPass {
    /// Its parsed JSON content (`first_pass`), read at enroll time.
    Content,
    /// Only its path (`filter_json`).
    Path,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Images root: {state}/{school}/{year}/{n}.jpg (or .jpeg, .png, .webp).
    #[arg(long, required_unless_present = "from", requires = "results_root")]
    pub images_root: Option<PathBuf>,
    /// First-pass results root holding label_to_curricular/{state}/{school}/{year}/{n}.json
    /// (or that directory itself).
    #[arg(long, requires = "images_root")]
    pub results_root: Option<PathBuf>,
    /// Where the plan JSON is written (an existing different plan is never
    /// overwritten).
    #[arg(long, required_unless_present = "from")]
    pub out: Option<PathBuf>,
    /// Use this existing plan file instead of scanning (with --enroll).
    #[arg(long, conflicts_with_all = ["images_root", "results_root", "out"], requires = "enroll")]
    pub from: Option<PathBuf>,
    /// Leave out pages whose image is missing instead of failing.
    #[arg(long)]
    pub skip_missing_images: bool,
    /// Enroll the plan into this ledger.
    #[arg(long, value_name = "LEDGER")]
    pub enroll: Option<String>,
    /// Prompt every row is rendered with, `name@version`. Without it (and
    /// without --text-only) the ledger's page prompt is registered and used
    /// (`tallyctl prompts page LEDGER`): the page image goes to the model.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Enroll each page's paths and first pass as its request's text, with
    /// no prompt and no image.
    #[arg(long, conflicts_with = "prompt")]
    pub text_only: bool,
    /// Model for every row (default: the ledger's).
    #[arg(long)]
    pub model: Option<String>,
    /// What the payload holds of the first-pass JSON.
    #[arg(long, value_enum, default_value = "content")]
    pub first_pass: FirstPass,
    /// Rows per EnrollRows call.
    #[arg(long, default_value_t = 1000)]
    pub chunk: usize,
    /// Exit 1 when any row was a CONFLICT.
    #[arg(long)]
    pub fail_on_conflict: bool,
    /// When every page should be done (with --enroll): an RFC 3339 time or
    /// a duration from now (`10m`, `2h`). The ledger then routes the deep
    /// part of each book's chain by a synchronous lane of --lanes, and the
    /// forecast is printed; run a worker for each lane.
    #[arg(long, value_name = "TIME|DURATION", requires = "enroll")]
    pub deadline: Option<String>,
    /// The lanes the pages may take with --deadline (default batch,flex).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LANE,…",
        requires = "deadline"
    )]
    pub lanes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn globals_go_anywhere_and_summary_is_status() {
        let cli = Cli::try_parse_from([
            "tallyctl",
            "summary",
            "x",
            "--json",
            "--server",
            "http://h:1",
        ])
        .unwrap();
        assert!(cli.json);
        assert_eq!(cli.server.as_deref(), Some("http://h:1"));
        assert!(matches!(cli.command, Command::Status(_)));
    }

    #[test]
    fn old_spellings_still_parse_as_the_noun_verb_commands() {
        // Invariant: every spelling scripts used before noun-verb still
        // parses, to the same arguments the new spelling gives.
        let cli = try_parse_from([
            "tallyctl",
            "rows",
            "l",
            "--status",
            "permanent",
            "-o",
            "yaml",
        ])
        .unwrap();
        let Command::Rows(RowsCmd { verb: None, legacy }) = cli.command else {
            panic!("{:?}", cli.command)
        };
        let a = legacy.into_list().unwrap();
        assert_eq!((a.ledger.as_str(), a.filter.statuses.len()), ("l", 1));
        assert_eq!(a.out.output, Some(crate::output::Format::Yaml));
        let cli = try_parse_from(["tallyctl", "rows", "list", "l", "--limit", "5"]).unwrap();
        let Command::Rows(RowsCmd {
            verb: Some(RowsVerb::List(a)),
            ..
        }) = cli.command
        else {
            panic!()
        };
        assert_eq!((a.ledger.as_str(), a.limit), ("l", 5));
        assert!(matches!(
            try_parse_from(["tallyctl", "row", "l", "k"])
                .unwrap()
                .command,
            Command::Row(_)
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "rows", "get", "l", "k"])
                .unwrap()
                .command,
            Command::Rows(RowsCmd {
                verb: Some(RowsVerb::Get(_)),
                ..
            })
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "jobs", "l", "--state", "running"])
                .unwrap()
                .command,
            Command::Jobs(JobsCmd {
                verb: None,
                legacy: JobsLegacy {
                    ledger: Some(_),
                    ..
                }
            })
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "job", "l/j"]).unwrap().command,
            Command::Job(_)
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "operations"]).unwrap().command,
            Command::Operations(OperationsCmd { verb: None, .. })
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "operation", "abc", "--events"])
                .unwrap()
                .command,
            Command::Operation(_)
        ));
        assert!(matches!(
            try_parse_from(["tallyctl", "operations", "get", "abc"])
                .unwrap()
                .command,
            Command::Operations(OperationsCmd {
                verb: Some(OperationsVerb::Get(_)),
                ..
            })
        ));
    }

    #[test]
    fn help_lists_exit_codes_and_hides_old_spellings() {
        let help = command().render_long_help().to_string();
        for code in ["0 ", "1 ", "2 ", "3 ", "4 ", "130"] {
            assert!(help.contains(&format!("\n  {code}")), "exit {code}: {help}");
        }
        for old in ["\n  row ", "\n  job ", "\n  operation "] {
            assert!(!help.contains(old), "{old} shown in\n{help}");
        }
        let mut cmd = command();
        let rows = cmd.find_subcommand_mut("rows").unwrap();
        let rows_help = rows.render_long_help().to_string();
        assert!(!rows_help.contains("--status"), "{rows_help}");
        assert!(rows_help.contains("list"), "{rows_help}");
    }

    #[test]
    fn json_and_output_are_one_choice() {
        let cli = try_parse_from(["tallyctl", "--json", "ledgers", "list"]).unwrap();
        assert!(cli.json);
        let cli =
            try_parse_from(["tallyctl", "ledgers", "list", "-o", "wide", "--no-headers"]).unwrap();
        let out = cli.command.output_args().unwrap();
        assert_eq!(out.output, Some(crate::output::Format::Wide));
        assert!(out.no_headers);
        assert!(try_parse_from(["tallyctl", "ledgers", "list", "-o", "xml"]).is_err());
    }

    #[test]
    fn redrive_takes_keys_or_a_filter_not_both() {
        let cli = Cli::try_parse_from(["tallyctl", "redrive", "l", "--keys", "a,b"]).unwrap();
        let Command::Redrive(r) = cli.command else {
            panic!()
        };
        assert_eq!(r.keys, vec!["a", "b"]);
        assert!(
            Cli::try_parse_from([
                "tallyctl",
                "redrive",
                "l",
                "--keys",
                "a",
                "--status",
                "permanent"
            ])
            .is_err()
        );
    }

    #[test]
    fn plan_needs_roots_or_a_plan_file() {
        assert!(Cli::try_parse_from(["tallyctl", "plan", "--out", "p.json"]).is_err());
        assert!(
            Cli::try_parse_from([
                "tallyctl",
                "plan",
                "--images-root",
                "i",
                "--results-root",
                "r",
                "--out",
                "p"
            ])
            .is_ok()
        );
        assert!(Cli::try_parse_from(["tallyctl", "plan", "--from", "p.json"]).is_err());
        assert!(
            Cli::try_parse_from(["tallyctl", "plan", "--from", "p.json", "--enroll", "l"]).is_ok()
        );
    }

    #[test]
    fn help_never_shows_a_token() {
        // Invariant: every flag whose variable holds a token hides its
        // value in `--help`, subcommands included.
        use clap::CommandFactory as _;
        fn walk(cmd: &clap::Command, seen: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if let Some(env) = arg.get_env().and_then(|e| e.to_str())
                    && env.ends_with("TOKEN")
                {
                    assert!(arg.is_hide_env_values_set(), "{env} is shown by --help");
                    seen.push(env.to_string());
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, seen);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut seen = Vec::new();
        walk(&cmd, &mut seen);
        assert!(seen.contains(&"TALLY_TOKEN".to_string()), "{seen:?}");
        assert!(seen.contains(&"TALLY_LOCK_TOKEN".to_string()), "{seen:?}");
    }

    #[test]
    fn help_lists_every_exit_code() {
        // Invariant: `--help` documents each code tallyctl can exit with.
        for code in crate::error::ExitCode::ALL {
            let line = format!("\n  {:<4} ", code.code());
            assert!(AFTER_HELP.contains(&line), "{code:?} missing from --help");
        }
    }
}

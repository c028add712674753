//! tallyctl: the operator CLI over tally's gRPC API, and the dataset
//! planner.
//!
//! Layout:
//! - [`cli`]: the command line (clap derive), the only place flags live;
//! - [`connect`]: the flags and [`config`], the config file's profiles,
//!   made into tally-client's connection target (its channel, TLS and mTLS,
//!   bearer token and `--timeout`);
//! - [`commands`]: one module per command group, each a thin "call, then
//!   print a table or a JSON projection";
//! - [`enroll`]: the chunked, streaming enroller shared by `enroll` and
//!   `plan --enroll`; [`jsonl`]: parsing one enroll line;
//! - [`formats`]: OpenAI and Anthropic batch request lines → rows;
//!   [`export`]: rows → JSONL, OpenAI batch output, CSV, Parquet;
//! - [`plan`]: the pure dataset planner, and [`plan::scan`], its file-system
//!   walk;
//! - [`output`]: `-o table|wide|json|jsonl|yaml`, JSON made generically
//!   from the proto descriptors; [`render`]: enum names, times, durations
//!   for tables; [`table`]: aligned tables; [`timefmt`]: times and
//!   durations as tallyctl writes and reads them;
//! - [`error`]: failures and the exit codes scripts rely on.
//!
//! No business logic lives here: the server decides, tallyctl asks and
//! shows.

pub mod cli;
pub mod commands;
pub mod config;
pub mod connect;
pub mod enroll;
pub mod error;
pub mod export;
pub mod formats;
pub mod jsonl;
pub mod output;
pub mod plan;
pub mod render;
pub mod table;
pub mod timefmt;

use connect::Clients;
use error::{CliError, ExitCode};
use indicatif::{ProgressBar, ProgressDrawTarget};
use output::Printer;
use std::io::IsTerminal as _;

/// What every command gets: the clients and how to print.
pub struct Ctx {
    pub clients: Clients,
    /// Where the clients connect, and how (for programs tallyctl runs).
    pub target: tally_client::Target,
    /// Machine output (`-o json|jsonl|yaml`, `--json`): one document on
    /// stdout, no tables, no progress bars, errors as JSON on stderr.
    pub json: bool,
    /// `-o` and `--no-headers`.
    pub printer: Printer,
    /// Progress bars are drawn (stderr is a terminal and not `--json`).
    pub interactive: bool,
}

impl Ctx {
    /// A progress bar on stderr, hidden unless interactive.
    pub fn progress(&self, len: Option<u64>) -> ProgressBar {
        let bar = match len {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        if !self.interactive {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar
    }

    /// Prints a document on stdout in the `-o` format (JSON unless YAML or
    /// JSONL was asked for).
    pub fn print_json(&self, value: &serde_json::Value) {
        print!("{}", self.printer.document(value));
    }

    /// Prints a list of items (see [`Printer::list`]).
    pub fn print_list(&self, key: &str, items: Vec<serde_json::Value>, truncated: Option<bool>) {
        print!("{}", self.printer.list(key, items, truncated));
    }

    /// Prints a table, with its header unless `--no-headers`.
    pub fn print_table(&self, t: &table::Table) {
        print!("{}", self.printer.table(t));
    }
}

/// Runs a parsed command line on a fresh runtime, prints any error (as
/// JSON on stderr with machine output) and returns the exit code.
pub fn main_with(cli: cli::Cli) -> ExitCode {
    let out = cli.command.output_args().unwrap_or_default();
    let json = output::resolve(out.output, cli.json).map_or(cli.json, |f| f.is_machine());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tallyctl: cannot start the runtime: {e}");
            return ExitCode::Input;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            if json {
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("tallyctl: {e}");
            }
            e.exit_code()
        }
    }
}

/// Connects and runs one command. A failure to reach the server names its
/// address (and the profile that gave it).
pub async fn run(cli: cli::Cli) -> Result<ExitCode, CliError> {
    // Needs no server, no config file.
    if let cli::Command::Completion(args) = &cli.command {
        return Ok(commands::completion(args));
    }
    let out = cli.command.output_args().unwrap_or_default();
    let format = output::resolve(out.output, cli.json)?;
    let conn = connect::resolve(&cli)?;
    let mut ctx = Ctx {
        clients: conn.connect()?,
        target: conn.target.clone(),
        json: format.is_machine(),
        printer: Printer {
            format,
            no_headers: out.no_headers,
        },
        interactive: !format.is_machine() && std::io::stderr().is_terminal(),
    };
    commands::dispatch(&mut ctx, cli.command)
        .await
        .map_err(|e| e.naming_server(&conn.describe()))
}

/// `x` or `ledgers/x` → `ledgers/x`.
pub fn ledger_name(arg: &str) -> String {
    if arg.starts_with("ledgers/") {
        arg.to_string()
    } else {
        format!("ledgers/{arg}")
    }
}

/// `x` or `ledgers/x` → `x`.
pub fn ledger_id(arg: &str) -> &str {
    arg.strip_prefix("ledgers/").unwrap_or(arg)
}

/// `ledgers/l/jobs/j` as is, `l/j` → `ledgers/l/jobs/j`.
pub fn job_name(arg: &str) -> Result<String, CliError> {
    if arg.starts_with("ledgers/") {
        return Ok(arg.to_string());
    }
    match arg.split_once('/') {
        Some((l, j)) if !l.is_empty() && !j.is_empty() && !j.contains('/') => {
            Ok(format!("ledgers/{l}/jobs/{j}"))
        }
        _ => Err(CliError::usage(format!(
            "job {arg:?}: give ledgers/{{ledger}}/jobs/{{job}} or {{ledger}}/{{job}}"
        ))),
    }
}

/// A job filter value for a ledger: a bare id becomes the full name.
pub fn job_in_ledger(ledger: &str, job: &str) -> String {
    if job.starts_with("ledgers/") {
        job.to_string()
    } else {
        format!("{}/jobs/{job}", ledger_name(ledger))
    }
}

/// `x` or `locks/x` → `locks/x`.
pub fn lock_name(arg: &str) -> String {
    if arg.starts_with("locks/") {
        arg.to_string()
    } else {
        format!("locks/{arg}")
    }
}

/// `p@v` or `prompts/p/versions/v` → `prompts/p/versions/v`.
pub fn prompt_name(arg: &str) -> Result<String, CliError> {
    if arg.starts_with("prompts/") {
        return Ok(arg.to_string());
    }
    let p = jsonl::parse_prompt_ref(arg).map_err(CliError::usage)?;
    Ok(format!("prompts/{}/versions/{}", p.name, p.version))
}

/// `abc` → `operations/batches/abc`; other spellings go as given (the server
/// normalizes `batches/abc`, `projects/…/batches/abc`, …).
pub fn operation_name(arg: &str) -> String {
    if arg.contains('/') {
        arg.to_string()
    } else {
        format!("operations/batches/{arg}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_short_and_full_forms() {
        assert_eq!(ledger_name("x"), "ledgers/x");
        assert_eq!(ledger_name("ledgers/x"), "ledgers/x");
        assert_eq!(job_name("l/j").unwrap(), "ledgers/l/jobs/j");
        assert_eq!(job_name("ledgers/l/jobs/j").unwrap(), "ledgers/l/jobs/j");
        assert!(job_name("j").is_err());
        assert_eq!(job_in_ledger("l", "j"), "ledgers/l/jobs/j");
        assert_eq!(lock_name("nightly"), "locks/nightly");
        assert_eq!(prompt_name("ocr@v2").unwrap(), "prompts/ocr/versions/v2");
        assert!(prompt_name("ocr").is_err());
        assert_eq!(operation_name("abc"), "operations/batches/abc");
        assert_eq!(operation_name("batches/abc"), "batches/abc");
    }
}

//! One module per command group. Each command makes its calls, then prints
//! either a table (humans; `-o wide` adds columns) or the proto messages as
//! JSON/YAML ([`crate::output`]), and returns the exit code.

mod cache;
pub mod consume;
pub mod enroll;
pub mod export;
pub mod golden;
pub mod jobs;
pub mod ledger_archive;
pub mod ledger_delete;
pub mod ledgers;
pub mod operations;
pub mod pages;
pub mod plan;
pub mod prompts;
pub mod rows;
pub mod watch;

use crate::Ctx;
use crate::cli::{Command, JobsVerb, OperationsVerb, RowsVerb};
use crate::error::{CliError, ExitCode};

pub async fn dispatch(ctx: &mut Ctx, command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Ledgers(cmd) => ledgers::run(ctx, cmd).await,
        Command::Enroll(args) => enroll::run(ctx, args).await,
        Command::Status(args) => rows::status(ctx, args).await,
        Command::Rows(cmd) => match cmd.verb {
            Some(RowsVerb::List(args)) => rows::list(ctx, args).await,
            Some(RowsVerb::Get(args)) => rows::get(ctx, args).await,
            None => match cmd.legacy.into_list() {
                Some(args) => rows::list(ctx, args).await,
                None => Err(CliError::usage(
                    "say what: tallyctl rows list LEDGER, tallyctl rows get LEDGER KEY",
                )),
            },
        },
        Command::Row(args) => rows::get(ctx, args).await,
        Command::Redrive(args) => rows::redrive(ctx, args).await,
        Command::Jobs(cmd) => match cmd.verb {
            Some(JobsVerb::List(args)) => jobs::list(ctx, args).await,
            Some(JobsVerb::Get(args)) => jobs::get(ctx, args).await,
            Some(JobsVerb::HandOver(args)) => jobs::hand_over(ctx, args).await,
            Some(JobsVerb::ResolveCreate(args)) => jobs::resolve_create(ctx, args).await,
            None => match cmd.legacy.into_list() {
                Some(args) => jobs::list(ctx, args).await,
                None => Err(CliError::usage(
                    "say what: tallyctl jobs list LEDGER, tallyctl jobs get LEDGER/JOB, tallyctl jobs hand-over LEDGER/JOB",
                )),
            },
        },
        Command::Job(args) => jobs::get(ctx, args).await,
        Command::Watch(args) => watch::run(ctx, args).await,
        // Bare `operations [--state …]` lists, as it always did.
        Command::Operations(cmd) => match cmd.verb {
            Some(OperationsVerb::List(args)) => operations::list(ctx, args).await,
            Some(OperationsVerb::Get(args)) => operations::get(ctx, args).await,
            None => operations::list(ctx, cmd.legacy).await,
        },
        Command::Operation(args) => operations::get(ctx, args).await,
        Command::Locks(cmd) => jobs::locks(ctx, cmd).await,
        Command::Prompts(cmd) => prompts::run(ctx, cmd).await,
        Command::Golden(cmd) => golden::run(ctx, cmd).await,
        Command::Plan(args) => plan::run(ctx, args).await,
        Command::Export(args) => export::run(ctx, args).await,
        Command::Consume(args) => consume::run(ctx, args).await,
        Command::Completion(args) => Ok(completion(&args)),
    }
}

/// `tallyctl completion SHELL`: the script on stdout, from the same
/// command line tallyctl parses (old spellings hidden).
pub fn completion(args: &crate::cli::CompletionArgs) -> ExitCode {
    let mut cmd = crate::cli::command();
    clap_complete::generate(args.shell, &mut cmd, "tallyctl", &mut std::io::stdout());
    ExitCode::Ok
}

//! One module per command group. Each command makes its calls, then prints
//! either a table (humans) or a JSON projection (`--json`), and returns the
//! exit code.

pub mod enroll;
pub mod export;
pub mod jobs;
pub mod ledger_archive;
pub mod ledger_delete;
pub mod ledgers;
pub mod operations;
pub mod plan;
pub mod prompts;
pub mod rows;
pub mod watch;

use crate::Ctx;
use crate::cli::Command;
use crate::error::{CliError, ExitCode};

pub async fn dispatch(ctx: &mut Ctx, command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Ledgers(cmd) => ledgers::run(ctx, cmd).await,
        Command::Enroll(args) => enroll::run(ctx, args).await,
        Command::Status(args) => rows::status(ctx, args).await,
        Command::Rows(args) => rows::list(ctx, args).await,
        Command::Row(args) => rows::get(ctx, args).await,
        Command::Redrive(args) => rows::redrive(ctx, args).await,
        Command::Jobs(args) => jobs::list(ctx, args).await,
        Command::Job(args) => jobs::get(ctx, args).await,
        Command::Watch(args) => watch::run(ctx, args).await,
        Command::Operations(args) => operations::list(ctx, args).await,
        Command::Operation(args) => operations::get(ctx, args).await,
        Command::Locks(cmd) => jobs::locks(ctx, cmd).await,
        Command::Prompts(cmd) => prompts::run(ctx, cmd).await,
        Command::Plan(args) => plan::run(ctx, args).await,
        Command::Export(args) => export::run(ctx, args).await,
    }
}

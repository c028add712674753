//! The `tallyctl` binary: parse, run, print the error and exit with its
//! code (see [`tallyctl::error::ExitCode`]).

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = match tallyctl::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap exits 2 on usage errors; 2 means "server error" here.
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let code = tallyctl::main_with(cli);
    std::process::ExitCode::from(code.code() as u8)
}

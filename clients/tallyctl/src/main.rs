//! The `tallyctl` binary: parse, run, print the error and exit with its
//! code (see [`tallyctl::error::ExitCode`]).

use tallyctl::error::ExitCode;

fn main() -> std::process::ExitCode {
    let cli = match tallyctl::cli::try_parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            // clap exits 2 on usage errors; 2 means "server error" here.
            let _ = e.print();
            let code = if e.use_stderr() {
                ExitCode::Input
            } else {
                ExitCode::Ok
            };
            return std::process::ExitCode::from(code.code() as u8);
        }
    };
    let code = tallyctl::main_with(cli);
    std::process::ExitCode::from(code.code() as u8)
}

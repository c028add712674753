//! The connection is tally-client's (one lazily connected channel, so an
//! unreachable server is an UNAVAILABLE answer to the first call, exit code
//! 2; TLS for https:// addresses with the system's roots or `--tls-ca`, a
//! client certificate for mTLS; the bearer token on every call). Here the
//! global flags become its [`Target`], and its errors usage errors (exit
//! code 1).

use crate::cli::Cli;
use crate::error::CliError;
pub use tally_client::{AuthChannel as Svc, Clients, ConnectError, Target, Tls};

/// The connection the global flags describe.
pub fn target(cli: &Cli) -> Target {
    Target {
        server: cli.server.clone(),
        token: cli.token.clone(),
        tls: Tls {
            ca: cli.tls_ca.clone(),
            cert: cli.tls_cert.clone(),
            key: cli.tls_key.clone(),
            domain: cli.tls_domain.clone(),
        },
    }
}

impl From<ConnectError> for CliError {
    fn from(e: ConnectError) -> Self {
        CliError::usage(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn flags_become_the_target_and_bad_ones_are_usage_errors() {
        // Invariant: the global TLS flags reach tally-client unchanged, and
        // its refusals keep tallyctl's messages and exit code 1.
        let cli = Cli::try_parse_from([
            "tallyctl",
            "--server",
            "http://example:80",
            "--tls-ca",
            "/nonexistent/ca.pem",
            "ledgers",
            "list",
        ])
        .unwrap();
        let t = target(&cli);
        assert_eq!(
            t.tls.ca.as_deref(),
            Some(std::path::Path::new("/nonexistent/ca.pem"))
        );
        let err = CliError::from(t.connect().err().unwrap());
        assert!(err.to_string().contains("https://"), "{err}");
        assert_eq!(err.exit_code(), crate::error::ExitCode::Input);
    }
}

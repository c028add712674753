//! The connection is tally-client's (one lazily connected channel, so an
//! unreachable server is an UNAVAILABLE answer to the first call, exit code
//! 2; TLS for https:// addresses with the system's roots or `--tls-ca`, a
//! client certificate for mTLS; the bearer token on every call; `--timeout`
//! on every call). Here the global flags and the config file's profile
//! become its [`Target`] (flags and their variables first, then the
//! profile, then the defaults), and its errors usage errors (exit code 1).

use crate::cli::Cli;
use crate::config::{self, Selected};
use crate::error::CliError;
use std::time::Duration;
pub use tally_client::{AuthChannel as Svc, Clients, ConnectError, Target, Tls};

/// Where tallyctl connects, and what told it so (for error messages).
#[derive(Debug, Clone)]
pub struct Conn {
    pub target: Target,
    pub timeout: Duration,
    /// The profile used, and its file.
    pub profile: Option<(String, std::path::PathBuf)>,
}

impl Conn {
    /// `http://host:port (profile "prod" of /path/config.toml)`.
    pub fn describe(&self) -> String {
        match &self.profile {
            Some((name, file)) => format!(
                "{} (profile {name:?} of {})",
                self.target.server,
                file.display()
            ),
            None => self.target.server.clone(),
        }
    }

    pub fn connect(&self) -> Result<Clients, CliError> {
        if let Some(warning) = self.target.plaintext_token_warning() {
            eprintln!("tallyctl: warning: {warning}");
        }
        self.target
            .connect_with_timeout(Some(self.timeout))
            .map_err(|e| {
                let mut m = e.to_string();
                if let Some((name, file)) = &self.profile {
                    m.push_str(&format!(" (profile {name:?} of {})", file.display()));
                }
                CliError::usage(m)
            })
    }
}

/// The connection the global flags and the config file describe.
pub fn resolve(cli: &Cli) -> Result<Conn, CliError> {
    let selected = config::select(config::path(), cli.profile.as_deref())?;
    resolve_with(cli, selected)
}

/// [`resolve`] with the profile already chosen.
pub fn resolve_with(cli: &Cli, selected: Selected) -> Result<Conn, CliError> {
    let p = &selected.profile;
    let token = match (&cli.token, &cli.token_file, &p.token_file) {
        (Some(t), _, _) => Some(t.clone()),
        (None, Some(f), _) => Some(config::read_token(f, "--token-file")?),
        (None, None, Some(f)) => Some(config::read_token(f, "the profile's token_file")?),
        (None, None, None) => None,
    };
    let timeout = match (&cli.timeout, &p.timeout) {
        (Some(t), _) => config::parse_timeout(t, "--timeout")?,
        (None, Some(t)) => config::parse_timeout(t, "the profile's timeout")?,
        (None, None) => config::DEFAULT_TIMEOUT,
    };
    let target = Target {
        server: cli
            .server
            .clone()
            .or_else(|| p.server.clone())
            .unwrap_or_else(|| config::DEFAULT_SERVER.to_string()),
        token,
        tls: Tls {
            ca: cli.tls_ca.clone().or_else(|| p.tls_ca.clone()),
            cert: cli.tls_cert.clone().or_else(|| p.tls_cert.clone()),
            key: cli.tls_key.clone().or_else(|| p.tls_key.clone()),
            domain: cli.tls_domain.clone().or_else(|| p.tls_domain.clone()),
        },
    };
    Ok(Conn {
        target,
        timeout,
        profile: selected.name.zip(selected.file),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Profile;

    fn cli(args: &[&str]) -> Cli {
        let mut all = vec!["tallyctl"];
        all.extend_from_slice(args);
        all.extend(["ledgers", "list"]);
        crate::cli::try_parse_from(all).unwrap()
    }

    fn prod() -> Selected {
        Selected {
            name: Some("prod".into()),
            file: Some("/etc/tally/config.toml".into()),
            profile: Profile {
                server: Some("https://prod:443".into()),
                tls_ca: Some("/etc/ca.pem".into()),
                timeout: Some("5s".into()),
                ..Profile::default()
            },
        }
    }

    #[test]
    fn flags_override_the_profile_which_overrides_defaults() {
        let c = resolve_with(&cli(&[]), prod()).unwrap();
        assert_eq!(c.target.server, "https://prod:443");
        assert_eq!(
            c.target.tls.ca.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert!(
            c.describe().contains("profile \"prod\""),
            "{}",
            c.describe()
        );
        let c = resolve_with(
            &cli(&["--server", "https://other:1", "--timeout", "1m"]),
            prod(),
        )
        .unwrap();
        assert_eq!(c.target.server, "https://other:1");
        assert_eq!(c.timeout, Duration::from_secs(60));
        let c = resolve_with(&cli(&[]), Selected::default()).unwrap();
        assert_eq!(c.target.server, config::DEFAULT_SERVER);
        assert_eq!(c.timeout, config::DEFAULT_TIMEOUT);
        assert_eq!(c.describe(), config::DEFAULT_SERVER);
    }

    #[test]
    fn flags_become_the_target_and_bad_ones_are_usage_errors() {
        // Invariant: the global TLS flags reach tally-client unchanged, and
        // its refusals keep tallyctl's messages and exit code 1.
        let c = resolve_with(
            &cli(&[
                "--server",
                "http://example:80",
                "--tls-ca",
                "/nonexistent/ca.pem",
            ]),
            Selected::default(),
        )
        .unwrap();
        assert_eq!(
            c.target.tls.ca.as_deref(),
            Some(std::path::Path::new("/nonexistent/ca.pem"))
        );
        let err = c.connect().err().unwrap();
        assert!(err.to_string().contains("https://"), "{err}");
        assert_eq!(err.exit_code(), crate::error::ExitCode::Input);
        let err = resolve_with(&cli(&["--timeout", "never"]), Selected::default()).unwrap_err();
        assert!(err.to_string().contains("--timeout"), "{err}");
    }
}

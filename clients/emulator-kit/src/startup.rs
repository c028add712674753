//! What the emulator binaries do around their own flags: tracing set up,
//! the fault plan file read, the webhook flags paired (never unsigned), and
//! a clean stop on Ctrl-C or SIGTERM, the synchronous endpoints' flags.
//! Errors are typed; `main` wraps them.

use std::path::{Path, PathBuf};

use std::time::Duration;

use crate::delivery::WebhookTarget;
use crate::online::{Latency, Limits, OnlineConfig};

/// The flags of the synchronous endpoints, the same in every emulator.
#[derive(Debug, Clone, clap::Args)]
pub struct OnlineArgs {
    /// Requests per minute the account may send to the synchronous
    /// endpoints (a sliding minute; 429 past it); 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub rpm: u32,
    /// Tokens per minute (input, plus the output a request asks for at
    /// most); 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub tpm: u64,
    /// How long a standard or priority answer takes.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub latency: Duration,
    /// How long a flex answer takes.
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    pub flex_latency: Duration,
}

impl OnlineArgs {
    pub fn config(&self) -> OnlineConfig {
        OnlineConfig {
            limits: self.limits(),
            latency: self.latency(),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            rpm: self.rpm,
            tpm: self.tpm,
        }
    }

    pub fn latency(&self) -> Latency {
        Latency {
            standard: self.latency,
            flex: self.flex_latency,
        }
    }
}

/// Why a binary refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("reading fault plan {}", path.display())]
    ReadFaults {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fault plan {}", path.display())]
    Faults {
        path: PathBuf,
        #[source]
        source: Invalid,
    },
    // Unsigned webhooks would teach receivers to skip verification.
    #[error("--webhook-url needs --webhook-secret")]
    UrlWithoutSecret,
    #[error("--webhook-secret without --webhook-url")]
    SecretWithoutUrl,
}

/// Why a fault plan was refused, as its parser said.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Logs to stdout, as JSON lines or text, filtered by `RUST_LOG` (default
/// `info`).
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal, as tally-server's logs: a log
    // redirected to a file (dev.sh's emulator.log) stays plain text
    // (NO_COLOR also turns them off).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour);
    if json {
        fmt.json().init();
    } else {
        fmt.init();
    }
}

/// The fault plan in the file at `path` by the emulator's `parse`, or the
/// default plan without one.
pub fn fault_plan<T: Default>(
    path: Option<&Path>,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, StartupError> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| StartupError::ReadFaults {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|message| StartupError::Faults {
        path: path.to_owned(),
        source: Invalid(message),
    })
}

/// The webhook target of `--webhook-url` and `--webhook-secret`: both or
/// neither.
pub fn webhook_target<P: Default>(
    url: Option<String>,
    secret: Option<String>,
) -> Result<Option<WebhookTarget<P>>, StartupError> {
    match (url, secret) {
        (Some(url), Some(secret)) => Ok(Some(WebhookTarget::new(url, secret))),
        (Some(_), None) => Err(StartupError::UrlWithoutSecret),
        (None, Some(_)) => Err(StartupError::SecretWithoutUrl),
        (None, None) => Ok(None),
    }
}

/// Logs `ready` with the emulator's `base_url` (scripts read it), waits for
/// Ctrl-C or SIGTERM, and logs `stopping`.
pub async fn serve_until_signal(base_url: &str) {
    tracing::info!(base_url = %base_url, "ready");
    wait_for_signal().await;
    tracing::info!("stopping");
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_flags_come_in_pairs() {
        let both = webhook_target::<()>(Some("http://h".into()), Some("whsec_x".into()));
        assert_eq!(both.unwrap().unwrap().url, "http://h");
        assert!(webhook_target::<()>(None, None).unwrap().is_none());
        let err = webhook_target::<()>(Some("http://h".into()), None).unwrap_err();
        assert_eq!(err.to_string(), "--webhook-url needs --webhook-secret");
        let err = webhook_target::<()>(None, Some("whsec_x".into())).unwrap_err();
        assert_eq!(err.to_string(), "--webhook-secret without --webhook-url");
    }

    #[test]
    fn a_fault_plan_is_read_and_parsed_or_defaulted() {
        assert_eq!(fault_plan(None, |_| Ok(7u8)).unwrap(), 0);
        let missing = Path::new("/nonexistent/plan.json");
        let err = fault_plan(Some(missing), |_| Ok(7u8)).unwrap_err();
        assert_eq!(err.to_string(), "reading fault plan /nonexistent/plan.json");
        let dir = std::env::temp_dir().join(format!("kit-plan-{}", std::process::id()));
        std::fs::write(&dir, "{}").unwrap();
        let err = fault_plan::<u8>(Some(&dir), |t| Err(format!("bad {t}"))).unwrap_err();
        assert_eq!(
            std::error::Error::source(&err).unwrap().to_string(),
            "bad {}"
        );
        std::fs::remove_file(&dir).unwrap();
    }
}

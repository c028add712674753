//! Helpers for the emulators' integration tests: an emulator on a free
//! loopback port, waiting for what a background task will do, and JSONL
//! both ways. Not used by the emulators themselves.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::emulator::{Emulator, Service};

/// How long a test waits: generous, as timings stretch on a loaded 2-core
/// machine.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// An emulator of `S` for `config` on a free loopback port (reqwest is
/// built without a bundled TLS provider: one is installed first).
pub async fn start<S: Service>(config: S::Config) -> Emulator<S> {
    crate::delivery::install_crypto();
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("a loopback address");
    Emulator::start(addr, config)
        .await
        .expect("emulator starts")
}

/// Polls `check` until it yields a value, panicking with `what` after
/// [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `lines` as a JSONL file.
pub fn jsonl(lines: &[Value]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

/// A JSONL file's lines, each parsed.
pub fn parse_jsonl(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

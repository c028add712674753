//! Claim names never reach a log in full (issue 17, item 6). A live claim
//! name authorizes ReportOutcomes and FinishJob for its rows, so anyone who
//! can read a log could otherwise forge results; logs show only the first
//! characters of its id (`tally_core::names::claim_for_logs`).
//!
//! A whole run — claim, create, poll, webhooks, reconcile — with the server
//! (in this process) and the worker (its own process) both logging at
//! `debug`; then every claim id the run made is looked for in both logs.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_logs:: -- --nocapture`.

use crate::common;

use common::{World, exits_ok, list_jobs};
use gemini_emulator::FaultPlan;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

const LEDGER: &str = "logs";
const ROWS: usize = 12;

/// Everything the process logs, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Invariant: no claim id appears whole in the server's or the worker's
/// log, even at `debug`, while the log does mention claims (by prefix).
// One thread, so the scoped subscriber below sees every task of this test
// (and none of the other tests sharing this process).
#[tokio::test(flavor = "current_thread")]
async fn claim_names_never_reach_a_log_in_full() {
    let server_log = Captured::default();
    let writer = server_log.clone();
    let _subscriber = tracing_subscriber::fmt()
        .with_env_filter("debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish()
        .set_default();
    let w = World::start(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        tally_proto::v1::AttemptBudgets::default(),
    )
    .await;
    let mut cmd = common::worker_command(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "logger",
        &[
            "--exit-when-idle",
            "--claim-size",
            "4",
            "--max-rows-per-batch",
            "4",
        ],
    );
    cmd.env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut worker = cmd.spawn().expect("spawn tally-worker");
    let mut out = worker.stdout.take().expect("stdout");
    let mut err = worker.stderr.take().expect("stderr");
    let read_out = tokio::spawn(async move {
        let mut s = Vec::new();
        out.read_to_end(&mut s).await.map(|_| s)
    });
    let read_err = tokio::spawn(async move {
        let mut s = Vec::new();
        err.read_to_end(&mut s).await.map(|_| s)
    });
    exits_ok(worker, "the worker").await;
    let mut worker_log = read_out.await.unwrap().expect("worker stdout");
    worker_log.extend(read_err.await.unwrap().expect("worker stderr"));
    let worker_log = String::from_utf8_lossy(&worker_log).into_owned();

    let jobs = list_jobs(&w.c, LEDGER).await;
    let claims: Vec<String> = jobs
        .iter()
        .map(|j| {
            j.claim
                .rsplit('/')
                .next()
                .expect("a claim name has an id")
                .to_string()
        })
        .collect();
    assert!(
        jobs.len() >= 3,
        "12 rows of at most 4 a job: {}",
        jobs.len()
    );
    let server_log = String::from_utf8_lossy(&server_log.0.lock().unwrap()).into_owned();
    println!(
        "{} jobs; server log {} bytes, worker log {} bytes",
        jobs.len(),
        server_log.len(),
        worker_log.len()
    );
    for id in &claims {
        assert_eq!(id.len(), 36, "a claim id is a UUID: {id}");
        for (who, log) in [("server", &server_log), ("worker", &worker_log)] {
            let leak = log.lines().find(|line| line.contains(id.as_str()));
            assert!(
                leak.is_none(),
                "the {who} logged claim {id} in full: {}",
                leak.unwrap_or_default()
            );
        }
    }
    // The check above means something only if the logs talk about claims.
    let prefix = &claims[0][..tally_core::names::LOGGED_CLAIM_CHARS];
    assert!(
        server_log.contains(prefix) || worker_log.contains(prefix),
        "the logs name claims by their prefix ({prefix}…)"
    );
    w.stop().await;
}

//! The account's tokens per minute binding the synchronous lanes: eight
//! workers on one OpenAI account whose emulated limit is in tokens only,
//! rows whose output budget (`max_completion_tokens`) is most of what the
//! provider counts.
//!
//! Invariant: each call asks tally for its input estimate plus its output
//! budget, at least what the provider counts when the call arrives, so
//! the grants of every worker together never take the provider's minute
//! past its limit: no call is refused as over the limit, every row is
//! answered once and succeeds, and the minute's tokens at the emulator
//! stay within the limit while filling most of it (the limit binds). An
//! ask of the input alone would send every row at once and the emulator
//! would refuse the calls past its limit (429s).
//!
//! The minute is the providers' (and tally's 65 s window): the test takes
//! a little over one.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_tpm:: -- --nocapture`.

use std::time::{Duration, Instant};

use openai_emulator::FaultPlan;
use tally_proto::v1 as pb;

use crate::common::{all_rows, exits_ok};
use crate::e2e_online::{MODEL, Online, attempts};

/// The account's tokens per minute, at tally and at the emulator.
const TPM: u64 = 4_000;
/// Each row's output budget: four rows' fit in a minute, five do not.
const MAX_OUTPUT: u64 = 900;
const ROWS: usize = 8;

#[tokio::test]
async fn tokens_per_minute_bind_and_are_never_passed() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "online": {"limits": {"rpm": 0, "tpm": TPM}}
    }))
    .unwrap();
    let w = Online::start_with(
        "tpm",
        &[pb::Lane::Flex],
        0,
        faults,
        Duration::from_millis(10),
        |args| {
            args.provider.provider_rpm = vec!["0".into()];
            args.provider.provider_tpm = vec![format!("{MODEL}={TPM}")];
        },
    )
    .await;
    let rows: Vec<pb::RowInput> = (0..ROWS)
        .map(|i| pb::RowInput {
            key: format!("row-{i:02}"),
            payload: serde_json::json!({
                "messages": [{"role": "user", "content": format!("Summarize archive document {i} of the review in one short line.")}],
                "max_completion_tokens": MAX_OUTPUT,
            })
            .to_string(),
            ..Default::default()
        })
        .collect();
    w.enroll("tpm", rows).await;
    let started = Instant::now();
    // Eight workers, each claiming (and asking for) a row at a time:
    // together they ask for more than the minute holds.
    let flags = ["--calls", "1", "--claim-size", "1", "--exit-when-idle"];
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    futures::future::join_all(
        names
            .iter()
            .map(|name| exits_ok(w.worker("tpm", name, "flex", &flags), "a worker")),
    )
    .await;
    let took = started.elapsed();
    let online = w.emulator.stats().online;
    println!(
        "TPM {TPM}, {ROWS} rows of max {MAX_OUTPUT} output tokens: took {took:?}; emulator peak \
         {} tokens and {} requests in a minute, {} refused as over the limit, {} answered",
        online.peak_tokens_per_minute,
        online.peak_requests_per_minute,
        online.rate_limited,
        online.answered.values().sum::<u64>()
    );
    assert_eq!(online.rate_limited, 0, "no call refused as over the limit");
    assert!(
        online.peak_tokens_per_minute <= TPM,
        "the minute's tokens stayed within the limit"
    );
    assert!(
        online.peak_tokens_per_minute > TPM - MAX_OUTPUT,
        "the limit bound: the minute filled until another row would not fit"
    );
    assert!(
        online.peak_requests_per_minute < ROWS as u64,
        "the rows did not all go in one minute"
    );
    assert_eq!(w.answers_per_row(), vec![1; ROWS], "each row answered once");
    for r in all_rows(&w.c, "tpm").await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        assert_eq!(attempts(&r), 1, "{}: one attempt", r.key);
    }
}

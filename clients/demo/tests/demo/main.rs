//! The README's demo command, run twice on one database.

use std::process::Command;
use tally_pg::TestDb;

fn run_demo(url: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tally-demo"))
        .args(["--database-url", url])
        .args(extra)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The first run ends with every row where its fault puts it (the dataset's
/// 180 good or retried rows SUCCEEDED, 19 PERMANENT, the 3 chapters behind a
/// blocked one BLOCKED, nothing left in flight); the second run of the same
/// command enrolls nothing and sends nothing to the provider (it never pays
/// for a row twice) and finds the same final state.
async fn settles_and_pays_once(extra: &[&str]) {
    let db = TestDb::new().await;
    let final_line = "succeeded=180 retryable=0 permanent=19 blocked=3 pending=0 running=0";

    let first = run_demo(db.url(), extra);
    assert!(
        first.contains("202 rows enrolled (0 already present)"),
        "{first}"
    );
    assert!(first.contains(final_line), "{first}");
    assert!(
        first.contains("BLOCKED       3  chapter-2, chapter-3, chapter-4"),
        "{first}"
    );
    assert!(!first.contains(" 0 batches created"), "{first}");

    let second = run_demo(db.url(), extra);
    assert!(
        second.contains("0 rows enrolled (202 already present)"),
        "{second}"
    );
    assert!(
        second.contains("0 batches created, 0 rows sent"),
        "{second}"
    );
    assert!(second.contains(final_line), "{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_settles_every_row_and_a_second_run_pays_for_nothing() {
    settles_and_pays_once(&[]).await;
}

/// The same on OpenAI's Batch API (`--provider openai`): the same groups,
/// faulted as OpenAI answers them, end in the same place.
#[tokio::test(flavor = "multi_thread")]
async fn the_openai_demo_settles_every_row_and_a_second_run_pays_for_nothing() {
    settles_and_pays_once(&["--provider", "openai"]).await;
}

/// The same on Anthropic's Message Batches (`--provider anthropic`): the
/// same groups, faulted as Anthropic answers them, end in the same place.
#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_demo_settles_every_row_and_a_second_run_pays_for_nothing() {
    settles_and_pays_once(&["--provider", "anthropic"]).await;
}

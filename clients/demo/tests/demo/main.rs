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

/// The README's sample of the demo's ledger summary (the block that opens
/// with `== ledger ledgers/demo ==`), line by line.
fn readme_sample() -> Vec<&'static str> {
    let readme = include_str!("../../../../README.md");
    let start = readme
        .find("```\n== ledger ledgers/demo ==\n")
        .expect("the README's demo sample")
        + "```\n".len();
    let end = start + readme[start..].find("```").expect("the sample's end");
    readme[start..end].lines().collect()
}

/// Whether a line of the README's sample is the same every run. The README
/// says what varies with timing: how many rows needed a retry (the
/// SUCCEEDED line's list), the attempts and tokens, and this run's batches
/// and webhooks.
fn fixed(line: &str) -> bool {
    !(line.is_empty()
        || line.starts_with("SUCCEEDED")
        || line.starts_with("attempts")
        || line.starts_with("this run:"))
}

/// The first run ends with every row where its fault puts it, as the
/// README's sample says (for Gemini, whose sample it is: every line of the
/// sample that does not vary between runs, read from the README; for the
/// other providers, whose ledger and rule texts differ, the summary line,
/// the PERMANENT count and the BLOCKED rows); the second run of the same
/// command enrolls nothing and sends nothing to the provider (it never pays
/// for a row twice) and finds the same final state.
async fn settles_and_pays_once(extra: &[&str]) {
    let db = TestDb::new().await;
    let sample = readme_sample();
    let final_line = *sample
        .iter()
        .find(|l| l.starts_with("succeeded="))
        .expect("the sample's summary line");
    let expected: Vec<&str> = sample
        .iter()
        .copied()
        .filter(|l| fixed(l))
        .filter(|l| {
            extra.is_empty()
                || *l == final_line
                || l.starts_with("PERMANENT")
                || l.starts_with("BLOCKED")
        })
        .collect();
    assert!(expected.len() >= 3, "{sample:?}");

    let first = run_demo(db.url(), extra);
    assert!(
        first.contains("202 rows enrolled (0 already present)"),
        "{first}"
    );
    let printed: Vec<&str> = first.lines().collect();
    for line in &expected {
        assert!(
            printed.contains(line),
            "README line {line:?} not printed:\n{first}"
        );
    }
    // The SUCCEEDED count is fixed too; only its retry list varies.
    let succeeded = sample
        .iter()
        .find(|l| l.starts_with("SUCCEEDED"))
        .and_then(|l| l.split(" (").next())
        .map(str::trim_end)
        .expect("the sample's SUCCEEDED line");
    assert!(
        printed.iter().any(|l| l.starts_with(succeeded)),
        "{succeeded:?} not printed:\n{first}"
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

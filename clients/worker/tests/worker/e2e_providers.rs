//! What a Gemini ledger has, an OpenAI and an Anthropic ledger have: a
//! spend cap that pauses the work before the money goes out, priced from
//! the provider's own usage, and golden rows answered and compared in
//! every job. The same scenario at each provider, against its emulator and
//! `tally-worker --provider {openai|anthropic}` processes.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_providers:: -- --nocapture`.

use crate::common;

use std::time::Duration;

use common::{
    API_KEY, Stack, create_ledger, enroll_documents, exits_ok, register_prompt, resume,
    spawn_api_worker, start_server, summary, until,
};
use tally_client::Clients;
use tally_proto::v1 as pb;
use tokio::process::Child;

/// A provider other than Gemini, emulated in-process.
enum Provider {
    OpenAi(openai_emulator::Emulator),
    Anthropic(anthropic_emulator::Emulator),
}

impl Provider {
    async fn start(api: &str) -> Provider {
        let addr = "127.0.0.1:0".parse().unwrap();
        match api {
            "openai" => Provider::OpenAi(
                openai_emulator::Emulator::start(
                    addr,
                    openai_emulator::EmulatorConfig {
                        api_keys: vec![API_KEY.into()],
                        timing: openai_emulator::Timing::fast(),
                        ..openai_emulator::EmulatorConfig::default()
                    },
                )
                .await
                .expect("openai emulator starts"),
            ),
            _ => Provider::Anthropic(
                anthropic_emulator::Emulator::start(
                    addr,
                    anthropic_emulator::EmulatorConfig {
                        api_keys: vec![API_KEY.into()],
                        timing: anthropic_emulator::Timing::fast(),
                        ..anthropic_emulator::EmulatorConfig::default()
                    },
                )
                .await
                .expect("anthropic emulator starts"),
            ),
        }
    }

    fn api(&self) -> &'static str {
        match self {
            Provider::OpenAi(_) => "openai",
            Provider::Anthropic(_) => "anthropic",
        }
    }

    /// The ledger's model: one this provider runs.
    fn model(&self) -> &'static str {
        match self {
            Provider::OpenAi(_) => "gpt-4o-mini",
            Provider::Anthropic(_) => "claude-haiku-4-5",
        }
    }

    /// The base URL as the worker's flag takes it.
    fn url(&self) -> String {
        match self {
            Provider::OpenAi(e) => format!("{}/v1", e.base_url()),
            Provider::Anthropic(e) => e.base_url(),
        }
    }

    /// Requests the provider was sent, all batches together.
    fn sent(&self) -> usize {
        match self {
            Provider::OpenAi(e) => e.stats().submissions.values().map(Vec::len).sum(),
            Provider::Anthropic(e) => e.stats().submissions.values().map(Vec::len).sum(),
        }
    }

    async fn stop(self) {
        match self {
            Provider::OpenAi(e) => e.shutdown().await,
            Provider::Anthropic(e) => e.shutdown().await,
        }
    }
}

/// tally, `api`'s emulator, and a ledger `ledger` of `rows` rows of the
/// provider's model.
async fn world(api: &str, ledger: &str, rows: usize) -> (Stack, Provider, Clients) {
    let stack = start_server(100).await;
    let provider = Provider::start(api).await;
    let c = tally_client::connect(&stack.grpc, None).expect("connect");
    create_ledger(&c, ledger, provider.model(), pb::AttemptBudgets::default()).await;
    register_prompt(&c).await;
    enroll_documents(&c, ledger, "row-", rows, "").await;
    (stack, provider, c)
}

fn worker(stack: &Stack, p: &Provider, ledger: &str, extra: &[&str]) -> Child {
    spawn_api_worker(&stack.grpc, p.api(), &p.url(), ledger, "worker", extra)
}

async fn update_policy(c: &Clients, ledger: &str, policy: pb::LedgerPolicy, paths: &[&str]) {
    c.ledgers
        .clone()
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: format!("ledgers/{ledger}"),
                policy: Some(policy),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            }),
        })
        .await
        .expect("update the policy");
}

/// A price of $1 per thousand tokens and a spend cap of `usd` (50 output
/// tokens estimated a row), for `model`.
async fn set_cap(c: &Clients, ledger: &str, model: &str, usd: f64) {
    let policy = pb::LedgerPolicy {
        prices: vec![pb::ModelPrice {
            model: model.into(),
            input_per_million: 1000.0,
            output_per_million: 1000.0,
            ..Default::default()
        }],
        spend_cap: Some(pb::SpendCap {
            max_cost_usd: usd,
            output_tokens_per_row: 50,
            ..Default::default()
        }),
        ..Default::default()
    };
    update_policy(c, ledger, policy, &["policy.prices", "policy.spend_cap"]).await;
}

/// Invariants, at each provider: the ledger pauses with reason SPEND_CAP
/// and work left; what the rows sent before the pause spent (priced from
/// the provider's usage) is above zero and within the cap; nothing stays
/// reserved; no attempt is charged for the pause; after the cap is raised
/// and the ledger resumed every row succeeds, each sent once.
async fn spend_cap_pauses(api: &str) {
    const ROWS: usize = 40;
    const CAP_USD: f64 = 0.5;
    let ledger = format!("capped-{api}");
    let (stack, p, c) = world(api, &ledger, ROWS).await;
    set_cap(&c, &ledger, p.model(), CAP_USD).await;
    let mut w = worker(
        &stack,
        &p,
        &ledger,
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );
    until(
        Duration::from_secs(60),
        "the ledger pauses at its cap",
        || async { summary(&c, &ledger).await.state == pb::LedgerState::Paused as i32 },
    )
    .await;
    until(Duration::from_secs(60), "the jobs out finish", || async {
        let s = summary(&c, &ledger).await;
        s.active_jobs == 0 && s.running == 0
    })
    .await;
    let s = summary(&c, &ledger).await;
    let pause = s.pause.clone().expect("a pause");
    assert_eq!(
        pause.reason,
        pb::LedgerPauseReason::SpendCap as i32,
        "{api}"
    );
    let spend = s.spend.expect("spend shown for a capped ledger");
    let (spent, reserved) = (
        spend.spent.unwrap_or_default(),
        spend.reserved.unwrap_or_default(),
    );
    let sent = s.succeeded + s.permanent + s.retryable;
    eprintln!(
        "{api}: paused after {sent} of {ROWS} rows; spent ${:.4} (tokens in {} out {}), cap ${CAP_USD}",
        spent.cost_usd, spent.input_tokens, spent.output_tokens
    );
    assert!(
        sent > 0 && (sent as usize) < ROWS,
        "{api}: the cap stopped the work midway: {sent}"
    );
    assert!(
        spent.cost_usd > 0.0 && spent.input_tokens > 0 && spent.output_tokens > 0,
        "{api}: the provider's usage was priced: {spent:?}"
    );
    assert!(
        spent.cost_usd <= CAP_USD + 1e-9,
        "{api}: spent within the cap: ${}",
        spent.cost_usd
    );
    assert_eq!(
        reserved.cost_usd, 0.0,
        "{api}: nothing held once jobs ended"
    );
    assert_eq!(s.attempts_infra, 0, "{api}: no attempt spent on the pause");

    set_cap(&c, &ledger, p.model(), 100.0).await;
    resume(&c, &ledger).await;
    until(Duration::from_secs(120), "every row succeeds", || async {
        summary(&c, &ledger).await.succeeded == ROWS as i64
    })
    .await;
    assert_eq!(p.sent(), ROWS, "{api}: every row sent once");
    w.start_kill().expect("stop the worker");
    let _ = w.wait().await;
    p.stop().await;
    stack.server.stop().await.expect("server stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spend_cap_pauses_openai_before_the_money_goes_out() {
    spend_cap_pauses("openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spend_cap_pauses_anthropic_before_the_money_goes_out() {
    spend_cap_pauses("anthropic").await;
}

/// Invariants, at each provider: every job carries the golden rows (a
/// prompt row, rendered for the provider), their answers are recorded
/// and compared under the provider's model, and never counted as rows.
async fn golden_rows_are_answered(api: &str) {
    const ROWS: usize = 12;
    let ledger = format!("golden-{api}");
    let (stack, p, c) = world(api, &ledger, ROWS).await;
    c.ledgers
        .clone()
        .set_golden_rows(pb::SetGoldenRowsRequest {
            golden: Some(pb::GoldenSet {
                name: format!("ledgers/{ledger}/golden"),
                rows: vec![pb::GoldenRow {
                    key: "known".into(),
                    payload: serde_json::json!({"text": "a known document"}).to_string(),
                    prompt: Some(pb::PromptRef {
                        name: "summarize".into(),
                        version: "v1".into(),
                    }),
                    // Not what the emulator answers: every result mismatches.
                    expected: r#"{"summary": "never", "score": -1}"#.into(),
                    ..Default::default()
                }],
                every_nth_job: 1,
                window: 3,
                max_mismatch_fraction: 0.99,
                pause_on_drift: false,
                drift: None,
            }),
        })
        .await
        .expect("golden rows set");
    let w = worker(
        &stack,
        &p,
        &ledger,
        &[
            "--claim-size",
            "4",
            "--max-rows-per-batch",
            "4",
            "--exit-when-idle",
        ],
    );
    exits_ok(w, "the worker").await;
    let set = c
        .ledgers
        .clone()
        .get_golden_rows(pb::GetGoldenRowsRequest {
            name: format!("ledgers/{ledger}/golden"),
        })
        .await
        .expect("golden rows")
        .into_inner();
    let drift = set.drift.expect("golden results recorded");
    eprintln!("{api}: golden {drift:?}");
    assert!(
        drift.results >= 3,
        "{api}: a golden answer from each of the 3 jobs: {drift:?}"
    );
    assert_eq!(
        drift.mismatches, drift.results,
        "{api}: each answer compared"
    );
    assert_eq!(drift.model, p.model(), "{api}");
    let s = summary(&c, &ledger).await;
    assert_eq!(
        s.succeeded, ROWS as i64,
        "{api}: golden answers are not rows"
    );
    assert_eq!(s.attempts_total, ROWS as i64, "{api}");
    p.stop().await;
    stack.server.stop().await.expect("server stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn golden_rows_are_answered_at_openai() {
    golden_rows_are_answered("openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn golden_rows_are_answered_at_anthropic() {
    golden_rows_are_answered("anthropic").await;
}

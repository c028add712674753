//! Synchronous lanes at the OpenAI emulator (issue 48): rows sent one call
//! each in the flex lane, within the account's requests per minute that
//! tally hands out, against the same rows in batch. Counted at the
//! emulator: answers per row (every row sent once), refusals, the most
//! requests that arrived (refused or not) and were admitted in any minute;
//! priced from the ledger's summary (flex at the batch price, the default
//! factor). A run fails ([`check`]) when a row was answered twice or not
//! at all, or more requests arrived in a minute than the account's limit.
//!
//! Scenarios, each on its own ledger: one worker at 600 RPM; eight workers
//! sharing the account; eight workers through a storm of 429s; the rows in
//! batch, for the price.

use crate::grpc::{self, Client};
use crate::pipeline::{Provider, idle_worker};
use crate::workload;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

const API_KEY: &str = "bench-key";
const MODEL: &str = "gpt-4o-mini";

/// The account's limit, at tally and at the emulator alike.
pub const RPM: u32 = 600;

/// What one scenario showed.
pub struct Measured {
    pub scenario: String,
    pub rows: usize,
    pub elapsed: Duration,
    /// Answers the model gave (a row answered twice counts twice).
    pub answered: u64,
    /// The most answers any one row got.
    pub most_per_row: usize,
    /// Calls the emulator refused as over the limit (or a storm).
    pub rate_limited: u64,
    /// The most requests the emulator admitted within any minute.
    pub peak_per_minute: u64,
    /// The most requests that arrived at the emulator within any minute,
    /// refused ones included.
    pub peak_arrivals_per_minute: u64,
    pub cost_usd: f64,
    /// Provider batches made (the batch scenario).
    pub batches: u64,
}

#[derive(Clone, Copy)]
pub enum Scenario {
    /// One worker in the flex lane.
    Flex,
    /// Eight workers in the flex lane on one account.
    EightWorkers,
    /// Eight workers through 200 calls refused 429.
    Storm,
    /// One batch worker: the same rows' batch price.
    Batch,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::Flex,
        Scenario::EightWorkers,
        Scenario::Storm,
        Scenario::Batch,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Flex => "flex, 1 worker",
            Scenario::EightWorkers => "flex, 8 workers on one account",
            Scenario::Storm => "flex, 8 workers, 200 calls refused 429",
            Scenario::Batch => "batch, 1 worker",
        }
    }

    fn ledger(self) -> &'static str {
        match self {
            Scenario::Flex => "online-flex",
            Scenario::EightWorkers => "online-eight",
            Scenario::Storm => "online-storm",
            Scenario::Batch => "online-batch",
        }
    }

    fn workers(self) -> usize {
        match self {
            Scenario::Flex | Scenario::Batch => 1,
            Scenario::EightWorkers | Scenario::Storm => 8,
        }
    }
}

/// Runs `scenario` over `rows` rows against the tally server at `addr`
/// (started with `--provider-rpm` [`RPM`]).
pub async fn run(addr: &str, scenario: Scenario, rows: usize) -> anyhow::Result<Measured> {
    let ledger = scenario.ledger();
    let faults: openai_emulator::FaultPlan = match scenario {
        Scenario::Storm => serde_json::from_value(serde_json::json!({
            "online": {"rate_limited": {"times": 200, "retry_after_secs": 2}}
        }))?,
        _ => Default::default(),
    };
    let emulator = openai_emulator::Emulator::start(
        "127.0.0.1:0".parse()?,
        openai_emulator::EmulatorConfig {
            api_keys: vec![API_KEY.into()],
            faults,
            timing: openai_emulator::Timing::fast(),
            online: openai_emulator::OnlineConfig {
                limits: emulator_kit::online::Limits { rpm: RPM, tpm: 0 },
                latency: openai_emulator::Latency {
                    standard: Duration::from_millis(100),
                    flex: Duration::from_millis(300),
                },
            },
            ..Default::default()
        },
    )
    .await?;
    let mut client = grpc::connect(addr).await?;
    prepare(&mut client, ledger, scenario).await?;
    let keys = workload::keys(ledger, 0..rows as u64);
    enroll(&mut client, ledger, &keys).await?;
    let base = format!("{}/v1", emulator.base_url());
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for i in 0..scenario.workers() {
        let lane: &[&str] = match scenario {
            Scenario::Batch => &["--poll-interval", "1s"],
            _ => &["--lane", "flex", "--calls", "32"],
        };
        let args = idle_worker(
            addr,
            Provider::Openai,
            &base,
            ledger,
            &format!("online-{i}"),
            lane,
        )?;
        workers.spawn(tally_worker::run_until(
            args,
            tally_worker::ApiKey::new(API_KEY.into()),
            std::future::pending(),
        ));
    }
    while let Some(done) = workers.join_next().await {
        done?.map_err(|e| anyhow::anyhow!("a worker failed: {e}"))?;
    }
    let elapsed = start.elapsed();
    let stats = emulator.stats();
    emulator.shutdown().await;
    grpc::all_succeeded(&mut client, ledger, rows as u64).await?;
    let summary = client
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            ..Default::default()
        })
        .await?
        .into_inner();
    let online = &stats.online;
    let batch_answers: u64 = keys
        .iter()
        .map(|k| stats.submissions.get(k).map_or(0, Vec::len) as u64)
        .sum();
    Ok(Measured {
        scenario: scenario.name().into(),
        rows,
        elapsed,
        answered: online.answered.values().sum::<u64>() + batch_answers,
        most_per_row: online
            .by_prompt
            .values()
            .map(Vec::len)
            .max()
            .unwrap_or(0)
            .max(
                keys.iter()
                    .map(|k| stats.submissions.get(k).map_or(0, Vec::len))
                    .max()
                    .unwrap_or(0),
            ),
        rate_limited: online.rate_limited,
        peak_per_minute: online.peak_requests_per_minute,
        peak_arrivals_per_minute: online.peak_arrivals_per_minute,
        cost_usd: summary.estimated_cost_usd,
        batches: stats.batches_created,
    })
}

async fn prepare(client: &mut Client, ledger: &str, scenario: Scenario) -> anyhow::Result<()> {
    let lane = match scenario {
        Scenario::Batch => pb::Lane::Batch,
        _ => pb::Lane::Flex,
    };
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: ledger.into(),
            policy: Some(pb::LedgerPolicy {
                model: MODEL.into(),
                lanes: vec![lane as i32],
                // gpt-4o-mini's batch prices (USD per million tokens); flex
                // is priced at them (the default factor).
                prices: vec![pb::ModelPrice {
                    model: MODEL.into(),
                    input_per_million: 0.075,
                    output_per_million: 0.30,
                    ..Default::default()
                }],
                batch_fill: Some(pb::BatchFill {
                    max_wait: Some(prost_types::Duration {
                        seconds: 2,
                        nanos: 0,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await?;
    grpc::register_summarize(client).await
}

async fn enroll(client: &mut Client, ledger: &str, keys: &[String]) -> anyhow::Result<()> {
    let prompt = pb::PromptRef {
        name: "summarize".into(),
        version: "v1".into(),
    };
    let rows: Vec<pb::RowInput> = keys
        .iter()
        .map(|k| pb::RowInput {
            key: k.clone(),
            // Each prompt names its row: the emulator counts answers by
            // prompt.
            payload: serde_json::json!({"text": format!("{k}: {}", workload::payload(k))})
                .to_string(),
            prompt: Some(prompt.clone()),
            ..Default::default()
        })
        .collect();
    for part in rows.chunks(500) {
        client
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{ledger}"),
                rows: part.to_vec(),
            })
            .await?;
    }
    Ok(())
}

/// The invariants of every scenario, counted at the emulator: every row
/// answered exactly once, and (in a synchronous lane) no minute in which
/// more requests arrived than the account's limit, however many workers
/// shared it and whatever 429s they met.
pub fn check(m: &Measured, scenario: Scenario) -> anyhow::Result<()> {
    anyhow::ensure!(
        m.answered == m.rows as u64 && m.most_per_row == 1,
        "{}: {} answers for {} rows, at most {} a row: every row must be answered once",
        m.scenario,
        m.answered,
        m.rows,
        m.most_per_row
    );
    if !matches!(scenario, Scenario::Batch) {
        anyhow::ensure!(
            m.peak_arrivals_per_minute <= u64::from(RPM),
            "{}: {} requests arrived within a minute, past the account's {RPM}",
            m.scenario,
            m.peak_arrivals_per_minute
        );
    }
    Ok(())
}

/// The counts as the bench's table shows them.
pub fn describe(m: &Measured) -> (String, String) {
    (
        format!("online: {} rows, {}", m.rows, m.scenario),
        format!(
            "{:.0} s, {} answers (at most {} a row), {} refused 429 at the emulator, peak {} requests/min arrived, {} admitted (limit {RPM}), ${:.4}, {} batch(es)",
            m.elapsed.as_secs_f64(),
            m.answered,
            m.most_per_row,
            m.rate_limited,
            m.peak_arrivals_per_minute,
            m.peak_per_minute,
            m.cost_usd,
            m.batches
        ),
    )
}

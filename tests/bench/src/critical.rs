//! The critical path (issue 49): the design document's workload, three
//! books of 40 pages, each page depending on the one before (three chains
//! of 40 links), each page's prompt carrying the answer of the page before.
//! The emulator takes 60 s a batch and about a second a synchronous call.
//!
//! Scenarios, each on its own ledger and emulator:
//! - all batch, no deadline, at a 2 s batch (the turnarounds it takes, and
//!   its cost: at 60 s a batch the same run takes 40 minutes and more);
//! - Gemini with a 10-minute deadline, batch and flex allowed (flex at the
//!   batch price): finished in time, cost against all batch;
//! - 10,000 independent rows with the same deadline: every row in batch;
//! - Anthropic with the same deadline, batch and standard allowed
//!   (standard at twice the batch price): the extra cost the plan states;
//! - Anthropic allowing batch only (the price limit): the forecast says the
//!   deadline cannot be met (not run).
//!
//! Counted at the emulator: batches, batch lines and synchronous answers
//! (every row sent once). The forecast read before the run is printed
//! beside the finish measured.

use crate::grpc::{self, Client};
use crate::pipeline::{Provider, idle_worker};
use std::time::{Duration, Instant, SystemTime};
use tally_proto::v1 as pb;

const API_KEY: &str = "bench-key";
const BOOKS: usize = 3;
const PAGES: usize = 40;
const DEADLINE: Duration = Duration::from_secs(600);
const BATCH: Duration = Duration::from_secs(60);
const SYNC: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    AllBatch,
    GeminiDeadline,
    Flat,
    AnthropicDeadline,
    PriceLimit,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::AllBatch,
        Scenario::GeminiDeadline,
        Scenario::Flat,
        Scenario::AnthropicDeadline,
        Scenario::PriceLimit,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::AllBatch => "3 books x 40 pages, Gemini, all batch (2 s batches)",
            Scenario::GeminiDeadline => "3 books x 40 pages, Gemini, 10-min deadline, batch+flex",
            Scenario::Flat => "10,000 independent rows, Gemini, 10-min deadline, batch+flex",
            Scenario::AnthropicDeadline => {
                "3 books x 40 pages, Anthropic, 10-min deadline, batch+standard"
            }
            Scenario::PriceLimit => "3 books x 40 pages, Anthropic, 10-min deadline, batch only",
        }
    }

    fn ledger(self) -> &'static str {
        match self {
            Scenario::AllBatch => "critical-all-batch",
            Scenario::GeminiDeadline => "critical-gemini",
            Scenario::Flat => "critical-flat",
            Scenario::AnthropicDeadline => "critical-anthropic",
            Scenario::PriceLimit => "critical-price-limit",
        }
    }

    fn provider(self) -> Provider {
        match self {
            Scenario::AllBatch | Scenario::GeminiDeadline | Scenario::Flat => Provider::Gemini,
            Scenario::AnthropicDeadline | Scenario::PriceLimit => Provider::Anthropic,
        }
    }

    /// The synchronous lane beside batch, if any.
    fn sync_lane(self) -> Option<(pb::Lane, &'static str)> {
        match self {
            Scenario::GeminiDeadline | Scenario::Flat => Some((pb::Lane::Flex, "flex")),
            Scenario::AnthropicDeadline => Some((pb::Lane::Standard, "standard")),
            Scenario::AllBatch | Scenario::PriceLimit => None,
        }
    }

    fn batch_time(self) -> Duration {
        match self {
            Scenario::AllBatch => Duration::from_secs(2),
            _ => BATCH,
        }
    }

    fn deadline(self) -> Option<Duration> {
        (self != Scenario::AllBatch).then_some(DEADLINE)
    }
}

/// What one scenario showed.
pub struct Measured {
    pub scenario: Scenario,
    pub rows: usize,
    /// Before the run.
    pub forecast: pb::LedgerForecast,
    /// When the forecast was read: its finish times count from here.
    pub forecast_at: SystemTime,
    /// `None`: not run (the forecast is the answer).
    pub run: Option<Run>,
}

pub struct Run {
    pub elapsed: Duration,
    pub batches: u64,
    /// Rows sent in batches and calls answered (each row once: their sum
    /// is the rows).
    pub batch_lines: u64,
    pub calls: u64,
    /// Rows whose attempt ran in each lane.
    pub rows_by_lane: Vec<(pb::Lane, u64)>,
    pub cost_usd: f64,
}

/// An emulator of the scenario's provider.
enum Emulator {
    Gemini(gemini_emulator::Emulator),
    Anthropic(anthropic_emulator::Emulator),
}

impl Emulator {
    async fn start(s: Scenario) -> anyhow::Result<Emulator> {
        let latency = emulator_kit::online::Latency {
            standard: SYNC,
            flex: SYNC,
        };
        let online = emulator_kit::online::OnlineConfig {
            latency,
            ..Default::default()
        };
        let addr = "127.0.0.1:0".parse()?;
        // A tenth of the turnaround pending, the rest running.
        let pending = s.batch_time() / 10;
        Ok(match s.provider() {
            Provider::Anthropic => Emulator::Anthropic(
                anthropic_emulator::Emulator::start(
                    addr,
                    anthropic_emulator::EmulatorConfig {
                        api_keys: vec![API_KEY.into()],
                        timing: anthropic_emulator::Timing {
                            in_progress: s.batch_time(),
                            ..Default::default()
                        },
                        online,
                        ..Default::default()
                    },
                )
                .await?,
            ),
            _ => Emulator::Gemini(
                gemini_emulator::Emulator::start(
                    addr,
                    gemini_emulator::EmulatorConfig {
                        api_key: API_KEY.into(),
                        timing: gemini_emulator::Timing {
                            pending,
                            running: s.batch_time() - pending,
                        },
                        online,
                        ..Default::default()
                    },
                )
                .await?,
            ),
        })
    }

    fn base_url(&self) -> String {
        match self {
            Emulator::Gemini(e) => e.base_url(),
            Emulator::Anthropic(e) => e.base_url(),
        }
    }

    /// Batches, batch lines, synchronous answers.
    fn counts(&self) -> (u64, u64, u64) {
        fn lines<O>(s: &emulator_kit::submissions::Submissions<O>) -> u64 {
            s.values().map(|v| v.len() as u64).sum()
        }
        match self {
            Emulator::Gemini(e) => {
                let s = e.stats();
                let calls = s.online.answered.values().sum();
                (s.batches_created, lines(&s.submissions), calls)
            }
            Emulator::Anthropic(e) => {
                let s = e.stats();
                let calls = s.online.answered.values().sum();
                (s.batches_created, lines(&s.submissions), calls)
            }
        }
    }

    async fn shutdown(self) {
        match self {
            Emulator::Gemini(e) => e.shutdown().await,
            Emulator::Anthropic(e) => e.shutdown().await,
        }
    }
}

/// Runs `scenario` against the tally server at `addr`.
pub async fn run(addr: &str, scenario: Scenario) -> anyhow::Result<Measured> {
    let ledger = scenario.ledger();
    let mut client = grpc::connect(addr).await?;
    prepare(&mut client, scenario).await?;
    let rows = match scenario {
        Scenario::Flat => enroll_flat(&mut client, ledger, 10_000).await?,
        _ => enroll_books(&mut client, ledger).await?,
    };
    let forecast = forecast(&mut client, ledger).await?;
    let forecast_at = SystemTime::now();
    if scenario == Scenario::PriceLimit {
        return Ok(Measured {
            scenario,
            rows,
            forecast,
            forecast_at,
            run: None,
        });
    }
    let emulator = Emulator::start(scenario).await?;
    let base = emulator.base_url();
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    let mut flags: Vec<Vec<&str>> = vec![vec!["--poll-interval", "1s"]];
    if let Some((_, lane)) = scenario.sync_lane() {
        flags.push(vec!["--lane", lane, "--calls", "8"]);
    }
    for (i, extra) in flags.iter().enumerate() {
        let args = idle_worker(
            addr,
            scenario.provider(),
            &base,
            ledger,
            &format!("{ledger}-{i}"),
            extra,
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
    let (batches, batch_lines, calls) = emulator.counts();
    emulator.shutdown().await;
    grpc::all_succeeded(&mut client, ledger, rows as u64).await?;
    let summary = client
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(Measured {
        scenario,
        rows,
        forecast,
        forecast_at,
        run: Some(Run {
            elapsed,
            batches,
            batch_lines,
            calls,
            rows_by_lane: summary
                .cost_by_lane
                .iter()
                .map(|c| (c.lane(), c.attempts as u64))
                .collect(),
            cost_usd: summary.estimated_cost_usd,
        }),
    })
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

async fn prepare(client: &mut Client, s: Scenario) -> anyhow::Result<()> {
    let model = s.provider().model();
    let mut lanes = vec![pb::Lane::Batch as i32];
    lanes.extend(s.sync_lane().map(|(l, _)| l as i32));
    let deadline = s.deadline().map(|d| {
        let at = SystemTime::now() + d;
        prost_types::Timestamp::from(at)
    });
    // Batch prices (USD per million tokens); flex defaults to the batch
    // price, standard to twice it.
    let (input, output) = match s.provider() {
        Provider::Anthropic => (0.50, 2.50),
        _ => (0.15, 1.25),
    };
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: s.ledger().into(),
            policy: Some(pb::LedgerPolicy {
                model: model.into(),
                lanes,
                deadline,
                turnarounds: Some(pb::LaneTurnarounds {
                    batch: Some(duration(BATCH.max(s.batch_time()))),
                    flex: Some(duration(SYNC)),
                    standard: Some(duration(SYNC)),
                    priority: Some(duration(SYNC)),
                }),
                prices: vec![pb::ModelPrice {
                    model: model.into(),
                    input_per_million: input,
                    output_per_million: output,
                    ..Default::default()
                }],
                batch_fill: Some(pb::BatchFill {
                    max_wait: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await?;
    register_page(client).await
}

/// `page`/`v1`: a page's summary, continuing from the page before.
async fn register_page(client: &mut Client) -> anyhow::Result<()> {
    let registered = client
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "page".into(),
            version: "v1".into(),
            template: "Book {{ book }} page {{ page }}.{% if deps is defined %} Before: {{ deps.previous.summary }}{% endif %}".into(),
            response_schema: serde_json::json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"]
            })
            .to_string(),
            ..Default::default()
        })
        .await;
    match registered {
        Ok(_) => Ok(()),
        // Registered by an earlier scenario: the same immutable version.
        Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(s) => Err(s.into()),
    }
}

fn page_prompt() -> Option<pb::PromptRef> {
    Some(pb::PromptRef {
        name: "page".into(),
        version: "v1".into(),
    })
}

async fn enroll_books(client: &mut Client, ledger: &str) -> anyhow::Result<usize> {
    let mut rows = Vec::with_capacity(BOOKS * PAGES);
    for book in 0..BOOKS {
        for page in 0..PAGES {
            let before = page.checked_sub(1).map(|p| format!("b{book}-p{p:02}"));
            rows.push(pb::RowInput {
                key: format!("b{book}-p{page:02}"),
                payload: serde_json::json!({"book": book, "page": page}).to_string(),
                prompt: page_prompt(),
                depends_on: before.iter().cloned().collect(),
                dependency_names: before
                    .map(|k| (k, "previous".to_string()))
                    .into_iter()
                    .collect(),
                ..Default::default()
            });
        }
    }
    let n = rows.len();
    send(client, ledger, rows).await?;
    Ok(n)
}

async fn enroll_flat(client: &mut Client, ledger: &str, n: usize) -> anyhow::Result<usize> {
    let rows = (0..n)
        .map(|i| pb::RowInput {
            key: format!("flat-{i:05}"),
            payload: serde_json::json!({"book": "flat", "page": i}).to_string(),
            prompt: page_prompt(),
            ..Default::default()
        })
        .collect();
    send(client, ledger, rows).await?;
    Ok(n)
}

async fn send(client: &mut Client, ledger: &str, rows: Vec<pb::RowInput>) -> anyhow::Result<()> {
    crate::grpc::enroll_inputs(client, ledger, &rows, 1000).await
}

async fn forecast(client: &mut Client, ledger: &str) -> anyhow::Result<pb::LedgerForecast> {
    let summary = client
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            forecast: true,
        })
        .await?
        .into_inner();
    summary
        .forecast
        .ok_or_else(|| anyhow::anyhow!("{ledger}: the summary has no forecast"))
}

/// Seconds from `from` to `t`.
fn seconds_after(t: &Option<prost_types::Timestamp>, from: SystemTime) -> f64 {
    let Some(t) = t else { return f64::NAN };
    let from = from
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    t.seconds as f64 + f64::from(t.nanos) / 1e9 - from
}

fn lanes(rows: &[(pb::Lane, u64)]) -> String {
    rows.iter()
        .map(|(l, n)| {
            format!(
                "{} {n}",
                l.as_str_name().trim_start_matches("LANE_").to_lowercase()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan_text(p: &Option<pb::ForecastPlan>, at: SystemTime) -> String {
    let Some(p) = p else { return "-".into() };
    let by: Vec<(pb::Lane, u64)> = p
        .rows_by_lane
        .iter()
        .map(|r| (r.lane(), r.rows as u64))
        .collect();
    format!(
        "{:.0} s{}, ${:.4} ({})",
        seconds_after(&p.finish_time, at),
        if p.in_time { "" } else { " (late)" },
        p.cost_usd,
        lanes(&by)
    )
}

/// The counts as the bench's table shows them: the forecast before the
/// run, then what the run measured.
pub fn describe(m: &Measured) -> (String, String) {
    let f = &m.forecast;
    let mut text = format!(
        "forecast: plan {}; all batch {}; {}",
        plan_text(&f.plan, m.forecast_at),
        plan_text(&f.all_batch, m.forecast_at),
        f.explanation
    );
    match &m.run {
        Some(r) => text.push_str(&format!(
            " | measured: {:.0} s{}, {} batches, {} batch lines + {} calls for {} rows, {} , ${:.4}",
            r.elapsed.as_secs_f64(),
            match m.scenario.deadline() {
                Some(d) if r.elapsed > d => " (past the deadline)",
                Some(_) => " (in time)",
                None => "",
            },
            r.batches,
            r.batch_lines,
            r.calls,
            m.rows,
            lanes(&r.rows_by_lane),
            r.cost_usd
        )),
        None => text.push_str(" | not run: the forecast is the answer"),
    }
    (format!("critical path: {}", m.scenario.name()), text)
}

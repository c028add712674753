//! Turnarounds and batches (issue 50, item 5): what decides when a night
//! at a real provider ends is how many batch turnarounds stand between
//! enrolling and the last row settling, and how many batches each needs.
//! One in-process tally-worker runs a ledger at the Gemini emulator (each
//! batch takes about a second), with the ledger's batch filling on (its
//! defaults) and, as the baseline, off: independent rows; rows of which 3%
//! fail once; a chain. Batches are counted at the emulator; turnarounds are
//! the most batches any one row (or, for a chain, the chain) went through.
//! A last scenario kills (-9) a tally-worker process while its batches are
//! at the provider and starts it again with the same command, under the
//! default lease: how long until its batches are adopted, and whether any
//! row was sent again.

use crate::grpc::{self, Client};
use crate::workload;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

/// The key the emulators of these phases take.
pub const API_KEY: &str = "bench-key";
const MODEL: &str = "gemini-2.5-flash";

/// One scenario's counts.
pub struct Counted {
    pub scenario: String,
    pub filling: bool,
    pub rows: usize,
    pub batches: u64,
    pub turnarounds: u32,
    pub sends: u64,
    pub elapsed: Duration,
}

/// What a kill -9 and restart of the same command showed.
pub struct Restarted {
    pub rows: usize,
    /// From the restart to the first adoption of the dead worker's jobs.
    pub adopted_after: Duration,
    pub batches: u64,
    pub sends: u64,
}

/// A Gemini emulator with `faults` whose batches wait `pending`, then run
/// `running`.
pub async fn emulator(
    faults: gemini_emulator::FaultPlan,
    pending: Duration,
    running: Duration,
) -> anyhow::Result<gemini_emulator::Emulator> {
    Ok(gemini_emulator::Emulator::start(
        "127.0.0.1:0".parse()?,
        gemini_emulator::EmulatorConfig {
            api_key: API_KEY.into(),
            faults,
            timing: gemini_emulator::Timing { pending, running },
            ..Default::default()
        },
    )
    .await?)
}

/// `tally-worker` beside this binary (`cargo build --release -p
/// tally-worker`).
fn worker_binary() -> anyhow::Result<std::path::PathBuf> {
    let me = std::env::current_exe()?;
    let bin = me.with_file_name("tally-worker");
    anyhow::ensure!(
        bin.is_file(),
        "{} is missing: the restart scenario runs the worker binary (cargo build --release -p tally-worker)",
        bin.display()
    );
    Ok(bin)
}

/// Kills a worker (-9) once it has a batch at the provider, starts the
/// same command again, and measures how soon the jobs are adopted.
pub async fn restart(addr: &str, rows: usize) -> anyhow::Result<Restarted> {
    use tally_proto::v1::job_service_client::JobServiceClient;
    let ledger = "turns-restart";
    let keys = workload::keys(ledger, 0..rows as u64);
    let emulator = emulator(
        gemini_emulator::FaultPlan::default(),
        Duration::from_millis(500),
        Duration::from_secs(3),
    )
    .await?;
    let mut client = grpc::connect(addr).await?;
    prepare(&mut client, ledger, true).await?;
    enroll(&mut client, ledger, &keys, false).await?;
    let mut jobs = JobServiceClient::connect(addr.to_string()).await?;
    let bin = worker_binary()?;
    let base = emulator.base_url();
    let command = || {
        let mut c = tokio::process::Command::new(&bin);
        c.args([
            "--server",
            addr,
            "--ledger",
            ledger,
            "--gemini-base-url",
            &base,
            "--claim-size",
            "500",
            "--poll-interval",
            "1s",
            "--exit-when-idle",
        ])
        .env("GEMINI_API_KEY", API_KEY)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
        c
    };
    let list = pb::ListJobsRequest {
        parent: format!("ledgers/{ledger}"),
        page_size: 100,
        ..Default::default()
    };
    let mut first = command().spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = jobs.list_jobs(list.clone()).await?.into_inner().jobs;
        if listed
            .iter()
            .any(|j| matches!(j.state(), pb::JobState::Submitted | pb::JobState::Running))
        {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "no batch reached the provider");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await?;
    let restarted = Instant::now();
    let mut again = command().spawn()?;
    let adopted_after = loop {
        let listed = jobs.list_jobs(list.clone()).await?.into_inner().jobs;
        if listed.iter().any(|j| j.adoptions > 0) {
            break restarted.elapsed();
        }
        anyhow::ensure!(
            restarted.elapsed() < Duration::from_secs(120),
            "nothing adopted within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let status = again.wait().await?;
    anyhow::ensure!(status.success(), "the restarted worker exited {status}");
    let stats = emulator.stats();
    emulator.shutdown().await;
    grpc::all_succeeded(&mut client, ledger, rows as u64).await?;
    Ok(Restarted {
        rows,
        adopted_after,
        batches: stats.batches_created,
        sends: keys.iter().map(|k| stats.submission_count(k) as u64).sum(),
    })
}

#[derive(Clone, Copy)]
pub enum Scenario {
    Independent,
    Transient,
    Chain,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Independent, Scenario::Transient, Scenario::Chain];

    fn name(self) -> &'static str {
        match self {
            Scenario::Independent => "independent",
            Scenario::Transient => "3% transient once",
            Scenario::Chain => "chain",
        }
    }
}

/// Runs `scenario` over `rows` rows (a chain: 10 links) with filling on or
/// off, on its own ledger.
pub async fn run(
    addr: &str,
    scenario: Scenario,
    rows: usize,
    filling: bool,
) -> anyhow::Result<Counted> {
    let rows = match scenario {
        Scenario::Chain => 10,
        _ => rows,
    };
    let ledger = format!(
        "turns-{}-{}",
        ["independent", "transient", "chain"][scenario as usize],
        if filling { "fill" } else { "nofill" }
    );
    let keys = workload::keys(&ledger, 0..rows as u64);
    // Every 33rd row fails once with a 503: 3%.
    let failing: Vec<String> = keys.iter().step_by(33).cloned().collect();
    let faults = match scenario {
        Scenario::Transient => gemini_emulator::FaultPlan {
            rows: failing
                .iter()
                .map(|k| gemini_emulator::RowRule {
                    matcher: gemini_emulator::RowMatch {
                        key: Some(k.clone()),
                        ..Default::default()
                    },
                    fault: gemini_emulator::RowFault::Transient {
                        code: 503,
                        times: 1,
                    },
                })
                .collect(),
            ..Default::default()
        },
        _ => gemini_emulator::FaultPlan::default(),
    };
    let emulator = emulator(
        faults,
        Duration::from_millis(200),
        Duration::from_millis(800),
    )
    .await?;
    let mut client = grpc::connect(addr).await?;
    prepare(&mut client, &ledger, filling).await?;
    enroll(
        &mut client,
        &ledger,
        &keys,
        matches!(scenario, Scenario::Chain),
    )
    .await?;

    let start = Instant::now();
    let args = crate::pipeline::idle_worker(
        addr,
        crate::pipeline::Provider::Gemini,
        &emulator.base_url(),
        &ledger,
        "turns",
        &["--poll-interval", "1s"],
    )?;
    tally_worker::run_until(
        args,
        tally_worker::ApiKey::new(API_KEY.into()),
        std::future::pending(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("the worker failed: {e}"))?;
    let elapsed = start.elapsed();
    let stats = emulator.stats();
    emulator.shutdown().await;
    grpc::all_succeeded(&mut client, &ledger, rows as u64).await?;
    let sends: u64 = keys.iter().map(|k| stats.submission_count(k) as u64).sum();
    let most = keys
        .iter()
        .map(|k| stats.submission_count(k) as u32)
        .max()
        .unwrap_or(0);
    Ok(Counted {
        scenario: scenario.name().into(),
        filling,
        rows,
        batches: stats.batches_created,
        // A chain's links go one after another: one turnaround each.
        turnarounds: match scenario {
            Scenario::Chain => rows as u32,
            _ => most,
        },
        sends,
        elapsed,
    })
}

async fn prepare(client: &mut Client, ledger: &str, filling: bool) -> anyhow::Result<()> {
    let two = prost_types::Duration {
        seconds: 2,
        nanos: 0,
    };
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: ledger.into(),
            policy: Some(pb::LedgerPolicy {
                model: MODEL.into(),
                // The default backoff's 30 s, shortened to keep the run short;
                // everything else is the ledger's default, filling included.
                backoff: Some(pb::Backoff {
                    initial: Some(two),
                    max: Some(two),
                    ..Default::default()
                }),
                batch_fill: (!filling).then(|| pb::BatchFill {
                    max_wait: Some(prost_types::Duration::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await?;
    grpc::register_summarize(client).await
}

/// Enrolls `keys` in calls of 500 (a chain: each row depends on the one
/// before).
async fn enroll(
    client: &mut Client,
    ledger: &str,
    keys: &[String],
    chain: bool,
) -> anyhow::Result<()> {
    let prompt = pb::PromptRef {
        name: "summarize".into(),
        version: "v1".into(),
    };
    let rows: Vec<pb::RowInput> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| pb::RowInput {
            key: k.clone(),
            payload: workload::payload(k),
            prompt: Some(prompt.clone()),
            depends_on: if chain && i > 0 {
                vec![keys[i - 1].clone()]
            } else {
                Vec::new()
            },
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

/// The counts as the bench's table shows them.
pub fn describe(c: &Counted) -> (String, String) {
    (
        format!(
            "turnarounds: {} rows, {} (filling {})",
            c.rows,
            c.scenario,
            if c.filling { "on" } else { "off" }
        ),
        format!(
            "{} turnaround(s), {} batch(es), {} sends, {:.1} s",
            c.turnarounds,
            c.batches,
            c.sends,
            c.elapsed.as_secs_f64()
        ),
    )
}

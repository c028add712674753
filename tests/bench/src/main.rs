//! tally-bench: tally measured against raw PostgreSQL in the same run, on the
//! same database, so the ratios mean something on a shared, noisy machine.
//!
//! The server under test runs as a child process (this binary in `serve`
//! mode) so its memory can be sampled on its own. Every tally figure is
//! printed beside its baseline with the ratio.
//!
//! Layout: `child` the server under test; `db` the scratch database;
//! `grpc` the tally side of each loop and `raw` its baseline; `workload`
//! the rows; `stats` medians and percentiles; `quiet` waiting for the
//! server's ANALYZEs. Phases: `ingest`, `watch`, `disk`, `delete`,
//! `sustained`, `pipeline` (server, workers and emulators),
//! `turnarounds` (batches and turnarounds at an emulator), `online`
//! (the synchronous lanes within an account's limits), `critical`
//! (chains under a deadline), `consume` (results handed to consumers) and
//! `cache` (the result cache on the hot path and at an emulator).

mod cache;
mod child;
mod consume;
mod critical;
mod db;
mod delete;
mod disk;
mod grpc;
mod ingest;
mod online;
mod pipeline;
mod quiet;
mod raw;
mod stats;
mod sustained;
mod turnarounds;
mod watch;
mod workload;

use clap::{Parser, Subcommand};
use sqlx::postgres::PgPoolOptions;
use stats::{Line, ms, per_sec, rate};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "tally-bench",
    about = "tally against raw PostgreSQL, in one run"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// An EMPTY database to run in (emptied again afterwards).
    #[arg(long)]
    database_url: Option<String>,
    /// A server to create a scratch database on (dropped afterwards).
    /// Default: DATABASE_URL; without either, a private PostgreSQL.
    #[arg(long, env = "DATABASE_URL")]
    admin_url: Option<String>,
    /// Seconds each side of a throughput phase runs (in three alternating
    /// rounds).
    #[arg(long, default_value_t = 9)]
    seconds: u64,
    /// Rows per enroll phase (three rounds a side: at 200,000 a round
    /// lasted half a second and ratios of one build spread over 0.3-0.7).
    #[arg(long, default_value_t = 600_000)]
    enroll_rows: u64,
    /// Concurrent enroll clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Rows enrolled ahead of each claim+report phase.
    #[arg(long, default_value_t = 600_000)]
    backlog: u64,
    /// Rows of the pipeline phase.
    #[arg(long, default_value_t = 100_000)]
    pipeline_rows: u64,
    /// Rows of the disk phase (bytes on disk per row).
    #[arg(long, default_value_t = 200_000)]
    disk_rows: u64,
    /// Finished rows of the consume phase.
    #[arg(long, default_value_t = 100_000)]
    consume_rows: u64,
    /// Ledger sizes for the claim-latency scale test.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    scale: Vec<u64>,
    /// IngestEvent calls per second in the ingest-latency phase.
    #[arg(long, default_value_t = 200)]
    ingest_rate: u32,
    /// Job events per second in the watch fan-out phase.
    #[arg(long, default_value_t = 50)]
    watch_rate: u32,
    /// Smaller everything, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Which phases to run (default: all of them).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Phase>,
    /// In the claim+report phases, tally's workers report and claim the
    /// next rows in one call (ReportOutcomes with `claim_next`) instead of
    /// a ClaimRows and a ReportOutcomes a batch.
    #[arg(long)]
    chained: bool,
    /// Worker counts of the claim+report phases (default: 1, 2 and 4 at
    /// batch 500; 1 and 4 at batch 1) and of the pipeline (1 and 2).
    #[arg(long, value_delimiter = ',')]
    workers: Vec<usize>,
    /// The providers the pipeline phase runs at, each through its emulator.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "gemini,openai,anthropic"
    )]
    providers: Vec<pipeline::Provider>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// EnrollRows against the bulk insert.
    Enroll,
    /// ClaimRows + ReportOutcomes of 500 rows with 1, 2 and 4 workers.
    Claim,
    /// The same with batches of one row.
    Batch1,
    /// IngestEvent latency.
    Ingest,
    /// WatchJobs fan-out latency.
    Watch,
    /// Claim latency and server RSS as the ledger grows.
    Scale,
    /// Bytes on disk per row against the payload and result bytes (runs
    /// first, on the empty database).
    Disk,
    /// The whole pipeline (server, tally-workers, a provider's emulator at
    /// zero latency) against the raw claim+report loop, 1 and 2 workers,
    /// for each of --providers.
    Pipeline,
    /// A ledger's finished rows through a consumer (1 and 3 instances)
    /// against ListRows paging, and three `tallyctl consume` of one consumer
    /// with two killed (-9) mid-stream (needs the release tallyctl binary
    /// beside tally-bench). Only with --only.
    Consume,
    /// Turnarounds and batches at the Gemini emulator (batches of about a
    /// second), batch filling on and off: 2,000 independent rows, the same
    /// with 3% failing once, a chain of 10; then a worker killed (-9) with
    /// batches at the provider and started again (needs the release
    /// tally-worker binary beside tally-bench). Only with --only.
    Turnarounds,
    /// Synchronous lanes at the OpenAI emulator: 2,000 rows in the flex
    /// lane at 600 requests a minute (1 worker; 8 workers on the account;
    /// 8 through a storm of 429s) and in batch, for the time, the sends
    /// and the price. Only with --only.
    Online,
    /// The critical path: 3 books of 40 pages (chains of 40) at emulators
    /// taking 60 s a batch and 1 s a call, all batch (at 2 s a batch) and
    /// under a 10-minute deadline on Gemini (flex) and Anthropic
    /// (standard); 10,000 independent rows under the same deadline; the
    /// forecast read before each run beside what it measured (about 25
    /// minutes). Only with --only.
    Critical,
    /// The result cache: enrolls and claims of 500 rows reported with the
    /// cache on (a lookup before, all misses) and off, three alternated
    /// rounds a side; claims
    /// the cache answers whole; 10,000 rows at the Gemini emulator run
    /// twice under two ledger names, then with 1,000 rows changed (batches
    /// and sends counted). Only with --only.
    Cache,
}

#[derive(Subcommand)]
enum Command {
    /// The sustained run: minutes of enroll, claim, report and retries at
    /// once over a backlog kept at --backlog rows; throughput sampled every
    /// --interval, first minute against last.
    Sustained {
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        #[arg(long, default_value_t = 1_000_000)]
        backlog: u64,
        #[arg(long, default_value_t = 2)]
        workers: usize,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        interval: Duration,
        /// Also run the naive raw SQL loop this long, for its curve.
        #[arg(long, default_value_t = 0.0)]
        raw_minutes: f64,
    },
    /// DeleteLedger of a --rows ledger while another ledger is claimed
    /// continuously: the delete's duration, and the other ledger's claim
    /// latency during the purge against the same loop just before it.
    Delete {
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        #[arg(long, default_value_t = 400_000)]
        live_rows: u64,
        #[arg(long, default_value_t = 10)]
        claim_batch: i32,
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        before: Duration,
    },
    /// Internal: run the server under test.
    Serve {
        #[arg(long)]
        database_url: String,
        #[arg(long)]
        port: u16,
        #[arg(long)]
        metrics_port: u16,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    if let Some(Command::Serve {
        database_url,
        port,
        metrics_port,
    }) = cli.command
    {
        tracing_subscriber::fmt()
            .with_env_filter("warn")
            .with_writer(std::io::stderr)
            .init();
        return child::serve(database_url, port, metrics_port).await;
    }
    if cli.quick {
        cli.seconds = 3;
        cli.enroll_rows = 50_000;
        cli.backlog = 80_000;
        cli.scale = vec![10_000, 100_000];
        cli.disk_rows = 20_000;
        cli.pipeline_rows = 20_000;
        cli.consume_rows = 20_000;
    }
    let scratch = db::Scratch::acquire(cli.database_url.clone(), cli.admin_url.clone()).await?;
    let result = match &cli.command {
        Some(Command::Sustained {
            minutes,
            backlog,
            workers,
            interval,
            raw_minutes,
        }) => {
            let opts = sustained::Options {
                minutes: *minutes,
                backlog: *backlog,
                workers: *workers,
                interval: *interval,
            };
            run_sustained(scratch.url(), &opts, *raw_minutes).await
        }
        Some(Command::Delete {
            rows,
            live_rows,
            claim_batch,
            before,
        }) => {
            let opts = delete::Options {
                rows: *rows,
                live_rows: *live_rows,
                claim_batch: *claim_batch,
                before: *before,
            };
            delete::run(scratch.url(), &opts).await
        }
        _ => run(&cli, scratch.url()).await,
    };
    scratch.release().await?;
    let lines = result?;
    println!("\n{}", stats::render(&lines));
    Ok(())
}

async fn run(cli: &Cli, url: &str) -> anyhow::Result<Vec<Line>> {
    let server = child::Server::start(url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(url)
        .await?;
    let mut client = grpc::connect(&server.addr).await?;
    let mut lines = Vec::new();
    let phase = Duration::from_secs(cli.seconds);
    let runs = |p: Phase| cli.only.is_empty() || cli.only.contains(&p);

    if runs(Phase::Disk) {
        eprintln!(
            "disk: {} rows run to their end, then vacuumed",
            cli.disk_rows
        );
        lines.extend(disk::run(&server.addr, &pool, cli.disk_rows, cli.clients).await?);
    }

    if runs(Phase::Enroll) {
        eprintln!(
            "enroll: {} rows, {} clients, batches of 1000, {ROUNDS} rounds a side",
            cli.enroll_rows, cli.clients
        );
        let keys = workload::keys("e", 0..cli.enroll_rows);
        let slices: Vec<Arc<Vec<String>>> = keys
            .chunks(keys.len().div_ceil(ROUNDS).max(1))
            .map(|c| Arc::new(c.to_vec()))
            .collect();
        grpc::create_ledger(&mut client, "enroll").await?;
        raw::setup(&pool, "enroll").await?;
        checkpoint(&pool).await;
        let mut analyzing = Duration::ZERO;
        let ((raw_n, raw_t), (n, t)) = alternate(
            slices.len(),
            async |r| {
                let done = raw::enroll(&pool, "enroll", slices[r].clone(), cli.clients, 1000).await;
                quiet::analyzes_done(&pool).await?;
                done
            },
            async |r| {
                let done =
                    grpc::enroll(&server.addr, "enroll", slices[r].clone(), cli.clients, 1000)
                        .await;
                analyzing += quiet::analyzes_done(&pool).await?;
                done
            },
        )
        .await?;
        lines.push(line(
            format!("enroll ({} clients, batches of 1000)", cli.clients),
            rate(n, t),
            rate(raw_n, raw_t),
        ));
        lines.push(Line {
            workload: "the server's ANALYZEs after its enroll rounds (not in the rates)".into(),
            tally: format!("{:.1} s", analyzing.as_secs_f64()),
            baseline: "-".into(),
            ratio: None,
        });
    }

    let claim_phases = [
        (Phase::Claim, 500, 1, cli.backlog),
        (Phase::Claim, 500, 2, cli.backlog),
        (Phase::Claim, 500, 4, cli.backlog),
        (Phase::Batch1, 1, 1, 20_000),
        (Phase::Batch1, 1, 4, 20_000),
    ];
    let counted = |w: usize| cli.workers.is_empty() || cli.workers.contains(&w);
    for (_, batch, workers, backlog) in claim_phases
        .into_iter()
        .filter(|p| runs(p.0) && counted(p.2))
    {
        let ledger = format!("cr-{batch}-{workers}");
        eprintln!("claim+report: batch {batch}, {workers} workers, backlog {backlog}");
        let keys = Arc::new(workload::keys(&ledger, 0..backlog));
        grpc::create_ledger(&mut client, &ledger).await?;
        grpc::enroll(&server.addr, &ledger, keys.clone(), cli.clients, 1000).await?;
        raw::setup(&pool, &ledger).await?;
        raw::enroll(&pool, &ledger, keys, cli.clients, 1000).await?;
        sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
        checkpoint(&pool).await;
        let round = phase / ROUNDS as u32;
        let ((raw_n, raw_t), (n, t)) = alternate(
            ROUNDS,
            async |_| raw::claim_report(&pool, &ledger, workers, batch, round).await,
            async |_| {
                grpc::claim_report(
                    &server.addr,
                    &ledger,
                    workers,
                    batch as i32,
                    round,
                    cli.chained,
                )
                .await
            },
        )
        .await?;
        lines.push(line(
            format!(
                "claim+report{}, batch {batch}, {workers} worker(s)",
                if cli.chained { " (one call)" } else { "" }
            ),
            rate(n, t),
            rate(raw_n, raw_t),
        ));
    }

    if runs(Phase::Pipeline) {
        for provider in cli.providers.iter().copied() {
            for workers in [1, 2].into_iter().filter(|w| counted(*w)) {
                let name = provider.name();
                eprintln!(
                    "pipeline: {} rows at {name}, {workers} worker(s), the emulator at zero latency; raw loop first",
                    cli.pipeline_rows
                );
                let m = pipeline::run(
                    &server.addr,
                    &pool,
                    provider,
                    cli.pipeline_rows,
                    workers,
                    cli.clients,
                )
                .await?;
                lines.push(line(
                    format!(
                        "pipeline at {name} (server, emulator, batches of 500), {workers} worker(s)"
                    ),
                    rate(m.rows, m.tally),
                    rate(m.rows, m.raw),
                ));
            }
        }
    }

    if cli.only.contains(&Phase::Online) {
        for scenario in online::Scenario::ALL {
            let m = online::run(&server.addr, scenario, 2000).await?;
            let (workload, counts) = online::describe(&m);
            eprintln!("{workload}: {counts}");
            online::check(&m, scenario)?;
            lines.push(Line {
                workload,
                tally: counts,
                baseline: String::new(),
                ratio: None,
            });
        }
    }

    if cli.only.contains(&Phase::Critical) {
        for scenario in critical::Scenario::ALL {
            let m = critical::run(&server.addr, scenario).await?;
            let (workload, counts) = critical::describe(&m);
            eprintln!("{workload}: {counts}");
            lines.push(Line {
                workload,
                tally: counts,
                baseline: String::new(),
                ratio: None,
            });
        }
    }

    if cli.only.contains(&Phase::Cache) {
        lines.extend(run_cache(cli, &server.addr, &mut client, phase).await?);
    }

    if cli.only.contains(&Phase::Consume) {
        lines.extend(
            consume::run(&server.addr, &server.metrics, cli.consume_rows, cli.clients).await?,
        );
    }

    if cli.only.contains(&Phase::Turnarounds) {
        for scenario in turnarounds::Scenario::ALL {
            for filling in [false, true] {
                let c = turnarounds::run(&server.addr, scenario, 2000, filling).await?;
                let (workload, counts) = turnarounds::describe(&c);
                eprintln!("{workload}: {counts}");
                lines.push(Line {
                    workload,
                    tally: counts,
                    baseline: String::new(),
                    ratio: None,
                });
            }
        }
        let r = turnarounds::restart(&server.addr, 2000).await?;
        let counts = format!(
            "adopted {:.1} s after the restart, {} batch(es), {} sends",
            r.adopted_after.as_secs_f64(),
            r.batches,
            r.sends
        );
        eprintln!("turnarounds: kill -9 and restart: {counts}");
        lines.push(Line {
            workload: format!(
                "turnarounds: {} rows, kill -9 with batches at the provider, same command again (30m lease)",
                r.rows
            ),
            tally: counts,
            baseline: String::new(),
            ratio: None,
        });
    }

    if runs(Phase::Ingest) {
        let events = (cli.ingest_rate as u64 * cli.seconds) as usize;
        eprintln!(
            "ingest: {events} events at {}/s, about 1 in 5 dropped",
            cli.ingest_rate
        );
        let mix = ingest::mix(events);
        let (lat, dropped) = ingest::tally(&server.addr, &mix, cli.ingest_rate).await?;
        let raw_lat = ingest::raw(&pool, &mix, cli.ingest_rate).await?;
        eprintln!("ingest: {dropped} of {events} not applied by the reducer");
        lines.push(latency_line(
            format!(
                "IngestEvent latency p50 (p99) at {}/s vs raw upsert",
                cli.ingest_rate
            ),
            &lat,
            &raw_lat,
        ));
    }

    if runs(Phase::Watch) {
        let events = (cli.watch_rate as u64 * cli.seconds) as usize;
        eprintln!(
            "watch: {events} job events at {}/s, {} watchers",
            cli.watch_rate,
            watch::WATCHERS
        );
        let fan = watch::tally(&server.addr, "watch", events, cli.watch_rate).await?;
        let raw_fan = watch::raw(&pool, events, cli.watch_rate).await?;
        for (who, f) in [("tally", &fan), ("raw", &raw_fan)] {
            eprintln!(
                "watch {who}: {} events, {} deliveries, {} missing, {} seen before the commit's answer",
                f.events,
                f.latencies.len(),
                f.missing,
                f.early
            );
        }
        lines.push(latency_line(
            format!(
                "WatchJobs commit->delivery p50 (p99), {} watchers, vs LISTEN/NOTIFY",
                watch::WATCHERS
            ),
            &fan.latencies,
            &raw_fan.latencies,
        ));
    }

    let mut first_p50 = None;
    let scale = if runs(Phase::Scale) {
        &cli.scale[..]
    } else {
        &[]
    };
    for &size in scale {
        let ledger = format!("scale-{size}");
        eprintln!("scale: {size} rows");
        let keys = Arc::new(workload::keys(&ledger, 0..size));
        grpc::create_ledger(&mut client, &ledger).await?;
        grpc::enroll(&server.addr, &ledger, keys, cli.clients, 1000).await?;
        sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
        let lat = grpc::claim_latencies(&server.addr, &ledger, 500, 40).await?;
        let p50 = stats::percentile(&lat, 0.5);
        let base = *first_p50.get_or_insert(p50);
        lines.push(Line {
            workload: format!("claim 500 latency p50 (p99) at {size} rows, vs the smallest"),
            tally: format!("{} ({})", ms(p50), ms(stats::percentile(&lat, 0.99))),
            baseline: ms(base),
            ratio: Some(p50.as_secs_f64() / base.as_secs_f64().max(1e-9)),
        });
        lines.push(Line {
            workload: format!("server RSS at {size} rows"),
            tally: format!("{:.1} MiB", server.rss_now_kib() as f64 / 1024.0),
            baseline: "150 MiB target".into(),
            ratio: None,
        });
    }
    lines.push(Line {
        workload: "server peak RSS over the run".into(),
        tally: format!("{:.1} MiB", server.peak_rss_mib()),
        baseline: "150 MiB target".into(),
        ratio: None,
    });
    pool.close().await;
    server.stop().await?;
    Ok(lines)
}

async fn run_sustained(
    url: &str,
    opts: &sustained::Options,
    raw_minutes: f64,
) -> anyhow::Result<Vec<Line>> {
    let server = child::Server::start(url).await?;
    let pool = PgPoolOptions::new().max_connections(8).connect(url).await?;
    let samples = sustained::tally(&server.addr, &pool, opts).await?;
    let mut lines = curve_lines(
        &format!(
            "tally sustained {} min, {} workers, backlog {}",
            opts.minutes, opts.workers, opts.backlog
        ),
        &samples,
        opts.minutes,
    );
    lines.push(Line {
        workload: "server peak RSS over the sustained run".into(),
        tally: format!("{:.1} MiB", server.peak_rss_mib()),
        baseline: "150 MiB target".into(),
        ratio: None,
    });
    server.stop().await?;
    if raw_minutes > 0.0 {
        let raw_opts = sustained::Options {
            minutes: raw_minutes,
            ..*opts
        };
        let samples = sustained::raw(&pool, &raw_opts).await?;
        lines.extend(curve_lines(
            &format!("raw naive loop {raw_minutes} min"),
            &samples,
            raw_minutes,
        ));
    }
    pool.close().await;
    Ok(lines)
}

/// The last minute of a sustained curve against its first minute, and
/// against seconds 30–90 (the first 20 s after a large enrollment are a cold
/// start that flatters the first-minute ratio).
fn curve_lines(label: &str, samples: &[sustained::Sample], minutes: f64) -> Vec<Line> {
    let minute = Duration::from_secs(60);
    let total = Duration::from_secs_f64(minutes * 60.0);
    let last = sustained::mean_between(samples, total.saturating_sub(minute), total);
    let windows = [
        ("first minute", Duration::ZERO, minute.min(total)),
        (
            "seconds 30-90",
            Duration::from_secs(30),
            Duration::from_secs(90).min(total),
        ),
    ];
    windows
        .into_iter()
        .map(|(name, from, to)| {
            let base = sustained::mean_between(samples, from, to);
            Line {
                workload: format!("{label}: last minute vs {name}"),
                tally: per_sec(last),
                baseline: per_sec(base),
                ratio: Some(last / base.max(1e-9)),
            }
        })
        .collect()
}

/// Rounds a side in each throughput phase.
const ROUNDS: usize = 3;

/// Runs `rounds` rounds of each side, alternating which goes first, so that
/// checkpoints, autovacuum and the machine's other work fall on both sides
/// alike. Returns each side's (rows, time) summed over its rounds.
async fn alternate(
    rounds: usize,
    mut raw: impl AsyncFnMut(usize) -> anyhow::Result<(u64, Duration)>,
    mut tally: impl AsyncFnMut(usize) -> anyhow::Result<(u64, Duration)>,
) -> anyhow::Result<((u64, Duration), (u64, Duration))> {
    let (mut a, mut b) = ((0, Duration::ZERO), (0, Duration::ZERO));
    let add = |acc: &mut (u64, Duration), (n, t): (u64, Duration)| {
        acc.0 += n;
        acc.1 += t;
    };
    for r in 0..rounds {
        // Progress, and a marker to line a profiler up with one side.
        eprintln!(
            "  round {} of {rounds}: {} first",
            r + 1,
            if r % 2 == 0 { "raw" } else { "tally" }
        );
        if r % 2 == 0 {
            add(&mut a, raw(r).await?);
            add(&mut b, tally(r).await?);
        } else {
            add(&mut b, tally(r).await?);
            add(&mut a, raw(r).await?);
        }
    }
    Ok((a, b))
}

/// Starts a phase with no checkpoint debt from the one before (best effort:
/// CHECKPOINT needs a superuser or pg_checkpoint).
async fn checkpoint(pool: &sqlx::PgPool) {
    if let Err(e) = sqlx::query("CHECKPOINT").execute(pool).await {
        eprintln!("(no CHECKPOINT before the phase: {e})");
    }
}

/// Latency line: p50 (p99) both sides; ratio = baseline p50 / tally p50
/// (above 1: tally is faster).
fn latency_line(workload: String, tally: &[Duration], baseline: &[Duration]) -> Line {
    let p = |v: &[Duration]| {
        format!(
            "{} ({})",
            ms(stats::percentile(v, 0.5)),
            ms(stats::percentile(v, 0.99))
        )
    };
    Line {
        workload,
        tally: p(tally),
        baseline: p(baseline),
        ratio: Some(
            stats::percentile(baseline, 0.5).as_secs_f64()
                / stats::percentile(tally, 0.5).as_secs_f64().max(1e-9),
        ),
    }
}

fn line(workload: String, tally: f64, baseline: f64) -> Line {
    Line {
        workload,
        tally: per_sec(tally),
        baseline: per_sec(baseline),
        ratio: Some(tally / baseline.max(1e-9)),
    }
}

/// The cache phase (see `cache`).
async fn run_cache(
    cli: &Cli,
    addr: &str,
    client: &mut grpc::Client,
    phase: Duration,
) -> anyhow::Result<Vec<Line>> {
    let mut lines = Vec::new();
    let backlog = cli.backlog.min(200_000);
    eprintln!("cache: claims of 500 reported, lookup (all misses) or none; backlog {backlog}");
    let keys = workload::keys("cache", 0..backlog);
    let slices: Vec<Arc<Vec<String>>> = keys
        .chunks(keys.len().div_ceil(ROUNDS).max(1))
        .map(|c| Arc::new(c.to_vec()))
        .collect();
    for (ledger, on) in [("cache-off", false), ("cache-on", true)] {
        cache::create_ledger(client, ledger, on).await?;
    }
    // Enrolling is the same call whatever the cache: measured all the same.
    let ((off_n, off_t), (on_n, on_t)) = alternate(
        slices.len(),
        async |r| grpc::enroll(addr, "cache-off", slices[r].clone(), cli.clients, 1000).await,
        async |r| grpc::enroll(addr, "cache-on", slices[r].clone(), cli.clients, 1000).await,
    )
    .await?;
    lines.push(Line {
        workload: format!(
            "cache: enroll ({} clients, batches of 1000) on a ledger with the cache, against without",
            cli.clients
        ),
        ..line(String::new(), rate(on_n, on_t), rate(off_n, off_t))
    });
    let round = phase / ROUNDS as u32;
    let ((off_n, off_t), (on_n, on_t)) = alternate(
        ROUNDS,
        async |_| cache::claim_report(addr, "cache-off", round, false).await,
        async |_| cache::claim_report(addr, "cache-on", round, true).await,
    )
    .await?;
    lines.push(Line {
        workload: "cache: claim+report of 500 with a lookup first (all misses, answers kept), against none (cache off)".into(),
        ..line(String::new(), rate(on_n, on_t), rate(off_n, off_t))
    });
    let answered = cache::succeeded_keys(client, "cache-on").await?;
    cache::create_ledger(client, "cache-hits", true).await?;
    grpc::enroll(addr, "cache-hits", Arc::new(answered), cli.clients, 1000).await?;
    let (hits, took, mut latencies) = cache::claim_hits(addr, "cache-hits").await?;
    latencies.sort();
    lines.push(Line {
        workload: format!("cache: {hits} rows answered whole by the cache (claim + SettleFromCache of 500), against claim+report"),
        ..line(String::new(), rate(hits, took), rate(off_n, off_t))
    });
    lines.push(Line {
        workload: "cache: one SettleFromCache of 500 hits (p50, p99)".into(),
        tally: format!(
            "{}, {}",
            ms(stats::percentile(&latencies, 0.5)),
            ms(stats::percentile(&latencies, 0.99))
        ),
        baseline: "-".into(),
        ratio: None,
    });
    let rows = if cli.quick { 2_000 } else { 10_000 };
    for r in cache::at_emulator(addr, rows, rows / 10).await? {
        let (workload, counts) = cache::describe(&r);
        eprintln!("{workload}: {counts}");
        lines.push(Line {
            workload,
            tally: counts,
            baseline: String::new(),
            ratio: None,
        });
    }
    Ok(lines)
}

//! The sustained run: enroll, claim, report and retries flowing at once for
//! minutes over a backlog kept at a target size, throughput sampled every
//! interval. A fresh table flatters any queue; this shows whether dead
//! entries at the queue's head slow claims down as the run goes on (DESIGN.md
//! section 10). The naive raw loop can run beside it for the comparison.

use crate::workload::{self, Mix};
use crate::{grpc, raw, stats};
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

#[derive(Clone, Copy)]
pub struct Options {
    pub minutes: f64,
    pub backlog: u64,
    pub workers: usize,
    pub interval: Duration,
}

/// Counters shared by the loops of one run.
#[derive(Default)]
struct Counters {
    reported: AtomicU64,
    settled: AtomicU64,
    enrolled: AtomicU64,
    stop: AtomicBool,
}

/// One sample: rows reported per second over an interval, and the dead
/// entries PostgreSQL counts in the queue table at its end.
pub struct Sample {
    pub at: Duration,
    pub rate: f64,
    pub dead: i64,
}

/// Runs tally for `opts.minutes`; returns the samples.
pub async fn tally(addr: &str, pool: &PgPool, opts: &Options) -> anyhow::Result<Vec<Sample>> {
    let ledger = "sustained";
    let mut client = grpc::connect(addr).await?;
    grpc::create_ledger(&mut client, ledger).await?;
    let c = Arc::new(Counters::default());
    eprintln!("sustained: enrolling a backlog of {} rows", opts.backlog);
    let keys = Arc::new(workload::keys(ledger, 0..opts.backlog));
    let (n, _) = grpc::enroll(addr, ledger, keys, 4, 1000).await?;
    c.enrolled.store(n, Ordering::Relaxed);
    let mut tasks = Vec::new();
    for w in 0..opts.workers {
        let (addr, c) = (addr.to_string(), c.clone());
        tasks.push(tokio::spawn(
            async move { worker(&addr, ledger, w, c).await },
        ));
    }
    {
        let (addr, c, target) = (addr.to_string(), c.clone(), opts.backlog);
        tasks.push(tokio::spawn(async move {
            enroller(&addr, ledger, target, c).await
        }));
    }
    let samples = sample(pool, "runnable", &c, opts).await?;
    c.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(samples)
}

/// Runs the naive raw loop for `opts.minutes`; returns the samples.
pub async fn raw(pool: &PgPool, opts: &Options) -> anyhow::Result<Vec<Sample>> {
    let ledger = "sustained";
    raw::setup(pool, ledger).await?;
    let c = Arc::new(Counters::default());
    eprintln!(
        "sustained raw: inserting a backlog of {} rows",
        opts.backlog
    );
    let keys = Arc::new(workload::keys(ledger, 0..opts.backlog));
    let (n, _) = raw::enroll(pool, ledger, keys, 4, 1000).await?;
    c.enrolled.store(n, Ordering::Relaxed);
    let mut tasks = Vec::new();
    for w in 0..opts.workers {
        let (pool, c) = (pool.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            while !c.stop.load(Ordering::Relaxed) {
                let (n, _) =
                    raw::claim_report(&pool, ledger, 1, 500, Duration::from_millis(500)).await?;
                c.reported.fetch_add(n, Ordering::Relaxed);
                c.settled.fetch_add(n * 93 / 100, Ordering::Relaxed);
                let _ = w;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    {
        let (pool, c, target) = (pool.clone(), c.clone(), opts.backlog);
        tasks.push(tokio::spawn(async move {
            let mut next = c.enrolled.load(Ordering::Relaxed);
            while !c.stop.load(Ordering::Relaxed) {
                let backlog = c.enrolled.load(Ordering::Relaxed)
                    - c.settled
                        .load(Ordering::Relaxed)
                        .min(c.enrolled.load(Ordering::Relaxed));
                if backlog >= target {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let keys = Arc::new(workload::keys(ledger, next..next + 1000));
                next += 1000;
                let (n, _) = raw::enroll(&pool, ledger, keys, 1, 1000).await?;
                c.enrolled.fetch_add(n, Ordering::Relaxed);
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    let table = format!("raw_{ledger}");
    let samples = sample(pool, &table, &c, opts).await?;
    c.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(samples)
}

async fn worker(addr: &str, ledger: &str, w: usize, c: Arc<Counters>) -> anyhow::Result<()> {
    let mut client = grpc::connect(addr).await?;
    let parent = format!("ledgers/{ledger}");
    while !c.stop.load(Ordering::Relaxed) {
        let grant = client
            .claim_rows(pb::ClaimRowsRequest {
                parent: parent.clone(),
                max_rows: 500,
                worker: format!("sustained-{w}"),
                ..Default::default()
            })
            .await?
            .into_inner();
        let Some(claim) = grant.claim else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let settled = grant
            .rows
            .iter()
            .filter(|r| {
                let attempt = r.attempts.map_or(0, |a| a.total) as u64 + 1;
                workload::outcome(&r.key, attempt) != Mix::Transient
            })
            .count() as u64;
        let n = grant.rows.len() as u64;
        client
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: claim.name,
                outcomes: grpc::outcomes(&grant.rows),
                claim_next: None,
            })
            .await?;
        c.reported.fetch_add(n, Ordering::Relaxed);
        c.settled.fetch_add(settled, Ordering::Relaxed);
    }
    Ok(())
}

/// Keeps the backlog (enrolled minus settled) at `target` rows.
async fn enroller(addr: &str, ledger: &str, target: u64, c: Arc<Counters>) -> anyhow::Result<()> {
    let mut next = c.enrolled.load(Ordering::Relaxed);
    while !c.stop.load(Ordering::Relaxed) {
        let enrolled = c.enrolled.load(Ordering::Relaxed);
        let backlog = enrolled - c.settled.load(Ordering::Relaxed).min(enrolled);
        if backlog >= target {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let keys = Arc::new(workload::keys(ledger, next..next + 1000));
        next += 1000;
        let (n, _) = grpc::enroll(addr, ledger, keys, 1, 1000).await?;
        c.enrolled.fetch_add(n, Ordering::Relaxed);
    }
    Ok(())
}

async fn sample(
    pool: &PgPool,
    table: &str,
    c: &Counters,
    opts: &Options,
) -> anyhow::Result<Vec<Sample>> {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(opts.minutes * 60.0);
    let mut samples = Vec::new();
    let mut last = c.reported.load(Ordering::Relaxed);
    let mut last_at = Instant::now();
    while Instant::now() < end {
        tokio::time::sleep(opts.interval).await;
        let now = c.reported.load(Ordering::Relaxed);
        let dead: i64 = sqlx::query_scalar(
            "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = $1",
        )
        .bind(table)
        .fetch_optional(pool)
        .await?
        .unwrap_or(0);
        let s = Sample {
            at: start.elapsed(),
            rate: stats::rate(now - last, last_at.elapsed()),
            dead,
        };
        eprintln!(
            "  {:>5.0}s  {:>10}  dead entries {}",
            s.at.as_secs_f64(),
            stats::per_sec(s.rate),
            s.dead
        );
        samples.push(s);
        last = now;
        last_at = Instant::now();
    }
    Ok(samples)
}

/// Mean rate over samples taken in `[from, to)`.
pub fn mean_between(samples: &[Sample], from: Duration, to: Duration) -> f64 {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.at > from && s.at <= to)
        .map(|s| s.rate)
        .collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

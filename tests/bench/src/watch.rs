//! WatchJobs fan-out latency, commit to delivery, against raw LISTEN/NOTIFY.
//!
//! Ten watchers on one ledger; job events are produced at a fixed rate by
//! CreateJob, MarkSubmitted and FinishJob. For every event and every
//! watcher, the latency runs from the producing RPC's OK answer (which comes
//! after the commit) to the watcher receiving the event. A watcher can see
//! an event before the producer has read its answer; such a latency counts
//! as zero (and is counted on stderr).

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, interval, timeout};

pub const WATCHERS: usize = 10;
const DEADLINE: Duration = Duration::from_secs(10);
/// How long the watchers keep reading after the last event is produced.
const DRAIN: Duration = Duration::from_secs(1);

/// An event as the watchers see it: job name, event type, job state.
type JobKey = (String, i32, i32);

/// One watcher's task: what it received, and when.
type Watcher<K> = JoinHandle<anyhow::Result<Vec<(K, Instant)>>>;

/// Latencies (sorted) and counts, one fan-out phase.
pub struct Fanout {
    pub latencies: Vec<Duration>,
    pub events: usize,
    /// (event, watcher) pairs never delivered.
    pub missing: usize,
    /// Deliveries seen before the producer had its answer.
    pub early: usize,
}

fn collate<K: Eq + Hash>(
    produced: &HashMap<K, Instant>,
    received: Vec<Vec<(K, Instant)>>,
) -> Fanout {
    let mut latencies = Vec::new();
    let mut early = 0;
    for seen in &received {
        for (k, at) in seen {
            if let Some(ok) = produced.get(k) {
                if *at < *ok {
                    early += 1;
                }
                latencies.push(at.saturating_duration_since(*ok));
            }
        }
    }
    latencies.sort();
    Fanout {
        missing: produced.len() * received.len() - latencies.len(),
        events: produced.len(),
        latencies,
        early,
    }
}

fn pace(rate: u32) -> tokio::time::Interval {
    let mut tick = interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    tick
}

/// `events` job events at `rate` per second on a fresh ledger `ledger`, with
/// ten WatchJobs streams on it.
pub async fn tally(addr: &str, ledger: &str, events: usize, rate: u32) -> anyhow::Result<Fanout> {
    let channel = tonic::transport::Endpoint::from_shared(addr.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut l = crate::grpc::connect(addr).await?;
    let mut j = JobServiceClient::new(channel);
    let parent = format!("ledgers/{ledger}");
    let jobs = events.div_ceil(3);
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: ledger.into(),
        policy: Some(pb::LedgerPolicy {
            max_active_jobs: 100,
            ..Default::default()
        }),
    })
    .await?;
    let keys: Vec<String> = (0..=jobs).map(|i| format!("w{i}")).collect();
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: parent.clone(),
        rows: keys
            .iter()
            .map(|k| pb::RowInput {
                key: k.clone(),
                payload: crate::workload::payload(k),
                ..Default::default()
            })
            .collect(),
    })
    .await?;
    // A claim per job, ahead of time: claims are not job events.
    let mut claims = Vec::with_capacity(jobs + 1);
    for _ in 0..=jobs {
        let grant = l
            .claim_rows(pb::ClaimRowsRequest {
                parent: parent.clone(),
                max_rows: 1,
                worker: "watch-bench".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        claims.push(grant.claim.map(|c| c.name).unwrap_or_default());
    }
    anyhow::ensure!(
        claims.iter().all(|c| !c.is_empty()),
        "a claim came back empty"
    );

    let mut streams = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        streams.push(
            j.watch_jobs(pb::WatchJobsRequest {
                parent: parent.clone(),
                after_sequence: 0,
            })
            .await?
            .into_inner(),
        );
    }
    // A first event through every stream proves it is live; not measured.
    let warm = claims.pop().unwrap_or_default();
    j.create_job(pb::CreateJobRequest {
        claim: warm,
        ..Default::default()
    })
    .await?;
    for s in &mut streams {
        timeout(DEADLINE, s.message())
            .await??
            .ok_or_else(|| anyhow::anyhow!("a watch stream closed"))?;
    }

    let (stop_tx, stop) = watch::channel(false);
    let watchers: Vec<Watcher<JobKey>> = streams
        .into_iter()
        .map(|mut s| {
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    tokio::select! {
                        m = s.message() => {
                            let Some(e) = m? else { break };
                            let at = Instant::now();
                            let job = e.job.unwrap_or_default();
                            seen.push(((job.name, e.r#type, job.state), at));
                        }
                        _ = stop.changed() => break,
                    }
                }
                Ok(seen)
            })
        })
        .collect();

    let mut produced: HashMap<JobKey, Instant> = HashMap::with_capacity(events);
    let mut tick = pace(rate);
    let created = pb::JobEventType::Created as i32;
    let changed = pb::JobEventType::StateChanged as i32;
    let mut job = pb::Job::default();
    for i in 0..events {
        tick.tick().await;
        let (n, claim) = (i / 3, claims[i / 3].clone());
        let (key, at) = match i % 3 {
            0 => {
                job = j
                    .create_job(pb::CreateJobRequest {
                        claim,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                let at = Instant::now();
                ((job.name.clone(), created, job.state), at)
            }
            1 => {
                job = j
                    .mark_submitted(pb::MarkSubmittedRequest {
                        name: job.name.clone(),
                        claim,
                        batch: format!("batches/watch-{n}"),
                        input_file: format!("files/watch-{n}"),
                    })
                    .await?
                    .into_inner();
                let at = Instant::now();
                ((job.name.clone(), changed, job.state), at)
            }
            _ => {
                job = j
                    .finish_job(pb::FinishJobRequest {
                        name: job.name.clone(),
                        claim,
                        final_state: pb::JobState::Succeeded as i32,
                        output_file: format!("files/watch-out-{n}"),
                        error: String::new(),
                        not_run: Vec::new(),
                    })
                    .await?
                    .into_inner();
                let at = Instant::now();
                ((job.name.clone(), changed, job.state), at)
            }
        };
        produced.insert(key, at);
    }
    tokio::time::sleep(DRAIN).await;
    stop_tx.send(true)?;
    let mut received = Vec::with_capacity(WATCHERS);
    for w in watchers {
        received.push(w.await??);
    }
    Ok(collate(&produced, received))
}

/// The raw equivalent: ten `PgListener`s on one channel; each event is an
/// INSERT and a `pg_notify` in one transaction, timed from its commit.
pub async fn raw(pool: &PgPool, events: usize, rate: u32) -> anyhow::Result<Fanout> {
    const CHANNEL: &str = "bench_watch";
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_watch (
             id bigserial PRIMARY KEY,
             body text NOT NULL,
             create_time timestamptz NOT NULL DEFAULT now())",
    )
    .execute(pool)
    .await?;
    let mut listeners = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let mut l = PgListener::connect_with(pool).await?;
        l.listen(CHANNEL).await?;
        listeners.push(l);
    }
    let notify = |body: String| async move {
        let mut tx = pool.begin().await?;
        let id: i64 = sqlx::query_scalar("INSERT INTO bench_watch (body) VALUES ($1) RETURNING id")
            .bind(body)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok::<i64, anyhow::Error>(id)
    };
    // Warm-up, not measured.
    notify("warm-up".into()).await?;
    for l in &mut listeners {
        timeout(DEADLINE, l.recv()).await??;
    }

    let (stop_tx, stop) = watch::channel(false);
    let watchers: Vec<Watcher<i64>> = listeners
        .into_iter()
        .map(|mut l| {
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    tokio::select! {
                        n = l.recv() => {
                            let n = n?;
                            let at = Instant::now();
                            seen.push((n.payload().parse()?, at));
                        }
                        _ = stop.changed() => break,
                    }
                }
                Ok(seen)
            })
        })
        .collect();
    let mut produced = HashMap::with_capacity(events);
    let mut tick = pace(rate);
    for i in 0..events {
        tick.tick().await;
        let id = notify(format!("event {i}")).await?;
        produced.insert(id, Instant::now());
    }
    tokio::time::sleep(DRAIN).await;
    stop_tx.send(true)?;
    let mut received = Vec::with_capacity(WATCHERS);
    for w in watchers {
        received.push(w.await??);
    }
    Ok(collate(&produced, received))
}

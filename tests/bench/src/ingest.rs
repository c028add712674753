//! IngestEvent latency at a fixed rate, against the raw SQL upsert that a
//! hand-rolled reducer would run.
//!
//! Open loop: requests are started on a `tokio::time::interval` schedule
//! (missed ticks burst) and each latency is measured from the tick's
//! scheduled instant, not from when the request was actually sent, so a
//! stalled server is charged for the requests it held up (no coordinated
//! omission).

use sqlx::PgPool;
use std::future::Future;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tokio::time::{MissedTickBehavior, interval};

/// One provider event of the mix.
#[derive(Clone)]
pub struct Event {
    pub operation: String,
    pub state: &'static str,
    /// Provider update time, microseconds since the epoch.
    pub micros: i64,
    pub event_id: String,
}

/// `n` events over operations `batches/bench-<i>`: each operation goes
/// PENDING → RUNNING → SUCCEEDED with increasing update times, and about one
/// event in five is a redelivery (same event id) or a stale event (an older
/// state or time), which the reducer drops. Operations are interleaved ten
/// at a time, so events of one operation are ten ticks apart.
pub fn mix(n: usize) -> Vec<Event> {
    const STATES: [&str; 3] = [
        "BATCH_STATE_PENDING",
        "BATCH_STATE_RUNNING",
        "BATCH_STATE_SUCCEEDED",
    ];
    const WINDOW: usize = 10;
    let base = 1_700_000_000_000_000i64;
    let mut out = Vec::with_capacity(n);
    let mut group = 0usize;
    let mut genuine = 0usize;
    while out.len() < n {
        // One group of WINDOW operations, round-robin through their lives.
        let mut per_op: Vec<Vec<Event>> = (0..WINDOW)
            .map(|k| {
                let op = format!("batches/bench-{}", group * WINDOW + k);
                let mut evs = Vec::new();
                for (s, state) in STATES.iter().enumerate() {
                    let micros = base + ((group * WINDOW + k) as i64) * 1_000 + s as i64 * 100;
                    let e = Event {
                        operation: op.clone(),
                        state,
                        micros,
                        event_id: format!("{op}/{s}"),
                    };
                    evs.push(e.clone());
                    genuine += 1;
                    // After every fourth genuine event, a dropped one:
                    // 1 in 5 of all events.
                    if genuine.is_multiple_of(4) {
                        let dropped = match genuine / 4 % 3 {
                            // The same delivery again.
                            0 => e,
                            // An older state (lower rank, or a regression
                            // from the terminal state).
                            1 if s > 0 => Event {
                                state: STATES[s - 1],
                                micros: micros - 50,
                                event_id: format!("{op}/{s}/late"),
                                ..e
                            },
                            // The same state again with an older time.
                            _ => Event {
                                micros: micros - 10,
                                event_id: format!("{op}/{s}/stale"),
                                ..e
                            },
                        };
                        evs.push(dropped);
                    }
                }
                evs
            })
            .collect();
        for step in 0.. {
            let mut any = false;
            for evs in &mut per_op {
                if step < evs.len() {
                    out.push(evs[step].clone());
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        group += 1;
    }
    out.truncate(n);
    out
}

fn timestamp(micros: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

/// Runs `send(event)` for every event at `rate` per second, open loop, and
/// answers the sorted latencies measured from each scheduled start.
async fn paced<F, Fut>(events: &[Event], rate: u32, send: F) -> anyhow::Result<Vec<Duration>>
where
    F: Fn(Event) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut tick = interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(events.len());
    for e in events {
        let scheduled: Instant = tick.tick().await.into_std();
        let fut = send(e.clone());
        tasks.push(tokio::spawn(async move {
            fut.await?;
            Ok::<Duration, anyhow::Error>(scheduled.elapsed())
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await??);
    }
    out.sort();
    Ok(out)
}

/// The mix through IngestEvent. Answers the sorted latencies and how many
/// events the reducer dropped.
pub async fn tally(
    addr: &str,
    events: &[Event],
    rate: u32,
) -> anyhow::Result<(Vec<Duration>, u64)> {
    let channel = tonic::transport::Endpoint::from_shared(addr.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let client = OperationsServiceClient::new(channel);
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let lat = paced(events, rate, |e| {
        let mut client = client.clone();
        let dropped = dropped.clone();
        async move {
            let r = client
                .ingest_event(pb::IngestEventRequest {
                    event: Some(pb::OperationEvent {
                        operation: e.operation,
                        state: e.state.into(),
                        update_time: Some(timestamp(e.micros)),
                        source: pb::EventSource::Webhook as i32,
                        event_id: e.event_id,
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner();
            if r.verdict != pb::EventVerdict::Applied as i32 {
                dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
    })
    .await?;
    Ok((lat, dropped.load(std::sync::atomic::Ordering::Relaxed)))
}

/// The raw equivalent: one conditional upsert per event into a bare table.
pub async fn raw(pool: &PgPool, events: &[Event], rate: u32) -> anyhow::Result<Vec<Duration>> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_ingest (
             name text PRIMARY KEY,
             state text NOT NULL,
             update_time timestamptz NOT NULL)",
    )
    .execute(pool)
    .await?;
    paced(events, rate, |e| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "INSERT INTO bench_ingest AS t (name, state, update_time)
                 VALUES ($1, $2, to_timestamp($3::float8 / 1e6))
                 ON CONFLICT (name) DO UPDATE
                 SET state = excluded.state, update_time = excluded.update_time
                 WHERE t.update_time < excluded.update_time",
            )
            .bind(e.operation)
            .bind(e.state)
            .bind(e.micros as f64)
            .execute(&pool)
            .await?;
            Ok(())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_one_fifth_dropped_events() {
        let m = mix(1000);
        assert_eq!(m.len(), 1000);
        let mut seen = std::collections::HashSet::new();
        let mut last: std::collections::HashMap<&str, (usize, i64)> = Default::default();
        let rank = |s: &str| match s {
            "BATCH_STATE_PENDING" => 0,
            "BATCH_STATE_RUNNING" => 1,
            _ => 2,
        };
        let mut dropped = 0;
        for e in &m {
            let fresh = seen.insert(e.event_id.clone());
            let r = rank(e.state);
            let newer = last
                .get(e.operation.as_str())
                .is_none_or(|&(lr, lt)| r > lr || (r == lr && e.micros > lt));
            if fresh && newer {
                last.insert(&e.operation, (r, e.micros));
            } else {
                dropped += 1;
            }
        }
        assert!((180..=220).contains(&dropped), "{dropped}");
        assert!(m[0].operation == "batches/bench-0" && m[1].operation == "batches/bench-1");
    }
}

//! `tallyctl consume LEDGER CONSUMER`: a ledger's finished results as JSONL
//! on stdout, through a named consumer (DeliveryService), each
//! acknowledged only once its line is written and flushed.
//!
//! So a consume killed at any point loses nothing: a result handed out and
//! not acknowledged is handed out again once its visibility timeout ends
//! (to this consume started again, or to another instance of the
//! consumer), and the duplicates a kill can cause are the lines written
//! and not yet acknowledged (at most `--ack-every`). Each line carries
//! `ledger`, `key` and `version`: what a sink deduplicates on. Started
//! again, it resumes where the consumer's cursor is.
//!
//! It runs until interrupted, or with `--until-empty` until a receive
//! that waited finds nothing; transient failures (the server restarting)
//! are retried.

use crate::cli::{ConsumeArgs, ConsumeStart};
use crate::error::{CliError, ExitCode};
use crate::{Ctx, output};
use std::io::Write as _;
use std::time::Duration;
use tally_client::{RetryPolicy, with_retry};
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_client::DeliveryServiceClient;
use tonic::Code;

type Deliveries = DeliveryServiceClient<crate::connect::Svc>;

/// How long a transient failure is retried (the server restarting).
fn retry() -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(5),
        tries: 30,
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// One result's line: the ResultDelivery with its result and payload as
/// the JSON they hold, and the ledger.
pub fn line(ledger: &str, r: &pb::ResultDelivery) -> serde_json::Value {
    let mut v = output::to_json(r);
    if let Some(o) = v.as_object_mut() {
        o.insert("ledger".into(), serde_json::Value::String(ledger.into()));
    }
    v
}

pub async fn run(ctx: &mut Ctx, args: ConsumeArgs) -> Result<ExitCode, CliError> {
    let name = format!("ledgers/{}/consumers/{}", args.ledger, args.consumer);
    if args.create {
        create(ctx, &args).await?;
    }
    let mut client = ctx.clients.deliveries.clone();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut written = 0u64;
    let ack_every = args.ack_every.max(1) as usize;
    loop {
        if args.limit.is_some_and(|n| written >= n) {
            break;
        }
        let want = args.limit.map_or(args.batch, |n| {
            (n - written).min(u64::from(args.batch)) as u32
        });
        let req = pb::ReceiveResultsRequest {
            consumer: name.clone(),
            max_rows: want as i32,
            wait: Some(duration(args.wait)),
            visibility_timeout: args.visibility.map(duration),
            include_payload: args.include_payload,
        };
        let got = with_retry(retry(), "receive results", || {
            let mut c = client.clone();
            let req = req.clone();
            async move { c.receive_results(req).await.map(|r| r.into_inner()) }
        })
        .await
        .map_err(|s| CliError::server(format!("receiving from {name}"), s))?;
        if got.results.is_empty() {
            if args.until_empty {
                break;
            }
            continue;
        }
        let mut pending: Vec<i64> = Vec::with_capacity(ack_every);
        let mut lost = false;
        for r in &got.results {
            if lost {
                // A lease of this answer ran out and the result went to
                // another instance: the rest are likely theirs too. Leave
                // them (they come back if not acknowledged) and receive anew.
                break;
            }
            let text = serde_json::to_string(&line(&args.ledger, r))
                .map_err(|e| CliError::input(format!("encoding a result: {e}")))?;
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|e| CliError::input(format!("writing to stdout: {e}")))?;
            written += 1;
            pending.push(r.position);
            if pending.len() >= ack_every {
                lost = ack(&mut client, &name, std::mem::take(&mut pending)).await? > 0;
            }
        }
        if !pending.is_empty() {
            ack(&mut client, &name, pending).await?;
        }
    }
    out.flush()
        .map_err(|e| CliError::input(format!("writing to stdout: {e}")))?;
    Ok(ExitCode::Ok)
}

/// Acknowledges lines already written and flushed; answers how many of
/// them were no longer leased to this consumer (their visibility ran out).
async fn ack(client: &mut Deliveries, name: &str, positions: Vec<i64>) -> Result<i64, CliError> {
    let req = pb::AckResultsRequest {
        consumer: name.to_string(),
        positions,
        up_to_position: 0,
    };
    let got = with_retry(retry(), "acknowledge results", || {
        let mut c = client.clone();
        let req = req.clone();
        async move { c.ack_results(req).await }
    })
    .await
    .map_err(|s| CliError::server(format!("acknowledging to {name}"), s))?
    .into_inner();
    if got.not_leased > 0 {
        eprintln!(
            "warning: {} result(s) were no longer leased when acknowledged (the visibility timeout ran out; another instance may have them): receiving anew",
            got.not_leased
        );
    }
    Ok(got.not_leased)
}

/// Creates the consumer unless it exists (`--create`).
async fn create(ctx: &mut Ctx, args: &ConsumeArgs) -> Result<(), CliError> {
    let start = pb::ConsumerStart {
        at: Some(match args.start {
            ConsumeStart::Beginning => pb::consumer_start::At::Beginning(true),
            ConsumeStart::Now => pb::consumer_start::At::Now(true),
        }),
    };
    let req = pb::CreateConsumerRequest {
        parent: format!("ledgers/{}", args.ledger),
        consumer_id: args.consumer.clone(),
        consumer: Some(pb::Consumer {
            visibility_timeout: args.visibility.map(duration),
            ..Default::default()
        }),
        start: Some(start),
    };
    match ctx.clients.deliveries.create_consumer(req).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(CliError::server("creating the consumer", s)),
    }
}

//! The same work through tally's gRPC API.

use crate::workload::{self, Mix};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tonic::transport::Channel;

pub type Client = LedgerServiceClient<Channel>;

pub async fn connect(addr: &str) -> anyhow::Result<Client> {
    let channel = tonic::transport::Endpoint::from_shared(addr.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(LedgerServiceClient::new(channel)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20))
}

/// A ledger whose retries are claimable at once (like the raw loop's).
pub async fn create_ledger(client: &mut Client, id: &str) -> anyhow::Result<()> {
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: Some(pb::LedgerPolicy {
                backoff: Some(pb::Backoff {
                    initial: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 1_000,
                    }),
                    max: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 1_000,
                    }),
                    multiplier: 1.0,
                    jitter: 0.0,
                }),
                ..Default::default()
            }),
        })
        .await?;
    Ok(())
}

pub async fn enroll(
    addr: &str,
    ledger: &str,
    keys: Arc<Vec<String>>,
    clients: usize,
    batch: usize,
) -> anyhow::Result<(u64, Duration)> {
    enroll_with(addr, ledger, keys, clients, batch, None).await
}

/// [`enroll`], every row on `prompt` when one is given.
/// Fails unless all `rows` rows of `ledger` SUCCEEDED (the workers exited
/// idle).
pub async fn all_succeeded(client: &mut Client, ledger: &str, rows: u64) -> anyhow::Result<()> {
    let summary = client
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{ledger}"),
            ..Default::default()
        })
        .await?
        .into_inner();
    anyhow::ensure!(
        summary.succeeded == rows as i64,
        "the workers exited with {} of {rows} rows of {ledger} succeeded: {}",
        summary.succeeded,
        summary.summary_line
    );
    Ok(())
}

/// Enrolls `rows` into `ledger` in calls of `chunk`.
pub async fn enroll_inputs(
    client: &mut Client,
    ledger: &str,
    rows: &[pb::RowInput],
    chunk: usize,
) -> anyhow::Result<()> {
    for part in rows.chunks(chunk) {
        client
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{ledger}"),
                rows: part.to_vec(),
            })
            .await?;
    }
    Ok(())
}

/// Registers the `summarize@v1` prompt the workers' phases render (once a
/// run: a second phase finds the same version there).
pub async fn register_summarize(client: &mut Client) -> anyhow::Result<()> {
    let registered = client
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "summarize".into(),
            version: "v1".into(),
            template: "Summarize {{ text }} in one line.".into(),
            ..Default::default()
        })
        .await;
    match registered {
        // Registered by an earlier phase of this run: the same version.
        Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
        other => other.map(drop).map_err(Into::into),
    }
}

pub async fn enroll_with(
    addr: &str,
    ledger: &str,
    keys: Arc<Vec<String>>,
    clients: usize,
    batch: usize,
    prompt: Option<pb::PromptRef>,
) -> anyhow::Result<(u64, Duration)> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut client = connect(addr).await?;
        let (keys, next, parent) = (keys.clone(), next.clone(), format!("ledgers/{ledger}"));
        let prompt = prompt.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let from = next.fetch_add(batch as u64, Ordering::Relaxed) as usize;
                if from >= keys.len() {
                    return Ok::<u64, anyhow::Error>(done);
                }
                let rows = keys[from..(from + batch).min(keys.len())]
                    .iter()
                    .map(|k| pb::RowInput {
                        key: k.clone(),
                        payload: workload::payload(k),
                        prompt: prompt.clone(),
                        ..Default::default()
                    })
                    .collect();
                let r = client
                    .enroll_rows(pb::EnrollRowsRequest {
                        parent: parent.clone(),
                        rows,
                    })
                    .await?
                    .into_inner();
                done += r.enrolled as u64;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok((total, start.elapsed()))
}

pub fn outcomes(rows: &[pb::ClaimedRow]) -> Vec<pb::RowOutcome> {
    rows.iter()
        .map(|r| {
            let attempt = r.attempts.map_or(0, |a| a.total) as u64 + 1;
            let outcome = match workload::outcome(&r.key, attempt) {
                Mix::Success => pb::row_outcome::Outcome::Result(workload::result(&r.key)),
                Mix::Transient => pb::row_outcome::Outcome::Failure(pb::Failure {
                    http_code: 503,
                    status: "UNAVAILABLE".into(),
                    message: "overloaded".into(),
                    ..Default::default()
                }),
                Mix::Permanent => pb::row_outcome::Outcome::Failure(pb::Failure {
                    http_code: 400,
                    status: "INVALID_ARGUMENT".into(),
                    message: "bad request".into(),
                    ..Default::default()
                }),
            };
            pb::RowOutcome {
                key: r.key.clone(),
                outcome: Some(outcome),
                usage: Some(pb::Usage {
                    input_tokens: 120,
                    output_tokens: 40,
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect()
}

/// ClaimRows of `batch`, then ReportOutcomes of the same rows, by `workers`
/// loops for `duration`. Returns rows reported. `chained`: each report also
/// claims the next rows (`claim_next`), one call a batch after the first.
pub async fn claim_report(
    addr: &str,
    ledger: &str,
    workers: usize,
    batch: i32,
    duration: Duration,
    chained: bool,
) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = connect(addr).await?;
        let claim = pb::ClaimRowsRequest {
            parent: format!("ledgers/{ledger}"),
            max_rows: batch,
            worker: format!("bench-{w}"),
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            let mut reported = 0u64;
            let (mut claims, mut reports) = (Vec::new(), Vec::new());
            let mut next: Option<pb::ClaimRowsResponse> = None;
            while Instant::now() < deadline {
                let grant = match next.take() {
                    Some(grant) => grant,
                    None => {
                        let t = Instant::now();
                        let grant = client.claim_rows(claim.clone()).await?.into_inner();
                        claims.push(t.elapsed());
                        grant
                    }
                };
                let Some(granted) = grant.claim else { break };
                let n = grant.rows.len() as u64;
                let req = pb::ReportOutcomesRequest {
                    claim: granted.name,
                    outcomes: outcomes(&grant.rows),
                    claim_next: chained.then(|| claim.clone()),
                };
                let t = Instant::now();
                next = client.report_outcomes(req).await?.into_inner().next_claim;
                reports.push(t.elapsed());
                reported += n;
            }
            let elapsed = start.elapsed();
            // A claim taken by the last report is given back for the next
            // round, outside the time measured.
            if let Some(left) = next.and_then(|n| n.claim) {
                client
                    .release_claim(pb::ReleaseClaimRequest {
                        name: left.name,
                        keys: vec![],
                    })
                    .await?;
            }
            Ok::<_, anyhow::Error>((reported, claims, reports, elapsed))
        }));
    }
    let (mut total, mut claims, mut reports) = (0, Vec::new(), Vec::new());
    let mut elapsed = Duration::ZERO;
    for t in tasks {
        let (n, c, r, e) = t.await??;
        total += n;
        claims.extend(c);
        reports.extend(r);
        elapsed = elapsed.max(e);
    }
    claims.sort();
    reports.sort();
    // Where a round's time went, for profiling.
    eprintln!(
        "    tally: {} ClaimRows p50 {}, {} ReportOutcomes{} p50 {}",
        claims.len(),
        crate::stats::ms(crate::stats::percentile(&claims, 0.5)),
        reports.len(),
        if chained { " (with claim_next)" } else { "" },
        crate::stats::ms(crate::stats::percentile(&reports, 0.5)),
    );
    Ok((total, elapsed))
}

/// Latencies of `samples` ClaimRows calls of `batch` rows (each followed by
/// its report, untimed).
pub async fn claim_latencies(
    addr: &str,
    ledger: &str,
    batch: i32,
    samples: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut client = connect(addr).await?;
    let parent = format!("ledgers/{ledger}");
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let grant = client
            .claim_rows(pb::ClaimRowsRequest {
                parent: parent.clone(),
                max_rows: batch,
                worker: "latency".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        out.push(t.elapsed());
        let Some(claim) = grant.claim else { break };
        client
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: claim.name,
                outcomes: outcomes(&grant.rows),
                claim_next: None,
            })
            .await?;
    }
    out.sort();
    Ok(out)
}

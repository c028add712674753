//! The result cache (issue 54): what a lookup costs on the hot path, what a
//! hit costs beside a provider round trip, and the batches a run sends.
//!
//! - Hot path: one loop of claims of 500 rows reported SUCCEEDED on a
//!   ledger without the cache, against the same loop on a ledger with it,
//!   where each claim first asks SettleFromCache with one request per row
//!   (every one new: each misses, is remembered, and its answer is kept
//!   when reported). Three alternated rounds a side.
//! - Hits: claims of 500 rows whose requests were all answered on the
//!   cached ledger, settled by SettleFromCache alone: rows a second and
//!   each lookup's latency.
//! - At the Gemini emulator (batches of about a second): 10,000 rows run
//!   by an in-process tally-worker, then the same rows under another
//!   ledger name, then with one variable changed in 1,000 of them: the
//!   batches made and requests sent each time.

use crate::grpc::{self, Client};
use crate::workload;
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

const BATCH: i32 = 500;
const MODEL: &str = "gemini-2.5-flash";

/// A ledger like [`grpc::create_ledger`]'s, with the cache on or off.
pub async fn create_ledger(client: &mut Client, id: &str, cache: bool) -> anyhow::Result<()> {
    client
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: Some(pb::LedgerPolicy {
                model: MODEL.into(),
                result_cache: cache.then(pb::ResultCachePolicy::default),
                ..Default::default()
            }),
        })
        .await?;
    Ok(())
}

/// The request the loops look up for `key` (about the size of a short
/// rendered prompt).
fn request_of(key: &str) -> String {
    format!(
        r#"{{"expect":{{"json":false,"schema":null}},"model":"{MODEL}","provider":"gemini","request":{},"v":1}}"#,
        workload::payload(key)
    )
}

fn succeeded(rows: &[pb::ClaimedRow]) -> Vec<pb::RowOutcome> {
    rows.iter()
        .map(|r| pb::RowOutcome {
            key: r.key.clone(),
            outcome: Some(pb::row_outcome::Outcome::Result(workload::result(&r.key))),
            usage: Some(pb::Usage {
                input_tokens: 120,
                output_tokens: 40,
                ..Default::default()
            }),
            model_version: "bench-1".into(),
            ..Default::default()
        })
        .collect()
}

fn lookups(rows: &[pb::ClaimedRow], claim: &str) -> pb::SettleFromCacheRequest {
    pb::SettleFromCacheRequest {
        claim: claim.into(),
        requests: rows
            .iter()
            .map(|r| pb::CacheRequest {
                key: r.key.clone(),
                request: request_of(&r.key),
            })
            .collect(),
    }
}

fn claim_of(ledger: &str) -> pb::ClaimRowsRequest {
    pb::ClaimRowsRequest {
        parent: format!("ledgers/{ledger}"),
        max_rows: BATCH,
        worker: "bench-cache".into(),
        ..Default::default()
    }
}

/// Claims reported SUCCEEDED for `duration`, each first looked up (all
/// misses) when `lookup`. Rows reported and the time taken.
pub async fn claim_report(
    addr: &str,
    ledger: &str,
    duration: Duration,
    lookup: bool,
) -> anyhow::Result<(u64, Duration)> {
    let mut client = grpc::connect(addr).await?;
    let start = Instant::now();
    let mut reported = 0;
    while start.elapsed() < duration {
        let grant = client.claim_rows(claim_of(ledger)).await?.into_inner();
        let Some(claim) = grant.claim else { break };
        if lookup {
            let got = client
                .settle_from_cache(lookups(&grant.rows, &claim.name))
                .await?
                .into_inner();
            anyhow::ensure!(got.hits.is_empty(), "new requests hit the cache");
        }
        client
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: claim.name,
                outcomes: succeeded(&grant.rows),
                claim_next: None,
            })
            .await?;
        reported += grant.rows.len() as u64;
    }
    Ok((reported, start.elapsed()))
}

/// Claims settled by the cache alone until none is left: rows settled, the
/// time taken, and each lookup's latency.
pub async fn claim_hits(
    addr: &str,
    ledger: &str,
) -> anyhow::Result<(u64, Duration, Vec<Duration>)> {
    let mut client = grpc::connect(addr).await?;
    let start = Instant::now();
    let (mut settled, mut latencies) = (0, Vec::new());
    loop {
        let grant = client.claim_rows(claim_of(ledger)).await?.into_inner();
        let Some(claim) = grant.claim else { break };
        let t = Instant::now();
        let got = client
            .settle_from_cache(lookups(&grant.rows, &claim.name))
            .await?
            .into_inner();
        latencies.push(t.elapsed());
        anyhow::ensure!(
            got.hits.len() == grant.rows.len(),
            "{} of {} rows hit",
            got.hits.len(),
            grant.rows.len()
        );
        settled += got.hits.len() as u64;
    }
    Ok((settled, start.elapsed(), latencies))
}

/// The keys of `ledger`'s SUCCEEDED rows.
pub async fn succeeded_keys(client: &mut Client, ledger: &str) -> anyhow::Result<Vec<String>> {
    let mut keys = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_rows(pb::ListRowsRequest {
                parent: format!("ledgers/{ledger}"),
                filter: Some(pb::RowFilter {
                    statuses: vec![pb::RowStatus::Succeeded as i32],
                    ..Default::default()
                }),
                page_size: 1000,
                page_token: token,
                view: pb::RowView::Basic as i32,
            })
            .await?
            .into_inner();
        keys.extend(page.rows.into_iter().map(|r| r.key));
        if page.next_page_token.is_empty() {
            return Ok(keys);
        }
        token = page.next_page_token;
    }
}

/// One run of a ledger at the emulator.
pub struct Run {
    pub what: &'static str,
    pub rows: usize,
    pub batches: u64,
    pub sends: u64,
    pub hits: i64,
    pub elapsed: Duration,
}

/// 10,000 rows (`rows`) at the Gemini emulator three times: under a first
/// ledger name, again under a second, and with `changed` rows' text
/// changed under a third.
pub async fn at_emulator(addr: &str, rows: usize, changed: usize) -> anyhow::Result<Vec<Run>> {
    let emulator = crate::turnarounds::emulator(
        gemini_emulator::FaultPlan::default(),
        Duration::from_millis(200),
        Duration::from_millis(800),
    )
    .await?;
    let mut client = grpc::connect(addr).await?;
    grpc::register_summarize(&mut client).await?;
    let keys = workload::keys("cached", 0..rows as u64);
    let mut out = Vec::new();
    for (what, ledger, differ) in [
        ("first run", "cache-run-1", 0),
        ("the same rows, another ledger", "cache-run-2", 0),
        ("1 in 10 rows changed", "cache-run-3", changed),
    ] {
        create_ledger(&mut client, ledger, true).await?;
        let prompt = pb::PromptRef {
            name: "summarize".into(),
            version: "v1".into(),
        };
        let inputs: Vec<pb::RowInput> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| pb::RowInput {
                key: k.clone(),
                // The prompt renders `text`: each row its own request.
                payload: if i < differ {
                    format!(r#"{{"id":"{k}","text":"changed {k}"}}"#)
                } else {
                    format!(r#"{{"id":"{k}","text":"review {k}"}}"#)
                },
                prompt: Some(prompt.clone()),
                ..Default::default()
            })
            .collect();
        grpc::enroll_inputs(&mut client, ledger, &inputs, 500).await?;
        let before = emulator.stats();
        let start = Instant::now();
        let args = crate::pipeline::idle_worker(
            addr,
            crate::pipeline::Provider::Gemini,
            &emulator.base_url(),
            ledger,
            "cache",
            &["--poll-interval", "1s", "--claim-size", "1000"],
        )?;
        tally_worker::run_until(
            args,
            tally_worker::ApiKey::new(crate::turnarounds::API_KEY.into()),
            std::future::pending(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("the worker failed: {e}"))?;
        let elapsed = start.elapsed();
        grpc::all_succeeded(&mut client, ledger, rows as u64).await?;
        let after = emulator.stats();
        let sent = |s: &gemini_emulator::Stats| -> u64 {
            keys.iter().map(|k| s.submission_count(k) as u64).sum()
        };
        let summary = client
            .summarize_ledger(pb::SummarizeLedgerRequest {
                name: format!("ledgers/{ledger}"),
                ..Default::default()
            })
            .await?
            .into_inner();
        out.push(Run {
            what,
            rows,
            batches: after.batches_created - before.batches_created,
            sends: sent(&after) - sent(&before),
            hits: summary.result_cache.map_or(0, |c| c.hits),
            elapsed,
        });
    }
    emulator.shutdown().await;
    Ok(out)
}

/// A run as the bench's table shows it.
pub fn describe(r: &Run) -> (String, String) {
    (
        format!("cache: {} rows at the Gemini emulator, {}", r.rows, r.what),
        format!(
            "{} batch(es), {} sends, {} hits, {:.1} s",
            r.batches,
            r.sends,
            r.hits,
            r.elapsed.as_secs_f64()
        ),
    )
}

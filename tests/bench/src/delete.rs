//! `tally-bench delete`: DeleteLedger of a big ledger while another ledger
//! is being claimed continuously. Measures how long the delete takes (the
//! call, and the background purge until GetLedger answers NOT_FOUND) and
//! the other ledger's ClaimRows latency during the purge against the same
//! loop just before it.

use crate::grpc::{self, Client};
use crate::stats::{Line, ms, per_sec, percentile};
use crate::{child, workload};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;

pub struct Options {
    /// Rows of the ledger deleted.
    pub rows: u64,
    /// Rows of the ledger claimed meanwhile (its backlog must outlast the
    /// measurement).
    pub live_rows: u64,
    /// Rows per ClaimRows of the live ledger.
    pub claim_batch: i32,
    /// How long the claim loop runs before the delete (the baseline).
    pub before: Duration,
}

pub async fn run(url: &str, o: &Options) -> anyhow::Result<Vec<Line>> {
    let server = child::Server::start(url).await?;
    let mut client = grpc::connect(&server.addr).await?;
    grpc::create_ledger(&mut client, "doomed").await?;
    grpc::create_ledger(&mut client, "live").await?;
    let t = Instant::now();
    let keys = Arc::new(workload::keys("d", 0..o.rows));
    grpc::enroll(&server.addr, "doomed", keys, 4, 1000).await?;
    eprintln!("delete: enrolled {} rows in {:.1?}", o.rows, t.elapsed());
    let keys = Arc::new(workload::keys("l", 0..o.live_rows));
    grpc::enroll(&server.addr, "live", keys, 4, 1000).await?;

    eprintln!("delete: claim loop alone for {:?}", o.before);
    let stop = Arc::new(AtomicBool::new(false));
    let claimer = tokio::spawn(claim_loop(
        grpc::connect(&server.addr).await?,
        o.claim_batch,
        stop.clone(),
    ));
    tokio::time::sleep(o.before).await;
    stop.store(true, Ordering::Relaxed);
    let mut before = claimer.await??;

    eprintln!(
        "delete: DeleteLedger of {} rows with the claim loop running",
        o.rows
    );
    let stop = Arc::new(AtomicBool::new(false));
    let claimer = tokio::spawn(claim_loop(
        grpc::connect(&server.addr).await?,
        o.claim_batch,
        stop.clone(),
    ));
    let start = Instant::now();
    let marked = client
        .delete_ledger(pb::DeleteLedgerRequest {
            name: "ledgers/doomed".into(),
            force: false,
            etag: String::new(),
            content_etag: String::new(),
        })
        .await?
        .into_inner();
    let call = start.elapsed();
    anyhow::ensure!(
        marked.state == pb::LedgerState::Deleting as i32,
        "DeleteLedger did not answer a DELETING ledger"
    );
    let purge = wait_gone(&mut client, o.rows).await?;
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut during = claimer.await??;
    let peak = server.peak_rss_mib();
    server.stop().await?;

    before.sort();
    during.sort();
    eprintln!(
        "delete: {} claims before, {} during (batch {})",
        before.len(),
        during.len(),
        o.claim_batch
    );
    let mut lines = vec![
        Line {
            workload: format!("DeleteLedger call ({} rows)", o.rows),
            tally: ms(call),
            baseline: "-".into(),
            ratio: None,
        },
        Line {
            workload: "delete until GetLedger is NOT_FOUND".into(),
            tally: format!("{:.1} s", elapsed.as_secs_f64()),
            baseline: "-".into(),
            ratio: None,
        },
        Line {
            workload: "purge rate (rows with their attempts)".into(),
            tally: per_sec(o.rows as f64 / purge.as_secs_f64().max(1e-9)),
            baseline: "-".into(),
            ratio: None,
        },
    ];
    for (name, p) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
        let (d, b) = (percentile(&during, p), percentile(&before, p));
        lines.push(Line {
            workload: format!(
                "other ledger ClaimRows({}) {name}: during delete | before",
                o.claim_batch
            ),
            tally: ms(d),
            baseline: ms(b),
            ratio: Some(d.as_secs_f64() / b.as_secs_f64().max(1e-9)),
        });
    }
    lines.push(Line {
        workload: "server peak RSS".into(),
        tally: format!("{peak:.1} MiB"),
        baseline: "-".into(),
        ratio: None,
    });
    Ok(lines)
}

/// ClaimRows then ReportOutcomes on the live ledger until `stop`; answers
/// the ClaimRows latencies.
async fn claim_loop(
    mut client: Client,
    batch: i32,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let grant = client
            .claim_rows(pb::ClaimRowsRequest {
                parent: "ledgers/live".into(),
                max_rows: batch,
                worker: "bench".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        out.push(t.elapsed());
        let Some(claim) = grant.claim else {
            anyhow::bail!("the live ledger ran out of rows: raise --live-rows");
        };
        client
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: claim.name,
                outcomes: grpc::outcomes(&grant.rows),
                claim_next: None,
            })
            .await?;
    }
    Ok(out)
}

/// Polls GetLedger until the deleted ledger is gone, printing progress;
/// answers how long that took.
async fn wait_gone(client: &mut Client, total: u64) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        match client
            .get_ledger(pb::GetLedgerRequest {
                name: "ledgers/doomed".into(),
            })
            .await
        {
            Ok(l) => {
                if last_print.elapsed() > Duration::from_secs(5) {
                    let purged = l.into_inner().purge.map_or(0, |p| p.rows_purged);
                    eprintln!(
                        "    {purged}/{total} rows purged after {:.0?}",
                        start.elapsed()
                    );
                    last_print = Instant::now();
                }
            }
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(start.elapsed()),
            Err(s) => return Err(s.into()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

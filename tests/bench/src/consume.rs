//! The consume phase (issue 52): a ledger's finished rows read through a
//! consumer, against the ListRows paging a user would write instead; and
//! three `tallyctl consume` processes of one consumer with two of them
//! killed (-9) mid-stream, checked like the tallyctl test: every result
//! delivered, acknowledged exactly once (the server's counter), the
//! duplicates only the killed instances' last lines, a sink deduplicating
//! on (ledger, key, version) writing each once.

use crate::stats::{Line, per_sec, rate};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_client::DeliveryServiceClient;

type Deliveries = DeliveryServiceClient<tonic::transport::Channel>;

async fn deliveries(addr: &str) -> anyhow::Result<Deliveries> {
    let channel = tonic::transport::Endpoint::from_shared(addr.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(DeliveryServiceClient::new(channel)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20))
}

/// Enrolls `rows` rows of `ledger` and runs them all to SUCCEEDED (4
/// workers, claims of 500, each answered with a ~200-byte result).
pub async fn finished(addr: &str, ledger: &str, rows: u64, clients: usize) -> anyhow::Result<()> {
    let mut client = crate::grpc::connect(addr).await?;
    crate::grpc::create_ledger(&mut client, ledger).await?;
    let keys = Arc::new(crate::workload::keys(ledger, 0..rows));
    crate::grpc::enroll(addr, ledger, keys, clients, 1000).await?;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut c = crate::grpc::connect(addr).await?;
        let parent = format!("ledgers/{ledger}");
        tasks.push(tokio::spawn(async move {
            loop {
                let claim = c
                    .claim_rows(pb::ClaimRowsRequest {
                        parent: parent.clone(),
                        max_rows: 500,
                        worker: "bench".into(),
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                let Some(grant) = claim.claim else {
                    return Ok::<(), anyhow::Error>(());
                };
                let outcomes = claim
                    .rows
                    .iter()
                    .map(|r| pb::RowOutcome {
                        key: r.key.clone(),
                        outcome: Some(pb::row_outcome::Outcome::Result(format!(
                            "{{\"label\": \"{}\", \"reason\": \"{}\"}}",
                            r.key,
                            "x".repeat(160)
                        ))),
                        ..Default::default()
                    })
                    .collect();
                c.report_outcomes(pb::ReportOutcomesRequest {
                    claim: grant.name,
                    outcomes,
                    claim_next: None,
                })
                .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Every SUCCEEDED row through ListRows (FULL view, pages of 1000): what a
/// user without consumers writes (and must keep a cursor of their own).
pub async fn list_rows(addr: &str, ledger: &str) -> anyhow::Result<(u64, Duration)> {
    let mut c = crate::grpc::connect(addr).await?;
    let start = Instant::now();
    let (mut n, mut token) = (0u64, String::new());
    loop {
        let page = c
            .list_rows(pb::ListRowsRequest {
                parent: format!("ledgers/{ledger}"),
                filter: Some(pb::RowFilter {
                    statuses: vec![pb::RowStatus::Succeeded as i32],
                    ..Default::default()
                }),
                page_size: 1000,
                page_token: token,
                view: pb::RowView::Full as i32,
            })
            .await?
            .into_inner();
        n += page.rows.len() as u64;
        if page.next_page_token.is_empty() {
            return Ok((n, start.elapsed()));
        }
        token = page.next_page_token;
    }
}

async fn create_consumer(d: &mut Deliveries, ledger: &str, name: &str) -> anyhow::Result<()> {
    d.create_consumer(pb::CreateConsumerRequest {
        parent: format!("ledgers/{ledger}"),
        consumer_id: name.into(),
        consumer: Some(pb::Consumer {
            visibility_timeout: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            ..Default::default()
        }),
        start: None,
    })
    .await?;
    Ok(())
}

async fn lag(d: &mut Deliveries, ledger: &str, name: &str) -> anyhow::Result<i64> {
    Ok(d.get_consumer(pb::GetConsumerRequest {
        name: format!("ledgers/{ledger}/consumers/{name}"),
    })
    .await?
    .into_inner()
    .lag_rows)
}

/// `instances` in-process instances of a new consumer, each receiving
/// `batch` results and acknowledging them in one call, until a receive
/// finds nothing; answers (results, time, lag before).
pub async fn consume(
    addr: &str,
    ledger: &str,
    name: &str,
    instances: usize,
    batch: i32,
) -> anyhow::Result<(u64, Duration, i64)> {
    let mut d = deliveries(addr).await?;
    create_consumer(&mut d, ledger, name).await?;
    let before = lag(&mut d, ledger, name).await?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..instances {
        let mut d = deliveries(addr).await?;
        let (done, consumer) = (done.clone(), format!("ledgers/{ledger}/consumers/{name}"));
        tasks.push(tokio::spawn(async move {
            loop {
                let got = d
                    .receive_results(pb::ReceiveResultsRequest {
                        consumer: consumer.clone(),
                        max_rows: batch,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                if got.results.is_empty() {
                    return Ok::<(), anyhow::Error>(());
                }
                let positions = got.results.iter().map(|r| r.position).collect();
                d.ack_results(pb::AckResultsRequest {
                    consumer: consumer.clone(),
                    positions,
                    up_to_position: 0,
                })
                .await?;
                done.fetch_add(got.results.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = start.elapsed();
    let after = lag(&mut d, ledger, name).await?;
    anyhow::ensure!(after == 0, "consumer {name} ended with lag {after}");
    Ok((done.load(Ordering::Relaxed), elapsed, before))
}

/// What the kill scenario came to.
pub struct Killed {
    pub rows: u64,
    pub elapsed: Duration,
    pub lines: Vec<usize>,
    pub duplicates: usize,
    pub acked: f64,
}

/// `tallyctl` beside this binary (`cargo build --release -p tallyctl`).
fn tallyctl() -> anyhow::Result<PathBuf> {
    let bin = std::env::current_exe()?.with_file_name("tallyctl");
    anyhow::ensure!(
        bin.is_file(),
        "{} is missing: the kill scenario runs tallyctl consume (cargo build --release -p tallyctl)",
        bin.display()
    );
    Ok(bin)
}

fn spawn(
    bin: &Path,
    addr: &str,
    ledger: &str,
    out: &Path,
) -> anyhow::Result<tokio::process::Child> {
    Ok(tokio::process::Command::new(bin)
        .args([
            "--server",
            addr,
            "consume",
            ledger,
            "sink",
            "--batch",
            "100",
            "--wait",
            "10s",
            "--until-empty",
        ])
        .env_remove("TALLY_SERVER")
        .env_remove("TALLY_TOKEN")
        .stdout(Stdio::from(std::fs::File::create(out)?))
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?)
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

async fn wait_lines(path: &Path, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while lines(path) < n {
        anyhow::ensure!(Instant::now() < deadline, "{} stalled", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Three `tallyctl consume` of one consumer (acking after each line), the
/// first killed at a tenth of the rows, the second at a fifth; the third
/// runs to the end. `metrics` is the server's `/metrics` address.
pub async fn killed(addr: &str, metrics: &str, ledger: &str, rows: u64) -> anyhow::Result<Killed> {
    let bin = tallyctl()?;
    let mut d = deliveries(addr).await?;
    create_consumer(&mut d, ledger, "sink").await?;
    let dir = std::env::temp_dir().join(format!("tally-bench-consume-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("out-{i}.jsonl"))).collect();
    let start = Instant::now();
    let mut children = outs
        .iter()
        .map(|o| spawn(&bin, addr, ledger, o))
        .collect::<anyhow::Result<Vec<_>>>()?;
    wait_lines(&outs[0], (rows / 10) as usize).await?;
    children[0].kill().await?;
    wait_lines(&outs[1], (rows / 5) as usize).await?;
    children[1].kill().await?;
    let status = children[2].wait().await?;
    anyhow::ensure!(status.success(), "the surviving tallyctl failed: {status}");
    let elapsed = start.elapsed();
    let mut sink: HashMap<(String, i64), usize> = HashMap::new();
    let mut last = Vec::new();
    let mut counts = Vec::new();
    for o in &outs {
        let text = std::fs::read_to_string(o)?;
        let mut n = 0;
        let mut end = None;
        for l in text.lines() {
            // A line torn by the kill is not JSON: a sink skips it.
            let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
                continue;
            };
            let id = (
                v["key"].as_str().unwrap_or_default().to_string(),
                v["version"].as_i64().unwrap_or_default(),
            );
            *sink.entry(id.clone()).or_default() += 1;
            end = Some(id);
            n += 1;
        }
        counts.push(n);
        last.push(end);
    }
    anyhow::ensure!(
        sink.len() as u64 == rows,
        "{} distinct results of {rows}",
        sink.len()
    );
    let duplicated: HashSet<&(String, i64)> = sink
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    let in_flight: HashSet<&(String, i64)> = last[..2].iter().flatten().collect();
    anyhow::ensure!(
        duplicated.iter().all(|r| in_flight.contains(r)),
        "duplicates beyond the killed instances' in-flight lines: {duplicated:?}"
    );
    let view = d
        .get_consumer(pb::GetConsumerRequest {
            name: format!("ledgers/{ledger}/consumers/sink"),
        })
        .await?
        .into_inner();
    anyhow::ensure!(
        view.in_flight == 0 && view.lag_rows == 0,
        "consumer left in flight {} lag {}",
        view.in_flight,
        view.lag_rows
    );
    let text = reqwest_free_get(metrics).await?;
    let acked = text
        .lines()
        .find(|l| {
            l.starts_with("tally_consumer_results_total{")
                && l.contains(&format!("ledger=\"{ledger}\""))
                && l.contains("consumer=\"sink\"")
                && l.contains("event=\"acked\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(-1.0);
    anyhow::ensure!(
        acked == rows as f64,
        "acked {acked} times for {rows} results"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Killed {
        rows,
        elapsed,
        lines: counts,
        duplicates: duplicated.len(),
        acked,
    })
}

/// `GET /metrics` over a plain TCP connection (HTTP/1.0, no client crate).
async fn reqwest_free_get(addr: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

/// The table lines of the phase.
pub async fn run(
    addr: &str,
    metrics: &str,
    rows: u64,
    clients: usize,
) -> anyhow::Result<Vec<Line>> {
    let ledger = "consume";
    eprintln!("consume: {rows} rows run to SUCCEEDED first");
    finished(addr, ledger, rows, clients).await?;
    let (listed, list_t) = list_rows(addr, ledger).await?;
    let mut lines = Vec::new();
    for (name, instances) in [("one", 1), ("three", 3)] {
        let (n, t, before) = consume(addr, ledger, name, instances, 500).await?;
        anyhow::ensure!(n == rows, "consumer {name} got {n} of {rows}");
        eprintln!("consume: {instances} instance(s): {n} results in {t:?}, lag before {before}");
        lines.push(Line {
            workload: format!(
                "consume {rows} results, {instances} instance(s) of a consumer (receive 500, ack them), lag {before} → 0, vs ListRows pages of 1000 (FULL)"
            ),
            tally: per_sec(rate(n, t)),
            baseline: per_sec(rate(listed, list_t)),
            ratio: Some(rate(n, t) / rate(listed, list_t).max(1e-9)),
        });
    }
    if let Err(e) = tallyctl() {
        eprintln!("consume: the kill scenario is skipped: {e}");
        return Ok(lines);
    }
    let k = killed(addr, metrics, ledger, rows).await?;
    eprintln!(
        "consume: kill -9: lines {:?}, duplicates {}, acked {}",
        k.lines, k.duplicates, k.acked
    );
    lines.push(Line {
        workload: format!(
            "consume {} results with 3 tallyctl consume (ack after each line), two killed -9 mid-stream: lines per instance {:?}, every result acked once ({}), duplicates (the killed ones' in-flight lines) {}",
            k.rows, k.lines, k.acked, k.duplicates
        ),
        tally: per_sec(rate(k.rows, k.elapsed)),
        baseline: String::new(),
        ratio: None,
    });
    Ok(lines)
}

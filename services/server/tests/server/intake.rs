//! Request intake through a real `tally-server` process: a request's size
//! and row count are judged from its bytes before it is decoded, so a small
//! message that would decode into hundreds of megabytes costs the server
//! next to nothing.

use std::net::SocketAddr;
use tally_pg::TestDb;

use crate::process;
use process::spawn_server_process;

/// Peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// An `EnrollRowsRequest` for `ledgers/{ledger}` with `rows` empty rows,
/// encoded by hand (field 1 the parent, field 2 an empty `RowInput` each:
/// 2 bytes a row), framed as a gRPC message.
fn empty_rows_frame(ledger: &str, rows: usize) -> Vec<u8> {
    let parent = format!("ledgers/{ledger}");
    let mut message = vec![0x0a, u8::try_from(parent.len()).unwrap()];
    message.extend_from_slice(parent.as_bytes());
    message.reserve(rows * 2);
    for _ in 0..rows {
        message.extend_from_slice(&[0x12, 0x00]);
    }
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// Sends raw gRPC bytes to `method`; answers (grpc-status, grpc-message).
async fn call_raw(addr: SocketAddr, method: &str, frame: Vec<u8>) -> (String, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = http
        .post(format!("http://{addr}{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(frame)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    (
        header("grpc-status"),
        percent_decoded(&header("grpc-message")),
    )
}

/// `grpc-message` is percent-encoded.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Invariant: an EnrollRows of 4 million empty rows (8 MB on the wire,
/// over 500 MB once decoded) is refused INVALID_ARGUMENT naming `rows`,
/// writes nothing, and the server's peak RSS grows by less than 100 MB.
#[tokio::test]
async fn four_million_empty_rows_are_refused_before_they_are_decoded() {
    let db = TestDb::new().await;
    let (addr, child) = spawn_server_process(&db, &[]).await;
    let pid = child.id().unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut ledgers =
        tally_proto::v1::ledger_service_client::LedgerServiceClient::new(channel.clone());
    ledgers
        .create_ledger(tally_proto::v1::CreateLedgerRequest {
            ledger_id: "big".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let before = peak_rss(pid);
    let (code, message) = call_raw(
        addr,
        "/tally.v1.LedgerService/EnrollRows",
        empty_rows_frame("big", 4_000_000),
    )
    .await;
    let after = peak_rss(pid);
    println!(
        "peak RSS before {:.1} MiB, after {:.1} MiB (+{:.1} MiB): {code} {message}",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after - before) as f64 / 1048576.0
    );
    assert_eq!(code, "3", "INVALID_ARGUMENT: {message}");
    assert!(message.contains("rows"), "{message}");
    assert!(message.contains("4000000"), "{message}");
    assert!(
        after - before < 100 * 1024 * 1024,
        "peak RSS grew by {} bytes",
        after - before
    );
    let summary = ledgers
        .summarize_ledger(tally_proto::v1::SummarizeLedgerRequest {
            name: "ledgers/big".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.total, 0);
}

/// Invariant: a request over its method's size limit is refused
/// RESOURCE_EXHAUSTED from its length prefix; small methods have a small
/// limit (a 2 MB GetLedger is refused even though EnrollRows may be 64 MB).
#[tokio::test]
async fn each_method_has_its_own_size_limit() {
    let db = TestDb::new().await;
    let (addr, _child) = spawn_server_process(&db, &[]).await;
    // GetLedgerRequest { name: 2 MB }.
    let name = vec![b'x'; 2 * 1024 * 1024];
    let mut message = vec![0x0a];
    let mut len = name.len();
    while len >= 0x80 {
        message.push(u8::try_from(len & 0x7f).unwrap() | 0x80);
        len >>= 7;
    }
    message.push(u8::try_from(len).unwrap());
    message.extend_from_slice(&name);
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&message);
    let (code, message) = call_raw(addr, "/tally.v1.LedgerService/GetLedger", frame).await;
    assert_eq!(code, "8", "RESOURCE_EXHAUSTED: {message}");
    assert!(message.contains("at most 1048576"), "{message}");
}

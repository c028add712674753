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

/// `message` framed as one uncompressed gRPC message.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    frame
}

/// A length-delimited field `number` holding `bytes`.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = bytes.len();
    while len >= 0x80 {
        out.push(u8::try_from(len & 0x7f).unwrap() | 0x80);
        len >>= 7;
    }
    out.push(u8::try_from(len).unwrap());
    out.extend_from_slice(bytes);
    out
}

/// `n` copies of an empty entry of field `number` (2 bytes each).
fn empty_entries(number: u8, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * n);
    for _ in 0..n {
        out.extend_from_slice(&[(number << 3) | 2, 0]);
    }
    out
}

/// A server process with a ledger `big`, its pid, and a client.
async fn server_with_ledger(
    db: &TestDb,
) -> (
    SocketAddr,
    tokio::process::Child,
    u32,
    tally_proto::v1::ledger_service_client::LedgerServiceClient<tonic::transport::Channel>,
) {
    let (addr, child) = spawn_server_process(db, &[]).await;
    let pid = child.id().unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut ledgers = tally_proto::v1::ledger_service_client::LedgerServiceClient::new(channel);
    ledgers
        .create_ledger(tally_proto::v1::CreateLedgerRequest {
            ledger_id: "big".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    (addr, child, pid, ledgers)
}

/// Sends `frame` to `method`, printing and bounding the server's peak RSS
/// growth (+50 MiB at the default limits); answers (grpc-status,
/// grpc-message).
async fn attack(
    addr: SocketAddr,
    pid: u32,
    what: &str,
    method: &str,
    frame: Vec<u8>,
) -> (String, String) {
    let before = peak_rss(pid);
    let (code, message) = call_raw(addr, method, frame).await;
    let after = peak_rss(pid);
    println!(
        "{what}: peak RSS before {:.1} MiB, after {:.1} MiB (+{:.1} MiB): {code} {message}",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after - before) as f64 / 1048576.0
    );
    assert!(
        after - before < 50 * 1024 * 1024,
        "{what}: peak RSS grew by {} bytes",
        after - before
    );
    (code, message)
}

/// Invariant: an empty group (wire types 3 and 4, which prost skips unread
/// for an unknown field) in front of two million empty entries does not get
/// the entries past the intake: EnrollRows, ReportOutcomes and ReleaseClaim
/// are refused INVALID_ARGUMENT before decoding, at under +50 MiB.
#[tokio::test]
async fn a_group_in_front_of_the_rows_is_refused_before_decoding() {
    let db = TestDb::new().await;
    let (addr, _child, pid, mut ledgers) = server_with_ledger(&db).await;
    for (method, parent_field) in [
        ("/tally.v1.LedgerService/EnrollRows", "ledgers/big"),
        (
            "/tally.v1.LedgerService/ReportOutcomes",
            "ledgers/big/claims/00000000-0000-0000-0000-000000000000",
        ),
        (
            "/tally.v1.LedgerService/ReleaseClaim",
            "ledgers/big/claims/00000000-0000-0000-0000-000000000000",
        ),
    ] {
        // Field 9 as an empty group, then the parent or claim, then the
        // entries (field 2 in all three).
        let mut message = vec![(9 << 3) | 3, (9 << 3) | 4];
        message.extend(field(1, parent_field.as_bytes()));
        message.extend(empty_entries(2, 2_000_000));
        let (code, text) = attack(addr, pid, method, method, framed(&message)).await;
        assert_eq!(code, "3", "{method}: INVALID_ARGUMENT: {text}");
        assert!(text.contains("group"), "{text}");
    }
    let summary = ledgers
        .summarize_ledger(tally_proto::v1::SummarizeLedgerRequest {
            name: "ledgers/big".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.total, 0);
}

/// Invariant: nested lists are counted before decoding: one row with two
/// million empty dependencies, a ReportGoldenResults with 520,000 empty
/// answers (under the small-message limit), a RedriveRows with two million
/// keys and a SetGoldenRows row with a million fields are each refused
/// INVALID_ARGUMENT naming the field's path, at under +50 MiB.
#[tokio::test]
async fn nested_lists_are_counted_before_decoding() {
    let db = TestDb::new().await;
    let (addr, _child, pid, _ledgers) = server_with_ledger(&db).await;

    let mut message = field(1, b"ledgers/big");
    let mut row = field(1, b"k");
    row.extend(empty_entries(3, 2_000_000));
    message.extend(field(2, &row));
    let (code, text) = attack(
        addr,
        pid,
        "2,000,000 dependencies",
        "/tally.v1.LedgerService/EnrollRows",
        framed(&message),
    )
    .await;
    assert_eq!(code, "3", "{text}");
    assert!(text.contains("rows[0].depends_on"), "{text}");
    assert!(text.contains("2000000"), "{text}");

    let mut message = field(1, b"ledgers/big/jobs/j");
    message.extend(field(
        2,
        b"ledgers/big/claims/00000000-0000-0000-0000-000000000000",
    ));
    message.extend(empty_entries(3, 520_000));
    assert!(message.len() < 1024 * 1024);
    let (code, text) = attack(
        addr,
        pid,
        "520,000 golden answers",
        "/tally.v1.JobService/ReportGoldenResults",
        framed(&message),
    )
    .await;
    assert_eq!(code, "3", "{text}");
    assert!(text.contains("answers"), "{text}");

    let mut message = field(1, b"ledgers/big");
    message.extend(field(2, &empty_entries(1, 2_000_000)));
    let (code, text) = attack(
        addr,
        pid,
        "2,000,000 redrive keys",
        "/tally.v1.LedgerService/RedriveRows",
        framed(&message),
    )
    .await;
    assert_eq!(code, "3", "{text}");
    assert!(text.contains("keys.keys"), "{text}");

    // SetGoldenRowsRequest { golden: GoldenSet { rows: [GoldenRow {
    // fields: 500,000 × "" }] } } (1 MB, the small-message limit).
    let golden_row = empty_entries(5, 500_000);
    let set = [field(1, b"ledgers/big/golden"), field(2, &golden_row)].concat();
    let message = field(1, &set);
    let (code, text) = attack(
        addr,
        pid,
        "500,000 golden row fields",
        "/tally.v1.LedgerService/SetGoldenRows",
        framed(&message),
    )
    .await;
    assert_eq!(code, "3", "{text}");
    assert!(text.contains("golden.rows[0].fields"), "{text}");
}

/// Invariant: a compressed request is refused (UNIMPLEMENTED): the intake
/// cannot judge it, so the decoder never sees it.
#[tokio::test]
async fn compressed_requests_are_refused() {
    let db = TestDb::new().await;
    let (addr, _child) = spawn_server_process(&db, &[]).await;
    let mut frame = framed(&field(1, b"ledgers/x"));
    frame[0] = 1;
    let (code, text) = call_raw(addr, "/tally.v1.LedgerService/GetLedger", frame).await;
    assert_eq!(code, "12", "UNIMPLEMENTED: {text}");
    assert!(text.contains("compressed"), "{text}");
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
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.total, 0);
}

/// Invariant: a request over its method's size limit is refused
/// RESOURCE_EXHAUSTED from its length prefix; small methods have a small
/// limit (a 2 MB GetLedger is refused even though EnrollRows may be 16 MiB).
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

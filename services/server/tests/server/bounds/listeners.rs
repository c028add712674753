//! The webhook and metrics listeners cannot be held by a client (issue 17,
//! item 4): header and body read timeouts, and a connection cap.

use crate::bounds::support::*;
use std::net::SocketAddr;
use std::time::Duration;
use tally_server::config::SecretText;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How late past its timeout the server may close a connection (the
/// machine is shared and slow; a hang would take far longer).
const MARGIN: Duration = Duration::from_millis(1500);

/// Reads until the server closes the connection (EOF or reset), up to
/// `limit`; returns what was read, or `None` when still open at `limit`.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends the start of a request, then one header byte every 200 ms for as
/// long as the server keeps the connection; returns how long it stayed open.
async fn slowloris(addr: SocketAddr, path: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.split();
    write
        .write_all(format!("POST {path} HTTP/1.1\r\nhost: tally\r\nx-slow: ").as_bytes())
        .await
        .unwrap();
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b"a").await.is_err() {
                // The server closed; the reader sees it too.
                std::future::pending::<()>().await;
            }
        }
    };
    let closed = async {
        let mut buf = [0u8; 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = trickle => unreachable!(),
        _ = closed => {}
        _ = tokio::time::sleep(limit) => panic!("{path}: still open after {limit:?}"),
    }
    start.elapsed()
}

/// Invariant: a client that sends its request headers slowly (a byte at a
/// time, never finishing) is disconnected once --http-header-timeout has
/// passed since it connected, on the webhook and on the metrics listener.
#[tokio::test]
async fn slowloris_is_cut_off_at_the_header_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let server = start(|a| {
        a.webhook.secrets = vec![SecretText::from(SECRET)];
        a.http_addr = Some("127.0.0.1:0".parse().unwrap());
        a.http.http_header_timeout = TIMEOUT;
    })
    .await;
    let webhook = server.running.http_addr.expect("webhook listener");
    let metrics = server.running.metrics_addr;
    for (name, addr, path) in [
        ("webhook", webhook, "/webhooks/gemini"),
        ("metrics", metrics, "/metrics"),
    ] {
        let open = slowloris(addr, path, TIMEOUT * 5).await;
        println!(
            "slowloris on the {name} listener: closed after {open:?} (header timeout {TIMEOUT:?})"
        );
        assert!(
            open >= TIMEOUT - Duration::from_millis(50),
            "{name}: closed early, {open:?}"
        );
        assert!(open <= TIMEOUT + MARGIN, "{name}: closed late, {open:?}");
    }
    // The listener still serves a well-behaved client.
    let mut ok = TcpStream::connect(metrics).await.unwrap();
    ok.write_all(b"GET /metrics HTTP/1.1\r\nhost: tally\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut ok, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    server.stop().await;
}

/// Invariant: a request whose headers arrived but whose body does not is
/// answered 408 and closed once --http-body-timeout has passed.
#[tokio::test]
async fn a_body_that_never_arrives_is_answered_408_at_the_body_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let server = start(|a| {
        a.webhook.secrets = vec![SecretText::from(SECRET)];
        a.http_addr = Some("127.0.0.1:0".parse().unwrap());
        a.http.http_body_timeout = TIMEOUT;
    })
    .await;
    let start = Instant::now();
    let mut stream = TcpStream::connect(server.running.http_addr.unwrap())
        .await
        .unwrap();
    stream
        .write_all(
            b"POST /webhooks/gemini HTTP/1.1\r\nhost: tally\r\ncontent-type: application/json\r\n\
              content-length: 1000\r\n\r\n{\"partial\":",
        )
        .await
        .unwrap();
    let answer = read_until_closed(&mut stream, TIMEOUT * 5)
        .await
        .expect("closed");
    let open = start.elapsed();
    println!(
        "a body that never arrives: answered and closed after {open:?} (body timeout {TIMEOUT:?})"
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("--http-body-timeout"), "{text}");
    assert!(
        open >= TIMEOUT - Duration::from_millis(50) && open <= TIMEOUT + MARGIN,
        "{open:?}"
    );
    server.stop().await;
}

/// Invariant: with --http-max-connections N, N idle connections hold every
/// slot: connection N+1 is answered 503 and closed at once; once one of
/// the N goes away a new connection is served.
#[tokio::test]
async fn connections_over_the_cap_are_refused_until_one_closes() {
    const CAP: usize = 3;
    let server = start(|a| {
        a.http.http_max_connections = CAP;
        a.http.http_header_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = server.running.metrics_addr;
    let mut idle = Vec::new();
    for _ in 0..CAP {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // Accepted in order, so the extra one finds every slot taken.
    let start = Instant::now();
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let answer = read_until_closed(&mut extra, Duration::from_secs(10))
        .await
        .expect("the extra connection is closed");
    println!(
        "connection {} over a cap of {CAP}: refused after {:?}",
        CAP + 1,
        start.elapsed()
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("--http-max-connections"), "{text}");
    // The idle ones are still open (a request on one is answered).
    idle[0]
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: tally\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let served = read_until_closed(&mut idle[0], Duration::from_secs(10))
        .await
        .unwrap();
    assert!(served.starts_with(b"HTTP/1.1 200"));
    drop(idle.remove(0));
    eventually("a freed slot serves a new connection", || async {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            return false;
        };
        if s.write_all(b"GET /metrics HTTP/1.1\r\nhost: tally\r\nconnection: close\r\n\r\n")
            .await
            .is_err()
        {
            return false;
        }
        read_until_closed(&mut s, Duration::from_secs(10))
            .await
            .is_some_and(|a| a.starts_with(b"HTTP/1.1 200"))
    })
    .await;
    server.stop().await;
}

/// Invariant: one client address holds at most
/// --http-max-connections-per-client connections of a listener: one more
/// from it is answered 503 and closed, while another client (127.0.0.2)
/// is still served.
#[tokio::test]
async fn one_client_cannot_hold_every_slot() {
    let server = start(|a| {
        a.http.http_max_connections = 10;
        a.http.http_max_connections_per_client = 2;
        a.http.http_header_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = server.running.metrics_addr;
    let from = |ip: &str| {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        socket.connect(addr)
    };
    let _idle = [
        from("127.0.0.1").await.unwrap(),
        from("127.0.0.1").await.unwrap(),
    ];
    let mut extra = from("127.0.0.1").await.unwrap();
    let answer = read_until_closed(&mut extra, Duration::from_secs(30))
        .await
        .expect("the client's extra connection is closed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("--http-max-connections-per-client"), "{text}");
    let mut other = from("127.0.0.2").await.unwrap();
    other
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: tally\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let served = read_until_closed(&mut other, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        served.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&served)
    );
    server.stop().await;
}

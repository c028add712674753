//! The gRPC port's connections (issue 30, item 3): a cap on open
//! connections, and connections that never make a call are closed.

use crate::bounds::support::*;
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

/// Waits (at most `limit`) until the server closes `stream`: true when it
/// did, false when it is still open.
async fn closed_by_server(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A health Check over an already open TCP connection.
async fn health_over(stream: TcpStream, addr: std::net::SocketAddr) -> bool {
    let Ok((client, connection)) = h2::client::handshake(stream).await else {
        return false;
    };
    tokio::spawn(connection);
    let Ok(mut client) = client.ready().await else {
        return false;
    };
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let Ok((response, mut send)) = client.send_request(request, false) else {
        return false;
    };
    if send
        .send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .is_err()
    {
        return false;
    }
    matches!(response.await, Ok(r) if r.status() == 200)
}

/// Invariant: with --max-connections N, connection N+1 is closed at once
/// while the N stay open and are served.
#[tokio::test]
async fn connections_over_the_cap_are_closed() {
    let server = start(|a| {
        a.limits.max_connections = 2;
        a.limits.connection_start_timeout = Duration::from_secs(600);
    })
    .await;
    let addr = server.running.grpc_addr;
    let first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut extra, Duration::from_secs(30)).await,
        "the connection over the cap is closed"
    );
    assert!(health_over(first, addr).await, "the first is still served");
    server.stop().await;
}

/// Invariant: a connection that makes no call (here: not even its HTTP/2
/// preface) is closed after --connection-start-timeout, freeing its slot;
/// a connection that calls is served.
#[tokio::test]
async fn connections_that_never_call_are_closed() {
    let server = start(|a| {
        a.limits.max_connections = 2;
        a.limits.connection_start_timeout = Duration::from_secs(1);
    })
    .await;
    let addr = server.running.grpc_addr;
    let mut silent = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    for s in &mut silent {
        assert!(
            closed_by_server(s, Duration::from_secs(60)).await,
            "a connection that never calls is closed"
        );
    }
    eventually("the port serves again", || async {
        match TcpStream::connect(addr).await {
            Ok(s) => health_over(s, addr).await,
            Err(_) => false,
        }
    })
    .await;
    server.stop().await;
}

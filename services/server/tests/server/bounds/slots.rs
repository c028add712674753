//! Slots no client can hold (issue 17, item 4): tokenless streams on their
//! own quota, and a client that stops reading cut off after the write
//! timeout with its slot freed.

use crate::bounds::support::*;
use bytes::Bytes;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt as _;

fn reason(s: &tonic::Status) -> String {
    s.get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

/// A health Watch that read its first answer.
async fn health_watch(
    channel: Channel,
) -> Result<tonic::Streaming<tonic_health::pb::HealthCheckResponse>, tonic::Status> {
    let mut stream = HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await?
        .into_inner();
    stream.message().await?.expect("a first status");
    Ok(stream)
}

async fn watch_jobs(channel: Channel) -> Result<tonic::Streaming<pb::JobEvent>, tonic::Status> {
    Ok(JobServiceClient::new(channel)
        .watch_jobs(pb::WatchJobsRequest {
            parent: "ledgers/-".into(),
            after_sequence: 0,
        })
        .await?
        .into_inner())
}

/// Invariant: tokenless streams (health Watch) take slots of their own:
/// when those are full, more are refused TOO_MANY_ANONYMOUS_STREAMS while
/// a tally stream is still admitted, and the other way round.
#[tokio::test]
async fn tokenless_streams_have_their_own_quota() {
    let server = start(|a| {
        a.limits.max_anonymous_streams = 1;
        a.limits.max_concurrent_streams = 1;
    })
    .await;
    let held = health_watch(server.connect().await)
        .await
        .expect("first watch");
    let refused = health_watch(server.connect().await).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TOO_MANY_ANONYMOUS_STREAMS");
    let jobs = watch_jobs(server.connect().await)
        .await
        .expect("a tally stream is admitted while tokenless slots are full");
    let refused = watch_jobs(server.connect().await).await.unwrap_err();
    assert_eq!(reason(&refused), "TOO_MANY_STREAMS", "{refused:?}");
    drop(held);
    eventually("the tokenless slot is freed", || async {
        health_watch(server.connect().await).await.is_ok()
    })
    .await;
    drop(jobs);
    server.stop().await;
}

/// Invariant: a client that never reads its stream (a receive window of
/// zero, so not one byte of the first message can be sent) is disconnected
/// once --write-timeout has passed, its slot is freed (a new stream is
/// admitted), and a client that does read is left alone.
#[tokio::test]
async fn a_client_that_never_reads_is_cut_off_and_its_slot_freed() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    let server = start(|a| {
        a.limits.max_anonymous_streams = 1;
        a.limits.write_timeout = TIMEOUT;
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(server.running.grpc_addr)
        .await
        .unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("h2 handshake");
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let ended = connection.await;
        let _ = closed_tx.send((Instant::now(), ended.err().map(|e| e.to_string())));
    });
    let mut client = client.ready().await.expect("ready");
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/grpc.health.v1.Health/Watch",
            server.running.grpc_addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).expect("send");
    // An empty HealthCheckRequest: the 5-byte gRPC prefix alone.
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let response = response
        .await
        .expect("response headers (not flow-controlled)");
    let stalled_at = Instant::now();
    assert_eq!(response.status(), 200);

    // While it stalls, it holds the only tokenless slot.
    let refused = health_watch(server.connect().await).await.unwrap_err();
    assert_eq!(
        reason(&refused),
        "TOO_MANY_ANONYMOUS_STREAMS",
        "{refused:?}"
    );

    let (closed_at, error) = tokio::time::timeout(TIMEOUT * 10, closed_rx)
        .await
        .expect("the server closes the connection")
        .unwrap();
    let cut = closed_at - stalled_at;
    println!(
        "a stream never read: connection closed {cut:?} after its first message stalled (write timeout {TIMEOUT:?}; client saw {error:?})"
    );
    assert!(
        cut >= TIMEOUT - Duration::from_millis(50),
        "cut early: {cut:?}"
    );
    assert!(
        cut <= TIMEOUT + Duration::from_millis(1500),
        "cut late: {cut:?}"
    );

    // The slot is free again, and a reading client is not cut: its stream
    // stays open well past the write timeout.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reader = loop {
        match health_watch(server.connect().await).await {
            Ok(s) => break s,
            Err(e) => assert!(Instant::now() < deadline, "the slot is never freed: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let quiet = tokio::time::timeout(TIMEOUT * 3, reader.message()).await;
    assert!(
        quiet.is_err(),
        "a reading client's idle stream stays open: {quiet:?}"
    );
    server.stop().await;
}

/// Invariant: a stream must send its request within the request timeout:
/// a WatchJobs that sends its headers and never its message is answered
/// DEADLINE_EXCEEDED (REQUEST_TIMEOUT) and its stream slot freed, long
/// before the stream's maximum age.
#[tokio::test]
async fn a_stream_that_never_sends_its_request_gives_its_slot_back() {
    let server = start(|a| {
        a.limits.max_concurrent_streams = 1;
        a.limits.request_timeout = Duration::from_secs(1);
        a.limits.max_stream_age = Duration::from_secs(3600);
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(server.running.grpc_addr)
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/tally.v1.JobService/WatchJobs",
            server.running.grpc_addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    // Headers only: the request message never comes.
    let (response, _send) = client.send_request(request, false).expect("send");
    let response = tokio::time::timeout(Duration::from_secs(60), response)
        .await
        .expect("the server answers the silent stream (it held the slot before)")
        .expect("response headers");
    let status = tonic::Status::from_header_map(response.headers()).expect("trailers-only answer");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(reason(&status), "REQUEST_TIMEOUT");
    assert!(status.message().contains("request"), "{status:?}");
    // The only stream slot is free again.
    let stream = watch_jobs(server.connect().await).await;
    assert!(stream.is_ok(), "{:?}", stream.err());
    server.stop().await;
}

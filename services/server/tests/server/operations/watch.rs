//! WatchOperations: applied transitions, resumable by sequence.

use crate::operations::common::*;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tonic::Streaming;
use tonic::transport::Channel;

/// Long enough for any wake-up on a loaded machine; only a failing test
/// waits this long.
const PATIENCE: Duration = Duration::from_secs(20);

async fn watch(
    c: &mut OperationsServiceClient<Channel>,
    after: i64,
) -> Streaming<pb::OperationTransition> {
    c.watch_operations(pb::WatchOperationsRequest {
        after_sequence: after,
    })
    .await
    .expect("watch")
    .into_inner()
}

async fn next(stream: &mut Streaming<pb::OperationTransition>) -> pb::OperationTransition {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("a transition in time")
        .expect("stream healthy")
        .expect("stream open")
}

/// Invariant 7 for watchers: a watch from the first stored transition
/// (-1) sees exactly the applied events, in order, with their from and to
/// states; a watch resumed after the last sequence it saw gets exactly the
/// transitions committed since (none repeated, none missed, drops never
/// streamed); a watch "from now" (0) sees only what comes after it opened.
#[tokio::test]
async fn watches_resume_without_gaps_or_duplicates() {
    let env = env().await;
    let mut c = env.client().await;
    ingest(&mut c, event("batches/w", "PENDING", 10)).await;
    ingest(&mut c, event("batches/w", "RUNNING", 20)).await;
    ingest(&mut c, event("batches/w", "PENDING", 5)).await; // dropped

    let mut from_start = watch(&mut c, -1).await;
    let first = next(&mut from_start).await;
    let second = next(&mut from_start).await;
    assert_eq!(first.from_state, pb::OperationState::Unspecified as i32);
    assert_eq!(first.to_state, pb::OperationState::Pending as i32);
    assert_eq!(second.from_state, pb::OperationState::Pending as i32);
    assert_eq!(second.to_state, pb::OperationState::Running as i32);
    let op = second.operation.as_ref().unwrap();
    assert_eq!((op.name.as_str(), op.version), ("operations/batches/w", 2));
    assert_eq!(second.source, pb::EventSource::Poller as i32);
    drop(from_start);

    let mut from_now = watch(&mut c, 0).await;
    // While nobody watches from `second`, more happens.
    ingest(&mut c, event("batches/w", "RUNNING", 15)).await; // dropped
    let third = ingest(&mut c, event("batches/w", "SUCCEEDED", 30)).await;
    let fourth = ingest(&mut c, event("batches/v", "RUNNING", 1)).await;

    let mut resumed = watch(&mut c, second.sequence).await;
    let got = [next(&mut resumed).await, next(&mut resumed).await];
    assert_eq!(
        got.iter().map(|t| t.sequence).collect::<Vec<_>>(),
        [third.sequence, fourth.sequence]
    );
    assert_eq!(got[0].to_state, pb::OperationState::Succeeded as i32);
    let now = [next(&mut from_now).await, next(&mut from_now).await];
    assert_eq!(now, got);

    // And nothing else is waiting on either stream.
    let fifth = ingest(&mut c, event("batches/v", "RUNNING", 2)).await;
    assert_eq!(next(&mut resumed).await.sequence, fifth.sequence);
    assert_eq!(next(&mut from_now).await.sequence, fifth.sequence);

    let err = c
        .watch_operations(pb::WatchOperationsRequest { after_sequence: -2 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    env.stop().await;
}

/// Invariant 7 for watchers under load: while two writers apply
/// transitions to many operations concurrently, a watcher opened before
/// them receives every applied event exactly once, in increasing sequence
/// order, and the same set the event log holds. Sequence numbers are
/// assigned in commit order, so no late commit can slip behind a watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_every_concurrent_transition_once() {
    let env = env().await;
    let mut c = env.client().await;
    let mut watcher = watch(&mut c, 0).await;
    let mut writers = Vec::new();
    for _ in 0..2 {
        let mut c = env.client().await;
        writers.push(tokio::spawn(async move {
            let mut applied = 0;
            for i in 0..40 {
                let op = format!("batches/load-{}", i % 10);
                // Both writers send the same times: half of these drop.
                let r = ingest(&mut c, event(&op, "RUNNING", i64::from(i / 10) + 1)).await;
                applied += i64::from(r.verdict == pb::EventVerdict::Applied as i32);
            }
            applied
        }));
    }
    let mut applied = 0;
    for t in writers {
        applied += t.await.unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..applied {
        seen.push(next(&mut watcher).await.sequence);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let logged: Vec<i64> = sqlx::query_scalar(
        "SELECT sequence FROM operation_events WHERE verdict = 1 ORDER BY sequence",
    )
    .fetch_all(env.pool())
    .await
    .unwrap();
    assert_eq!(seen, logged);
    env.stop().await;
}

/// Shutdown drains watch streams: an open watch ends cleanly (status OK)
/// when the server stops, and stopping does not wait out the grace period.
#[tokio::test]
async fn open_watches_end_cleanly_on_shutdown() {
    let env = env().await;
    let mut c = env.client().await;
    let mut stream = watch(&mut c, -1).await;
    let started = std::time::Instant::now();
    env.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stop waited for the stream"
    );
    let end = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
}

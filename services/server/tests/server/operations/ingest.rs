//! IngestEvent, GetOperation, ListOperations, ListOperationEvents.

use crate::operations::common::*;
use tally_proto::v1 as pb;
use tally_server::metrics::EventLabels;
use tonic::Code;

const APPLIED: i32 = pb::EventVerdict::Applied as i32;
const DROPPED: i32 = pb::EventVerdict::Dropped as i32;
const RECORDED: i32 = pb::EventVerdict::Recorded as i32;

/// Invariant 7, the seed's table through IngestEvent: RUNNING then an old
/// PENDING is dropped `lower_rank`; SUCCEEDED then a late RUNNING is dropped
/// `regress_from_terminal`; SUCCEEDED then FAILED with a newer time is
/// recorded, not applied (`terminal_conflict`); RUNNING then a newer
/// RUNNING is applied. Drops are normal answers, never errors; names in any
/// spelling reach the same operation; GetOperation counts the drops by
/// reason, ListOperationEvents shows every event with its source, verdict
/// and reason, and the metrics count them.
#[tokio::test]
async fn the_seed_table_through_ingest_event() {
    let env = env().await;
    let mut c = env.client().await;
    let seen = [
        ("batches/seed", "BATCH_STATE_RUNNING", 200, APPLIED, ""),
        (
            "projects/p/locations/l/batches/seed",
            "JOB_STATE_PENDING",
            100,
            DROPPED,
            "lower_rank",
        ),
        ("models/x/batches/seed", "RUNNING", 250, APPLIED, ""),
        (
            "operations/batches/seed",
            "batch.succeeded",
            300,
            APPLIED,
            "",
        ),
        (
            "batches/seed",
            "BATCH_STATE_RUNNING",
            900,
            DROPPED,
            "regress_from_terminal",
        ),
        (
            "batches/seed",
            "JOB_STATE_FAILED",
            400,
            RECORDED,
            "terminal_conflict",
        ),
    ];
    for (i, (name, state, time, verdict, reason)) in seen.into_iter().enumerate() {
        let r = ingest(&mut c, event(name, state, time)).await;
        assert_eq!(
            (r.verdict, r.reason.as_str()),
            (verdict, reason),
            "event {i}"
        );
        let op = r.operation.expect("the operation after the event");
        assert_eq!(op.name, "operations/batches/seed");
    }

    let op = c
        .get_operation(pb::GetOperationRequest {
            name: "https://generativelanguage.googleapis.com/v1beta/batches/seed".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(op.state, pb::OperationState::Succeeded as i32);
    assert_eq!(op.update_time, Some(ts(300)));
    assert_eq!((op.version, op.applied_events), (3, 3));
    assert_eq!(op.drops.len(), 3);
    for reason in ["lower_rank", "regress_from_terminal", "terminal_conflict"] {
        assert_eq!(op.drops.get(reason), Some(&1), "{reason}");
    }

    let log = c
        .list_operation_events(pb::ListOperationEventsRequest {
            parent: "operations/batches/seed".into(),
            page_size: 4,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(log.events.len(), 4);
    let rest = c
        .list_operation_events(pb::ListOperationEventsRequest {
            parent: "batches/seed".into(),
            page_size: 4,
            page_token: log.next_page_token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rest.next_page_token.is_empty());
    let all: Vec<_> = log.events.into_iter().chain(rest.events).collect();
    let got: Vec<(i32, &str, &str, i32)> = all
        .iter()
        .map(|e| (e.verdict, e.reason.as_str(), e.raw_state.as_str(), e.source))
        .collect();
    let poller = pb::EventSource::Poller as i32;
    assert_eq!(
        got,
        [
            (APPLIED, "", "BATCH_STATE_RUNNING", poller),
            (DROPPED, "lower_rank", "JOB_STATE_PENDING", poller),
            (APPLIED, "", "RUNNING", poller),
            (APPLIED, "", "batch.succeeded", poller),
            (
                DROPPED,
                "regress_from_terminal",
                "BATCH_STATE_RUNNING",
                poller
            ),
            (RECORDED, "terminal_conflict", "JOB_STATE_FAILED", poller),
        ]
    );
    assert!(all.windows(2).all(|w| w[0].sequence < w[1].sequence));
    assert_eq!(all[1].state, pb::OperationState::Pending as i32);
    assert!(all.iter().all(|e| e.receive_time.is_some()));

    let m = &env.running.metrics;
    let events = |verdict, reason| {
        m.operation_events
            .get_or_create(&EventLabels { verdict, reason })
            .get()
    };
    assert_eq!(events("applied", ""), 3);
    for (verdict, reason) in [
        ("dropped", "lower_rank"),
        ("dropped", "regress_from_terminal"),
        ("recorded", "terminal_conflict"),
    ] {
        assert_eq!(events(verdict, reason), 1);
    }
    let text = m.render();
    assert!(text.contains(
        "tally_operation_events_total{verdict=\"dropped\",reason=\"duplicate_event\"} 0"
    ));
    env.stop().await;
}

/// Bad input is INVALID_ARGUMENT naming the field, and writes nothing: a
/// name that is not a batch, no state, no source, a malformed time, a bad
/// page token or page size, an unknown state filter. An unknown operation
/// is NOT_FOUND.
#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let env = env().await;
    let mut c = env.client().await;
    let cases = [
        ("event.operation", event("files/abc", "RUNNING", 1)),
        ("event.operation", event("batches/a:cancel", "RUNNING", 1)),
        ("event.state", event("batches/a", "", 1)),
        (
            "event.source",
            pb::OperationEvent {
                source: 0,
                ..event("batches/a", "RUNNING", 1)
            },
        ),
        (
            "event.update_time",
            pb::OperationEvent {
                update_time: Some(prost_types::Timestamp {
                    seconds: 0,
                    nanos: 2_000_000_000,
                }),
                ..event("batches/a", "RUNNING", 1)
            },
        ),
    ];
    for (field, e) in cases {
        let err = c
            .ingest_event(pb::IngestEventRequest { event: Some(e) })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}");
        assert!(err.message().contains(field), "{field}: {}", err.message());
    }
    let err = c
        .ingest_event(pb::IngestEventRequest { event: None })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(env.written().await, (0, 0, 0));

    let err = c
        .get_operation(pb::GetOperationRequest {
            name: "operations/batches/none".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .get_operation(pb::GetOperationRequest {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .list_operation_events(pb::ListOperationEventsRequest {
            parent: "batches/none".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .list_operations(pb::ListOperationsRequest {
            states: vec![0],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .list_operations(pb::ListOperationsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    env.stop().await;
}

/// ListOperations filters by state and pages newest first without losing
/// or repeating an operation; a page token is bound to its filter.
#[tokio::test]
async fn list_operations_filters_and_pages() {
    let env = env().await;
    let mut c = env.client().await;
    for i in 0..7 {
        let state = if i % 2 == 0 { "RUNNING" } else { "SUCCEEDED" };
        ingest(&mut c, event(&format!("batches/op-{i}"), state, 10)).await;
    }
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_operations(pb::ListOperationsRequest {
                states: vec![pb::OperationState::Running as i32],
                page_size: 2,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        names.extend(page.operations.iter().map(|o| o.name.clone()));
        assert!(
            page.operations
                .iter()
                .all(|o| o.state == pb::OperationState::Running as i32)
        );
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(
        names,
        [
            "operations/batches/op-6",
            "operations/batches/op-4",
            "operations/batches/op-2",
            "operations/batches/op-0"
        ]
    );
    let first = c
        .list_operations(pb::ListOperationsRequest {
            page_size: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.operations.len(), 3);
    let err = c
        .list_operations(pb::ListOperationsRequest {
            states: vec![pb::OperationState::Succeeded as i32],
            page_size: 3,
            page_token: first.next_page_token,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    env.stop().await;
}

/// Invariant 7 under concurrency, end to end: two gRPC clients race a
/// shuffled, duplicated history of one batch and a serial client replays
/// the same history; both operations end SUCCEEDED at the last time, and
/// every event is in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_clients_end_where_a_serial_one_does() {
    let env = env().await;
    let mut history = vec![("PENDING", 100)];
    history.extend((1..=8).map(|i| ("RUNNING", 100 + i * 10)));
    history.push(("SUCCEEDED", 900));
    let mut events: Vec<(&str, i64)> = history.iter().flat_map(|e| [*e, *e]).collect();
    // A fixed interleaving that puts old news late.
    events.reverse();
    events.rotate_left(5);

    let mut serial = env.client().await;
    for (state, time) in &events {
        ingest(&mut serial, event("batches/serial", state, *time)).await;
    }
    let (a, b): (Vec<_>, Vec<_>) = events.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let mut tasks = Vec::new();
    for half in [a, b] {
        let mut c = env.client().await;
        let half: Vec<(&'static str, i64)> = half.into_iter().map(|(_, e)| *e).collect();
        tasks.push(tokio::spawn(async move {
            for (state, time) in half {
                ingest(&mut c, event("batches/raced", state, time)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = env.client().await;
    let get = |name: &str| pb::GetOperationRequest { name: name.into() };
    let serial = c
        .get_operation(get("batches/serial"))
        .await
        .unwrap()
        .into_inner();
    let raced = c
        .get_operation(get("batches/raced"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (raced.state, raced.update_time),
        (serial.state, serial.update_time)
    );
    assert_eq!(raced.state, pb::OperationState::Succeeded as i32);
    assert_eq!(raced.update_time, Some(ts(900)));
    let dropped: i64 = raced.drops.values().sum();
    assert_eq!(raced.applied_events + dropped, events.len() as i64);
    env.stop().await;
}

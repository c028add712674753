//! `POST /webhooks/gemini` and `/webhooks/openai`: signatures, dedupe,
//! refusals, rotation, and the poller meeting the webhook in one reducer.

use crate::operations::common::*;
use serde_json::json;
use tally_proto::v1 as pb;

const T1: &str = "2024-05-01T10:00:00Z";
const T2: &str = "2024-05-01T10:05:00Z";

/// Invariant 8: the same webhook delivered twice is applied once. Both
/// deliveries are answered 200 (the second with `duplicate_event`, so the
/// sender stops), the operation's version counts one applied event, and
/// both deliveries are in the event log with source WEBHOOK and their
/// delivery id.
#[tokio::test]
async fn a_webhook_delivered_twice_is_applied_once() {
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    let body = gemini_body("batch.succeeded", "batches/twice", T1);
    let d = Delivery::signed(OLD_SECRET, "msg_twice", &body);
    let (status, first) = post(&env, &d).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["verdict"], "applied");
    assert_eq!(first["operation"], "operations/batches/twice");
    // A redelivery is signed again (new timestamp), same id and body.
    let again = Delivery::signed(OLD_SECRET, "msg_twice", &body);
    let (status, second) = post(&env, &again).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["verdict"], "dropped");
    assert_eq!(second["reason"], "duplicate_event");

    let mut c = env.client().await;
    let op = c
        .get_operation(pb::GetOperationRequest {
            name: "batches/twice".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(op.state, pb::OperationState::Succeeded as i32);
    assert_eq!(op.version, 1);
    assert_eq!(op.output_file, "files/out-1");
    assert_eq!(op.drops.get("duplicate_event"), Some(&1));
    let log = c
        .list_operation_events(pb::ListOperationEventsRequest {
            parent: "batches/twice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    assert_eq!(log.len(), 2);
    for e in &log {
        assert_eq!(e.source, pb::EventSource::Webhook as i32);
        assert_eq!(e.event_id, "msg_twice");
        assert_eq!(e.raw_state, "batch.succeeded");
    }
    env.stop().await;
}

/// Invariant 8: a tampered body, a wrong secret, a timestamp six minutes
/// old (or ahead), missing headers and a malformed signature are all 401,
/// and nothing at all is written: no operation, no event, no delivery id
/// (so the genuine delivery, when it comes, is still judged as new).
#[tokio::test]
async fn unauthentic_webhooks_are_401_and_write_nothing() {
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    let body = gemini_body("batch.succeeded", "batches/forged", T1);
    let now = chrono::Utc::now().timestamp();

    let mut tampered = Delivery::signed(OLD_SECRET, "msg_1", &body);
    tampered.body = body.replace("succeeded", "failed");
    let wrong_secret = Delivery::signed(STRANGER, "msg_1", &body);
    let stale = Delivery::signed_at(OLD_SECRET, "msg_1", &body, now - 6 * 60);
    let future = Delivery::signed_at(OLD_SECRET, "msg_1", &body, now + 6 * 60);
    let mut unsigned = Delivery::signed(OLD_SECRET, "msg_1", &body);
    unsigned.signature = String::new();
    let mut garbled = Delivery::signed(OLD_SECRET, "msg_1", &body);
    garbled.signature = "v1,not-base64!!".into();
    let mut other_id = Delivery::signed(OLD_SECRET, "msg_1", &body);
    other_id.id = "msg_2".into();

    for (what, d) in [
        ("tampered body", &tampered),
        ("wrong secret", &wrong_secret),
        ("six minutes old", &stale),
        ("six minutes ahead", &future),
        ("no signature", &unsigned),
        ("garbled signature", &garbled),
        ("id not signed", &other_id),
    ] {
        let (status, reply) = post(&env, d).await;
        assert_eq!(status, 401, "{what}: {reply}");
        assert!(reply["error"].is_string(), "{what}: {reply}");
        assert!(!reply.to_string().contains("whsec_"), "{what}: {reply}");
    }
    assert_eq!(env.written().await, (0, 0, 0));

    // Missing headers altogether.
    let response = http_client()
        .post(format!("http://{}/webhooks/gemini", env.http()))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(env.written().await, (0, 0, 0));

    // The genuine delivery of the same id still goes through.
    let genuine = Delivery::signed(OLD_SECRET, "msg_1", &body);
    let (status, reply) = post(&env, &genuine).await;
    assert_eq!((status, reply["verdict"].as_str()), (200, Some("applied")));
    let m = &env.running.metrics;
    let unauthorized = tally_server::metrics::OutcomeLabels {
        outcome: "unauthorized",
    };
    assert_eq!(m.webhook_requests.get_or_create(&unauthorized).get(), 8);
    env.stop().await;
}

/// Authentic bodies that are not a Gemini event are acknowledged (200,
/// verdict `ignored` with the reason: a 4xx would be retried by the
/// provider for a day) and write nothing; bodies over the limit are 413
/// whether their length is declared or streamed, and write nothing either.
#[tokio::test]
async fn malformed_and_oversized_bodies_are_refused() {
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    for (what, body) in [
        ("not json", "{not json".to_string()),
        ("an array", "[1, 2]".to_string()),
        ("no type", json!({"data": {"id": "batches/a"}}).to_string()),
        (
            "no id",
            json!({"type": "batch.failed", "data": {}}).to_string(),
        ),
        ("not a batch", gemini_body("batch.failed", "files/a", T1)),
        (
            "bad timestamp",
            gemini_body("batch.failed", "batches/a", "yesterday"),
        ),
    ] {
        let d = Delivery::signed(OLD_SECRET, "msg_bad", &body);
        let (status, reply) = post(&env, &d).await;
        assert_eq!(status, 200, "{what}: {reply}");
        assert_eq!(reply["verdict"], "ignored", "{what}: {reply}");
        assert!(!reply["reason"].as_str().unwrap_or("").is_empty(), "{what}");
    }
    assert_eq!(env.written().await, (0, 0, 0));

    // The test server's limit is 16 KiB.
    let padding = "x".repeat(20 * 1024);
    let big = json!({
        "type": "batch.failed",
        "timestamp": T1,
        "data": {"id": "batches/a", "error_message": padding}
    })
    .to_string();
    let d = Delivery::signed(OLD_SECRET, "msg_big", &big);
    let (status, _) = post(&env, &d).await;
    assert_eq!(status, 413);

    // Streamed (chunked, no declared length): read up to the limit only.
    assert_eq!(post_chunked(&env, &d).await, 413);
    assert_eq!(env.written().await, (0, 0, 0));

    // Only POST is served.
    let response = http_client()
        .get(format!("http://{}/webhooks/gemini", env.http()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    env.stop().await;
}

/// Secret rotation: while both the old and the new secret are configured,
/// deliveries signed with either are accepted (and a header carrying both
/// signatures too); one signed with neither is refused.
#[tokio::test]
async fn old_and_new_secrets_are_both_accepted_while_rotating() {
    let env = env_with_webhooks(&[OLD_SECRET, NEW_SECRET]).await;
    let by_old = Delivery::signed(
        OLD_SECRET,
        "msg_old",
        &gemini_body("batch.running", "batches/rot", T1),
    );
    let by_new = Delivery::signed(
        NEW_SECRET,
        "msg_new",
        &gemini_body("batch.succeeded", "batches/rot", T2),
    );
    let (status, reply) = post(&env, &by_old).await;
    assert_eq!((status, reply["verdict"].as_str()), (200, Some("applied")));
    let (status, reply) = post(&env, &by_new).await;
    assert_eq!((status, reply["verdict"].as_str()), (200, Some("applied")));

    let body = gemini_body("batch.succeeded", "batches/rot2", T2);
    let mut both = Delivery::signed(STRANGER, "msg_both", &body);
    let new_sig = Delivery::signed_at(NEW_SECRET, "msg_both", &body, both.timestamp).signature;
    both.signature = format!("{} {new_sig}", both.signature);
    let (status, _) = post(&env, &both).await;
    assert_eq!(status, 200);

    let stranger = Delivery::signed(
        STRANGER,
        "msg_x",
        &gemini_body("batch.failed", "batches/rot", T2),
    );
    let (status, _) = post(&env, &stranger).await;
    assert_eq!(status, 401);
    env.stop().await;
}

/// Invariant 7 across paths: the webhook and the poller meet in the same
/// reducer. A webhook brings SUCCEEDED; the poller's later read of an older
/// RUNNING batch resource (tally-client's helper) is dropped
/// `regress_from_terminal`, and a poll of the same SUCCEEDED state adds
/// nothing (`stale_or_equal_update_time`). Dropped or not, each is logged
/// with its source.
#[tokio::test]
async fn the_poller_and_the_webhook_meet_in_one_reducer() {
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    let d = Delivery::signed(
        OLD_SECRET,
        "msg_done",
        &gemini_body("batch.succeeded", "batches/both", T2),
    );
    assert_eq!(post(&env, &d).await.0, 200);

    let mut c = env.client().await;
    let stale_poll = json!({
        "name": "projects/p/locations/l/batches/both",
        "metadata": {"state": "BATCH_STATE_RUNNING", "updateTime": T1}
    });
    let r = tally_client::ingest_batch_resource(&mut c, &stale_poll)
        .await
        .unwrap();
    assert_eq!(r.verdict, pb::EventVerdict::Dropped as i32);
    assert_eq!(r.reason, "regress_from_terminal");
    let same_poll = json!({
        "name": "batches/both",
        "metadata": {"state": "BATCH_STATE_SUCCEEDED", "updateTime": T2},
        "done": true,
        "response": {"responsesFile": "files/out-1"}
    });
    let r = tally_client::ingest_batch_resource(&mut c, &same_poll)
        .await
        .unwrap();
    assert_eq!(r.reason, "stale_or_equal_update_time");
    assert_eq!(
        r.operation.unwrap().state,
        pb::OperationState::Succeeded as i32
    );
    let sources: Vec<i32> = c
        .list_operation_events(pb::ListOperationEventsRequest {
            parent: "batches/both".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events
        .iter()
        .map(|e| e.source)
        .collect();
    let (w, p) = (
        pb::EventSource::Webhook as i32,
        pb::EventSource::Poller as i32,
    );
    assert_eq!(sources, [w, p, p]);
    env.stop().await;
}

/// The webhook path moves the linked job like any other: a signed
/// `batch.failed` for a job's batch makes the job FAILED with the event's
/// error, in the same transaction as the operation's change, and fails no
/// row: the documented event names no responses file, so the rows wait
/// for the owner to read the batch (GET) and finish the job.
#[tokio::test]
async fn a_failed_batch_webhook_fails_the_job_but_leaves_its_rows_to_the_owner() {
    use tally_core::status::RowStatus;
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    let store = &env.running.store;
    store
        .create_ledger("l", &tally_core::policy::Policy::default())
        .await
        .unwrap();
    let rows: Vec<_> = (0..2)
        .map(|i| {
            let payload = format!("{{\"n\": {i}}}");
            tally_store::types::NewRow {
                key: format!("k{i}"),
                content_hash: tally_core::payload::content_hash(&tally_core::payload::Content {
                    payload: &payload,
                    depends_on: &[],
                    prompt_name: "",
                    prompt_version: "",
                    model: "",
                    ..Default::default()
                }),
                payload,
                depends_on: vec![],
                prompt_name: String::new(),
                prompt_version: String::new(),
                model: String::new(),
                ..Default::default()
            }
        })
        .collect();
    store.enroll("l", &rows).await.unwrap();
    let grant = store
        .claim_rows(
            "l",
            &tally_store::types::ClaimRequest {
                max_rows: 10,
                worker: "w".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    let token = grant.claim.token;
    let job = store.create_job("l", token, "w").await.unwrap();
    store
        .mark_submitted(
            "l",
            &job.public_id,
            token,
            "batches/jobbed",
            "files/in",
            "w",
        )
        .await
        .unwrap();

    let body = json!({
        "type": "batch.failed",
        "version": "v1",
        "timestamp": T1,
        "data": {"id": "batches/jobbed", "error_code": "INTERNAL", "error_message": "boom"}
    })
    .to_string();
    let (status, reply) = post(&env, &Delivery::signed(OLD_SECRET, "msg_f", &body)).await;
    assert_eq!((status, reply["verdict"].as_str()), (200, Some("applied")));
    let got = store.get_job("l", &job.public_id).await.unwrap();
    assert_eq!(got.state, tally_core::job::JobState::Failed);
    assert_eq!(got.error, "INTERNAL: boom");
    for key in ["k0", "k1"] {
        let row = store.get_row("l", key).await.unwrap();
        assert_eq!(row.status, RowStatus::Running, "{key} waits for the owner");
    }
    let mut c = env.client().await;
    let op = c
        .get_operation(pb::GetOperationRequest {
            name: "batches/jobbed".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(op.job, format!("ledgers/l/jobs/{}", job.public_id));
    assert_eq!(op.error_code, "INTERNAL");
    env.stop().await;
}

/// POSTs a delivery with `Transfer-Encoding: chunked` over a raw
/// connection (no declared length); answers the status code.
async fn post_chunked(env: &Env, d: &Delivery) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(env.http()).await.unwrap();
    let mut request = format!(
        "POST /webhooks/gemini HTTP/1.1\r\nhost: tally\r\nconnection: close\r\n\
         transfer-encoding: chunked\r\nwebhook-id: {}\r\nwebhook-timestamp: {}\r\n\
         webhook-signature: {}\r\n\r\n",
        d.id, d.timestamp, d.signature
    )
    .into_bytes();
    for chunk in d.body.as_bytes().chunks(4096) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The server may answer and close before reading everything.
    let _ = conn.write_all(&request).await;
    let mut response = Vec::new();
    let _ = conn.read_to_end(&mut response).await;
    let head = String::from_utf8_lossy(&response);
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"))
}

/// Unsigned webhooks are never accepted: without a secret no webhook
/// listener runs, even with --http-addr set; a secret that does not parse
/// stops the server before it opens anything, and the message never quotes
/// it.
#[tokio::test]
async fn webhooks_never_run_without_a_usable_secret() {
    let db = tally_pg::TestDb::new().await;
    let mut args = tally_server::config::ServeArgs::for_tests(db.url().to_string());
    args.http_addr = Some("127.0.0.1:0".parse().unwrap());
    let running = tally_server::startup::server::start(args.clone())
        .await
        .unwrap();
    assert_eq!(running.http_addr, None);
    running.stop().await.unwrap();

    args.webhook.secrets = vec!["whsec_tooshort".into()];
    let err = tally_server::startup::server::start(args)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("webhook secret 1 of 1"), "{err}");
    assert!(!err.contains("tooshort"), "{err}");
}

/// OpenAI's signed batch webhooks go through the same receiver rules and
/// the same reducer: `batch.completed` (no file named: the worker reads
/// the batch) applies once, its redelivery is a `duplicate_event`, a stale
/// `in_progress` poll after it is dropped, and an unsigned delivery is 401
/// and writes nothing.
#[tokio::test]
async fn openai_webhooks_meet_the_same_reducer() {
    let env = env_with_webhooks(&[OLD_SECRET]).await;
    let body = json!({"id": "evt_1", "object": "event", "type": "batch.completed",
                      "created_at": 1_714_557_900, "data": {"id": "batch_oa1"}})
    .to_string();
    let mut unsigned = Delivery::signed(OLD_SECRET, "wh_1", &body);
    unsigned.signature = String::new();
    assert_eq!(post_to(&env, "openai", &unsigned).await.0, 401);
    assert_eq!(env.written().await, (0, 0, 0));
    let d = Delivery::signed(OLD_SECRET, "wh_1", &body);
    let (status, first) = post_to(&env, "openai", &d).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["verdict"], "applied");
    assert_eq!(first["operation"], "operations/batches/batch_oa1");
    assert_eq!(first["state"], "SUCCEEDED");
    let (_, again) = post_to(&env, "openai", &d).await;
    assert_eq!(again["reason"], "duplicate_event", "{again}");
    let mut c = env.client().await;
    let stale = json!({"id": "batch_oa1", "object": "batch", "status": "in_progress",
                       "created_at": 1_714_557_600, "in_progress_at": 1_714_557_603});
    let event = tally_client::observation_event(
        &tally_core::operation::event_from_openai_batch(&stale).unwrap(),
    );
    let r = c
        .ingest_event(pb::IngestEventRequest { event: Some(event) })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.verdict, pb::EventVerdict::Dropped as i32, "{r:?}");
    let op = c
        .get_operation(pb::GetOperationRequest {
            name: "batches/batch_oa1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(op.state, pb::OperationState::Succeeded as i32);
    assert_eq!(op.version, 1);
    env.stop().await;
}

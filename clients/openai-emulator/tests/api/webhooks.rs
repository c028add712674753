//! Signed webhook deliveries, verified as a receiver would (the Standard
//! Webhooks scheme, re-implemented here from the specification).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use openai_emulator::{FaultPlan, WebhookTarget};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::common::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let store = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let store = store.clone();
            async move {
                store.lock().unwrap().push((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn verify(headers: &HeaderMap, body: &[u8]) -> bool {
    use hmac::{Hmac, Mac};
    let key = STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let h = |n: &str| headers[n].to_str().unwrap().to_owned();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", h("webhook-id"), h("webhook-timestamp")).as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    h("webhook-signature").split(' ').any(|s| s == expected)
}

// Invariant: each terminal batch gets one signed event in OpenAI's shape;
// with `duplicate`, two deliveries share one webhook-id.
#[tokio::test]
async fn terminal_states_are_announced_signed() {
    let (url, seen) = receiver().await;
    let target = WebhookTarget {
        duplicate: true,
        ..WebhookTarget::new(url, SECRET)
    };
    let (emu, api) = start(EmulatorConfig {
        webhook: Some(target),
        ..config(plan(
            json!({"batches": [{"match": {"nth": 2}, "fault": {"kind": "failed"}}]}),
        ))
    })
    .await;
    let ok = api.batch(&[line("a", "x")]).await;
    let failed = api.batch(&[line("b", "x")]).await;
    let got = eventually("four deliveries", || async {
        let s = seen.lock().unwrap().clone();
        (s.len() >= 4).then_some(s)
    })
    .await;
    let mut types = Vec::new();
    for (headers, body) in &got {
        assert!(verify(headers, body), "signature verifies");
        let v: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v["object"], "event");
        assert!(v["id"].as_str().unwrap().starts_with("evt_"));
        assert!(v["created_at"].is_i64());
        types.push((
            v["type"].as_str().unwrap().to_owned(),
            v["data"]["id"].as_str().unwrap().to_owned(),
        ));
    }
    types.sort();
    types.dedup();
    let mut want = vec![
        ("batch.completed".to_owned(), ok),
        ("batch.failed".to_owned(), failed),
    ];
    want.sort();
    assert_eq!(types, want);
    let ids: std::collections::HashSet<_> =
        got.iter().map(|(h, _)| h["webhook-id"].clone()).collect();
    assert_eq!(ids.len(), 2, "duplicates share their webhook-id");
    // The emulator counts a delivery once its answer is back, which can be
    // after the receiver has recorded it.
    eventually("four deliveries counted", || async {
        (emu.stats().webhooks_sent == 4).then_some(())
    })
    .await;
    emu.shutdown().await;
}

// Invariant: a redelivery arrives later with the same webhook-id.
#[tokio::test]
async fn redeliveries_come_later_with_the_same_id() {
    let (url, seen) = receiver().await;
    let target = WebhookTarget {
        redeliver_after: Some(std::time::Duration::from_millis(200)),
        ..WebhookTarget::new(url, SECRET)
    };
    let (emu, api) = start(EmulatorConfig {
        webhook: Some(target),
        ..config(FaultPlan::default())
    })
    .await;
    api.batch(&[line("a", "x")]).await;
    let got = eventually("two deliveries", || async {
        let s = seen.lock().unwrap().clone();
        (s.len() >= 2).then_some(s)
    })
    .await;
    assert_eq!(got[0].0["webhook-id"], got[1].0["webhook-id"]);
    assert_eq!(got[0].1, got[1].1);
    emu.shutdown().await;
}

use openai_emulator::EmulatorConfig;

//! A batch's life: in progress, ended with results; canceled; expired;
//! deleted.

use std::time::Duration;

use anthropic_emulator::{EmulatorConfig, FaultPlan, Outcome, Timing};
use chrono::DateTime;
use serde_json::{Value, json};

use crate::common::*;

fn time(v: &Value) -> DateTime<chrono::FixedOffset> {
    DateTime::parse_from_rfc3339(v.as_str().expect("an RFC 3339 time")).unwrap()
}

// Invariant: a new batch is `in_progress` with every request counted
// `processing`, no results_url and expires_at 24 h after created_at;
// results are refused until it ends; then it is `ended` with the final
// counts, `ended_at`, and an absolute results_url on the emulator serving
// one succeeded Message per request.
#[tokio::test]
async fn a_batch_ends_with_results() {
    let (emu, api) = start(EmulatorConfig {
        timing: Timing {
            in_progress: Duration::from_secs(1),
            ..Timing::fast()
        },
        ..config(FaultPlan::default())
    })
    .await;
    let (status, b) = api.create(&requests(&["a", "b", "c"])).await;
    assert_eq!(status, 200, "{b}");
    let id = b["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("msgbatch_"), "{id}");
    assert_eq!(b["type"], "message_batch");
    assert_eq!(b["processing_status"], "in_progress");
    assert_eq!(
        b["request_counts"],
        json!({"processing": 3, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0})
    );
    assert!(b["results_url"].is_null() && b["ended_at"].is_null());
    assert!(b["archived_at"].is_null() && b["cancel_initiated_at"].is_null());
    assert_eq!(
        time(&b["expires_at"]) - time(&b["created_at"]),
        chrono::Duration::hours(24)
    );
    let (status, during) = api.get(&format!("/messages/batches/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(during["request_counts"]["processing"], 3);
    let (status, early) = api.get(&format!("/messages/batches/{id}/results")).await;
    assert_eq!(
        (status, early["error"]["type"].clone()),
        (400, json!("invalid_request_error"))
    );
    let b = api.ended(&id).await;
    assert_eq!(
        b["request_counts"],
        json!({"processing": 0, "succeeded": 3, "errored": 0, "canceled": 0, "expired": 0})
    );
    assert!(time(&b["ended_at"]) >= time(&b["created_at"]));
    assert_eq!(
        b["results_url"],
        format!("{}/v1/messages/batches/{id}/results", emu.base_url())
    );
    let lines = api.results(&b).await;
    assert_eq!(lines.len(), 3);
    let a = result_of(&lines, "a");
    assert_eq!(a["type"], "succeeded");
    let m = &a["message"];
    assert!(m["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        (m["type"].clone(), m["role"].clone()),
        (json!("message"), json!("assistant"))
    );
    assert_eq!(m["model"], MODEL);
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["content"][0]["type"], "text");
    assert!(
        m["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("a prompt")
    );
    for field in [
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ] {
        assert!(m["usage"][field].is_u64(), "{field}: {m}");
    }
    let stats = emu.stats();
    assert_eq!(stats.batches_created, 1);
    assert_eq!(stats.results_downloads, 1);
    assert_eq!(stats.last_outcome("a"), Some(Outcome::Succeeded));
    assert_eq!(stats.submissions["a"][0].batch, id);
    emu.shutdown().await;
}

// Invariant: results come in a seeded order that is not the request
// order, the same on every download, and hold each request once.
#[tokio::test]
async fn results_are_shuffled() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let ids: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let b = api.ended(&api.batch(&requests(&refs)).await).await;
    let order = |lines: Vec<Value>| -> Vec<String> {
        lines
            .iter()
            .map(|l| l["custom_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let served = order(api.results(&b).await);
    assert_ne!(served, ids);
    assert_eq!(served, order(api.results(&b).await));
    let mut sorted = served.clone();
    sorted.sort();
    assert_eq!(sorted, ids);
    emu.shutdown().await;
}

// Invariant: a cached prompt prefix (a `cache_control` block) is counted as
// cache creation the first time and as a cache read after.
#[tokio::test]
async fn cached_prefixes_are_read_after_their_first_write() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let cached = |id: &str| {
        let mut r = request(id, "the question");
        r["params"]["system"] = json!([{"type": "text", "text": "a long shared context",
            "cache_control": {"type": "ephemeral"}}]);
        r
    };
    let first = api.ended(&api.batch(&[cached("w")]).await).await;
    let second = api.ended(&api.batch(&[cached("r")]).await).await;
    let usage = |lines: &[Value], id: &str| result_of(lines, id)["message"]["usage"].clone();
    let w = usage(&api.results(&first).await, "w");
    let r = usage(&api.results(&second).await, "r");
    assert!(
        w["cache_creation_input_tokens"].as_u64().unwrap() > 0,
        "{w}"
    );
    assert_eq!(w["cache_read_input_tokens"], 0);
    assert_eq!(
        r["cache_read_input_tokens"],
        w["cache_creation_input_tokens"]
    );
    assert_eq!(r["cache_creation_input_tokens"], 0);
    emu.shutdown().await;
}

// Invariant: cancel moves an in-progress batch to `canceling` with
// `cancel_initiated_at`, then to `ended` with its requests `canceled`; an
// unended batch cannot be deleted; an ended one can, once, and is then
// gone from GET, lists and results; an ended batch cannot be canceled.
#[tokio::test]
async fn cancel_then_delete() {
    let (emu, api) = start(slow(FaultPlan::default())).await;
    let id = api.batch(&requests(&["a", "b"])).await;
    let (status, b) = api.delete(&format!("/messages/batches/{id}")).await;
    assert_eq!(
        (status, b["error"]["type"].clone()),
        (400, json!("invalid_request_error"))
    );
    let (status, b) = api.post(&format!("/messages/batches/{id}/cancel")).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["processing_status"], "canceling");
    assert!(b["cancel_initiated_at"].is_string());
    assert_eq!(b["request_counts"]["processing"], 2);
    let b = api.ended(&id).await;
    assert_eq!(b["request_counts"]["canceled"], 2);
    assert!(
        api.results(&b)
            .await
            .iter()
            .all(|l| l["result"] == json!({"type": "canceled"}))
    );
    assert_eq!(
        api.post(&format!("/messages/batches/{id}/cancel")).await.0,
        400
    );
    let (status, deleted) = api.delete(&format!("/messages/batches/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(deleted, json!({"id": id, "type": "message_batch_deleted"}));
    assert_eq!(api.get(&format!("/messages/batches/{id}")).await.0, 404);
    assert_eq!(
        api.get(&format!("/messages/batches/{id}/results")).await.0,
        404
    );
    assert_eq!(api.delete(&format!("/messages/batches/{id}")).await.0, 404);
    let (_, list) = api.get("/messages/batches").await;
    assert!(list["data"].as_array().unwrap().is_empty());
    let stats = emu.stats();
    assert_eq!((stats.batches_canceled, stats.batches_deleted), (1, 1));
    assert_eq!(stats.last_outcome("a"), Some(Outcome::Canceled));
    emu.shutdown().await;
}

// Invariant: with `finished_on_cancel`, that share of a canceled batch's
// requests (first in request order) still finish as succeeded.
#[tokio::test]
async fn cancel_can_finish_some_requests() {
    let (emu, api) = start(slow(plan(json!({"finished_on_cancel": 0.5})))).await;
    let id = api.batch(&requests(&["a", "b", "c", "d"])).await;
    assert_eq!(
        api.post(&format!("/messages/batches/{id}/cancel")).await.0,
        200
    );
    let b = api.ended(&id).await;
    assert_eq!(b["request_counts"]["succeeded"], 2);
    assert_eq!(b["request_counts"]["canceled"], 2);
    let lines = api.results(&b).await;
    assert_eq!(result_of(&lines, "a")["type"], "succeeded");
    assert_eq!(result_of(&lines, "d")["type"], "canceled");
    emu.shutdown().await;
}

// Invariant: a batch still in progress at its horizon ends `expired`
// (expires_at = created_at + the horizon), with `finished_on_expiry` of
// its requests finished and the rest `expired`.
#[tokio::test]
async fn batches_expire_at_the_horizon() {
    let (emu, api) = start(EmulatorConfig {
        timing: Timing {
            in_progress: Duration::from_secs(60),
            expires_after: Duration::from_millis(300),
            ..Timing::fast()
        },
        ..config(plan(json!({"finished_on_expiry": 0.34})))
    })
    .await;
    let (_, created) = api.create(&requests(&["a", "b", "c"])).await;
    assert_eq!(
        time(&created["expires_at"]) - time(&created["created_at"]),
        chrono::Duration::milliseconds(300)
    );
    let b = api.ended(created["id"].as_str().unwrap()).await;
    assert_eq!(
        b["request_counts"],
        json!({"processing": 0, "succeeded": 1, "errored": 0, "canceled": 0, "expired": 2})
    );
    let lines = api.results(&b).await;
    assert_eq!(result_of(&lines, "c"), json!({"type": "expired"}));
    let stats = emu.stats();
    assert_eq!(stats.batches_expired, 1);
    assert_eq!(stats.last_outcome("c"), Some(Outcome::Expired));
    assert_eq!(stats.last_outcome("a"), Some(Outcome::Succeeded));
    emu.shutdown().await;
}

// Invariant: with `moving_counts`, a running batch's counts move as its
// requests are answered (processing never rises, every request is counted
// once, one waits for the end); a cancel keeps the requests already
// answered and cancels only the rest.
#[tokio::test]
async fn counts_move_while_a_batch_runs() {
    let (emu, api) = start(EmulatorConfig {
        timing: Timing {
            in_progress: Duration::from_millis(1200),
            ..Timing::fast()
        },
        ..config(plan(json!({
            "moving_counts": true,
            "rows": [{"match": {"custom_id": "b"}, "fault": {"kind": "errored", "error": "invalid_request_error"}}]
        })))
    })
    .await;
    let id = api.batch(&requests(&["a", "b", "c", "d", "e", "f"])).await;
    let seen = std::sync::Mutex::new(Vec::new());
    let (seen_ref, api_ref, id_ref) = (&seen, &api, &id);
    let ended = eventually("the batch ends", || async move {
        let (api, id) = (api_ref, id_ref);
        let (_, b) = api.get(&format!("/messages/batches/{id}")).await;
        let c = &b["request_counts"];
        let count = |k: &str| c[k].as_u64().unwrap();
        if b["processing_status"] == "in_progress" {
            assert_eq!(
                count("processing") + count("succeeded") + count("errored"),
                6,
                "{c}"
            );
            assert!(count("processing") >= 1, "one waits for the end: {c}");
            seen_ref.lock().unwrap().push(count("processing"));
        }
        (b["processing_status"] == "ended").then_some(b)
    })
    .await;
    let seen = seen.into_inner().unwrap();
    assert!(seen.windows(2).all(|w| w[0] >= w[1]), "{seen:?}");
    assert!(
        seen.iter().any(|p| (1..6).contains(p)),
        "counts moved while it ran: {seen:?}"
    );
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 5, "errored": 1, "canceled": 0, "expired": 0})
    );

    let id = api.batch(&requests(&["g", "h", "i", "j"])).await;
    let answered = eventually("half the requests are answered", || async {
        let (_, b) = api.get(&format!("/messages/batches/{id}")).await;
        let succeeded = b["request_counts"]["succeeded"].as_u64().unwrap();
        (succeeded >= 2).then_some(succeeded)
    })
    .await;
    let (status, _) = api.post(&format!("/messages/batches/{id}/cancel")).await;
    assert_eq!(status, 200);
    let b = api.ended(&id).await;
    let c = &b["request_counts"];
    assert_eq!(c["succeeded"].as_u64().unwrap(), answered, "{c}");
    assert_eq!(c["canceled"].as_u64().unwrap(), 4 - answered, "{c}");
    assert_eq!(emu.stats().last_outcome("g"), Some(Outcome::Succeeded));
    emu.shutdown().await;
}

// Invariant: every list order pages through every listed batch exactly
// once by `after_id`: newest first (the default) reverses creation,
// oldest first keeps it, shuffled is neither and the same on each walk.
#[tokio::test]
async fn every_list_order_pages_each_batch_once() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut made = Vec::new();
    for i in 0..7 {
        made.push(api.batch(&requests(&[&format!("r{i}")])).await);
    }
    let walk = || async {
        let mut ids = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let cursor = after.map_or(String::new(), |a| format!("&after_id={a}"));
            let (status, page) = api.get(&format!("/messages/batches?limit=3{cursor}")).await;
            assert_eq!(status, 200, "{page}");
            ids.extend(
                page["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b["id"].as_str().unwrap().to_owned()),
            );
            if page["has_more"] != true {
                return ids;
            }
            after = page["last_id"].as_str().map(str::to_owned);
        }
    };
    let newest: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(walk().await, newest);
    emu.set_faults(plan(json!({"list_order": "oldest_first"})))
        .unwrap();
    assert_eq!(walk().await, made);
    emu.set_faults(plan(json!({"list_order": "shuffled"})))
        .unwrap();
    let shuffled = walk().await;
    assert_ne!(shuffled, made);
    assert_ne!(shuffled, newest);
    assert_eq!(walk().await, shuffled, "stable across walks");
    let mut sorted = shuffled.clone();
    sorted.sort();
    let mut all = made.clone();
    all.sort();
    assert_eq!(sorted, all);
    emu.shutdown().await;
}

// Invariant: an ended batch's results are available until their time
// (29 days after creation; the plan's `archive_after_ms` here); then the
// batch names `archived_at` and its results answer 404.
#[tokio::test]
async fn results_are_archived_after_their_time() {
    let (emu, api) = start(config(plan(json!({"archive_after_ms": 1500})))).await;
    let b = api.ended(&api.batch(&requests(&["a"])).await).await;
    assert!(b["archived_at"].is_null(), "{b}");
    assert_eq!(api.results(&b).await.len(), 1);
    let id = b["id"].as_str().unwrap().to_owned();
    let archived = eventually("the batch is archived", || async {
        let (_, b) = api.get(&format!("/messages/batches/{id}")).await;
        (!b["archived_at"].is_null()).then_some(b)
    })
    .await;
    assert_eq!(
        time(&archived["archived_at"]) - time(&archived["created_at"]),
        chrono::Duration::milliseconds(1500)
    );
    let (status, err) = api.get(&format!("/messages/batches/{id}/results")).await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["type"], "not_found_error");
    emu.shutdown().await;
}

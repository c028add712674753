//! Every row fault, every job fault, the create 429 and the finalize error
//! body, driven over HTTP.

use gemini_emulator::{FaultPlan, Outcome};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn every_row_fault_kind() {
    let faults = plan(json!({"rows": [
        {"match": {"key": "safe"}, "fault": {"kind": "safety"}},
        {"match": {"prompt_contains": "FORBIDDEN"}, "fault": {"kind": "prompt_blocked"}},
        {"match": {"key_prefix": "flaky-"}, "fault": {"kind": "transient", "code": 429, "times": 1}},
        {"match": {"key": "busy"}, "fault": {"kind": "transient", "code": 503, "times": 2}},
        {"match": {"key": "boom"}, "fault": {"kind": "transient", "code": 500, "times": 1}},
        {"match": {"key": "empty"}, "fault": {"kind": "empty_text"}},
        {"match": {"key_regex": "^garbled-\\d+$"}, "fault": {"kind": "invalid_json"}},
        {"match": {"key": "gone"}, "fault": {"kind": "missing"}},
        {"match": {"key": "bad"}, "fault": {"kind": "permanent_error", "code": 400}}
    ]}));
    let (emu, api) = start(config(faults)).await;
    let mut rows = vec![
        line("safe", "hello"),
        line("blocked", "something FORBIDDEN here"),
        line("flaky-1", "q"),
        line("busy", "q"),
        line("boom", "q"),
        line("empty", "q"),
        line("garbled-7", "q"),
        line("gone", "q"),
        line("bad", "q"),
        line("fine", "q"),
    ];
    rows[6]["request"]["generationConfig"] = json!({"responseMimeType": "application/json"});
    let name = api.submit("faulty", &rows).await;
    let out = api.results(&name).await;

    let safe = &by_key(&out, "safe").unwrap()["response"];
    assert_eq!(safe["candidates"][0]["finishReason"], "SAFETY");
    assert!(safe["candidates"][0].get("content").is_none());

    let blocked = &by_key(&out, "blocked").unwrap()["response"];
    assert!(blocked.get("candidates").is_none());
    assert_eq!(blocked["promptFeedback"]["blockReason"], "SAFETY");

    // Per-line errors are google.rpc.Status: gRPC canonical codes, no name.
    for (key, code) in [("flaky-1", 8), ("busy", 14), ("boom", 13), ("bad", 3)] {
        let l = by_key(&out, key).unwrap();
        assert!(l.get("response").is_none(), "{key}");
        assert_eq!(l["error"]["code"], code, "{key}");
        assert!(l["error"].get("status").is_none(), "{key}");
    }
    assert_eq!(text_of(by_key(&out, "empty").unwrap()), "");
    assert_eq!(
        by_key(&out, "empty").unwrap()["response"]["candidates"][0]["finishReason"],
        "STOP"
    );
    assert!(serde_json::from_str::<Value>(text_of(by_key(&out, "garbled-7").unwrap())).is_err());
    assert!(by_key(&out, "gone").is_none(), "missing rows are left out");
    assert_eq!(out.len(), 9);
    assert!(by_key(&out, "fine").unwrap().get("response").is_some());

    // The batch still SUCCEEDED, and its counts do not reveal the missing row.
    let op = api.operation(&name).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_SUCCEEDED");
    assert_eq!(
        op["metadata"]["batchStats"],
        json!({"requestCount": "10", "successfulRequestCount": "6", "failedRequestCount": "4"})
    );

    let stats = emu.stats();
    for (key, outcome) in [
        ("safe", Outcome::Safety),
        ("blocked", Outcome::PromptBlocked),
        ("flaky-1", Outcome::Error { code: 429 }),
        ("busy", Outcome::Error { code: 503 }),
        ("empty", Outcome::Empty),
        ("garbled-7", Outcome::Invalid),
        ("gone", Outcome::Missing),
        ("bad", Outcome::Error { code: 400 }),
        ("fine", Outcome::Success),
    ] {
        assert_eq!(stats.last_outcome(key), Some(outcome), "{key}");
    }

    // Resubmitting the transient rows: each recovers after its `times`.
    let retry = vec![
        line("flaky-1", "q"),
        line("busy", "q"),
        line("boom", "q"),
        line("bad", "q"),
    ];
    let second = api.submit("retry-1", &retry).await;
    let out = api.results(&second).await;
    assert!(by_key(&out, "flaky-1").unwrap().get("response").is_some());
    assert!(by_key(&out, "boom").unwrap().get("response").is_some());
    assert_eq!(
        by_key(&out, "busy").unwrap()["error"]["code"],
        14,
        "gRPC UNAVAILABLE"
    );
    assert_eq!(
        by_key(&out, "bad").unwrap()["error"]["code"],
        3,
        "permanent stays"
    );
    let third = api.submit("retry-2", &[line("busy", "q")]).await;
    let out = api.results(&third).await;
    assert!(by_key(&out, "busy").unwrap().get("response").is_some());

    let stats = emu.stats();
    assert_eq!(
        stats.submissions["busy"]
            .iter()
            .map(|s| s.outcome)
            .collect::<Vec<_>>(),
        vec![
            Outcome::Error { code: 503 },
            Outcome::Error { code: 503 },
            Outcome::Success
        ]
    );
    assert_eq!(stats.submission_count("flaky-1"), 2);
    assert!(stats.resubmitted_after_success().is_empty());
    emu.shutdown().await;
}

#[tokio::test]
async fn job_faults_fail_expire_and_hold_then_let_a_retry_through() {
    let faults = plan(json!({"jobs": [
        {"match": {"nth": 1}, "fault": {"kind": "failed", "message": "backend exploded"}},
        {"match": {"display_name_contains": "expiring"}, "fault": {"kind": "expired"}},
        {"match": {"display_name_contains": "stuck"}, "fault": {"kind": "stays_pending"}}
    ]}));
    let (emu, api) = start(config(faults)).await;
    let rows = [line("j1", "q"), line("j2", "q")];

    let failed = api.submit("first", &rows).await;
    let op = api.wait_done(&failed).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_FAILED");
    assert_eq!(op["error"]["code"], 13);
    assert_eq!(op["error"]["message"], "backend exploded");
    assert!(op.get("response").is_none());
    assert_eq!(
        op["metadata"]["batchStats"],
        json!({"requestCount": "2", "failedRequestCount": "2"})
    );

    let stuck = api.submit("stuck-job", &rows).await;

    let expired = api.submit("expiring-job", &rows).await;
    let op = api.wait_done(&expired).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_EXPIRED");
    assert!(op["error"]["code"].is_number());

    // The same display names again: each fault fires once, so retries succeed.
    let retried = api.submit("expiring-job", &rows).await;
    let op = api.wait_done(&retried).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_SUCCEEDED");

    // Batches created after the stuck one have finished; it has not moved.
    let op = api.operation(&stuck).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_PENDING");
    assert!(op.get("done").is_none());
    assert_eq!(op["metadata"]["createTime"], op["metadata"]["updateTime"]);
    api.post(&format!("/v1beta/{stuck}:cancel"))
        .send()
        .await
        .unwrap();
    let op = api.operation(&stuck).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_CANCELLED");

    let stats = emu.stats();
    assert_eq!(
        stats.submissions["j1"]
            .iter()
            .map(|s| s.outcome)
            .collect::<Vec<_>>(),
        vec![
            Outcome::JobFailed,
            Outcome::JobCancelled,
            Outcome::JobExpired,
            Outcome::Success
        ]
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn create_answers_429_then_accepts() {
    let faults = plan(json!({"create_429": {"times": 2, "retry_after_secs": 7}}));
    let (emu, api) = start(config(faults)).await;
    let file = api.upload("in", &jsonl(&[line("a", "q")])).await;
    let file_name = file["name"].as_str().unwrap();
    for _ in 0..2 {
        let response = api.create_raw("job", file_name).await;
        assert_eq!(response.status(), 429);
        assert!(
            response.headers().get("retry-after").is_none(),
            "the provider says when in the body, not in a header"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], 429);
        assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
        let details = body["error"]["details"].as_array().unwrap();
        let retry = details
            .iter()
            .find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
            .unwrap();
        assert_eq!(retry["retryDelay"], "7s");
        assert!(
            details
                .iter()
                .any(|d| d["@type"] == "type.googleapis.com/google.rpc.QuotaFailure")
        );
    }
    let op = api.create("job", file_name).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_PENDING");
    let stats = emu.stats();
    assert_eq!(stats.create_rejections, 2);
    assert_eq!(stats.batches_created, 1);
    assert_eq!(
        stats.submission_count("a"),
        1,
        "a rejected create submits nothing"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn finalize_can_answer_200_with_an_error_body() {
    let faults = plan(json!({"finalize_error_body": {"times": 1}}));
    let (emu, api) = start(config(faults)).await;
    let bytes = jsonl(&[line("a", "q")]);
    let url = api.start_upload("in", bytes.len()).await;
    let response = api.finalize(&url, &bytes).await;
    assert_eq!(
        response.status(),
        200,
        "the quirk: success status, error body"
    );
    let body: Value = response.json().await.unwrap();
    assert!(body.get("file").is_none());
    assert_eq!(body["error"]["code"], 500);
    assert_eq!(body["error"]["status"], "INTERNAL");

    // The session is gone; a fresh upload works.
    let again = api.finalize(&url, &bytes).await;
    assert_eq!(again.status(), 404);
    let file = api.upload("in", &bytes).await;
    assert!(file["name"].as_str().unwrap().starts_with("files/"));
    let stats = emu.stats();
    assert_eq!(stats.finalize_errors, 1);
    assert_eq!(stats.uploads, 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn faults_can_change_at_run_time() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    emu.set_faults(plan(
        json!({"rows": [{"match": {}, "fault": {"kind": "missing"}}]}),
    ))
    .unwrap();
    let name = api
        .submit("all-missing", &[line("m1", "q"), line("m2", "q")])
        .await;
    assert!(api.results(&name).await.is_empty());

    // The demo's way: POST /_emulator/faults (no key); a bad plan is refused.
    let url = format!("{}/_emulator/faults", emu.base_url());
    let bad = api
        .http
        .post(&url)
        .body(r#"{"rows": [{"match": {"key_regex": "("}, "fault": {"kind": "missing"}}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let ok = api.http.post(&url).body("{}").send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let current: Value = api
        .http
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(current["rows"], json!([]));
    let name = api.submit("all-back", &[line("m1", "q")]).await;
    assert_eq!(api.results(&name).await.len(), 1);
    assert!(
        emu.set_faults(plan(
            json!({"jobs": [{"match": {"nth": 0}, "fault": {"kind": "expired"}}]})
        ))
        .is_err()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn a_batch_cancelled_while_running_keeps_what_it_answered() {
    // Invariant: partial output names a file holding exactly the answered
    // rows, and the rest are left out (cancelled, not answered).
    let mut cfg = config(plan(json!({"partial_on_cancel": true})));
    cfg.timing.running = std::time::Duration::from_secs(30);
    let (emu, api) = start(cfg).await;
    let lines: Vec<Value> = (0..4).map(|i| line(&format!("p{i}"), "q")).collect();
    let name = api.submit("to-cancel", &lines).await;
    eventually("the batch to run", || async {
        (api.operation(&name).await["metadata"]["state"] == "BATCH_STATE_RUNNING").then_some(())
    })
    .await;
    let cancelled = api
        .post(&format!("/v1/{name}:cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let op = api.operation(&name).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_CANCELLED");
    let file = op["metadata"]["output"]["responsesFile"].as_str().unwrap();
    let out = api.download(file, true).await;
    let keys: Vec<&str> = out.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 2, "half answered: {keys:?}");
    assert!(keys.iter().all(|k| ["p0", "p1"].contains(k)));
    emu.shutdown().await;
}

#[tokio::test]
async fn files_expire_after_the_plans_ttl() {
    let (emu, api) = start(config(plan(json!({"file_ttl_ms": 1})))).await;
    let file = api.upload("short-lived", &jsonl(&[line("a", "x")])).await;
    let name = file["name"].as_str().unwrap();
    // Time passes beyond the 1 ms TTL; the file is then gone for good.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let got = api.get(&format!("/v1beta/{name}")).send().await.unwrap();
    assert_eq!(got.status(), 403);
    let create = api.create_raw("late", name).await;
    assert_eq!(
        create.status(),
        403,
        "a batch cannot be made from an expired file"
    );
    assert_eq!(emu.stats().files_expired, 1);
    emu.shutdown().await;
}

//! Each fault of the plan, over HTTP.

use std::time::Duration;

use anthropic_emulator::{EmulatorConfig, ErrorType, Outcome, Timing};
use serde_json::{Value, json};

use crate::common::*;

// Invariant: row faults shape each request's result as written (errored
// with the named error type, stop reasons, invalid JSON, empty content);
// `times` wears a fault out across batches.
#[tokio::test]
async fn row_faults_shape_each_result() {
    let (emu, api) = start(config(plan(json!({"rows": [
        {"match": {"custom_id": "api"}, "fault": {"kind": "errored", "error": "api_error"}, "times": 1},
        {"match": {"custom_id_contains": "inval"}, "fault": {"kind": "errored", "error": "invalid_request_error", "message": "nope"}},
        {"match": {"custom_id_regex": "^busy$"}, "fault": {"kind": "errored", "error": "overloaded_error"}},
        {"match": {"custom_id": "long"}, "fault": {"kind": "max_tokens"}},
        {"match": {"custom_id": "ref"}, "fault": {"kind": "refusal"}},
        {"match": {"custom_id": "inv"}, "fault": {"kind": "invalid_json"}},
        {"match": {"custom_id": "empty"}, "fault": {"kind": "empty_content"}}
    ]})))).await;
    let ids = [
        "api",
        "x-inval-1",
        "busy",
        "long",
        "ref",
        "inv",
        "empty",
        "ok",
    ];
    let b = api.ended(&api.batch(&requests(&ids)).await).await;
    assert_eq!(b["request_counts"]["errored"], 3);
    assert_eq!(b["request_counts"]["succeeded"], 5);
    let lines = api.results(&b).await;
    let error_type = |id: &str| result_of(&lines, id)["error"]["error"]["type"].clone();
    assert_eq!(error_type("api"), "api_error");
    assert_eq!(error_type("x-inval-1"), "invalid_request_error");
    assert_eq!(
        result_of(&lines, "x-inval-1")["error"]["error"]["message"],
        "nope"
    );
    assert_eq!(error_type("busy"), "overloaded_error");
    let message = |id: &str| result_of(&lines, id)["message"].clone();
    assert_eq!(message("long")["stop_reason"], "max_tokens");
    assert_eq!(message("ref")["stop_reason"], "refusal");
    let text = message("inv")["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(serde_json::from_str::<Value>(&text).is_err());
    assert_eq!(message("empty")["content"], json!([]));
    assert_eq!(message("ok")["stop_reason"], "end_turn");
    let stats = emu.stats();
    assert_eq!(
        stats.last_outcome("busy"),
        Some(Outcome::Errored {
            error: ErrorType::Overloaded
        })
    );
    assert_eq!(stats.last_outcome("empty"), Some(Outcome::EmptyContent));
    // Second time round, the `times: 1` fault is spent.
    let b = api.ended(&api.batch(&requests(&["api"])).await).await;
    assert_eq!(b["request_counts"]["succeeded"], 1);
    assert_eq!(emu.stats().submission_count("api"), 2);
    emu.shutdown().await;
}

// Invariant: batch faults end the nth batch early as written: expired or
// canceled (with cancel_initiated_at) with its first `finished` requests
// answered; `stays_in_progress` runs until the horizon and expires.
#[tokio::test]
async fn batch_faults_end_batches_early() {
    let (emu, api) = start(EmulatorConfig {
        timing: Timing {
            expires_after: Duration::from_millis(500),
            ..Timing::fast()
        },
        ..config(plan(json!({"batches": [
            {"match": {"nth": 1}, "fault": {"kind": "expired", "finished": 1}},
            {"match": {"nth": 2}, "fault": {"kind": "canceled", "finished": 1}},
            {"match": {"nth": 3}, "fault": {"kind": "stays_in_progress"}}
        ]})))
    })
    .await;
    let expired = api.ended(&api.batch(&requests(&["a", "b"])).await).await;
    assert_eq!(expired["request_counts"]["succeeded"], 1);
    assert_eq!(expired["request_counts"]["expired"], 1);
    assert!(expired["cancel_initiated_at"].is_null());
    let canceled = api.ended(&api.batch(&requests(&["c", "d"])).await).await;
    assert_eq!(canceled["request_counts"]["succeeded"], 1);
    assert_eq!(canceled["request_counts"]["canceled"], 1);
    assert!(canceled["cancel_initiated_at"].is_string());
    let held = api.batch(&requests(&["e"])).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, b) = api.get(&format!("/messages/batches/{held}")).await;
    assert_eq!(b["processing_status"], "in_progress");
    let b = api.ended(&held).await;
    assert_eq!(b["request_counts"]["expired"], 1);
    let stats = emu.stats();
    assert_eq!((stats.batches_expired, stats.batches_canceled), (2, 1));
    emu.shutdown().await;
}

// Invariant: create refusals answer the documented statuses and error
// types, the 429 with `retry-after` and the rate-limit headers; counted
// ones wear out; none makes a batch.
#[tokio::test]
async fn create_refusals() {
    let (emu, api) = start(config(plan(json!({
        "unauthorized": {"times": 1},
        "billing": {"times": 1},
        "forbidden": {"times": 1},
        "rate_limit": {"times": 1, "retry_after_secs": 7, "requests_limit": 40},
        "overloaded": {"times": 1}
    }))))
    .await;
    let create = || {
        api.authed(
            api.http
                .post(format!("{}/messages/batches", api.base))
                .json(&json!({"requests": requests(&["a"])})),
        )
    };
    for (status, kind) in [
        (401, "authentication_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
    ] {
        let a = api.send(create()).await;
        assert_eq!(
            (a.status, a.body["error"]["type"].clone()),
            (status, json!(kind))
        );
        assert!(a.headers.contains_key("request-id"));
        if status == 429 {
            assert_eq!(a.headers["retry-after"], "7");
            assert_eq!(a.headers["anthropic-ratelimit-requests-limit"], "40");
            assert_eq!(a.headers["anthropic-ratelimit-requests-remaining"], "0");
            let reset = a.headers["anthropic-ratelimit-requests-reset"]
                .to_str()
                .unwrap();
            assert!(
                chrono::DateTime::parse_from_rfc3339(reset).is_ok(),
                "{reset}"
            );
        }
    }
    assert_eq!(api.send(create()).await.status, 200);
    let stats = emu.stats();
    assert_eq!((stats.create_rejections, stats.batches_created), (5, 1));
    emu.set_faults(plan(json!({"unauthorized": {}}))).unwrap();
    for _ in 0..3 {
        assert_eq!(api.send(create()).await.status, 401);
    }
    emu.shutdown().await;
}

// Invariant: over the spend cap a create answers 429 `rate_limit_error`
// whose `error.details.error_code` names the cap, with no `retry-after`
// (the cap lasts until it is raised or the month ends); an organization
// on hold answers 400 `invalid_request_error` with its `error_code`, as
// the SDK types them; none makes a batch.
#[tokio::test]
async fn spend_caps_and_holds_name_their_error_code() {
    let (emu, api) = start(config(plan(json!({"spend_limit": {"times": 2}})))).await;
    for _ in 0..2 {
        let (status, body) = api.create(&requests(&["a"])).await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(
            body["error"]["details"],
            json!({"error_code": "enforced_spend_limit_reached"})
        );
    }
    let held = plan(json!({"spend_limit": {"times": 1, "error_code": "organization_on_hold"}}));
    emu.set_faults(held).unwrap();
    let (status, body) = api.create(&requests(&["a"])).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["details"]["error_code"],
        "organization_on_hold"
    );
    let contract =
        json!({"spend_limit": {"times": 1, "error_code": "contract_spend_limit_reached"}});
    emu.set_faults(plan(contract)).unwrap();
    let capped = api.send(
        api.authed(
            api.http
                .post(format!("{}/messages/batches", api.base))
                .json(&json!({"requests": requests(&["a"])})),
        ),
    );
    let capped = capped.await;
    assert_eq!(capped.status, 429);
    assert!(!capped.headers.contains_key("retry-after"));
    assert_eq!(
        capped.body["error"]["details"]["error_code"],
        "contract_spend_limit_reached"
    );
    let stats = emu.stats();
    assert_eq!((stats.create_rejections, stats.batches_created), (4, 0));
    emu.shutdown().await;
}

// Invariant: a lost create answer still makes the batch (found by list),
// in both modes: a 500 `api_error`, or a connection cut before the body.
#[tokio::test]
async fn lost_create_answers_still_make_batches() {
    let (emu, api) = start(config(plan(json!({"create_answer_lost": {"times": 1}})))).await;
    let (status, body) = api.create(&requests(&["a"])).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (500, json!("api_error"))
    );
    emu.set_faults(plan(json!({"create_answer_lost": {"mode": "drop"}})))
        .unwrap();
    let sent = api
        .authed(
            api.http
                .post(format!("{}/messages/batches", api.base))
                .json(&json!({"requests": requests(&["b"])})),
        )
        .send()
        .await;
    let read = match sent {
        Ok(resp) => resp.json::<Value>().await.is_ok(),
        Err(_) => false,
    };
    assert!(!read, "the answer must not be readable");
    let (_, list) = api.get("/messages/batches").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    let stats = emu.stats();
    assert_eq!((stats.create_answers_lost, stats.batches_created), (2, 2));
    assert_eq!(stats.submission_count("a"), 1);
    emu.shutdown().await;
}

// Invariant: get_not_found answers 404 `not_found_error` for a batch that
// exists, `times` times, then the truth; list lag hides a new batch from
// lists, not from GET.
#[tokio::test]
async fn get_404s_and_list_lag() {
    let (emu, api) = start(config(plan(
        json!({"get_not_found": {"times": 1}, "list_lag_ms": 60000}),
    )))
    .await;
    let id = api.batch(&requests(&["a"])).await;
    let (status, body) = api.get(&format!("/messages/batches/{id}")).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (404, json!("not_found_error"))
    );
    assert_eq!(api.get(&format!("/messages/batches/{id}")).await.0, 200);
    let (_, list) = api.get("/messages/batches").await;
    assert!(list["data"].as_array().unwrap().is_empty());
    assert_eq!(emu.stats().gets_not_found, 1);
    emu.shutdown().await;
}

// Invariant: the emulator's own endpoints need no key: stats read back
// what happened, and a plan posted there replaces the running one.
#[tokio::test]
async fn emulator_endpoints_need_no_key() {
    let (emu, api) = start(config(anthropic_emulator::FaultPlan::default())).await;
    let base = emu.base_url();
    let resp = api
        .http
        .post(format!("{base}/_emulator/faults"))
        .json(&json!({"overloaded": {"times": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let plan: Value = api
        .http
        .get(format!("{base}/_emulator/faults"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plan["overloaded"], json!({"times": 1}));
    assert_eq!(api.create(&requests(&["a"])).await.0, 529);
    let stats: Value = api
        .http
        .get(format!("{base}/_emulator/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["create_rejections"], 1);
    let bad = api
        .http
        .post(format!("{base}/_emulator/faults"))
        .json(&json!({"rows": [{"match": {"custom_id_regex": "("}, "fault": {"kind": "refusal"}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    emu.shutdown().await;
}

//! The API's own rules: keys, versions, request ids, create validation,
//! per-request params checks, answers, lists.

use anthropic_emulator::{ErrorType, FaultPlan, Models, Outcome};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

// Invariant: every /v1 call needs a known key, as `x-api-key` or a bearer
// token, and a known `anthropic-version`; errors have the API's shape and
// every response names a `request-id`, the same as its error body's.
#[tokio::test]
async fn keys_versions_and_request_ids() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let url = format!("{}/messages/batches", api.base);
    let none = api
        .send(api.http.get(&url).header("anthropic-version", VERSION))
        .await;
    assert_eq!(none.status, 401);
    assert_eq!(none.body["type"], "error");
    assert_eq!(none.body["error"]["type"], "authentication_error");
    let id = none.headers["request-id"].to_str().unwrap();
    assert!(id.starts_with("req_"), "{id}");
    assert_eq!(none.body["request_id"], id);
    let wrong = api
        .send(
            api.http
                .get(&url)
                .header("x-api-key", "sk-ant-wrong")
                .header("anthropic-version", VERSION),
        )
        .await;
    assert_eq!(wrong.status, 401);
    let bearer = api
        .send(
            api.http
                .get(&url)
                .bearer_auth(KEY)
                .header("anthropic-version", VERSION),
        )
        .await;
    assert_eq!(bearer.status, 200, "{}", bearer.body);
    assert!(bearer.headers.contains_key("request-id"));
    let no_version = api.send(api.http.get(&url).header("x-api-key", KEY)).await;
    assert_eq!(no_version.status, 400);
    assert_eq!(no_version.body["error"]["type"], "invalid_request_error");
    for version in ["2023-01-01", "2026-10-21"] {
        let ok = api
            .send(
                api.http
                    .get(&url)
                    .header("x-api-key", KEY)
                    .header("anthropic-version", version),
            )
            .await;
        assert_eq!(ok.status, 200);
    }
    let bad = api
        .send(
            api.http
                .get(&url)
                .header("x-api-key", KEY)
                .header("anthropic-version", "1999-01-01"),
        )
        .await;
    assert_eq!(bad.status, 400);
    let (status, body) = api.get("/nope").await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (404, json!("not_found_error"))
    );
    emu.shutdown().await;
}

// Invariant: a create's body is checked at once: each rule is a 400
// `invalid_request_error` naming the offending request's index; a refused
// create makes no batch and counts as a rejection.
#[tokio::test]
async fn create_validation_names_the_request_index() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut bad_id = request("x", "p");
    bad_id["custom_id"] = json!("no spaces allowed");
    let mut no_model = request("y", "p");
    no_model["params"].as_object_mut().unwrap().remove("model");
    let long = "a".repeat(65);
    let cases: Vec<(Vec<Value>, &str)> = vec![
        (vec![], "requests: "),
        (vec![request("a", "p"), bad_id], "requests.1.custom_id: "),
        (
            vec![request("a", "p"), request("b", "p"), request("a", "p")],
            "requests.2.custom_id: ",
        ),
        (
            vec![request("a", "p"), no_model],
            "requests.1.params.model: ",
        ),
        (vec![request(&long, "p")], "requests.0.custom_id: "),
    ];
    for (requests, prefix) in &cases {
        let (status, body) = api.create(requests).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(prefix),
            "{message} should start with {prefix}"
        );
    }
    let (status, _) = api
        .call(
            api.http
                .post(format!("{}/messages/batches", api.base))
                .body("{not json"),
        )
        .await;
    assert_eq!(status, 400);
    let stats = emu.stats();
    assert_eq!((stats.batches_created, stats.create_rejections), (0, 6));
    emu.shutdown().await;
}

// Invariant: a body over 256 MB is refused with 413 `request_too_large`
// before it is read whole.
#[tokio::test]
async fn oversized_bodies_are_413() {
    let (emu, _api) = start(config(FaultPlan::default())).await;
    let mut stream = tokio::net::TcpStream::connect(emu.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST /v1/messages/batches HTTP/1.1\r\nhost: x\r\nx-api-key: {KEY}\r\nanthropic-version: {VERSION}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{{",
        300 * 1024 * 1024
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("request_too_large"), "{answer}");
    assert_eq!(emu.stats().create_rejections, 1);
    emu.shutdown().await;
}

// Invariant: params are checked per request when processed, as the docs
// say: an unknown model is an `errored` `not_found_error` result, a bad
// max_tokens an `invalid_request_error` one; the others still succeed.
#[tokio::test]
async fn params_problems_are_errored_results() {
    let (emu, api) = start(anthropic_emulator::EmulatorConfig {
        models: Models::only(&[MODEL]),
        ..config(FaultPlan::default())
    })
    .await;
    let mut unknown = request("unknown", "p");
    unknown["params"]["model"] = json!("claude-nope-9");
    let mut zero = request("zero", "p");
    zero["params"]["max_tokens"] = json!(0);
    let mut dated = request("dated", "p");
    dated["params"]["model"] = json!(format!("{MODEL}-20250929"));
    let b = api
        .ended(&api.batch(&[unknown, zero, dated, request("ok", "p")]).await)
        .await;
    assert_eq!(b["request_counts"]["errored"], 2);
    assert_eq!(b["request_counts"]["succeeded"], 2);
    let lines = api.results(&b).await;
    let unknown = result_of(&lines, "unknown");
    assert_eq!(unknown["type"], "errored");
    assert_eq!(unknown["error"]["type"], "error");
    assert_eq!(unknown["error"]["error"]["type"], "not_found_error");
    assert_eq!(
        result_of(&lines, "zero")["error"]["error"]["type"],
        "invalid_request_error"
    );
    let stats = emu.stats();
    assert_eq!(
        stats.last_outcome("unknown"),
        Some(Outcome::Errored {
            error: ErrorType::NotFound
        })
    );
    assert_eq!(stats.model_of("unknown"), Some("claude-nope-9"));
    assert_eq!(stats.model_of("ok"), Some(MODEL));
    emu.shutdown().await;
}

// Invariant: a request with `output_config.format` (json_schema) gets a
// JSON instance of the schema as its text.
#[tokio::test]
async fn schema_requests_get_schema_instances() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut r = request("s", "classify this");
    r["params"]["output_config"] = json!({"format": {"type": "json_schema", "schema": {
        "type": "object", "properties": {"label": {"type": "string", "enum": ["x", "y"]}},
        "required": ["label"], "additionalProperties": false}}});
    let b = api.ended(&api.batch(&[r]).await).await;
    let result = result_of(&api.results(&b).await, "s");
    let text = result["message"]["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap();
    assert!(v["label"] == "x" || v["label"] == "y", "{v}");
    emu.shutdown().await;
}

// Invariant: lists are newest first and page both ways: forward by
// `after_id` = the last page's `last_id`, backward by `before_id` = its
// `first_id`, `has_more` false at the end of travel; limits out of
// 1..=1000 are refused.
#[tokio::test]
async fn lists_page_both_ways() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(api.batch(&[request(&format!("r{i}"), "p")]).await);
    }
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, all) = api.get("/messages/batches").await;
    assert_eq!(ids(&all), newest_first);
    assert_eq!(all["has_more"], false);
    let mut seen = Vec::new();
    let mut path = "/messages/batches?limit=2".to_owned();
    loop {
        let (status, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(ids(&page));
        assert_eq!(page["last_id"], json!(ids(&page).last()));
        if page["has_more"] == false {
            break;
        }
        path = format!(
            "/messages/batches?limit=2&after_id={}",
            page["last_id"].as_str().unwrap()
        );
    }
    assert_eq!(seen, newest_first);
    let mut back = Vec::new();
    let mut path = format!("/messages/batches?limit=2&before_id={}", made[0]);
    loop {
        let (_, page) = api.get(&path).await;
        let mut page_ids = ids(&page);
        page_ids.extend(back);
        back = page_ids;
        if page["has_more"] == false {
            break;
        }
        path = format!(
            "/messages/batches?limit=2&before_id={}",
            page["first_id"].as_str().unwrap()
        );
    }
    assert_eq!(back, newest_first[..4]);
    for limit in ["0", "1001", "x"] {
        let (status, _) = api.get(&format!("/messages/batches?limit={limit}")).await;
        assert_eq!(status, 400, "limit={limit}");
    }
    emu.shutdown().await;
}

// Invariant: every call to the API is counted in `requests`, answered or
// refused (a wrong key, a missing version, a path the API has not), so a
// test can bound every call a client made; the emulator's own endpoints
// are not counted.
#[tokio::test]
async fn every_call_is_counted_refused_ones_too() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let url = format!("{}/messages/batches", api.base);
    let call = |key: &str| {
        api.http
            .get(&url)
            .header("x-api-key", key)
            .header("anthropic-version", VERSION)
    };
    let wrong = api.send(call("sk-ant-wrong")).await;
    let ok = api.send(call(KEY)).await;
    let no_version = api.send(api.http.get(&url).header("x-api-key", KEY)).await;
    let unknown = format!("{}/messages/batches", emu.base_url());
    let unknown = api
        .send(api.http.get(unknown).header("x-api-key", KEY))
        .await;
    let own = format!("{}/_emulator/stats", emu.base_url());
    api.http.get(own).send().await.unwrap();
    let statuses = (wrong.status, ok.status, no_version.status, unknown.status);
    assert_eq!(statuses, (401, 200, 400, 404));
    let stats = emu.stats();
    assert_eq!((stats.requests.total, stats.requests.refused), (4, 3));
    assert_eq!(stats.requests.with_status(401), 1);
    assert_eq!(stats.requests.with_status(404), 1);
    emu.shutdown().await;
}

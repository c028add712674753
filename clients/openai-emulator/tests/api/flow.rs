//! The happy paths and the API's own rules: auth, files, batches, lists,
//! input validation, answers, stats.

use openai_emulator::{FaultPlan, Models, Outcome};
use serde_json::{Value, json};

use crate::common::*;

// Invariant: every /v1 call needs a known bearer key; the error has the
// API's shape, `invalid_api_key` for a wrong key.
#[tokio::test]
async fn keys_are_required() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let resp = api
        .http
        .get(format!("{}/batches", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let resp = api
        .http
        .get(format!("{}/batches", api.base))
        .bearer_auth("sk-wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert!(body["error"].as_object().unwrap().contains_key("param"));
    emu.shutdown().await;
}

// Invariant: a file round-trips (object fields, content, list, delete), and
// a deleted file is 404.
#[tokio::test]
async fn files_round_trip() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let bytes = jsonl(&[line("a", "hi")]);
    let id = api.upload("in.jsonl", bytes.clone()).await;
    assert!(id.starts_with("file-"));
    let (_, f) = api.get(&format!("/files/{id}")).await;
    assert_eq!(f["object"], "file");
    assert_eq!(f["bytes"], bytes.len());
    assert_eq!(f["filename"], "in.jsonl");
    assert_eq!(f["purpose"], "batch");
    assert_eq!(api.content(&id).await, bytes);
    let (_, list) = api.get("/files?purpose=batch").await;
    assert_eq!(list["data"][0]["id"], id.as_str());
    let (status, del) = api
        .call(api.http.delete(format!("{}/files/{id}", api.base)))
        .await;
    assert_eq!((status, del["deleted"].clone()), (200, json!(true)));
    assert_eq!(api.get(&format!("/files/{id}")).await.0, 404);
    assert_eq!(emu.stats().files_deleted, 1);
    emu.shutdown().await;
}

// Invariant: a batch walks validating → in_progress → finalizing →
// completed; its output file has one 200 chat.completion per row, with
// request_counts and usage to match; batches cannot be deleted.
#[tokio::test]
async fn a_batch_completes_with_an_output_file() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let id = api
        .batch(&[line("a", "first prompt"), line("b", "second prompt")])
        .await;
    assert!(id.starts_with("batch_"));
    let b = api.finished(&id).await;
    assert_eq!(b["status"], "completed", "{b}");
    for field in [
        "in_progress_at",
        "finalizing_at",
        "completed_at",
        "expires_at",
    ] {
        assert!(b[field].is_i64(), "{field}: {b}");
    }
    assert_eq!(
        b["request_counts"],
        json!({"total": 2, "completed": 2, "failed": 0})
    );
    assert_eq!(b["model"], MODEL);
    assert!(b["error_file_id"].is_null());
    assert!(b["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let out = api.lines_of(&b, "output_file_id").await;
    assert_eq!(out.len(), 2);
    let a = out.iter().find(|l| l["custom_id"] == "a").unwrap();
    assert_eq!(a["response"]["status_code"], 200);
    assert!(a["id"].as_str().unwrap().starts_with("batch_req_"));
    let body = &a["response"]["body"];
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("first prompt")
    );
    let (status, _) = api
        .call(api.http.delete(format!("{}/batches/{id}", api.base)))
        .await;
    assert_eq!(status, 404);
    let stats = emu.stats();
    assert_eq!(stats.batches_created, 1);
    assert_eq!(stats.last_outcome("a"), Some(Outcome::Success));
    emu.shutdown().await;
}

// Invariant: a json_schema request is answered with an instance of it.
#[tokio::test]
async fn schema_requests_get_schema_instances() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut l = line("s", "classify this");
    l["body"]["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "c", "strict": true,
        "schema": {"type": "object", "properties": {"label": {"type": "string", "enum": ["x", "y"]}}, "required": ["label"], "additionalProperties": false}}});
    let b = api.finished(&api.batch(&[l]).await).await;
    let out = api.lines_of(&b, "output_file_id").await;
    let text = out[0]["response"]["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    let v: Value = serde_json::from_str(text).unwrap();
    assert!(v["label"] == "x" || v["label"] == "y", "{v}");
    emu.shutdown().await;
}

// Invariant: input problems fail the batch at validation with the
// documented codes and the offending line; an unknown model is
// `model_not_found`; the rows are recorded as never run.
#[tokio::test]
async fn invalid_inputs_fail_the_batch_naming_the_line() {
    let (emu, api) = start(EmulatorConfig {
        models: Models::Only(vec![MODEL.into()]),
        ..config(FaultPlan::default())
    })
    .await;
    let cases = [
        (
            jsonl(&[line("a", "x"), line("a", "y")]),
            "duplicate_custom_id",
            Some(2),
        ),
        (b"{not json\n".to_vec(), "invalid_json_line", Some(1)),
        (
            {
                let mut l = line("b", "y");
                l["body"]["model"] = json!("gpt-4o");
                jsonl(&[line("a", "x"), l])
            },
            "model_mismatch",
            Some(2),
        ),
        (
            {
                let mut l = line("a", "x");
                l["body"]["model"] = json!("gpt-nope");
                jsonl(&[l])
            },
            "model_not_found",
            Some(1),
        ),
    ];
    for (bytes, code, at) in cases {
        let file = api.upload("in.jsonl", bytes).await;
        let (_, created) = api.create(&file, Value::Null).await;
        let b = api.finished(created["id"].as_str().unwrap()).await;
        assert_eq!(b["status"], "failed", "{b}");
        assert!(b["failed_at"].is_i64());
        let e = &b["errors"]["data"][0];
        assert_eq!(e["code"], code, "{b}");
        assert_eq!(e["line"].as_u64(), at, "{b}");
    }
    assert_eq!(emu.stats().batches_failed, 4);
    assert_eq!(emu.stats().last_outcome("a"), Some(Outcome::NotRun));
    emu.shutdown().await;
}

use openai_emulator::EmulatorConfig;

// Invariant: create validates its own parameters synchronously (400 with
// `param`), including metadata's documented limits.
#[tokio::test]
async fn create_checks_its_parameters() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let file = api.upload("in.jsonl", jsonl(&[line("a", "x")])).await;
    let too_many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (status, body) = api.create(&file, Value::Object(too_many)).await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("metadata"))
    );
    let (status, _) = api.create(&file, json!({"k": "v".repeat(513)})).await;
    assert_eq!(status, 400);
    let (status, _) = api.create(&file, json!({"k".repeat(65): "v"})).await;
    assert_eq!(status, 400);
    let bad = json!({"input_file_id": file, "endpoint": "/v1/nope", "completion_window": "24h"});
    let (status, body) = api
        .call(api.http.post(format!("{}/batches", api.base)).json(&bad))
        .await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (400, json!("endpoint"))
    );
    let (status, _) = api.create("file-missing", Value::Null).await;
    assert_eq!(status, 404);
    let (status, body) = api.create(&file, json!({"job": "j1"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["metadata"], json!({"job": "j1"}));
    assert_eq!(body["status"], "validating");
    emu.shutdown().await;
}

// Invariant: lists page with `after`/`limit`, newest first by default,
// with first_id/last_id/has_more; every batch appears exactly once.
#[tokio::test]
async fn batch_lists_paginate_newest_first() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(api.batch(&[line(&format!("r{i}"), "x")]).await);
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = after.as_ref().map_or("/batches?limit=2".to_owned(), |a| {
            format!("/batches?limit=2&after={a}")
        });
        let (_, page) = api.get(&q).await;
        assert_eq!(page["object"], "list");
        for b in page["data"].as_array().unwrap() {
            seen.push(b["id"].as_str().unwrap().to_owned());
        }
        if !page["has_more"].as_bool().unwrap() {
            break;
        }
        after = Some(page["last_id"].as_str().unwrap().to_owned());
    }
    made.reverse();
    assert_eq!(seen, made);
    emu.shutdown().await;
}

// Invariant: media in requests are hashed per custom_id in the stats.
#[tokio::test]
async fn media_are_counted_per_custom_id() {
    use base64::Engine as _;
    let (emu, api) = start(config(FaultPlan::default())).await;
    let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
    let mut l = line("img", "describe");
    l["body"]["messages"][0]["content"] = json!([{"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}]);
    api.finished(&api.batch(&[l]).await).await;
    let media = emu.stats().media;
    assert_eq!(media["img"].len(), 1);
    assert_eq!(media["img"][0].len(), 64);
    emu.shutdown().await;
}

// Invariant: a custom_id sent again after a successful answer is reported
// as paid twice; one resent after an expiry is not.
#[tokio::test]
async fn resubmissions_after_success_are_counted() {
    let (emu, api) = start(config(plan(
        json!({"batches": [{"match": {"nth": 1}, "fault": {"kind": "expired"}}]}),
    )))
    .await;
    api.finished(&api.batch(&[line("e", "x")]).await).await;
    api.finished(&api.batch(&[line("e", "x"), line("p", "y")]).await)
        .await;
    api.finished(&api.batch(&[line("p", "y")]).await).await;
    let stats = emu.stats();
    assert_eq!(stats.submission_count("e"), 2);
    assert_eq!(stats.resubmitted_after_success(), vec!["p".to_owned()]);
    emu.shutdown().await;
}

// Invariant: every call to the API is counted in `requests`, answered or
// refused (a missing key, a wrong key, a path the API has not), so a test
// can bound every call a client made; the emulator's own endpoints are
// not counted.
#[tokio::test]
async fn every_call_is_counted_refused_ones_too() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let batches = format!("{}/batches", api.base);
    let none = api.http.get(&batches).send().await.unwrap();
    let wrong = api.http.get(&batches).bearer_auth("sk-wrong").send();
    let wrong = wrong.await.unwrap();
    let (ok, _) = api.get("/batches").await;
    let unversioned = api.http.get(format!("{}/batches", emu.base_url()));
    let (unknown, _) = api.call(unversioned).await;
    let own = format!("{}/_emulator/stats", emu.base_url());
    api.http.get(own).send().await.unwrap();
    let statuses = (none.status().as_u16(), wrong.status().as_u16(), ok, unknown);
    assert_eq!(statuses, (401, 401, 200, 404));
    let stats = emu.stats();
    assert_eq!((stats.requests.total, stats.requests.refused), (4, 3));
    assert_eq!(stats.requests.with_status(401), 2);
    assert_eq!(stats.requests.with_status(404), 1);
    assert_eq!(
        stats.unknown_routes, 1,
        "the older counter keeps its meaning"
    );
    let by_route = [
        ("GET /v1/batches 200", 1),
        ("GET /v1/batches 401", 2),
        ("GET (unknown route) 404", 1),
    ];
    let by_route = by_route.map(|(k, n)| (k.to_owned(), n));
    assert_eq!(stats.requests.by_route, by_route.into());
    emu.shutdown().await;
}

//! The happy path and the plain REST surface: upload, create, poll,
//! download, list, cancel, API keys, bad input.

use std::collections::HashSet;

use gemini_emulator::{FaultPlan, Outcome};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn upload_create_poll_download() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let schema = json!({
        "type": "object",
        "properties": {
            "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
            "stars": {"type": "integer", "minimum": 1, "maximum": 5},
            "topics": {"type": "array", "items": {"type": "string"}, "minItems": 1}
        },
        "required": ["sentiment", "stars", "topics"],
        "additionalProperties": false
    });
    let openapi_schema = json!({
        "type": "OBJECT",
        "properties": {"label": {"type": "STRING", "enum": ["a", "b"]}, "score": {"type": "NUMBER"}},
        "required": ["label", "score"]
    });
    let mut lines: Vec<Value> = (0..12)
        .map(|i| {
            line(
                &format!("row-{i:02}"),
                &format!("Review number {i}: lovely app"),
            )
        })
        .collect();
    lines[1]["request"]["generationConfig"] =
        json!({"responseMimeType": "application/json", "responseJsonSchema": schema});
    lines[2]["request"]["generationConfig"] =
        json!({"responseMimeType": "application/json", "responseSchema": openapi_schema});
    lines[3]["request"]["generationConfig"] = json!({"responseMimeType": "application/json"});
    lines[4]["request"]["systemInstruction"] = json!({"parts": [{"text": "Be terse."}]});
    let bytes = jsonl(&lines);

    let file = api.upload("reviews-input", &bytes).await;
    assert_eq!(file["displayName"], "reviews-input");
    assert_eq!(file["sizeBytes"], bytes.len().to_string());
    assert_eq!(file["state"], "ACTIVE");
    assert_eq!(file["mimeType"], "application/jsonl");
    let file_name = file["name"].as_str().unwrap();
    assert!(file_name.starts_with("files/"));
    let id = file_name.strip_prefix("files/").unwrap();
    assert_eq!(file["uri"], format!("{}/v1beta/files/{id}", emu.base_url()));
    let fetched: Value = api
        .get(&format!("/v1beta/{file_name}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fetched, file);

    let op = api.create("reviews-nightly", file_name).await;
    let name = op["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("batches/"));
    let meta = &op["metadata"];
    assert_eq!(
        meta["@type"],
        "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
    );
    assert_eq!(meta["state"], "BATCH_STATE_PENDING");
    assert_eq!(meta["model"], format!("models/{MODEL}"));
    assert_eq!(meta["displayName"], "reviews-nightly");
    assert_eq!(meta["inputConfig"]["fileName"], file_name);
    assert_eq!(
        meta["batchStats"],
        json!({"requestCount": "12", "pendingRequestCount": "12"})
    );
    assert!(op.get("done").is_none());

    // Watch the states go by; each transition moves updateTime forward.
    let mut seen: Vec<(String, String)> = vec![(
        "BATCH_STATE_PENDING".to_owned(),
        meta["updateTime"].as_str().unwrap().to_owned(),
    )];
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let done = loop {
        let op = api.operation(&name).await;
        let state = op["metadata"]["state"].as_str().unwrap().to_owned();
        let updated = op["metadata"]["updateTime"].as_str().unwrap().to_owned();
        if seen.last().map(|(s, _)| s) != Some(&state) {
            seen.push((state, updated));
        }
        if op["done"] == true {
            break op;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {seen:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    let states: Vec<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(states.first(), Some(&"BATCH_STATE_PENDING"));
    assert_eq!(states.last(), Some(&"BATCH_STATE_SUCCEEDED"));
    for pair in seen.windows(2) {
        assert!(pair[0].1 < pair[1].1, "updateTime moves forward: {seen:?}");
    }
    let meta = &done["metadata"];
    assert_eq!(meta["endTime"], meta["updateTime"]);
    assert_eq!(
        meta["batchStats"],
        json!({"requestCount": "12", "successfulRequestCount": "12"})
    );
    assert_eq!(
        done["response"]["@type"],
        "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
    );
    let out = done["response"]["responsesFile"].as_str().unwrap();

    // Both download paths serve the same bytes.
    let a = api.download(out, true).await;
    let b = api.download(out, false).await;
    assert_eq!(a, b);
    let keys: Vec<&str> = a.iter().map(|l| l["key"].as_str().unwrap()).collect();
    let input_keys: Vec<String> = (0..12).map(|i| format!("row-{i:02}")).collect();
    assert_ne!(keys, input_keys, "output order is not input order");
    assert_eq!(
        keys.iter().copied().collect::<HashSet<_>>(),
        input_keys
            .iter()
            .map(String::as_str)
            .collect::<HashSet<_>>()
    );

    for l in &a {
        let response = &l["response"];
        assert_eq!(response["candidates"][0]["finishReason"], "STOP");
        assert_eq!(response["modelVersion"], MODEL);
        let usage = &response["usageMetadata"];
        assert_eq!(
            usage["totalTokenCount"].as_u64().unwrap(),
            usage["promptTokenCount"].as_u64().unwrap()
                + usage["candidatesTokenCount"].as_u64().unwrap()
        );
    }
    let structured: Value = serde_json::from_str(text_of(by_key(&a, "row-01").unwrap())).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        validator.is_valid(&structured),
        "{structured} fits the schema"
    );
    let openapi: Value = serde_json::from_str(text_of(by_key(&a, "row-02").unwrap())).unwrap();
    assert!(["a", "b"].contains(&openapi["label"].as_str().unwrap()));
    assert!(openapi["score"].is_number());
    let free: Value = serde_json::from_str(text_of(by_key(&a, "row-03").unwrap())).unwrap();
    assert!(free["answer"].is_string());
    assert!(
        serde_json::from_str::<Value>(text_of(by_key(&a, "row-00").unwrap())).is_err(),
        "without JSON mode the answer is plain text"
    );

    // The output file is a generated file with metadata too.
    let out_meta: Value = api
        .get(&format!("/v1beta/{out}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(out_meta["source"], "GENERATED");

    let stats = emu.stats();
    assert_eq!(stats.batches_created, 1);
    assert_eq!(stats.uploads, 1);
    assert_eq!(stats.submissions.len(), 12);
    for subs in stats.submissions.values() {
        assert_eq!(subs.len(), 1);
        assert_eq!(subs[0].outcome, Outcome::Success);
        assert_eq!(subs[0].batch, name);
    }
    assert!(stats.resubmitted_after_success().is_empty());

    // The same stats over HTTP, without a key.
    let http_stats: Value = api
        .http
        .get(format!("{}/_emulator/stats", emu.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http_stats["batches_created"], 1);
    assert_eq!(
        http_stats["submissions"]["row-00"][0]["outcome"]["kind"],
        "success"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn the_api_key_is_required() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let url = format!("{}/v1beta/batches", emu.base_url());

    let missing = api.http.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 403);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], 403);
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");

    let wrong = api
        .http
        .get(&url)
        .header("x-goog-api-key", "nope")
        .send()
        .await
        .unwrap();
    // The provider answers an unknown key 400 with ErrorInfo API_KEY_INVALID.
    assert_eq!(wrong.status(), 400);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(body["error"]["details"][0]["reason"], "API_KEY_INVALID");

    let by_query = api
        .http
        .get(format!("{url}?key={KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_query.status(), 200);

    let upload = api
        .http
        .post(format!("{}/upload/v1beta/files", emu.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 403, "uploads need the key too");
    emu.shutdown().await;
}

#[tokio::test]
async fn uploads_are_checked() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let bytes = jsonl(&[line("a", "x")]);

    // Declared length must match what arrives.
    let url = api.start_upload("short", bytes.len() + 5).await;
    let response = api.finalize(&url, &bytes).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");

    // Chunked: upload, query, then finalize with the rest.
    let url = api.start_upload("chunked", bytes.len()).await;
    let (head, tail) = bytes.split_at(5);
    let first = api
        .http
        .post(&url)
        .header("x-goog-api-key", KEY)
        .header("X-Goog-Upload-Command", "upload")
        .header("X-Goog-Upload-Offset", "0")
        .body(head.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-goog-upload-status"], "active");
    let query = api
        .http
        .post(&url)
        .header("x-goog-api-key", KEY)
        .header("X-Goog-Upload-Command", "query")
        .send()
        .await
        .unwrap();
    assert_eq!(query.headers()["x-goog-upload-size-received"], "5");
    let wrong_offset = api
        .http
        .post(&url)
        .header("x-goog-api-key", KEY)
        .header("X-Goog-Upload-Command", "upload, finalize")
        .header("X-Goog-Upload-Offset", "0")
        .body(tail.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_offset.status(), 400);
    let done = api
        .http
        .post(&url)
        .header("x-goog-api-key", KEY)
        .header("X-Goog-Upload-Command", "upload, finalize")
        .header("X-Goog-Upload-Offset", "5")
        .body(tail.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    let file: Value = done.json().await.unwrap();
    assert_eq!(file["file"]["sizeBytes"], bytes.len().to_string());

    // Non-resumable uploads are refused; unknown sessions are 404.
    let simple = api
        .post("/upload/v1beta/files")
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(simple.status(), 400);
    let unknown = api
        .post("/upload/v1beta/files?upload_id=nope&upload_protocol=resumable")
        .header("X-Goog-Upload-Command", "upload, finalize")
        .header("X-Goog-Upload-Offset", "0")
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(emu.stats().uploads, 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn malformed_inputs_and_requests_are_invalid_argument() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    for (what, bytes) in [
        ("not jsonl", b"this is not json\n".to_vec()),
        (
            "missing key",
            jsonl(&[json!({"request": {"contents": []}})]),
        ),
        ("missing request", jsonl(&[json!({"key": "a"})])),
        ("duplicate key", jsonl(&[line("a", "x"), line("a", "y")])),
    ] {
        let file = api.upload(what, &bytes).await;
        let response = api.create_raw(what, file["name"].as_str().unwrap()).await;
        assert_eq!(response.status(), 400, "{what}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT", "{what}");
    }
    let good = api.upload("good", &jsonl(&[line("a", "x")])).await;
    let good_name = good["name"].as_str().unwrap();

    let no_file = api.create_raw("x", "files/doesnotexist").await;
    assert_eq!(no_file.status(), 403);

    // The SDKs send no display name unless asked; a display name that is
    // not a string is refused.
    let no_display_name = api
        .post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
        .json(&json!({"batch": {"inputConfig": {"fileName": good_name}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_display_name.status(), 200);
    let bad_display_name = api
        .post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
        .json(&json!({"batch": {"displayName": 7, "inputConfig": {"fileName": good_name}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_display_name.status(), 400);
    let both_inputs = api
        .post(&format!("/v1/models/{MODEL}:batchGenerateContent"))
        .json(&json!({"batch": {"inputConfig": {"fileName": good_name, "requests": {"requests": []}}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(both_inputs.status(), 400);

    let wrong_model = api
        .post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
        .json(&json!({"batch": {"model": "models/other", "displayName": "x", "inputConfig": {"fileName": good_name}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_model.status(), 400);

    let model_inside = api
        .post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
        .json(&json!({"batch": {"model": format!("models/{MODEL}"), "displayName": "x", "inputConfig": {"fileName": good_name}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(model_inside.status(), 200);

    let bad_json = api
        .post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), 400);

    let unknown_batch = api.get("/v1beta/batches/nope").send().await.unwrap();
    assert_eq!(unknown_batch.status(), 404);
    let body: Value = unknown_batch.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND");

    let no_alt = api
        .get(&format!("/v1beta/{good_name}:download"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_alt.status(), 400);
    let uploaded = api
        .get(&format!("/v1beta/{good_name}:download?alt=media"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        uploaded.status(),
        400,
        "uploaded files cannot be downloaded"
    );
    // Only the create without a display name made a batch.
    assert_eq!(emu.stats().batches_created, 2);
    emu.shutdown().await;
}

#[tokio::test]
async fn list_pages_through_every_batch() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let file = api.upload("in", &jsonl(&[line("a", "x")])).await;
    let file_name = file["name"].as_str().unwrap();
    let mut created = Vec::new();
    for i in 0..5 {
        let op = api.create(&format!("job-{i}"), file_name).await;
        created.push(op["name"].as_str().unwrap().to_owned());
    }

    let mut listed = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = "/v1beta/batches?pageSize=2".to_owned();
        if let Some(t) = &token {
            path.push_str(&format!("&pageToken={t}"));
        }
        let page: Value = api.get(&path).send().await.unwrap().json().await.unwrap();
        pages += 1;
        let ops = page["operations"].as_array().unwrap();
        assert!(ops.len() <= 2);
        listed.extend(ops.iter().map(|o| o["name"].as_str().unwrap().to_owned()));
        match page.get("nextPageToken") {
            Some(t) => token = Some(t.as_str().unwrap().to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    created.reverse();
    assert_eq!(listed, created, "newest first, every batch once");

    // Finding a batch again by displayName, as the worker does after a crash.
    let all: Value = api
        .get("/v1beta/batches")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let found = all["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["metadata"]["displayName"] == "job-3")
        .unwrap();
    assert_eq!(found["name"], created[1]);
    assert!(all.get("nextPageToken").is_none());

    let bad = api
        .get("/v1beta/batches?pageToken=garbage")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    emu.shutdown().await;
}

#[tokio::test]
async fn cancel_ends_a_batch_once() {
    let mut cfg = config(FaultPlan::default());
    cfg.timing.pending = std::time::Duration::from_secs(30);
    let (emu, api) = start(cfg).await;
    let name = api
        .submit("to-cancel", &[line("c1", "x"), line("c2", "y")])
        .await;
    let response = api
        .post(&format!("/v1beta/{name}:cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    let op = api.operation(&name).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_CANCELLED");
    assert_eq!(op["done"], true);
    assert_eq!(op["error"]["code"], 1);
    assert!(op.get("response").is_none());
    assert!(op["metadata"]["endTime"].is_string());

    // Cancelling again changes nothing.
    let again = api
        .post(&format!("/v1beta/{name}:cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(api.operation(&name).await, op);

    let unknown = api
        .post("/v1beta/batches/nope:cancel")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let stats = emu.stats();
    assert_eq!(stats.last_outcome("c1"), Some(Outcome::JobCancelled));
    emu.shutdown().await;
}

#[tokio::test]
async fn an_upload_session_is_authorized_by_its_url_not_the_key() {
    // Invariant: as with the provider, the upload URL (its upload_id) is the
    // credential of a session; the SDKs send no key there. An unknown
    // session is not found, with or without a key.
    let (emu, api) = start(config(FaultPlan::default())).await;
    let bytes = jsonl(&[line("a", "x")]);
    let url = api.start_upload("no-key", bytes.len()).await;
    assert!(url.contains("/upload/v1beta/files?upload_id="));
    let start = api
        .post("/upload/v1/files")
        .header("X-Goog-Upload-Protocol", "resumable")
        .header("X-Goog-Upload-Command", "start")
        .header("X-Goog-Upload-Header-Content-Length", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        start.headers()["x-goog-upload-control-url"],
        start.headers()["x-goog-upload-url"]
    );
    // As the SDKs send it: no key on the session's calls.
    let finalize_keyless = |url: String| {
        api.http
            .post(url)
            .header("X-Goog-Upload-Command", "upload, finalize")
            .header("X-Goog-Upload-Offset", "0")
            .body(bytes.clone())
            .send()
    };
    let response = finalize_keyless(url.clone()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-goog-upload-status"], "final");
    let unknown = finalize_keyless(format!("{}/upload/v1/files?upload_id=nope", emu.base_url()))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_deleted_batch_is_gone_from_get_and_list_but_runs_on() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let name = api.submit("to-delete", &[line("a", "x")]).await;
    let url = format!("{}/v1/{name}", emu.base_url());
    let deleted = api
        .http
        .delete(&url)
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let get = api.get(&format!("/v1/{name}")).send().await.unwrap();
    assert_eq!(get.status(), 404);
    let list: Value = api
        .get("/v1/batches")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list.get("operations").is_none_or(|ops| {
        ops.as_array()
            .unwrap()
            .iter()
            .all(|op| op["name"] != name.as_str())
    }));
    let again = api
        .http
        .delete(&url)
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404, "deleting twice finds nothing");
    // Deleting is not cancelling: the row was still processed (and billed).
    eventually("the deleted batch to finish", || async {
        (emu.stats().submissions["a"][0].outcome == gemini_emulator::Outcome::Success).then_some(())
    })
    .await;
    assert_eq!(emu.stats().batches_deleted, 1);
    emu.shutdown().await;
}

// Invariant: every call to the API is counted in `requests`, answered or
// refused (a missing key's 403, a wrong key's 400, a path the API has
// not), so a test can bound every call a client made; the emulator's own
// endpoints are not counted.
#[tokio::test]
async fn every_call_is_counted_refused_ones_too() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let url = format!("{}/v1beta/batches", emu.base_url());
    let status = |r: reqwest::Response| r.status().as_u16();
    let none = status(api.http.get(&url).send().await.unwrap());
    let wrong = api.http.get(&url).header("x-goog-api-key", "nope");
    let wrong = status(wrong.send().await.unwrap());
    let ok = api.http.get(&url).header("x-goog-api-key", KEY);
    let ok = status(ok.send().await.unwrap());
    let unknown = api.http.get(format!("{}/v9/batches", emu.base_url()));
    let unknown = status(unknown.send().await.unwrap());
    let own = format!("{}/_emulator/stats", emu.base_url());
    api.http.get(own).send().await.unwrap();
    assert_eq!((none, wrong, ok, unknown), (403, 400, 200, 404));
    let stats = emu.stats();
    assert_eq!((stats.requests.total, stats.requests.refused), (4, 3));
    assert_eq!(stats.requests.with_status(403), 1);
    assert_eq!(stats.requests.with_status(404), 1);
    emu.shutdown().await;
}

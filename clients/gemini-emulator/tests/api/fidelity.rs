//! What the provider does that it never promised one way: list order, a
//! model the project cannot batch, refusals of any status, a GET that
//! answers 404 for a batch that exists. Each is an option or a fault, the
//! documented behaviour (where there is one) the default.

use gemini_emulator::{ListOrder, Models};
use serde_json::{Value, json};

use crate::common::{Api, config, line, plan, start};

/// Every batch name the list shows, following `nextPageToken` with pages
/// of `size`.
async fn list_all(api: &Api, size: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let mut req = api.get(&format!("/v1beta/batches?pageSize={size}"));
        if !token.is_empty() {
            req = req.query(&[("pageToken", token.as_str())]);
        }
        let page: Value = req.send().await.unwrap().json().await.unwrap();
        for op in page["operations"].as_array().into_iter().flatten() {
            names.push(op["name"].as_str().unwrap().to_owned());
        }
        match page["nextPageToken"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_owned(),
            _ => return names,
        }
    }
}

// Invariant: whatever `list_order`, walking every page lists each batch
// exactly once; oldest first lists them in creation order.
#[tokio::test]
async fn every_list_order_lists_every_batch_once() {
    for order in [
        ListOrder::NewestFirst,
        ListOrder::OldestFirst,
        ListOrder::Shuffled,
    ] {
        let mut faults = plan(json!({}));
        faults.list_order = order;
        let (emu, api) = start(config(faults)).await;
        let mut made = Vec::new();
        for i in 0..7 {
            made.push(api.submit(&format!("b{i}"), &[line("k", "q")]).await);
        }
        let listed = list_all(&api, 3).await;
        let mut sorted = listed.clone();
        sorted.sort();
        let mut expected = made.clone();
        expected.sort();
        assert_eq!(sorted, expected, "{order:?}: each batch once");
        match order {
            ListOrder::OldestFirst => assert_eq!(listed, made),
            ListOrder::NewestFirst => {
                assert_eq!(listed, made.iter().rev().cloned().collect::<Vec<_>>());
            }
            ListOrder::Shuffled => {}
        }
        emu.shutdown().await;
    }
}

// Invariant: a create for a model the project cannot batch is refused with
// the provider's 404 text (naming the API version asked), and makes
// nothing; `Models::Any` accepts it.
#[tokio::test]
async fn an_unknown_model_is_the_providers_404() {
    let (emu, api) = start(config(plan(json!({})))).await;
    let file = api
        .upload("m", &crate::common::jsonl(&[line("k", "q")]))
        .await;
    for version in ["v1beta", "v1"] {
        let response = api
            .post(&format!(
                "/{version}/models/gemini-2.5-flahs:batchGenerateContent"
            ))
            .json(&json!({"batch": {"inputConfig": {"fileName": file["name"]}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "models/gemini-2.5-flahs is not found for API version {version}, or is not supported for batchGenerateContent"
            )),
            "{message}"
        );
    }
    assert_eq!(emu.stats().batches_created, 0);
    emu.shutdown().await;

    let mut any = config(plan(json!({})));
    any.models = Models::Any;
    let (emu, api) = start(any).await;
    let file = api
        .upload("m", &crate::common::jsonl(&[line("k", "q")]))
        .await;
    let response = api
        .post("/v1beta/models/my-own-model:batchGenerateContent")
        .json(&json!({"batch": {"inputConfig": {"fileName": file["name"]}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    emu.shutdown().await;
}

// Invariant: the refusal fault answers its status and words `times` times
// and makes nothing; then creates succeed.
#[tokio::test]
async fn a_refusal_fault_answers_any_status_and_makes_nothing() {
    let (emu, api) = start(config(plan(json!({
        "create_refusal": {"code": 401, "status": "UNAUTHENTICATED",
                            "message": "Request had invalid authentication credentials.", "times": 2}
    }))))
    .await;
    let file = api
        .upload("r", &crate::common::jsonl(&[line("k", "q")]))
        .await;
    let name = file["name"].as_str().unwrap();
    for _ in 0..2 {
        let response = api.create_raw("r", name).await;
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(
            body["error"]["message"],
            "Request had invalid authentication credentials."
        );
    }
    assert_eq!(emu.stats().batches_created, 0);
    api.create("r", name).await;
    assert_eq!(emu.stats().batches_created, 1);
    emu.shutdown().await;
}

// Invariant: the get_not_found fault answers 404 for a batch that exists
// `times` times, then GET finds it again.
#[tokio::test]
async fn a_get_can_answer_404_for_a_batch_that_exists() {
    let (emu, api) = start(config(plan(json!({"get_not_found": {"times": 2}})))).await;
    let name = api.submit("g", &[line("k", "q")]).await;
    for _ in 0..2 {
        let response = api.get(&format!("/v1beta/{name}")).send().await.unwrap();
        assert_eq!(response.status(), 404);
    }
    api.operation(&name).await;
    emu.shutdown().await;
}

// Invariant: uploads count against the project's storage quota while they
// live; one that would pass it answers 429 naming FileStorageBytesPerProject,
// and deleting a file makes room again.
#[tokio::test]
async fn uploads_stay_under_the_storage_quota() {
    let mut cfg = config(plan(json!({})));
    cfg.file_storage_bytes = 100;
    let (emu, api) = start(cfg).await;
    let first = api.upload("a", &[b'x'; 60]).await;
    let refused = api
        .post("/upload/v1beta/files")
        .header("X-Goog-Upload-Protocol", "resumable")
        .header("X-Goog-Upload-Command", "start")
        .header("X-Goog-Upload-Header-Content-Length", "41")
        .json(&json!({"file": {"display_name": "b"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"]["details"][0]["violations"][0]["quotaId"],
        "FileStorageBytesPerProject"
    );
    api.upload("c", &[b'x'; 40]).await;
    let id = first["name"].as_str().unwrap().trim_start_matches("files/");
    let deleted = api
        .http
        .delete(format!("{}/v1beta/files/{id}", api.base))
        .header("x-goog-api-key", crate::common::KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    api.upload("d", &[b'x'; 41]).await;
    emu.shutdown().await;
}

// Invariant: the upload_refusal fault refuses the start of `times`
// uploads with its status (a 403 PERMISSION_DENIED in Google's words by
// default) and stores nothing; then uploads succeed. Every refused call
// shows in `requests`.
#[tokio::test]
async fn an_upload_refusal_answers_403_and_stores_nothing() {
    let (emu, api) = start(config(plan(
        json!({"upload_refusal": {"code": 403, "times": 2}}),
    )))
    .await;
    let start = || {
        api.post("/upload/v1beta/files")
            .header("X-Goog-Upload-Protocol", "resumable")
            .header("X-Goog-Upload-Command", "start")
            .header("X-Goog-Upload-Header-Content-Length", "3")
            .header("X-Goog-Upload-Header-Content-Type", "image/png")
            .json(&json!({"file": {"display_name": "page"}}))
    };
    for _ in 0..2 {
        let refused = start().send().await.unwrap();
        assert_eq!(refused.status(), 403);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(
            body["error"]["message"],
            "The caller does not have permission"
        );
    }
    let stats = emu.stats();
    assert_eq!((stats.uploads, stats.upload_rejections), (0, 2));
    assert_eq!(stats.requests.with_status(403), 2);
    api.upload("page", b"png").await;
    assert_eq!(emu.stats().uploads, 1);
    let bad = plan(json!({"upload_refusal": {"code": 200}}));
    let refused = gemini_emulator::faults::Faults::compile(bad).unwrap_err();
    assert!(
        refused.to_string().starts_with("upload_refusal:"),
        "{refused}"
    );
    emu.shutdown().await;
}

//! Each fault of the plan, over HTTP.

use openai_emulator::{FaultPlan, Outcome};
use serde_json::{Value, json};

use crate::common::*;

// Invariant: row faults shape each row's line as written: http errors and
// line errors go to the error file, finish reasons and refusals to the
// output file, a missing row to neither; `times` wears a fault out.
#[tokio::test]
async fn row_faults_shape_each_line() {
    let (emu, api) = start(config(plan(json!({"rows": [
        {"match": {"custom_id": "h"}, "fault": {"kind": "http_error", "status": 500, "code": "server_error"}, "times": 1},
        {"match": {"custom_id_prefix": "lerr"}, "fault": {"kind": "line_error", "code": "invalid_request", "message": "bad"}},
        {"match": {"custom_id_regex": "^len$"}, "fault": {"kind": "length"}},
        {"match": {"prompt_contains": "filthy"}, "fault": {"kind": "content_filter"}},
        {"match": {"custom_id": "ref"}, "fault": {"kind": "refusal"}},
        {"match": {"custom_id": "inv"}, "fault": {"kind": "invalid_json"}},
        {"match": {"custom_id": "miss"}, "fault": {"kind": "missing"}}
    ]})))).await;
    let ids = ["h", "lerr1", "len", "cf", "ref", "inv", "miss", "ok"];
    let lines: Vec<Value> = ids
        .iter()
        .map(|id| {
            line(
                id,
                if *id == "cf" {
                    "filthy words"
                } else {
                    "a prompt"
                },
            )
        })
        .collect();
    let b = api.finished(&api.batch(&lines).await).await;
    assert_eq!(
        b["request_counts"],
        json!({"total": 8, "completed": 5, "failed": 2})
    );
    let out = api.lines_of(&b, "output_file_id").await;
    let err = api.lines_of(&b, "error_file_id").await;
    let find = |lines: &[Value], id: &str| lines.iter().find(|l| l["custom_id"] == id).cloned();
    assert_eq!(find(&err, "h").unwrap()["response"]["status_code"], 500);
    assert_eq!(
        find(&err, "lerr1").unwrap()["error"]["code"],
        "invalid_request"
    );
    let choice = |id: &str| find(&out, id).unwrap()["response"]["body"]["choices"][0].clone();
    assert_eq!(choice("len")["finish_reason"], "length");
    assert_eq!(choice("cf")["finish_reason"], "content_filter");
    assert!(choice("ref")["message"]["refusal"].is_string());
    assert!(
        serde_json::from_str::<Value>(choice("inv")["message"]["content"].as_str().unwrap())
            .is_err()
    );
    assert!(find(&out, "miss").is_none() && find(&err, "miss").is_none());
    assert_eq!(emu.stats().last_outcome("miss"), Some(Outcome::Missing));
    // Second time round, the `times: 1` fault is spent.
    let b = api.finished(&api.batch(&[line("h", "again")]).await).await;
    assert_eq!(b["request_counts"]["completed"], 1);
    emu.shutdown().await;
}

// Invariant: an expired batch names a partial output file with its first
// `answered` rows and `batch_expired` lines for every other row.
#[tokio::test]
async fn expired_batches_answer_some_rows() {
    let (emu, api) = start(config(plan(json!({"batches": [{"match": {"metadata_contains": {"job": "x"}}, "fault": {"kind": "expired", "answered": 1}}]})))).await;
    let file = api
        .upload(
            "in.jsonl",
            jsonl(&[line("a", "x"), line("b", "y"), line("c", "z")]),
        )
        .await;
    let (_, created) = api.create(&file, json!({"job": "x"})).await;
    let b = api.finished(created["id"].as_str().unwrap()).await;
    assert_eq!(b["status"], "expired");
    assert!(b["expired_at"].is_i64());
    assert_eq!(api.lines_of(&b, "output_file_id").await.len(), 1);
    let err = api.lines_of(&b, "error_file_id").await;
    assert_eq!(err.len(), 2);
    assert!(
        err.iter()
            .all(|l| l["error"]["code"] == "batch_expired" && l["response"].is_null())
    );
    assert_eq!(emu.stats().last_outcome("c"), Some(Outcome::Expired));
    emu.shutdown().await;
}

// Invariant: `failed` and `token_limit_exceeded` fail the batch at
// validation with their errors; the enqueued-token limit does the same
// for a batch that does not fit beside the model's running ones.
#[tokio::test]
async fn batch_failures_name_their_errors() {
    let (emu, api) = start(config(plan(json!({
        "batches": [
            {"match": {"nth": 1}, "fault": {"kind": "failed", "errors": [{"code": "invalid_request", "message": "no", "line": 1}]}},
            {"match": {"nth": 2}, "fault": {"kind": "token_limit_exceeded"}},
            {"match": {"nth": 3}, "fault": {"kind": "stays_in_progress"}}
        ],
        "enqueued_tokens": 20
    })))).await;
    let b = api.finished(&api.batch(&[line("a", "x")]).await).await;
    assert_eq!(b["errors"]["data"][0]["code"], "invalid_request");
    let b = api.finished(&api.batch(&[line("b", "x")]).await).await;
    assert_eq!(b["errors"]["data"][0]["code"], "token_limit_exceeded");
    let held = api
        .batch(&[line(
            "c",
            "one two three four five six seven eight nine ten",
        )])
        .await;
    eventually("in progress", || async {
        (api.get(&format!("/batches/{held}")).await.1["status"] == "in_progress").then_some(())
    })
    .await;
    let b = api
        .finished(
            &api.batch(&[line(
                "d",
                "one two three four five six seven eight nine ten",
            )])
            .await,
        )
        .await;
    assert_eq!(b["status"], "failed");
    assert_eq!(b["errors"]["data"][0]["code"], "token_limit_exceeded");
    let stats = emu.stats();
    assert_eq!(stats.token_limit_failures, 2);
    assert_eq!(stats.batches_failed, 3);
    emu.shutdown().await;
}

// Invariant: create refusals are 429s in the API's shape: rate limits with
// `retry-after`, insufficient_quota with its code; they make no batch.
#[tokio::test]
async fn create_refusals() {
    let (emu, api) = start(config(plan(
        json!({"rate_limit": {"times": 1, "retry_after_secs": 7}}),
    )))
    .await;
    let file = api.upload("in.jsonl", jsonl(&[line("a", "x")])).await;
    let body = json!({"input_file_id": file, "endpoint": CHAT, "completion_window": "24h"});
    let resp = api
        .http
        .post(format!("{}/batches", api.base))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "rate_limit_exceeded");
    assert_eq!(api.create(&file, Value::Null).await.0, 200);
    emu.set_faults(plan(json!({"insufficient_quota": {}})))
        .unwrap();
    let (status, err) = api.create(&file, Value::Null).await;
    assert_eq!(
        (status, err["error"]["code"].clone()),
        (429, json!("insufficient_quota"))
    );
    let stats = emu.stats();
    assert_eq!((stats.create_rejections, stats.batches_created), (2, 1));
    emu.shutdown().await;
}

// Invariant: an upload refused by the plan, for its size or for a full
// storage answers in the API's error shape and stores nothing; the
// storage counts the files still stored, so deleting one makes room; a
// call without `/v1` is a counted 404.
#[tokio::test]
async fn upload_refusals_store_nothing() {
    let (emu, api) = start(config(plan(json!({"upload_refused": {"times": 1}})))).await;
    let small = jsonl(&[line("a", "x")]);
    let (status, err) = api.try_upload("in.jsonl", small.clone()).await;
    assert_eq!(status, 403, "{err}");
    assert_eq!(err["error"]["type"], "request_forbidden");
    assert_eq!(err["error"]["code"], "unsupported_country_region_territory");
    let kept = api.upload("in.jsonl", small.clone()).await;
    let room = 2 * small.len() as u64 - 1;
    emu.set_faults(plan(
        json!({"storage_limit_bytes": room, "upload_max_bytes": room}),
    ))
    .unwrap();
    let (status, err) = api.try_upload("in.jsonl", small.clone()).await;
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exceeded your file storage quota"),
        "{message}"
    );
    let (status, err) = api
        .try_upload("big.jsonl", vec![b'x'; room as usize + 1])
        .await;
    let too_large = format!("File is too large. The maximum file size is {room} bytes.");
    assert_eq!(
        (status, err["error"]["message"].as_str().unwrap()),
        (413, too_large.as_str())
    );
    let (status, _) = api
        .call(api.http.delete(format!("{}/files/{kept}", api.base)))
        .await;
    assert_eq!(status, 200);
    api.upload("in.jsonl", small).await;
    let stats = emu.stats();
    assert_eq!((stats.uploads, stats.upload_rejections), (2, 3));
    let (_, files) = api.get("/files").await;
    assert_eq!(files["data"].as_array().unwrap().len(), 1);
    let unversioned = api.http.post(format!("{}/files", emu.base_url()));
    let (status, err) = api.call(unversioned).await;
    assert_eq!(status, 404, "a base URL without /v1: {err}");
    assert_eq!(emu.stats().unknown_routes, 1);
    emu.shutdown().await;
}

// Invariant: an input file of purpose `batch` expires 30 days after its
// upload; a create's `output_expires_after` sets its output file's
// `expires_at`; once an output file has expired, its metadata, content
// and delete answer 404 and lists leave it out, while the batch still
// names it.
#[tokio::test]
async fn output_files_expire_then_answer_404() {
    let (emu, api) = start(config(FaultPlan::default())).await;
    let input = api.upload("in.jsonl", jsonl(&[line("a", "x")])).await;
    let (_, meta) = api.get(&format!("/files/{input}")).await;
    assert_eq!(
        meta["expires_at"].as_i64().unwrap() - meta["created_at"].as_i64().unwrap(),
        30 * 24 * 3600
    );
    let body = json!({"input_file_id": input, "endpoint": CHAT, "completion_window": "24h",
        "output_expires_after": {"anchor": "created_at", "seconds": 3600}});
    let (status, created) = api
        .call(api.http.post(format!("{}/batches", api.base)).json(&body))
        .await;
    assert_eq!(status, 200, "{created}");
    let done = api.finished(created["id"].as_str().unwrap()).await;
    let output = done["output_file_id"].as_str().unwrap().to_owned();
    let (_, meta) = api.get(&format!("/files/{output}")).await;
    assert_eq!(
        meta["expires_at"].as_i64().unwrap() - meta["created_at"].as_i64().unwrap(),
        3600
    );
    let mut short = body.clone();
    short["output_expires_after"]["seconds"] = json!(60);
    let (status, _) = api
        .call(api.http.post(format!("{}/batches", api.base)).json(&short))
        .await;
    assert_eq!(status, 400, "under the API's hour");

    emu.set_faults(plan(json!({"output_expiry_ms": 200})))
        .unwrap();
    let done = api.finished(&api.batch(&[line("b", "y")]).await).await;
    let output = done["output_file_id"].as_str().unwrap().to_owned();
    eventually("the output file expires", || async {
        (api.get(&format!("/files/{output}")).await.0 == 404).then_some(())
    })
    .await;
    let content = api
        .http
        .get(format!("{}/files/{output}/content", api.base))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(content.status(), 404);
    let (_, files) = api.get("/files?purpose=batch_output").await;
    assert!(
        files["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["id"] != output.as_str()),
        "{files}"
    );
    let (_, batch) = api
        .get(&format!("/batches/{}", done["id"].as_str().unwrap()))
        .await;
    assert_eq!(batch["output_file_id"], output.as_str());
    emu.shutdown().await;
}

// Invariant: a lost create answer still makes the batch (found by list);
// both modes (500, dropped connection) count.
#[tokio::test]
async fn lost_create_answers_still_make_batches() {
    let (emu, api) = start(config(plan(json!({"create_answer_lost": {"times": 1}})))).await;
    let file = api.upload("in.jsonl", jsonl(&[line("a", "x")])).await;
    assert_eq!(api.create(&file, json!({"tag": "t1"})).await.0, 500);
    emu.set_faults(plan(json!({"create_answer_lost": {"mode": "drop"}})))
        .unwrap();
    let body = json!({"input_file_id": file, "endpoint": CHAT, "completion_window": "24h"});
    let sent = api
        .http
        .post(format!("{}/batches", api.base))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await;
    let read = match sent {
        Ok(resp) => resp.json::<Value>().await.is_ok(),
        Err(_) => false,
    };
    assert!(!read, "the answer must not be readable");
    let (_, list) = api.get("/batches").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    assert_eq!(list["data"][1]["metadata"]["tag"], "t1");
    assert_eq!(emu.stats().create_answers_lost, 2);
    emu.shutdown().await;
}

// Invariant: get_not_found answers 404 once for a batch that exists, then
// the truth; list lag hides a new batch from lists, not from GET.
#[tokio::test]
async fn get_404_once_and_list_lag() {
    let (emu, api) = start(config(plan(
        json!({"get_not_found": {"times": 1}, "list_lag_ms": 60000}),
    )))
    .await;
    let id = api.batch(&[line("a", "x")]).await;
    assert_eq!(api.get(&format!("/batches/{id}")).await.0, 404);
    assert_eq!(api.get(&format!("/batches/{id}")).await.0, 200);
    let (_, list) = api.get("/batches").await;
    assert!(list["data"].as_array().unwrap().is_empty());
    assert_eq!(emu.stats().gets_not_found, 1);
    emu.shutdown().await;
}

// Invariant: the list order options hold (oldest first, shuffled is a
// permutation stable across calls).
#[tokio::test]
async fn list_orders() {
    let (emu, api) = start(config(plan(json!({"list_order": "oldest_first"})))).await;
    let mut made = Vec::new();
    for i in 0..4 {
        made.push(api.batch(&[line(&format!("r{i}"), "x")]).await);
    }
    let ids = |v: Value| {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(api.get("/batches").await.1), made);
    emu.set_faults(plan(json!({"list_order": "shuffled"})))
        .unwrap();
    let a = ids(api.get("/batches").await.1);
    assert_eq!(a, ids(api.get("/batches").await.1));
    let mut sorted = a.clone();
    sorted.sort();
    let mut expect = made.clone();
    expect.sort();
    assert_eq!(sorted, expect);
    emu.shutdown().await;
}

// Invariant: cancel moves a running batch through cancelling to cancelled
// with `batch_cancelled` lines; cancelling a finished batch answers what
// the plan says (409 by default, or the batch unchanged).
#[tokio::test]
async fn cancel_paths() {
    let (emu, api) = start(config(plan(
        json!({"batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}]}),
    )))
    .await;
    let id = api.batch(&[line("a", "x"), line("b", "y")]).await;
    eventually("in progress", || async {
        (api.get(&format!("/batches/{id}")).await.1["status"] == "in_progress").then_some(())
    })
    .await;
    let (status, b) = api
        .call(api.http.post(format!("{}/batches/{id}/cancel", api.base)))
        .await;
    assert_eq!((status, b["status"].clone()), (200, json!("cancelling")));
    let b = api.finished(&id).await;
    assert_eq!(b["status"], "cancelled");
    let err = api.lines_of(&b, "error_file_id").await;
    assert!(err.iter().all(|l| l["error"]["code"] == "batch_cancelled"));
    assert_eq!(emu.stats().batches_cancelled, 1);
    let (status, _) = api
        .call(api.http.post(format!("{}/batches/{id}/cancel", api.base)))
        .await;
    assert_eq!(status, 409);
    emu.set_faults(plan(json!({"cancel_finished": "unchanged"})))
        .unwrap();
    let (status, b) = api
        .call(api.http.post(format!("{}/batches/{id}/cancel", api.base)))
        .await;
    assert_eq!((status, b["status"].clone()), (200, json!("cancelled")));
    let _ = FaultPlan::default();
    emu.shutdown().await;
}

// Invariant: a batch's `request_counts` move while it is in progress, as
// the API's Batch object reports them: its requests are answered one by
// one over the in-progress time (the last at its end), so `completed` and
// `failed` only grow and `total` stays; a batch held in progress shows
// all but one answered (deterministically, whenever it is read); a cancel
// keeps the requests answered and fails the rest.
#[tokio::test]
async fn request_counts_move_while_in_progress() {
    let (emu, api) = start(config(plan(json!({
        "batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}],
        "rows": [{"match": {"custom_id": "b"}, "fault": {"kind": "http_error", "status": 500}}]
    }))))
    .await;
    let lines = [
        line("a", "w"),
        line("b", "x"),
        line("c", "y"),
        line("d", "z"),
    ];
    let id = api.batch(&lines).await;
    let mut seen: Vec<(u64, u64, u64)> = Vec::new();
    let counts = |b: &Value| {
        let c = &b["request_counts"];
        let n = |k: &str| c[k].as_u64().unwrap();
        (n("total"), n("completed"), n("failed"))
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let held = loop {
        assert!(tokio::time::Instant::now() < deadline, "{seen:?}");
        let (_, b) = api.get(&format!("/batches/{id}")).await;
        if b["status"] == "in_progress" {
            seen.push(counts(&b));
            if counts(&b).1 + counts(&b).2 == 3 {
                break b;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    assert!(
        seen.windows(2)
            .all(|w| w[0].0 == w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2),
        "in progress, counts only grow and the total stays: {seen:?}"
    );
    assert_eq!(
        counts(&held),
        (4, 2, 1),
        "a and c completed, b failed, d left"
    );
    let (_, again) = api.get(&format!("/batches/{id}")).await;
    assert_eq!(
        counts(&again),
        (4, 2, 1),
        "held in progress, the counts hold"
    );
    api.call(api.http.post(format!("{}/batches/{id}/cancel", api.base)))
        .await;
    let done = api.finished(&id).await;
    assert_eq!(done["status"], "cancelled");
    assert_eq!(counts(&done), (4, 2, 2), "d never ran: batch_cancelled");
    let stats = emu.stats();
    assert_eq!(stats.last_outcome("a"), Some(Outcome::Success));
    assert_eq!(stats.last_outcome("d"), Some(Outcome::Cancelled));
    emu.shutdown().await;
}

//! Formats in and out, end to end: an OpenAI batch input file is enrolled
//! with the real `tallyctl`, run by the real worker (in process) against the
//! Gemini emulator, and exported in every format by the real `tallyctl`;
//! each export must hold every `custom_id` exactly once.
//!
//! `TALLY_FORMATS_E2E_ROWS` sets the file's size (default 1,500; the
//! issue's 10,000-line round trip is this test with 10000).

use gemini_emulator::{Emulator, EmulatorConfig, Timing};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::RowAccessor as _;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

fn rows_wanted() -> usize {
    std::env::var("TALLY_FORMATS_E2E_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

async fn tallyctl(server: &str, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tallyctl"));
    cmd.arg("--server").arg(server).args(args);
    for var in ["TALLY_SERVER", "TALLY_TOKEN", "TALLY_TLS_CA"] {
        cmd.env_remove(var);
    }
    cmd.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("tallyctl {args:?} did not finish within 300s"))
        .expect("tallyctl runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn ok(server: &str, args: &[&str]) -> Output {
    let out = tallyctl(server, args).await;
    assert!(
        out.status.success(),
        "tallyctl {args:?} failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Line `i` of the OpenAI batch file: every third asks for JSON, the rest
/// for text; all name an OpenAI model (dropped for the ledger's).
fn openai_line(i: usize) -> String {
    let mut body = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": format!("Summarize item {i}")},
        ],
        "max_tokens": 100,
    });
    if i.is_multiple_of(3) {
        body["response_format"] = json!({"type": "json_object"});
    }
    json!({"custom_id": format!("req-{i:05}"), "method": "POST", "url": "/v1/chat/completions", "body": body})
        .to_string()
}

/// Counts of each key in a list.
fn counts(keys: impl IntoIterator<Item = String>) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for k in keys {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

fn assert_each_once(what: &str, got: HashMap<String, usize>, n: usize) {
    assert_eq!(got.len(), n, "{what}: every custom_id is present");
    for i in 0..n {
        let k = format!("req-{i:05}");
        assert_eq!(got.get(&k), Some(&1), "{what}: {k} exactly once");
    }
}

fn jsonl_keys(path: &Path, field: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("one JSON object per line");
            assert!(v.get(field).is_some(), "{l}");
            v
        })
        .collect()
}

/// The round trip: OpenAI batch input → enroll (with a duplicate custom_id
/// reported, not merged) → run → export as OpenAI output, JSONL, CSV and
/// Parquet, each holding every custom_id exactly once; `--after` continues
/// exactly after a page; a failing export writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_batch_round_trip_in_every_format() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n = rows_wanted();
    let db = tally_pg::TestDb::new().await;
    let server = tally_server::startup::server::start(tally_server::config::ServeArgs::for_tests(
        db.url().to_string(),
    ))
    .await
    .expect("server starts");
    let grpc = format!("http://{}", server.grpc_addr);
    let emulator = Emulator::start(
        "127.0.0.1:0".parse().unwrap(),
        EmulatorConfig {
            timing: Timing::fast(),
            ..EmulatorConfig::default()
        },
    )
    .await
    .expect("emulator starts");
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name).to_str().unwrap().to_string();

    ok(
        &grpc,
        &["ledgers", "create", "fmt", "--model", "gemini-2.5-flash"],
    )
    .await;
    let mut lines: Vec<String> = (0..n).map(openai_line).collect();
    // A second request under an existing custom_id (line n + 1).
    lines.push(openai_line(7).replace("Summarize item 7", "Something else"));
    std::fs::write(d("in.jsonl"), lines.join("\n") + "\n").unwrap();

    let enrolled = ok(
        &grpc,
        &[
            "enroll",
            "fmt",
            &d("in.jsonl"),
            "--format",
            "openai",
            "--skip-bad-lines",
        ],
    )
    .await;
    let err = text(&enrolled.stderr);
    assert!(
        err.contains(&format!(
            "line {}: duplicate custom_id \"req-00007\" (first on line 8)",
            n + 1
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "note: {n} rows named a model that is not a Gemini model (\"gpt-4o-mini\" (line 1))"
        )),
        "{err}"
    );
    assert!(
        text(&enrolled.stdout).contains(&format!("enrolled {n},")),
        "{}",
        text(&enrolled.stdout)
    );

    let worker_args = <tally_worker::WorkerArgs as clap::Parser>::try_parse_from([
        "tally-worker",
        "--server",
        &grpc,
        "--ledger",
        "fmt",
        "--gemini-base-url",
        &emulator.base_url(),
        "--poll-interval",
        "200ms",
        "--worker-name",
        "formats-e2e",
        "--exit-when-idle",
    ])
    .unwrap();
    let key = tally_worker::ApiKey::new(emulator.api_key().to_string());
    tokio::time::timeout(
        Duration::from_secs(600),
        tally_worker::run_until(worker_args, key, std::future::pending::<()>()),
    )
    .await
    .expect("the worker finishes within 10 minutes")
    .expect("the worker ran");

    // OpenAI batch output: every custom_id once, each a chat.completion.
    ok(
        &grpc,
        &[
            "export",
            "fmt",
            "--format",
            "openai",
            "-o",
            &d("out.openai.jsonl"),
        ],
    )
    .await;
    let lines = jsonl_keys(Path::new(&d("out.openai.jsonl")), "custom_id");
    for v in &lines {
        assert!(v["error"].is_null(), "every row succeeded: {v}");
        let body = &v["response"]["body"];
        assert_eq!(body["object"], "chat.completion");
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(!content.is_empty(), "{v}");
        if v["custom_id"].as_str().unwrap().ends_with("00003") {
            // Asked for JSON: the content is the JSON the model wrote.
            serde_json::from_str::<Value>(content).expect("JSON content");
        }
        assert!(body["usage"]["prompt_tokens"].as_i64().unwrap() > 0);
    }
    assert_each_once(
        "openai",
        counts(
            lines
                .iter()
                .map(|v| v["custom_id"].as_str().unwrap().to_string()),
        ),
        n,
    );

    // JSONL, tally's shape.
    ok(&grpc, &["export", "fmt", "-o", &d("out.jsonl")]).await;
    let lines = jsonl_keys(Path::new(&d("out.jsonl")), "key");
    assert!(
        lines
            .iter()
            .all(|v| v["status"] == "SUCCEEDED" && !v["result"].is_null())
    );
    assert_each_once(
        "jsonl",
        counts(lines.iter().map(|v| v["key"].as_str().unwrap().to_string())),
        n,
    );

    // CSV parses, one record per row.
    ok(
        &grpc,
        &["export", "fmt", "--format", "csv", "-o", &d("out.csv")],
    )
    .await;
    let mut reader = csv::Reader::from_path(d("out.csv")).unwrap();
    assert_eq!(&reader.headers().unwrap()[0], "key");
    let keys: Vec<String> = reader
        .records()
        .map(|r| r.expect("a CSV record")[0].to_string())
        .collect();
    assert_each_once("csv", counts(keys), n);

    // Parquet reads back with the row count and the columns.
    ok(
        &grpc,
        &[
            "export",
            "fmt",
            "--format",
            "parquet",
            "-o",
            &d("out.parquet"),
        ],
    )
    .await;
    let reader = SerializedFileReader::new(std::fs::File::open(d("out.parquet")).unwrap()).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), n as i64);
    let schema = reader.metadata().file_metadata().schema_descr();
    let columns: Vec<&str> = schema.columns().iter().map(|c| c.name()).collect();
    for c in [
        "key",
        "status",
        "rule",
        "attempts_total",
        "input_tokens",
        "model",
        "result",
        "update_time",
    ] {
        assert!(columns.contains(&c), "parquet column {c} in {columns:?}");
    }
    let keys: Vec<String> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap().get_string(0).unwrap().clone())
        .collect();
    assert_each_once("parquet", counts(keys), n);

    // --after continues exactly after the cursor (a page token): the rows
    // before it plus the rows after it are every row once.
    let mut ledgers =
        tally_proto::v1::ledger_service_client::LedgerServiceClient::connect(grpc.clone())
            .await
            .unwrap();
    let first = ledgers
        .list_rows(tally_proto::v1::ListRowsRequest {
            parent: "ledgers/fmt".into(),
            filter: Some(Default::default()),
            page_size: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let rest = ok(
        &grpc,
        &[
            "export",
            "fmt",
            "--format",
            "openai",
            "--after",
            &first.next_page_token,
        ],
    )
    .await;
    let mut keys: Vec<String> = first.rows.iter().map(|r| r.key.clone()).collect();
    keys.extend(text(&rest.stdout).lines().map(|l| {
        serde_json::from_str::<Value>(l).unwrap()["custom_id"]
            .as_str()
            .unwrap()
            .to_string()
    }));
    assert_each_once("first page + --after", counts(keys), n);

    // Filters: no row is PERMANENT, so that export is empty.
    let none = ok(
        &grpc,
        &["export", "fmt", "--status", "permanent", "--format", "csv"],
    )
    .await;
    assert_eq!(text(&none.stdout).lines().count(), 1, "a header only");

    // A failing export (unknown ledger) exits 2 and creates no file.
    let failed = tallyctl(&grpc, &["export", "nope", "-o", &d("nope.jsonl")]).await;
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed.stderr));
    assert!(!Path::new(&d("nope.jsonl")).exists());

    emulator.shutdown().await;
    server.stop().await.expect("server stops");
}

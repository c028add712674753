//! The real `tallyctl` binary against a real tally server started in this
//! process on port 0, over a fresh database per test.
//!
//! Commands over JobService/OperationsService are checked "either way":
//! while the server answers UNIMPLEMENTED the test checks that tallyctl says
//! so with exit code 2; once it answers, the test checks the real behavior.

use serde_json::Value;
use sha2::Digest as _;
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;

struct Env {
    server: Option<tally_server::startup::server::Running>,
    url: String,
    dir: tempfile::TempDir,
    _db: tally_pg::TestDb,
}

impl Env {
    async fn start() -> Env {
        let db = tally_pg::TestDb::new().await;
        let server = tally_server::startup::server::start(
            tally_server::config::ServeArgs::for_tests(db.url().to_string()),
        )
        .await
        .expect("server starts");
        let url = format!("http://{}", server.grpc_addr);
        Env {
            server: Some(server),
            url,
            dir: tempfile::tempdir().unwrap(),
            _db: db,
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tallyctl"));
        cmd.arg("--server").arg(&self.url).args(args);
        isolate(&mut cmd, self.dir.path());
        cmd
    }

    /// Runs tallyctl to completion (bounded, so a hang fails the test).
    async fn run(&self, args: &[&str]) -> Run {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("tallyctl {args:?} did not finish within 60s"))
            .expect("tallyctl runs");
        Run::from(out)
    }

    async fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args).await;
        assert_eq!(
            r.code, 0,
            "tallyctl {args:?} failed:\n{}\n{}",
            r.stdout, r.stderr
        );
        r
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let r = self.ok(&all).await;
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("tallyctl {args:?} printed no JSON ({e}):\n{}", r.stdout))
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    async fn client(&self) -> LedgerServiceClient<tonic::transport::Channel> {
        LedgerServiceClient::connect(self.url.clone())
            .await
            .unwrap()
    }

    async fn stop(mut self) {
        self.server.take().unwrap().stop().await.unwrap();
    }
}

/// No setting from the developer's environment or config file reaches the
/// tallyctl under test: the variables are removed and the config file is
/// looked for under `dir`.
fn isolate(cmd: &mut tokio::process::Command, dir: &Path) {
    for var in [
        "TALLY_SERVER",
        "TALLY_TOKEN",
        "TALLY_TOKEN_FILE",
        "TALLY_TLS_CA",
        "TALLY_TLS_CERT",
        "TALLY_TLS_KEY",
        "TALLY_TLS_DOMAIN",
        "TALLY_TIMEOUT",
        "TALLYCTL_CONFIG",
        "TALLYCTL_PROFILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("XDG_CONFIG_HOME", dir.join("xdg"));
    cmd.kill_on_drop(true);
}

/// tallyctl with exactly these arguments and variables (no --server).
async fn tallyctl_bare(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tallyctl"));
    cmd.args(args);
    isolate(&mut cmd, dir);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("tallyctl {args:?} did not finish within 60s"))
        .expect("tallyctl runs");
    Run::from(out)
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Claims every runnable row of a ledger and reports each as the closure
/// says: `Ok(result)` or `Err(http code)`.
async fn work(env: &Env, ledger: &str, outcome: impl Fn(&str) -> Result<String, i32>) -> usize {
    let mut client = env.client().await;
    let resp = client
        .claim_rows(pb::ClaimRowsRequest {
            parent: format!("ledgers/{ledger}"),
            max_rows: 1000,
            worker: "test-worker".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let Some(claim) = resp.claim else { return 0 };
    let outcomes = resp
        .rows
        .iter()
        .map(|r| pb::RowOutcome {
            key: r.key.clone(),
            usage: Some(pb::Usage {
                input_tokens: 100,
                output_tokens: 10,
                ..Default::default()
            }),
            outcome: Some(match outcome(&r.key) {
                Ok(result) => pb::row_outcome::Outcome::Result(result),
                Err(code) => pb::row_outcome::Outcome::Failure(pb::Failure {
                    kind: pb::FailureKind::ProviderError as i32,
                    http_code: code,
                    status: "INVALID_ARGUMENT".into(),
                    message: "the request is malformed".into(),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        })
        .collect();
    client
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claim.name,
            outcomes,
            claim_next: None,
        })
        .await
        .unwrap();
    resp.rows.len()
}

fn is_unimplemented(r: &Run) -> bool {
    r.code == 2 && r.stderr.contains("UNIMPLEMENTED")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_enroll_status_rows_and_redrive() {
    let env = Env::start().await;

    // Ledgers.
    let created = env
        .json(&[
            "ledgers",
            "create",
            "reviews",
            "--content-budget",
            "2",
            "--lease",
            "45m",
            "--price",
            "gemini-flash-latest=0.3,2.5",
        ])
        .await;
    assert_eq!(created["name"], "ledgers/reviews");
    assert_eq!(created["policy"]["budgets"]["content"], 2);
    assert_eq!(created["policy"]["lease"], "45m");
    let listed = env.ok(&["ledgers", "list"]).await;
    assert!(listed.stdout.starts_with("LEDGER"), "{}", listed.stdout);
    assert!(listed.stdout.contains("reviews"));
    let updated = env
        .json(&["ledgers", "update", "reviews", "--provider-budget", "3"])
        .await;
    assert_eq!(updated["policy"]["budgets"]["provider"], 3);
    assert_eq!(
        updated["policy"]["budgets"]["content"], 2,
        "only the named field changes"
    );
    let got = env.ok(&["ledgers", "get", "ledgers/reviews"]).await;
    assert!(
        got.stdout.contains("provider=3 content=2"),
        "{}",
        got.stdout
    );
    assert!(got.stdout.contains("result cache"), "{}", got.stdout);
    // The result cache: on with an age and a scope, shown, then off.
    let cached = env
        .json(&[
            "ledgers",
            "update",
            "reviews",
            "--result-cache",
            "7d",
            "--result-cache-scope",
            "shared",
        ])
        .await;
    assert_eq!(cached["policy"]["result_cache"]["max_age"], "7days");
    assert_eq!(cached["policy"]["result_cache"]["scope"], "SHARED");
    let got = env.ok(&["ledgers", "get", "reviews"]).await;
    assert!(got.stdout.contains("shared"), "{}", got.stdout);
    let bad = env
        .run(&[
            "ledgers",
            "update",
            "reviews",
            "--result-cache",
            "7d",
            "--result-cache-scope",
            "world",
        ])
        .await;
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    let off = env
        .json(&["ledgers", "update", "reviews", "--result-cache", "off"])
        .await;
    assert!(off["policy"]["result_cache"].is_null(), "{off}");

    // A bad line stops the enroll: the lines before it are sent, none after.
    let bad = env.file(
        "bad.jsonl",
        concat!(
            "{\"key\": \"r1\", \"payload\": {\"text\": \"great\"}}\n",
            "{\"key\": \"r2\", \"payload\": {\"text\": \"crash\"}, \"depends_on\": [\"r1\"]}\n",
            "\n",
            "{\"key\": \"r3\", \"payload\": \"not an object\"}\n",
            "{\"key\": \"r4\", \"payload\": {\"text\": \"after\"}}\n",
        ),
    );
    let r = env.run(&["enroll", "reviews", &bad]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("line 4: payload must be a JSON object"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout
            .contains("enrolled 2, already present 0, conflicts 0"),
        "{}",
        r.stdout
    );
    let missing = env.run(&["row", "reviews", "r4"]).await;
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(missing.stderr.contains("NOT_FOUND"), "{}", missing.stderr);

    // --skip-bad-lines goes on; already enrolled rows are ALREADY_PRESENT.
    let report = env
        .json(&[
            "enroll",
            "reviews",
            &bad,
            "--skip-bad-lines",
            "--chunk",
            "1",
        ])
        .await;
    assert_eq!(report["enrolled"], 1);
    assert_eq!(report["already_present"], 2);
    assert_eq!(report["bad"][0]["origin"], "line 4");
    assert_eq!(report["calls"], 3);

    // Derived keys, and a conflict (same key, other payload).
    let more = env.file(
        "more.jsonl",
        concat!(
            "{\"key_parts\": [\"reviews\", \"5\"], \"payload\": {\"text\": \"five\"}}\n",
            "{\"key\": \"r1\", \"payload\": {\"text\": \"changed\"}}\n",
        ),
    );
    let r = env
        .run(&["enroll", "reviews", &more, "--fail-on-conflict"])
        .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout
            .contains("enrolled 1, already present 0, conflicts 1"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("conflict: line 2: key r1"),
        "{}",
        r.stderr
    );
    let derived = tally_core::keys::derive_key(&["reviews", "5"]);
    env.ok(&["row", "reviews", &derived]).await;

    // The server's own validation errors name the file's line.
    let unknown_dep = env.file(
        "dep.jsonl",
        "{\"key\": \"x1\", \"payload\": {}}\n{\"key\": \"x2\", \"payload\": {}, \"depends_on\": [\"nope\"]}\n",
    );
    let r = env.run(&["enroll", "reviews", &unknown_dep]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("INVALID_ARGUMENT"), "{}", r.stderr);
    assert!(r.stderr.contains("rows[1] is line 2"), "{}", r.stderr);
    assert!(
        r.stderr.contains("field rows[1].depends_on[0]"),
        "{}",
        r.stderr
    );

    // Status: four rows pending.
    let s = env.json(&["status", "reviews"]).await;
    assert_eq!(s["total"], 4);
    assert_eq!(s["pending"], 4);
    assert_eq!(s["terminal"], false);
    let human = env.ok(&["summary", "reviews"]).await;
    assert!(human.stdout.contains("STATUS"), "{}", human.stdout);
    assert!(human.stdout.contains(s["summary_line"].as_str().unwrap()));

    // Work: r1 fails for good (400), so r2 is BLOCKED behind it.
    let worked = work(&env, "reviews", |key| {
        if key == "r1" {
            Err(400)
        } else {
            Ok("{\"label\": \"ok\"}".into())
        }
    })
    .await;
    assert_eq!(worked, 3, "r2 waits for r1");
    let s = env.json(&["status", "reviews"]).await;
    assert_eq!(s["permanent"], 1);
    assert_eq!(s["blocked"], 1);
    assert_eq!(s["succeeded"], 2);
    assert_eq!(s["terminal"], true);
    assert_eq!(s["attempts"]["total"], 3);
    assert_eq!(s["usage"]["input_tokens"], 300);
    let rule = s["permanent_by_rule"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let r = env.run(&["status", "reviews", "--fail-on-permanent"]).await;
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains("PERMANENT BY RULE"), "{}", r.stdout);
    assert!(r.stdout.contains(&rule));

    // Rows, filtered, and one row with its history.
    let rows = env
        .json(&["rows", "reviews", "--status", "permanent"])
        .await;
    assert_eq!(rows["rows"].as_array().unwrap().len(), 1);
    assert_eq!(rows["rows"][0]["key"], "r1");
    assert_eq!(rows["rows"][0]["rule"], rule.as_str());
    let by_rule = env.ok(&["rows", "reviews", "--rule", &rule]).await;
    assert_eq!(by_rule.stdout.lines().count(), 2, "{}", by_rule.stdout);
    let all = env
        .json(&["rows", "reviews", "--limit", "2", "--full"])
        .await;
    assert_eq!(all["rows"].as_array().unwrap().len(), 2);
    assert_eq!(all["truncated"], true);
    assert!(all["rows"][0].get("payload").is_some());
    let row = env.ok(&["row", "reviews", "r1"]).await;
    assert!(row.stdout.contains("OUTCOME"), "{}", row.stdout);
    assert!(row.stdout.contains("the request is malformed"));
    let r2 = env.json(&["row", "reviews", "r2"]).await;
    assert_eq!(r2["status"], "BLOCKED");
    assert_eq!(r2["depends_on"][0], "r1");

    // Redrive: a dry run changes nothing; the real one unblocks r2.
    let dry = env
        .json(&[
            "redrive",
            "reviews",
            "--status",
            "permanent",
            "--rule",
            &rule,
            "--dry-run",
        ])
        .await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["redriven"], 1);
    assert_eq!(
        env.json(&["row", "reviews", "r1"]).await["status"],
        "PERMANENT"
    );
    let r = env.run(&["redrive", "reviews"]).await;
    assert_eq!(r.code, 1, "a redrive names its rows: {r:?}");
    let done = env
        .ok(&[
            "redrive",
            "reviews",
            "--keys",
            "r1",
            "--reason",
            "fixed the input",
        ])
        .await;
    assert!(
        done.stdout.contains("redriven 1, unblocked 1"),
        "{}",
        done.stdout
    );
    assert_eq!(
        env.json(&["row", "reviews", "r2"]).await["status"],
        "PENDING"
    );

    // Asked again (issue 49): a SUCCEEDED row goes back to PENDING, its old
    // result kept and shown; the dry run changes nothing.
    let succeeded = env
        .json(&["rows", "reviews", "--status", "succeeded"])
        .await;
    let key = succeeded["rows"][0]["key"].as_str().unwrap().to_owned();
    let ask = ["redrive", "reviews", "--keys", &key, "--include-succeeded"];
    let dry = env.ok(&[&ask[..], &["--dry-run"]].concat()).await;
    assert!(
        dry.stdout.contains("would ask again 1 succeeded row(s)"),
        "{}",
        dry.stdout
    );
    assert_eq!(
        env.json(&["row", "reviews", &key]).await["status"],
        "SUCCEEDED"
    );
    env.ok(&[&ask[..], &["--reason", "new prompt"]].concat())
        .await;
    let row = env.json(&["row", "reviews", &key]).await;
    assert_eq!(row["status"], "PENDING");
    assert_eq!(row["superseded"][0]["result_version"], 1);
    assert_eq!(row["superseded"][0]["result"]["label"], "ok");
    let text = env.ok(&["row", "reviews", &key]).await;
    assert!(
        text.stdout
            .contains("results it had before it was asked again")
            && text.stdout.contains("new prompt"),
        "{}",
        text.stdout
    );
    env.ok(&["ledgers", "update", "reviews", "--rerun-dependants", "on"])
        .await;
    let got = env.ok(&["ledgers", "get", "reviews"]).await;
    assert!(got.stdout.contains("rerun dependants"), "{}", got.stdout);
    let bad = env
        .run(&["ledgers", "update", "reviews", "--rerun-dependants", "yes"])
        .await;
    assert_eq!(bad.code, 1, "{bad:?}");

    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_exit_2_with_code_and_details() {
    let env = Env::start().await;
    let r = env.run(&["ledgers", "get", "nope"]).await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("NOT_FOUND"), "{}", r.stderr);
    let r = env.run(&["ledgers", "create", "Bad_Id"]).await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("INVALID_ARGUMENT"), "{}", r.stderr);
    assert!(r.stderr.contains("field ledger_id"), "{}", r.stderr);
    let r = env.run(&["--json", "ledgers", "create", "Bad_Id"]).await;
    let err: Value = serde_json::from_str(r.stderr.trim()).unwrap();
    assert_eq!(err["error"]["code"], "INVALID_ARGUMENT");
    assert_eq!(err["error"]["field_violations"][0]["field"], "ledger_id");
    // Usage errors are 1, not clap's 2.
    assert_eq!(env.run(&["ledgers", "frobnicate"]).await.code, 1);
    assert_eq!(env.run(&["--help"]).await.code, 0);
    // A bearer token is sent (this server does not check it yet).
    env.ok(&["--token", "t0ken", "ledgers", "list"]).await;
    env.stop().await;

    // Nothing listening: UNAVAILABLE, exit 2.
    let unreachable = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = unreachable.local_addr().unwrap();
    drop(unreachable);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tallyctl"))
        .args(["--server", &format!("http://{addr}"), "ledgers", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("UNAVAILABLE"), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach http://{addr}")),
        "the address is named: {stderr}"
    );
}

/// The seed's layout in a temp dir: images 1..20, first-pass JSON for 3, 4,
/// 5, 12; plus a second group with a name that needs escaping.
fn dataset(root: &Path) -> (String, String) {
    let images = root.join("images");
    let results = root.join("first_pass_results");
    let put = |p: std::path::PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    for n in 1..=20 {
        put(
            images.join(format!("California/LincolnHigh/2023/{n}.jpg")),
            "jpg",
        );
    }
    for n in [3, 4, 5, 12] {
        put(
            results.join(format!(
                "label_to_curricular/California/LincolnHigh/2023/{n}.json"
            )),
            &format!("{{\"page\": {n}, \"label\": \"curricular\"}}"),
        );
    }
    for n in [1, 2] {
        put(images.join(format!("New York/St Mary/2024/{n}.jpg")), "jpg");
        put(
            results.join(format!(
                "label_to_curricular/New York/St Mary/2024/{n}.json"
            )),
            "{}",
        );
    }
    put(
        results.join("label_to_curricular/New York/St Mary/2024/notes.json"),
        "{}",
    );
    (images.display().to_string(), results.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_writes_once_and_enrolls_with_dependencies() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "curricular-ocr"]).await;
    env.ok(&[
        "prompts",
        "register",
        "page_ocr",
        "v2",
        "--template-file",
        &env.file("t.j2", "OCR page {{ page }}"),
    ])
    .await;
    let (images, results) = dataset(env.dir.path());
    let plan_path = env.dir.path().join("plan.json").display().to_string();

    let r = env
        .ok(&[
            "plan",
            "--images-root",
            &images,
            "--results-root",
            &results,
            "--out",
            &plan_path,
            "--enroll",
            "curricular-ocr",
            "--prompt",
            "page_ocr@v2",
        ])
        .await;
    assert!(
        r.stdout
            .contains("plan: 6 pages in 2 groups, 3 dependencies; written to"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("enrolled 6, already present 0, conflicts 0"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("warning: ignored"), "{}", r.stderr);
    assert!(r.stderr.contains("notes.json"), "{}", r.stderr);

    // The plan file: exactly 3→4→5 and 12 alone (and 1→2 in New York).
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    let k = |n: u32| format!("California:LincolnHigh:2023:{n}");
    let deps = plan["deps"].as_object().unwrap();
    assert_eq!(deps.len(), 6);
    assert_eq!(deps[&k(3)], Value::Null);
    assert_eq!(deps[&k(4)], Value::String(k(3)));
    assert_eq!(deps[&k(5)], Value::String(k(4)));
    assert_eq!(deps[&k(12)], Value::Null);
    assert_eq!(
        deps["New~20York:St~20Mary:2024:2"],
        "New~20York:St~20Mary:2024:1"
    );
    assert!(
        plan["nodes"][k(4)]["image_path"]
            .as_str()
            .unwrap()
            .ends_with("California/LincolnHigh/2023/4.jpg")
    );
    assert!(
        plan["nodes"][k(4)]["filter_json"]
            .as_str()
            .unwrap()
            .ends_with("label_to_curricular/California/LincolnHigh/2023/4.json")
    );

    // The dependencies made it into the ledger.
    let row4 = env.json(&["row", "curricular-ocr", &k(4)]).await;
    assert_eq!(row4["depends_on"], serde_json::json!([k(3)]));
    assert_eq!(row4["prompt"]["name"], "page_ocr");
    assert_eq!(row4["payload"]["first_pass"]["page"], 4);
    assert_eq!(row4["payload"]["page"], 4);
    assert_eq!(row4["payload"]["school"], "LincolnHigh");
    let row12 = env.json(&["row", "curricular-ocr", &k(12)]).await;
    assert_eq!(row12["depends_on"], serde_json::json!([]));
    let ny = env
        .json(&["row", "curricular-ocr", "New~20York:St~20Mary:2024:2"])
        .await;
    assert_eq!(ny["payload"]["state"], "New York");

    // Planning again: the same plan is fine, and nothing new is enrolled.
    let again = env
        .json(&[
            "plan",
            "--images-root",
            &images,
            "--results-root",
            &results,
            "--out",
            &plan_path,
            "--enroll",
            "curricular-ocr",
            "--prompt",
            "page_ocr@v2",
        ])
        .await;
    assert_eq!(again["plan"]["written"], "unchanged");
    assert_eq!(again["enroll"]["already_present"], 6);
    assert_eq!(again["enroll"]["enrolled"], 0);
    // From the plan file, without scanning.
    let from = env
        .json(&[
            "plan",
            "--from",
            &plan_path,
            "--enroll",
            "curricular-ocr",
            "--prompt",
            "page_ocr@v2",
        ])
        .await;
    assert_eq!(from["enroll"]["already_present"], 6);

    // Issue 55: with no --prompt, the ledger's page prompt is registered and
    // every page's image goes in its media variable (path, SHA-256 of the
    // bytes, type), so the page reaches the model; enrolling again finds
    // the same rows. --text-only enrolls the paths alone.
    env.ok(&["ledgers", "create", "pages-default"]).await;
    let default = env
        .json(&["plan", "--from", &plan_path, "--enroll", "pages-default"])
        .await;
    assert_eq!(default["enroll"]["enrolled"], 6);
    let row = env.json(&["row", "pages-default", &k(4)]).await;
    assert_eq!(row["prompt"]["name"], "pages-default");
    assert_eq!(row["prompt"]["version"], "pages-v1");
    let image = &row["payload"]["image"];
    assert!(
        image["uri"]
            .as_str()
            .unwrap()
            .ends_with("California/LincolnHigh/2023/4.jpg"),
        "{image}"
    );
    let jpg = format!("{:x}", sha2::Sha256::digest(b"jpg"));
    assert_eq!(image["sha256"], jpg.as_str());
    assert_eq!(image["mime_type"], "image/jpeg");
    let prompt = env.json(&["prompts", "page", "pages-default"]).await;
    assert_eq!(prompt["media"], serde_json::json!(["image"]));
    let twice = env
        .json(&["plan", "--from", &plan_path, "--enroll", "pages-default"])
        .await;
    assert_eq!(twice["enroll"]["already_present"], 6);
    // A ledger that does not exist yet is made with the default policy, as
    // the page flow makes it.
    let made = env
        .ok(&[
            "plan",
            "--from",
            &plan_path,
            "--enroll",
            "pages-text",
            "--text-only",
        ])
        .await;
    assert!(
        made.stderr
            .contains("ledger pages-text created with the default policy"),
        "{}",
        made.stderr
    );
    let text = env.json(&["row", "pages-text", &k(4)]).await;
    assert!(
        text["payload"].get("image").is_none() && text["prompt"].is_null(),
        "{text}"
    );

    // A media variable the template also reads as text is refused at
    // registration, naming it (issue 55).
    let both = env
        .run(&[
            "prompts",
            "register",
            "page_ocr",
            "v3",
            "--template-file",
            &env.file("t3.j2", "OCR page {{ page }}"),
            "--media",
            "page",
        ])
        .await;
    assert_ne!(both.code, 0, "{both:?}");
    assert!(
        both.stderr.contains("page") && both.stderr.contains("template's text"),
        "{}",
        both.stderr
    );
    // A prompt whose media variable is a field of the plan's rows (the
    // page number) is refused by the planner before anything is enrolled.
    env.ok(&[
        "prompts",
        "register",
        "page_ocr",
        "v3",
        "--template-file",
        &env.file("t3b.j2", "OCR the page of {{ school }}"),
        "--media",
        "page",
    ])
    .await;
    let clash = env
        .run(&[
            "plan",
            "--from",
            &plan_path,
            "--enroll",
            "curricular-ocr",
            "--prompt",
            "page_ocr@v3",
        ])
        .await;
    assert_eq!(clash.code, 1, "a usage error: {clash:?}");
    assert!(
        clash.stderr.contains("`page`") && clash.stderr.contains("--media image"),
        "{}",
        clash.stderr
    );

    // A changed dataset never overwrites the plan.
    std::fs::write(
        Path::new(&results).join("label_to_curricular/California/LincolnHigh/2023/11.json"),
        "{}",
    )
    .unwrap();
    let before = std::fs::read_to_string(&plan_path).unwrap();
    let r = env
        .run(&[
            "plan",
            "--images-root",
            &images,
            "--results-root",
            &results,
            "--out",
            &plan_path,
        ])
        .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("holds a different plan"), "{}", r.stderr);
    assert!(
        r.stderr.contains("1 new (California:LincolnHigh:2023:11)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("changed (California:LincolnHigh:2023:12)"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_to_string(&plan_path).unwrap(), before);

    // A results file without its image: refused unless skipped.
    std::fs::remove_file(Path::new(&images).join("California/LincolnHigh/2023/12.jpg")).unwrap();
    let other = env.dir.path().join("plan2.json").display().to_string();
    let r = env
        .run(&[
            "plan",
            "--images-root",
            &images,
            "--results-root",
            &results,
            "--out",
            &other,
        ])
        .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("California/LincolnHigh/2023/12"),
        "{}",
        r.stderr
    );
    let skipped = env
        .json(&[
            "plan",
            "--images-root",
            &images,
            "--results-root",
            &results,
            "--out",
            &other,
            "--skip-missing-images",
        ])
        .await;
    assert_eq!(skipped["plan"]["pages"], 6, "11 in, 12 out");
    let plan2: Value = serde_json::from_str(&std::fs::read_to_string(&other).unwrap()).unwrap();
    assert_eq!(plan2["deps"][k(11)], Value::Null, "10 has no results file");
    assert!(plan2["nodes"].get(k(12)).is_none());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_the_ledger_until_every_row_is_terminal() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "nightly"]).await;
    let rows = env.file(
        "rows.jsonl",
        "{\"key\": \"a\", \"payload\": {}}\n{\"key\": \"b\", \"payload\": {}}\n{\"key\": \"c\", \"payload\": {}, \"depends_on\": [\"b\"]}\n",
    );
    env.ok(&["enroll", "nightly", &rows]).await;

    // watch runs while the rows are worked; it can only end once they are
    // all terminal, whatever the timing.
    let watch = env
        .command(&[
            "watch",
            "nightly",
            "--interval",
            "100ms",
            "--fail-on-permanent",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watch = tokio::spawn(watch.wait_with_output());
    assert_eq!(
        work(&env, "nightly", |k| if k == "b" {
            Err(400)
        } else {
            Ok("{}".into())
        })
        .await,
        2
    );
    let out = tokio::time::timeout(Duration::from_secs(60), watch)
        .await
        .expect("watch ends once every row is terminal")
        .unwrap()
        .unwrap();
    let r = Run::from(out);
    assert_eq!(r.code, 3, "PERMANENT rows with --fail-on-permanent: {r:?}");
    assert!(r.stdout.contains("succeeded=1"), "{}", r.stdout);
    assert!(r.stdout.contains("PERMANENT BY RULE"), "{}", r.stdout);

    // Already terminal: returns at once; JSON for scripts; exit 0 without the flag.
    let s = env.json(&["watch", "nightly"]).await;
    assert_eq!(s["terminal"], true);
    assert_eq!(s["blocked"], 1);
    // An unknown ledger is a server error, not an endless wait.
    assert_eq!(env.run(&["watch", "nope"]).await.code, 2);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_jobs_operations_and_locks() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "p"]).await;

    // Prompts (LedgerService).
    let t = env.file("ocr.j2", "Read page {{ page }}.");
    let schema = env.file("schema.json", "{\"type\": \"object\"}");
    let reg = env
        .json(&[
            "prompts",
            "register",
            "page_ocr",
            "v1",
            "--template-file",
            &t,
            "--schema-file",
            &schema,
        ])
        .await;
    assert_eq!(reg["name"], "prompts/page_ocr/versions/v1");
    let got = env.ok(&["prompts", "get", "page_ocr@v1"]).await;
    assert!(
        got.stdout.contains("Read page {{ page }}."),
        "{}",
        got.stdout
    );
    let other = env.file("other.j2", "Something else");
    let r = env
        .run(&[
            "prompts",
            "register",
            "page_ocr",
            "v1",
            "--template-file",
            &other,
        ])
        .await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("ALREADY_EXISTS"), "{}", r.stderr);

    // Jobs.
    let r = env.run(&["jobs", "p"]).await;
    if is_unimplemented(&r) {
        eprintln!("JobService not implemented on this server: jobs checked for the error only");
    } else {
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.starts_with("JOB"), "{}", r.stdout);
        let j = env.json(&["jobs", "p", "--state", "running"]).await;
        assert!(j["jobs"].as_array().unwrap().is_empty());
    }

    // Locks.
    let r = env
        .run(&[
            "--json", "locks", "acquire", "nightly", "--owner", "me", "--ttl", "1m",
        ])
        .await;
    if is_unimplemented(&r) {
        eprintln!("locks not implemented on this server: checked for the error only");
    } else {
        assert_eq!(r.code, 0, "{r:?}");
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["acquired"], true);
        let token = v["lock"]["token"].as_str().unwrap().to_string();
        let held = env
            .run(&["locks", "acquire", "nightly", "--owner", "you"])
            .await;
        assert_eq!(held.code, 4, "{held:?}");
        assert!(held.stdout.contains("held by me"), "{}", held.stdout);
        env.ok(&[
            "locks", "renew", "nightly", "--token", &token, "--ttl", "2m",
        ])
        .await;
        assert_eq!(
            env.run(&["locks", "release", "nightly", "--token", "wrong"])
                .await
                .code,
            2
        );
        env.ok(&["locks", "release", "nightly", "--token", &token])
            .await;
        env.ok(&["locks", "acquire", "nightly", "--owner", "you"])
            .await;
    }

    // Operations.
    let r = env.run(&["operations"]).await;
    if is_unimplemented(&r) {
        eprintln!("OperationsService not implemented on this server: checked for the error only");
    } else {
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.starts_with("OPERATION"), "{}", r.stdout);
        let missing = env.run(&["operation", "batches/none", "--events"]).await;
        assert_eq!(missing.code, 2);
        assert!(missing.stderr.contains("NOT_FOUND"), "{}", missing.stderr);
    }
    env.stop().await;
}

// Invariant: the backoff and batch-fill flags set the policy on create, and
// on update change only the fields named (the rest keep their values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_set_backoff_and_batch_fill() {
    let env = Env::start().await;
    let created = env
        .json(&[
            "ledgers",
            "create",
            "night",
            "--backoff-initial",
            "5s",
            "--batch-fill-wait",
            "0s",
        ])
        .await;
    let policy = &created["policy"];
    assert_eq!(policy["backoff"]["initial"], "5s", "{policy}");
    assert_eq!(
        policy["backoff"]["multiplier"], 2.0,
        "default kept: {policy}"
    );
    assert_eq!(policy["batch_fill"]["max_wait"], "0s", "{policy}");
    let updated = env
        .json(&["ledgers", "update", "night", "--backoff-jitter", "0.5"])
        .await;
    let policy = &updated["policy"];
    assert_eq!(policy["backoff"]["jitter"], 0.5, "{policy}");
    assert_eq!(
        policy["backoff"]["initial"], "5s",
        "only the named field: {policy}"
    );
    assert_eq!(policy["batch_fill"]["max_wait"], "0s", "{policy}");
    let bad = env
        .run(&["ledgers", "update", "night", "--backoff-multiplier", "50"])
        .await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("backoff.multiplier"), "{}", bad.stderr);
    env.stop().await;
}

// Invariant: `jobs hand-over` ends a submitted job's lease at once (any
// worker adopts it on its next AdoptJobs, long before the hour's lease
// ends), and a name that is no job exits 2 with NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_hand_over_makes_a_job_adoptable_at_once() {
    use tally_proto::v1::job_service_client::JobServiceClient;
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "h"]).await;
    let job = creating_job(&env, "h", "a", "gone-worker").await;
    let mut j = JobServiceClient::connect(env.url.clone()).await.unwrap();
    j.mark_submitted(pb::MarkSubmittedRequest {
        name: job.name.clone(),
        claim: job.claim.clone(),
        batch: "batches/h-1".into(),
        input_file: "files/in".into(),
    })
    .await
    .unwrap();
    let adopt = pb::AdoptJobsRequest {
        parent: "ledgers/h".into(),
        worker: "next".into(),
        ..Default::default()
    };
    let before = j.adopt_jobs(adopt.clone()).await.unwrap().into_inner();
    assert!(before.jobs.is_empty(), "the lease still runs");

    let r = env
        .ok(&["jobs", "hand-over", &format!("h/{}", job.job_id)])
        .await;
    assert!(r.stdout.contains("lease ended"), "{}", r.stdout);
    assert!(r.stdout.contains("gone-worker"), "{}", r.stdout);
    let after = j.adopt_jobs(adopt).await.unwrap().into_inner();
    assert_eq!(after.jobs.len(), 1, "adoptable at once");

    let missing = env.run(&["jobs", "hand-over", "h/nope"]).await;
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("NOT_FOUND"), "{}", missing.stderr);
    env.stop().await;
}

/// A CREATING job of ledger `ledger` holding one row `key` (claimed by
/// `worker` for an hour, CreateJob, MarkCreating with input `files/in`),
/// as a worker whose create answer was lost leaves it.
async fn creating_job(env: &Env, ledger: &str, key: &str, worker: &str) -> pb::Job {
    use tally_proto::v1::job_service_client::JobServiceClient;
    let mut l = env.client().await;
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: format!("ledgers/{ledger}"),
        rows: vec![pb::RowInput {
            key: key.into(),
            payload: "{}".into(),
            ..Default::default()
        }],
    })
    .await
    .unwrap();
    let claim = l
        .claim_rows(pb::ClaimRowsRequest {
            parent: format!("ledgers/{ledger}"),
            max_rows: 1,
            worker: worker.into(),
            lease: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .claim
        .unwrap()
        .name;
    let mut j = JobServiceClient::connect(env.url.clone()).await.unwrap();
    let job = j
        .create_job(pb::CreateJobRequest {
            claim: claim.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    j.mark_creating(pb::MarkCreatingRequest {
        name: job.name.clone(),
        claim,
        input_file: "files/in".into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

// Invariant: `jobs resolve-create` ends a CREATING job's search with what
// the operator found: `--never-made` closes it CANCELLED with the reason
// and its row back PENDING without an attempt; `--batch` makes it
// SUBMITTED as that batch (its id as the console shows it, named as
// tally records it; input file kept); a job no longer CREATING is
// refused (exit 1) and left as it was; neither flag is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_resolve_create_ends_a_lost_create_search() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "rc"]).await;
    let gone = creating_job(&env, "rc", "a", "searching-worker").await;
    let found = creating_job(&env, "rc", "b", "searching-worker").await;
    let gone_name = format!("rc/{}", gone.job_id);
    let found_name = format!("rc/{}", found.job_id);

    let none = env.run(&["jobs", "resolve-create", &gone_name]).await;
    assert_ne!(none.code, 0, "{none:?}");

    let r = env
        .ok(&[
            "jobs",
            "resolve-create",
            &gone_name,
            "--never-made",
            "--reason",
            "no batch tagged so",
        ])
        .await;
    assert!(r.stdout.contains("CANCELLED"), "{}", r.stdout);
    let mut l = env.client().await;
    let row = l
        .get_row(pb::GetRowRequest {
            name: "ledgers/rc/rows/a".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(row.status(), pb::RowStatus::Pending);
    assert_eq!(
        row.attempts.unwrap_or_default().total,
        0,
        "no attempt for a batch never made"
    );
    let job = env.ok(&["jobs", "get", &gone_name, "-o", "json"]).await;
    assert!(job.stdout.contains("no batch tagged so"), "{}", job.stdout);

    let again = env
        .run(&["jobs", "resolve-create", &gone_name, "--never-made"])
        .await;
    assert_eq!(again.code, 1, "{again:?}");
    assert!(
        again.stderr.contains("only a CREATING job"),
        "{}",
        again.stderr
    );

    let r = env
        .ok(&[
            "jobs",
            "resolve-create",
            &found_name,
            "--batch",
            "batch_rc1",
            "-o",
            "json",
        ])
        .await;
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["state"], "SUBMITTED", "{v}");
    assert_eq!(
        v["batch"], "batches/batch_rc1",
        "the id as tally names it: {v}"
    );
    assert_eq!(v["input_file"], "files/in", "{v}");
    env.stop().await;
}

// Invariant: `ledgers delete` refuses a ledger with a live claim (exit 2,
// FAILED_PRECONDITION, reason LEDGER_ACTIVE, nothing deleted); with
// --force --wait it returns only once the purge has finished (the ledger
// is NOT_FOUND and its id free again); without --wait it answers at once
// with the ledger DELETING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_delete_refuses_active_work_then_forces_and_waits() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "doomed"]).await;
    let lines: String = (0..300)
        .map(|i| format!("{{\"key\": \"k{i}\", \"payload\": {{\"n\": {i}}}}}\n"))
        .collect();
    let file = env.file("rows.jsonl", &lines);
    env.ok(&["enroll", "doomed", &file]).await;
    let mut client = env.client().await;
    let claimed = client
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/doomed".into(),
            max_rows: 10,
            worker: "test-worker".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(claimed.rows.len(), 10);

    let r = env.run(&["ledgers", "delete", "doomed"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("FAILED_PRECONDITION"), "{}", r.stderr);
    assert!(r.stderr.contains("LEDGER_ACTIVE"), "{}", r.stderr);
    let still = env.json(&["ledgers", "get", "doomed"]).await;
    assert_eq!(still["state"], "ACTIVE");

    let r = env
        .ok(&[
            "ledgers",
            "delete",
            "doomed",
            "--force",
            "--wait",
            "--interval",
            "100ms",
        ])
        .await;
    assert!(r.stdout.contains("ledgers/doomed deleted"), "{}", r.stdout);
    let gone = env.run(&["ledgers", "get", "doomed"]).await;
    assert_eq!(gone.code, 2);
    assert!(gone.stderr.contains("NOT_FOUND"), "{}", gone.stderr);
    // A late report from the expired claim finds nothing.
    let late = client
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claimed.claim.unwrap().name,
            outcomes: vec![pb::RowOutcome {
                key: claimed.rows[0].key.clone(),
                outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
                ..Default::default()
            }],
            claim_next: None,
        })
        .await
        .unwrap_err();
    assert_eq!(late.code(), tonic::Code::NotFound);
    env.ok(&["ledgers", "create", "doomed"]).await;

    // Without --wait: answered at once, DELETING, with the purge's figures.
    env.ok(&["ledgers", "create", "quick"]).await;
    let doc = env.json(&["ledgers", "delete", "quick"]).await;
    assert_eq!(doc["state"], "DELETING", "{doc}");
    assert_eq!(doc["purge"]["forced"], false);
    env.stop().await;
}

// Invariant: `ledgers pause` makes the ledger PAUSED with the reason and
// who paused it, shown by `ledgers get`, `ledgers list`, `status` (text
// and JSON); `--reason` is required; `ledgers resume` makes it ACTIVE
// again; both are idempotent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_pause_and_resume_show_the_state_everywhere() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "nightly"]).await;
    let missing = env.run(&["ledgers", "pause", "nightly"]).await;
    assert_ne!(missing.code, 0, "--reason is required");

    let r = env
        .ok(&[
            "ledgers",
            "pause",
            "nightly",
            "--reason",
            "provider incident",
        ])
        .await;
    assert!(
        r.stdout.contains("ledgers/nightly PAUSED since"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("(operator): provider incident"),
        "{}",
        r.stdout
    );
    let doc = env.json(&["ledgers", "get", "nightly"]).await;
    assert_eq!(doc["state"], "PAUSED", "{doc}");
    assert_eq!(doc["pause"]["reason"], "operator");
    assert_eq!(doc["pause"]["message"], "provider incident");
    assert!(!doc["pause"]["actor"].as_str().unwrap().is_empty());
    let again = env
        .json(&["ledgers", "pause", "nightly", "--reason", "other"])
        .await;
    assert_eq!(again["pause"]["message"], "provider incident", "{again}");
    assert_eq!(again["etag"], doc["etag"]);

    let list = env.ok(&["ledgers", "list"]).await;
    assert!(list.stdout.contains("PAUSED (operator)"), "{}", list.stdout);
    let status = env.ok(&["status", "nightly"]).await;
    assert!(
        status.stdout.contains("state  PAUSED since"),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("PAUSED reason=operator succeeded=0"),
        "{}",
        status.stdout
    );
    let status = env.json(&["status", "nightly"]).await;
    assert_eq!(status["state"], "PAUSED");
    assert_eq!(status["pause"]["reason"], "operator");

    let r = env.ok(&["ledgers", "resume", "nightly"]).await;
    assert!(r.stdout.contains("ledgers/nightly ACTIVE"), "{}", r.stdout);
    let doc = env.json(&["ledgers", "resume", "nightly"]).await;
    assert_eq!(doc["state"], "ACTIVE");
    assert!(doc["pause"].is_null());
    let unknown = env.run(&["ledgers", "resume", "nope"]).await;
    assert_eq!(unknown.code, 2);
    assert!(unknown.stderr.contains("NOT_FOUND"), "{}", unknown.stderr);
    env.stop().await;
}

// Invariant: `ledgers archive` deletes nothing unless every row is in the
// archive: with work in flight it is refused before a file is made and the
// ledger stays; once the work is done, the file holds every row exactly
// once and only then is the ledger deleted; an existing file is never
// overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_archive_exports_every_row_before_deleting() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "old"]).await;
    let lines: String = (0..300)
        .map(|i| format!("{{\"key\": \"k{i}\", \"payload\": {{\"n\": {i}}}}}\n"))
        .collect();
    let file = env.file("rows.jsonl", &lines);
    env.ok(&["enroll", "old", &file]).await;
    let archive = env.dir.path().join("old.jsonl");
    let archive_arg = archive.to_str().unwrap();

    let mut client = env.client().await;
    let claim = client
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/old".into(),
            max_rows: 10,
            worker: "test-worker".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .claim
        .unwrap();
    let r = env
        .run(&["ledgers", "archive", "old", "-o", archive_arg])
        .await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("10 RUNNING rows"), "{}", r.stderr);
    assert!(!archive.exists(), "refused before a file was made");
    client
        .release_claim(pb::ReleaseClaimRequest {
            name: claim.name,
            keys: vec![],
        })
        .await
        .unwrap();
    assert_eq!(
        work(&env, "old", |k| Ok(format!("{{\"k\": \"{k}\"}}"))).await,
        300
    );

    let r = env
        .ok(&["ledgers", "archive", "old", "-o", archive_arg, "--wait"])
        .await;
    assert!(r.stderr.contains("archived 300 rows"), "{}", r.stderr);
    assert!(r.stdout.contains("ledgers/old deleted"), "{}", r.stdout);
    let text = std::fs::read_to_string(&archive).unwrap();
    let mut keys: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 300, "every row exactly once");
    let gone = env.run(&["ledgers", "get", "old"]).await;
    assert!(gone.stderr.contains("NOT_FOUND"), "{}", gone.stderr);

    // The archive file is never overwritten.
    env.ok(&["ledgers", "create", "again"]).await;
    let r = env
        .run(&["ledgers", "archive", "again", "-o", archive_arg])
        .await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("exists"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&archive).unwrap(), text);
    env.stop().await;
}

/// Every key of a printed message's JSON object, against the fields of its
/// proto message: the same set (plus the derived keys named).
fn assert_fields(v: &Value, message: &str, derived: &[&str]) {
    let desc = tallyctl::output::descriptor(message);
    let mut want: Vec<String> = desc.fields().map(|f| f.name().to_string()).collect();
    want.extend(derived.iter().map(|d| d.to_string()));
    want.sort();
    let mut got: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("{message}: not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    got.sort();
    assert_eq!(got, want, "{message} printed as {v}");
}

/// A command, the message it prints, the list key (None: a get), and
/// the derived keys it adds.
type Case<'a> = (Vec<&'a str>, &'a str, Option<&'a str>, Vec<&'a str>);

/// `-o yaml` read back by an independent parser (libyaml).
fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

// Invariant: on every list/get command, `-o json`, `-o jsonl` and `-o yaml`
// print the same data, which parses back and holds every field of the
// proto message (so a new field cannot go missing); `--json` is `-o json`;
// `--no-headers` drops exactly the header line; `-o wide` adds columns;
// the new noun-verb spellings and the old ones print the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_formats_carry_every_field_on_every_list_and_get() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "fmt", "--price", "m=1,2"])
        .await;
    let rows = env.file(
        "rows.jsonl",
        "{\"key\": \"a\", \"payload\": {\"n\": 1}}\n{\"key\": \"b\", \"payload\": {\"n\": 2}, \"depends_on\": [\"a\"]}\n",
    );
    env.ok(&["enroll", "fmt", &rows]).await;

    // A job and its operation, so jobs and operations have something to
    // print.
    let mut ledgers = env.client().await;
    let claim = ledgers
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/fmt".into(),
            max_rows: 10,
            worker: "w".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .claim
        .expect("row a is claimable");
    let mut jobs = pb::job_service_client::JobServiceClient::connect(env.url.clone())
        .await
        .unwrap();
    let job = jobs
        .create_job(pb::CreateJobRequest {
            claim: claim.name.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    jobs.mark_submitted(pb::MarkSubmittedRequest {
        name: job.name.clone(),
        claim: claim.name.clone(),
        batch: "batches/fmt1".into(),
        input_file: "files/in1".into(),
    })
    .await
    .unwrap();
    let mut ops = pb::operations_service_client::OperationsServiceClient::connect(env.url.clone())
        .await
        .unwrap();
    ops.ingest_event(pb::IngestEventRequest {
        event: Some(pb::OperationEvent {
            operation: "batches/fmt1".into(),
            state: "BATCH_STATE_RUNNING".into(),
            update_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            source: pb::EventSource::Webhook as i32,
            event_id: "e1".into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    let job_ref = format!("fmt/{}", job.job_id);

    // Each command: its JSON, the message it prints, where in the
    // document, derived keys.
    let cases: Vec<Case> = vec![
        (
            vec!["ledgers", "list"],
            "tally.v1.Ledger",
            Some("ledgers"),
            vec![],
        ),
        (
            vec!["ledgers", "get", "fmt"],
            "tally.v1.Ledger",
            None,
            vec![],
        ),
        (
            vec!["status", "fmt"],
            "tally.v1.LedgerSummary",
            None,
            vec!["attempts", "terminal"],
        ),
        (
            vec!["rows", "list", "fmt"],
            "tally.v1.Row",
            Some("rows"),
            vec![],
        ),
        (
            vec!["rows", "get", "fmt", "b"],
            "tally.v1.Row",
            None,
            vec![],
        ),
        (
            vec!["jobs", "list", "fmt"],
            "tally.v1.Job",
            Some("jobs"),
            vec![],
        ),
        (vec!["jobs", "get", &job_ref], "tally.v1.Job", None, vec![]),
        (
            vec!["operations", "list"],
            "tally.v1.Operation",
            Some("operations"),
            vec![],
        ),
        (
            vec!["operations", "get", "batches/fmt1"],
            "tally.v1.Operation",
            None,
            vec![],
        ),
    ];
    for (args, message, list_key, derived) in &cases {
        let with = |o: &'static str| {
            let mut a = args.clone();
            a.extend(["-o", o]);
            a
        };
        let json = env.json(args).await;
        let json_o: Value = serde_json::from_str(&env.ok(&with("json")).await.stdout).unwrap();
        assert_eq!(json, json_o, "{args:?}: --json is -o json");
        let yaml_v = yaml(&env.ok(&with("yaml")).await.stdout);
        assert_eq!(yaml_v, json, "{args:?}: -o yaml holds what -o json does");
        let lines = jsonl(&env.ok(&with("jsonl")).await.stdout);
        let items: Vec<Value> = match list_key {
            Some(k) => {
                if *k != "ledgers" {
                    assert_eq!(json["truncated"], false, "{args:?}");
                }
                json[*k].as_array().unwrap().clone()
            }
            None => vec![json.clone()],
        };
        assert_eq!(lines, items, "{args:?}: -o jsonl is one item per line");
        assert!(!items.is_empty(), "{args:?} printed nothing");
        for item in &items {
            assert_fields(item, message, derived);
        }
    }
    // Nested messages too: a row's attempts/usage, a job's counts.
    let b = env.json(&["rows", "get", "fmt", "b"]).await;
    assert_fields(&b["attempts"], "tally.v1.AttemptCounts", &[]);
    assert_eq!(b["payload"]["n"], 2, "payload is the JSON it holds");
    let j = env.json(&["jobs", "get", &job_ref]).await;
    assert_fields(&j["counts"], "tally.v1.JobCounts", &[]);
    assert_eq!(j["batch"], "batches/fmt1");
    assert_eq!(j["state"], "RUNNING", "the operation event moved it on");

    // Tables: --no-headers drops exactly the header; wide adds columns;
    // old and new spellings print the same.
    for (new, old) in [
        (vec!["rows", "list", "fmt"], vec!["rows", "fmt"]),
        (vec!["rows", "get", "fmt", "b"], vec!["row", "fmt", "b"]),
        (vec!["jobs", "list", "fmt"], vec!["jobs", "fmt"]),
        (vec!["jobs", "get", &job_ref], vec!["job", &job_ref]),
        (vec!["operations", "list"], vec!["operations"]),
        (
            vec!["operations", "get", "batches/fmt1"],
            vec!["operation", "batches/fmt1"],
        ),
    ] {
        let a = env.ok(&new).await.stdout;
        let b = env.ok(&old).await.stdout;
        assert_eq!(a, b, "{new:?} and {old:?} differ");
    }
    for (args, header) in [
        (vec!["ledgers", "list"], "LEDGER"),
        (vec!["rows", "list", "fmt"], "KEY"),
        (vec!["jobs", "list", "fmt"], "JOB"),
        (vec!["operations", "list"], "OPERATION"),
    ] {
        let with_headers = env.ok(&args).await.stdout;
        let mut a = args.clone();
        a.push("--no-headers");
        let without = env.ok(&a).await.stdout;
        assert!(with_headers.starts_with(header), "{args:?}: {with_headers}");
        assert!(!without.contains(header), "{args:?}: {without}");
        assert_eq!(
            without.lines().count() + 1,
            with_headers.lines().count(),
            "{args:?}"
        );
        let mut w = args.clone();
        w.extend(["-o", "wide"]);
        let wide = env.ok(&w).await.stdout;
        let first = |t: &str| t.lines().next().unwrap().split_whitespace().count();
        assert!(
            first(&wide) > first(&with_headers),
            "{args:?}: -o wide adds columns:\n{wide}"
        );
    }
    let rows_no_headers = env.ok(&["rows", "list", "fmt", "--no-headers"]).await;
    assert_eq!(rows_no_headers.stdout.lines().count(), 2);
    // --json with another -o is refused.
    let r = env.run(&["--json", "ledgers", "list", "-o", "yaml"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    env.stop().await;
}

// Invariant: a profile of the config file gives the address (and timeout,
// token file, CA); a flag overrides it; an unknown profile, a bad file and
// a bad value are exit 1 with a message naming the file (and the line);
// a server that cannot be reached is named with the profile that gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_flags_and_config_errors() {
    let env = Env::start().await;
    env.ok(&["ledgers", "create", "prof"]).await;
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        format!("http://{a}")
    };
    let token = env.file("t.token", "s3cret\n");
    let config = env.file(
        "conf/config.toml",
        &format!(
            "default_profile = \"good\"\n\n[profiles.good]\nserver = \"{}\"\ntoken_file = \"{token}\"\ntimeout = \"10s\"\n\n[profiles.dead]\naddress = \"{dead}\"\n",
            env.url
        ),
    );
    let dir = env.dir.path();
    let cfg = [("TALLYCTL_CONFIG", config.as_str())];

    // The file's default profile, --profile and TALLYCTL_PROFILE.
    let r = tallyctl_bare(dir, &["ledgers", "list"], &cfg).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("prof"), "{r:?}");
    let r = tallyctl_bare(dir, &["--profile", "good", "ledgers", "get", "prof"], &cfg).await;
    assert_eq!(r.code, 0, "{r:?}");
    let r = tallyctl_bare(
        dir,
        &["ledgers", "list"],
        &[cfg[0], ("TALLYCTL_PROFILE", "dead")],
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    // Unreachable: the address and the profile that gave it are named.
    assert!(r.stderr.contains(&format!("cannot reach {dead}")), "{r:?}");
    assert!(r.stderr.contains("profile \"dead\""), "{r:?}");
    assert!(r.stderr.contains(&config), "{r:?}");

    // A flag overrides the profile.
    let r = tallyctl_bare(
        dir,
        &["--profile", "dead", "--server", &env.url, "ledgers", "list"],
        &cfg,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");

    // An unknown profile.
    let r = tallyctl_bare(dir, &["--profile", "nope", "ledgers", "list"], &cfg).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no profile \"nope\""), "{r:?}");
    assert!(r.stderr.contains(&config), "{r:?}");
    assert!(r.stderr.contains("dead, good"), "{r:?}");

    // A bad file: the file and the line are named, whatever the command.
    let bad = env.file(
        "conf/bad.toml",
        "[profiles.a]\nserver = \"http://x:1\"\ntimout = \"5s\"\n",
    );
    let r = tallyctl_bare(dir, &["ledgers", "list"], &[("TALLYCTL_CONFIG", &bad)]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&bad) && r.stderr.contains("line 3"),
        "{r:?}"
    );
    assert!(r.stderr.contains("timout"), "{r:?}");
    let syntax = env.file("conf/syntax.toml", "[profiles.a\n");
    let r = tallyctl_bare(dir, &["ledgers", "list"], &[("TALLYCTL_CONFIG", &syntax)]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&syntax) && r.stderr.contains("line 1"),
        "{r:?}"
    );
    let missing = format!("{}/none.toml", dir.display());
    let r = tallyctl_bare(dir, &["ledgers", "list"], &[("TALLYCTL_CONFIG", &missing)]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&missing), "{r:?}");
    let bad_value = env.file(
        "conf/value.toml",
        "[profiles.a]\nserver = \"http://x:1\"\ntimeout = \"soon\"\n",
    );
    let r = tallyctl_bare(
        dir,
        &["--profile", "a", "ledgers", "list"],
        &[("TALLYCTL_CONFIG", &bad_value)],
    )
    .await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("timeout") && r.stderr.contains("soon"),
        "{r:?}"
    );

    // The default location: $XDG_CONFIG_HOME/tally/config.toml.
    let xdg = env.file(
        "xdg/tally/config.toml",
        &format!("[profiles.home]\nserver = \"{}\"\n", env.url),
    );
    let r = tallyctl_bare(dir, &["--profile", "home", "ledgers", "list"], &[]).await;
    assert_eq!(r.code, 0, "{r:?} ({xdg})");
    env.stop().await;
}

// Invariant: `--timeout` bounds each call: a server that accepts the
// connection and never answers is given up on after the timeout, exit 2,
// with the address named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_given_up_on_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds every connection, says nothing.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let server = format!("http://{addr}");
    let start = std::time::Instant::now();
    let r = tallyctl_bare(
        dir.path(),
        &["--server", &server, "--timeout", "1s", "ledgers", "list"],
        &[],
    )
    .await;
    let took = start.elapsed();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("no answer from {server} within")),
        "{r:?}"
    );
    // Well under the 10 s connect timeout and the 30 s default.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let r = tallyctl_bare(
        dir.path(),
        &[
            "--json",
            "--server",
            &server,
            "--timeout",
            "1s",
            "ledgers",
            "list",
        ],
        &[],
    )
    .await;
    let err: Value = serde_json::from_str(r.stderr.trim()).unwrap();
    assert_eq!(err["error"]["code"], "DEADLINE_EXCEEDED");
    assert_eq!(err["error"]["server"], server);
    silent.abort();
}

// Invariant: `completion SHELL` prints a script for each shell that names
// the commands (the noun-verb ones, not the hidden old spellings), with
// no server and even with a broken config file; `--help` lists the exit
// codes.
#[tokio::test]
async fn completions_and_help_need_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "not toml [").unwrap();
    let cfg = [("TALLYCTL_CONFIG", broken.to_str().unwrap())];
    for shell in ["bash", "zsh", "fish"] {
        let r = tallyctl_bare(dir.path(), &["completion", shell], &cfg).await;
        assert_eq!(r.code, 0, "{shell}: {r:?}");
        for word in [
            "ledgers",
            "rows",
            "jobs",
            "operations",
            "completion",
            "no-headers",
        ] {
            assert!(r.stdout.contains(word), "{shell} script lacks {word}");
        }
    }
    let bash = tallyctl_bare(dir.path(), &["completion", "bash"], &[]).await;
    assert!(bash.stdout.contains("complete -F"), "{}", bash.stdout);
    let r = tallyctl_bare(dir.path(), &["completion", "tcsh"], &[]).await;
    assert_eq!(r.code, 1, "{r:?}");
    let help = tallyctl_bare(dir.path(), &["--help"], &[]).await;
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Exit codes:"), "{}", help.stdout);
    for line in [
        "  0    ok",
        "  1    usage",
        "  2    the server",
        "  3    rows",
        "  4    the lock",
        "  130  interrupted",
    ] {
        assert!(help.stdout.contains(line), "{line:?} in {}", help.stdout);
    }
}

/// Invariants: `ledgers cache-dry-run` runs the worker against the same
/// server with the same token, the ledger and the flags given after `--`,
/// and shows the JSON line it printed last (whatever logs came before);
/// a worker that fails is an error naming what it said; no worker is a
/// usage error.
#[tokio::test]
async fn cache_dry_run_runs_a_worker_and_shows_its_answer() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::start().await;
    let dir = env.dir.path();
    let seen = dir.join("seen.txt");
    let worker = dir.join("fake-worker");
    std::fs::write(
        &worker,
        format!(
            "#!/bin/sh\necho \"$@ token=$TALLY_TOKEN\" > {}\necho 'a log line'\n\
             echo '{{\"rows\":5,\"hits\":3,\"misses\":2,\"saved_usd\":0.5,\"later\":1,\"elsewhere\":0}}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = worker.to_str().unwrap();
    let args = [
        "--token",
        "t0ken",
        "--json",
        "ledgers",
        "cache-dry-run",
        "ledgers/l1",
        "--worker-bin",
        bin,
        "--",
        "--gemini-base-url",
        "http://emu",
    ];
    let r = env.ok(&args).await;
    let v: Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!((v["rows"].as_i64(), v["hits"].as_i64()), (Some(5), Some(3)));
    let said = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        said.trim(),
        format!(
            "--server {} --ledger l1 --gemini-base-url http://emu --cache-dry-run token=t0ken",
            env.url
        )
    );
    let text = env
        .ok(&["ledgers", "cache-dry-run", "l1", "--worker-bin", bin])
        .await;
    assert!(
        text.stdout.contains("answered from the cache"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("$0.5000"), "{}", text.stdout);

    std::fs::write(&worker, "#!/bin/sh\necho 'no such ledger' >&2\nexit 1\n").unwrap();
    let r = env
        .run(&["ledgers", "cache-dry-run", "l1", "--worker-bin", bin])
        .await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("no such ledger"), "{}", r.stderr);

    let missing = dir.join("nowhere");
    let r = env
        .run(&[
            "ledgers",
            "cache-dry-run",
            "l1",
            "--worker-bin",
            missing.to_str().unwrap(),
        ])
        .await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("cannot run"), "{}", r.stderr);
    env.stop().await;
}

// Invariant: `--lanes`, `--deadline`, `--turnaround` and a lane's price
// set the ledger's lane policy as given; an unknown lane is refused with
// the value named, and nothing is written (no ledger made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledgers_take_lanes_a_deadline_and_lane_prices() {
    let env = Env::start().await;
    let created = env
        .json(&[
            "ledgers",
            "create",
            "laned",
            "--lanes",
            "batch,flex,standard",
            "--deadline",
            "2h",
            "--turnaround",
            "batch=20m",
            "--price",
            "gpt-4o-mini@flex=0.075,0.3",
        ])
        .await;
    let policy = &created["policy"];
    assert_eq!(
        policy["lanes"],
        serde_json::json!(["BATCH", "FLEX", "STANDARD"])
    );
    assert!(policy["deadline"].is_string(), "{policy}");
    assert_eq!(policy["turnarounds"]["batch"], "20m");
    assert_eq!(policy["prices"][0]["lane"], "FLEX");
    let got = env.ok(&["ledgers", "get", "laned"]).await;
    for shown in [
        "batch (20m), flex (1m), standard (10s)",
        "gpt-4o-mini@flex=0.075,0.3",
    ] {
        assert!(got.stdout.contains(shown), "{shown}: {}", got.stdout);
    }
    assert!(
        !got.stdout.contains("deadline          none"),
        "{}",
        got.stdout
    );
    let bad = env
        .run(&["ledgers", "create", "bad-lanes", "--lanes", "batch,warp"])
        .await;
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("warp"), "{}", bad.stderr);
    let listed = env.ok(&["ledgers", "list"]).await;
    assert!(!listed.stdout.contains("bad-lanes"), "{}", listed.stdout);
}

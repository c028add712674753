//! The worker on the OpenAI Batch API, end to end: the real tally server
//! in-process (its webhook listener at `/webhooks/openai`, signed), the
//! OpenAI emulator in-process (fast batches, every webhook delivered
//! twice), and `tally-worker --provider openai` processes.
//!
//! Invariants (each assertion names the one it checks):
//! - a row's request runs at the provider exactly as many times as the row
//!   has attempts: a request that never ran (`batch_expired`,
//!   `batch_cancelled`, a batch refused at validation) is no attempt;
//! - nothing is sent again once the provider answered a row and tally
//!   accepted the answer (a SUCCEEDED row's last submission is its
//!   success);
//! - every batch the provider made is recorded on a job (none paid for
//!   behind tally's back);
//! - a worker killed at each point of the create path, or a create answer
//!   lost while the list lags, leaves every row sent once.
//!
//! One ledger whose rows run at Gemini, OpenAI and Anthropic by model:
//! `e2e_anthropic::one_ledger_runs_each_row_at_its_models_provider_of_three`.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_openai:: -- --nocapture`.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    API_KEY, CREATE_FLAGS, PROBE_KEY, SECRET, Stack, all_rows, assert_batches_recorded,
    create_ledger, enroll_documents, exits_ok, first_job, list_jobs, register_prompt,
    spawn_openai_worker, start_server,
};
use openai_emulator::{Emulator, EmulatorConfig, FaultPlan, Outcome, Stats, Timing, WebhookTarget};
use tally_client::Clients;
use tally_proto::v1 as pb;
use tokio::process::Child;

/// The ledgers' OpenAI model.
const MODEL: &str = "gpt-4o-mini";

/// tally, the OpenAI emulator, and a ledger of `rows` rows `row-00`… on
/// the `summarize` prompt for [`MODEL`].
struct OpenAiWorld {
    stack: Stack,
    emulator: Emulator,
    c: Clients,
}

impl OpenAiWorld {
    async fn start(ledger: &str, rows: usize, faults: FaultPlan) -> OpenAiWorld {
        OpenAiWorld::start_for(ledger, MODEL, rows, faults).await
    }

    /// [`OpenAiWorld::start`] with the ledger's model `model`.
    async fn start_for(ledger: &str, model: &str, rows: usize, faults: FaultPlan) -> OpenAiWorld {
        let stack = start_server(100).await;
        let hook = stack.hook.replace("/webhooks/gemini", "/webhooks/openai");
        let mut target = WebhookTarget::new(hook, SECRET);
        target.duplicate = true;
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: vec![API_KEY.into()],
                faults,
                timing: Timing::fast(),
                webhook: Some(target),
                seed: 7,
                ..EmulatorConfig::default()
            },
        )
        .await
        .expect("emulator starts");
        let c = tally_client::connect(&stack.grpc, None).expect("connect");
        create_ledger(&c, ledger, model, pb::AttemptBudgets::default()).await;
        register_prompt(&c).await;
        enroll_documents(&c, ledger, "row-", rows, "").await;
        OpenAiWorld { stack, emulator, c }
    }

    /// The emulator's API base URL, as `OPENAI_BASE_URL` takes it.
    fn url(&self) -> String {
        format!("{}/v1", self.emulator.base_url())
    }

    fn worker(&self, ledger: &str, name: &str, extra: &[&str]) -> Child {
        spawn_openai_worker(&self.stack.grpc, &self.url(), ledger, name, extra)
    }

    async fn stop(self) {
        self.emulator.shutdown().await;
        self.stack.server.stop().await.expect("server stops");
    }
}

/// Whether a submission's request ran at the provider (and was paid for
/// if it was answered).
fn ran(outcome: Outcome) -> bool {
    !matches!(
        outcome,
        Outcome::Pending | Outcome::NotRun | Outcome::Expired | Outcome::Cancelled
    )
}

/// The never-pay-twice invariants over every row, and every batch made
/// recorded on a job. Answers how many batches jobs record.
fn check_paid_once(stats: &Stats, rows: &[pb::Row], jobs: &[pb::Job]) -> usize {
    for r in rows {
        let subs = stats
            .submissions
            .get(&r.key)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let runs = subs.iter().filter(|s| ran(s.outcome)).count();
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        assert_eq!(
            runs, attempts,
            "{} ran {runs} times for {attempts} attempts: {subs:?}",
            r.key
        );
        if r.status() == pb::RowStatus::Succeeded {
            assert_eq!(
                subs.last().map(|s| s.outcome),
                Some(Outcome::Success),
                "{}: nothing sent after the answer tally accepted: {subs:?}",
                r.key
            );
        }
    }
    assert_batches_recorded(
        jobs,
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
    )
}

/// A worker at the emulator with the create path's short settings.
fn create_worker(w: &OpenAiWorld, ledger: &str, name: &str, extra: &[&str]) -> Child {
    w.worker(ledger, name, &[&CREATE_FLAGS[..], extra].concat())
}

/// Worker A dies at `failpoint` on its first job (if any), then worker B
/// finishes the ledger: every row SUCCEEDED and sent once.
async fn create_path(ledger: &str, failpoint: Option<&str>, faults: FaultPlan) {
    let w = OpenAiWorld::start(ledger, 30, faults).await;
    if let Some(point) = failpoint {
        let a = create_worker(
            &w,
            ledger,
            "worker-a",
            &["--max-jobs", "1", "--failpoint", point],
        );
        common::dies_at(a, point).await;
    }
    let b = create_worker(
        &w,
        ledger,
        "worker-b",
        &["--exit-when-idle", "--orphan-age", "0s"],
    );
    exits_ok(b, "worker-b").await;
    let jobs = list_jobs(&w.c, ledger).await;
    let rows = all_rows(&w.c, ledger).await;
    let stats = w.emulator.stats();
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(
            stats.submission_count(&r.key),
            1,
            "{} sent once: {:?}",
            r.key,
            stats.submissions.get(&r.key)
        );
    }
    let recorded = check_paid_once(&stats, &rows, &jobs);
    if failpoint.is_some() {
        let killed = first_job(&jobs);
        assert!(
            killed.end_time.is_some(),
            "the killed worker's job closed: {killed:?}"
        );
    }
    eprintln!(
        "{ledger}: {} jobs ({recorded} with a batch), {} batches created, {} creates lost, {} rows each sent once",
        jobs.len(),
        stats.batches_created,
        stats.create_answers_lost,
        rows.len()
    );
    w.stop().await;
}

/// Worker A killed at `point` under a list lagging 1.5 s.
async fn killed_at(ledger: &str, point: &str) {
    create_path(
        ledger,
        Some(point),
        plan(serde_json::json!({"list_lag_ms": 1500})),
    )
    .await;
}

fn plan(value: serde_json::Value) -> FaultPlan {
    serde_json::from_value(value).expect("a valid fault plan")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_upload_nothing_is_sent_twice() {
    killed_at("oai-upload", "after-upload").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_mark_creating_nothing_is_sent_twice() {
    killed_at("oai-marked", "after-mark-creating").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_the_create_the_adopter_finds_the_batch_by_its_tag() {
    killed_at("oai-created", "after-create").await;
}

/// The answer to a create is lost, and the list shows new batches only
/// after the lookup window, oldest first: the batch is found, not made
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_create_answer_is_found_not_created_again() {
    create_path(
        "oai-lost",
        None,
        plan(serde_json::json!({
            "create_answer_lost": {"times": 1},
            "list_lag_ms": 5000,
            "list_order": "oldest_first",
        })),
    )
    .await;
}

/// One kind of row in the fault run: its key prefix, how many, the fault
/// rule (if any), and the status and rule it must end with.
struct Kind {
    prefix: &'static str,
    count: usize,
    fault: Option<serde_json::Value>,
    status: pb::RowStatus,
    rule: &'static str,
}

/// The rows of the fault run. The rules are the classifier's: a provider
/// error that is not transient is `http_permanent`; a truncated answer is
/// `finish_reason_max_tokens` (the same request would be cut again); a
/// content filter or a refusal is `finish_reason_blocked`; an answer that
/// is not the schema's JSON spends the content budget (1 by default); a
/// 500, a line error or a row missing from both files is retried.
fn kinds() -> Vec<Kind> {
    use pb::RowStatus::{Permanent, Succeeded};
    use serde_json::json;
    let k = |prefix, count, fault: Option<serde_json::Value>, status, rule| Kind {
        prefix,
        count,
        fault: fault.map(|f| json!({"fault": f})),
        status,
        rule,
    };
    let once = |fault: serde_json::Value| Some(json!({"fault": fault, "times": 1}));
    let mut kinds = vec![
        k("ok-", 740, None, Succeeded, "success"),
        k(
            "h400-",
            40,
            Some(
                json!({"kind": "http_error", "status": 400, "code": "invalid_value", "type": "invalid_request_error", "message": "bad value"}),
            ),
            Permanent,
            "http_permanent",
        ),
        k(
            "len-",
            40,
            Some(json!({"kind": "length"})),
            Permanent,
            "finish_reason_max_tokens",
        ),
        k(
            "filt-",
            40,
            Some(json!({"kind": "content_filter"})),
            Permanent,
            "finish_reason_blocked",
        ),
        k(
            "ref-",
            40,
            Some(json!({"kind": "refusal"})),
            Permanent,
            "finish_reason_blocked",
        ),
        k(
            "json-",
            40,
            Some(json!({"kind": "invalid_json"})),
            Permanent,
            "content_attempts_exhausted",
        ),
    ];
    // Transient faults, once each: the retry succeeds.
    for (prefix, fault) in [
        (
            "h500-",
            json!({"kind": "http_error", "status": 500, "code": "server_error", "type": "server_error", "message": "boom"}),
        ),
        ("miss-", json!({"kind": "missing"})),
        (
            "line-",
            json!({"kind": "line_error", "code": "request_timeout", "message": "timed out"}),
        ),
    ] {
        let mut kind = k(prefix, 20, None, Succeeded, "success");
        kind.fault = once(fault);
        kinds.push(kind);
    }
    kinds
}

/// Every SUCCEEDED row keeps the output line's `response` as the provider
/// wrote it (its request id, a chat.completion whose content is the stored
/// result), so an export writes the real body; no other row keeps one.
fn check_responses_kept(rows: &[pb::Row]) {
    for r in rows {
        if r.status != pb::RowStatus::Succeeded as i32 {
            assert!(
                r.response.is_empty(),
                "{}: a response without a result",
                r.key
            );
            continue;
        }
        let kept: serde_json::Value = serde_json::from_str(&r.response)
            .unwrap_or_else(|e| panic!("{}: no response kept ({e}): {:?}", r.key, r.response));
        assert_eq!(kept["status_code"], 200, "{}", r.key);
        assert!(
            kept["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("req_")),
            "{}: the provider's request id: {kept}",
            r.key
        );
        let body = &kept["body"];
        assert_eq!(body["object"], "chat.completion", "{}", r.key);
        let content = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        let answered: serde_json::Value = serde_json::from_str(content).expect("JSON content");
        let stored: serde_json::Value = serde_json::from_str(&r.result).expect("JSON result");
        assert_eq!(answered, stored, "{}: the body the result came from", r.key);
    }
}

/// 1,000 rows with every row fault, batches that expire part-way or go
/// over the enqueued-token limit, rate-limited and lost creates, 404s,
/// a lagging oldest-first list, every webhook twice, and two workers, one
/// SIGKILLed while its job is at the provider: every row ends as its fault
/// says, nothing is paid twice, and every batch is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_rows_with_every_fault_are_never_paid_twice() {
    const LEDGER: &str = "oai-faults";
    let rules: Vec<serde_json::Value> = kinds()
        .iter()
        .filter_map(|k| {
            let mut rule = k.fault.clone()?;
            rule["match"] = serde_json::json!({"custom_id_prefix": k.prefix});
            Some(rule)
        })
        .collect();
    let faults = plan(serde_json::json!({
        "rows": rules,
        "batches": [
            {"match": {"nth": 2}, "fault": {"kind": "expired", "answered": 5}},
            {"match": {"nth": 4}, "fault": {"kind": "token_limit_exceeded"}},
        ],
        "rate_limit": {"times": 2, "retry_after_secs": 1},
        "create_answer_lost": {"times": 1},
        "get_not_found": {"times": 2},
        "list_lag_ms": 1500,
        "list_order": "oldest_first",
    }));
    let w = OpenAiWorld::start(LEDGER, 0, faults).await;
    for k in kinds() {
        enroll_documents(&w.c, LEDGER, k.prefix, k.count, "").await;
    }
    let started = Instant::now();
    let flags = [
        "--claim-size",
        "100",
        "--create-lookup-window",
        "4s",
        "--http-timeout",
        "3s",
        // The enqueued-token refusal names no delay: the model cools down
        // this long (60s by default, most of the deadline below under
        // load).
        "--refusal-cooldown",
        "2s",
    ];
    let mut a = w.worker(
        LEDGER,
        "worker-a",
        &[&flags[..], &["--max-jobs", "1"]].concat(),
    );
    let victim = common::submitted_job_of(&w.c, LEDGER, "worker-a").await;
    let b = w.worker(
        LEDGER,
        "worker-b",
        &[&flags[..], &["--exit-when-idle"]].concat(),
    );
    a.start_kill().expect("SIGKILL worker-a");
    assert!(
        !a.wait().await.expect("worker-a reaped").success(),
        "worker-a was killed"
    );
    exits_ok(b, "worker-b").await;

    let rows = all_rows(&w.c, LEDGER).await;
    assert_eq!(rows.len(), 1000);
    let expected: Vec<common::Expected<'_>> = kinds()
        .iter()
        .map(|k| common::Expected {
            prefix: k.prefix,
            count: k.count,
            status: k.status,
            rule: k.rule,
        })
        .collect();
    let by_status = common::check_kinds(&rows, &expected);
    check_responses_kept(&rows);
    let jobs = list_jobs(&w.c, LEDGER).await;
    let killed = jobs
        .iter()
        .find(|j| j.job_id == victim.job_id)
        .expect("the killed worker's job");
    assert!(
        killed.adoptions >= 1,
        "the killed worker's job was adopted: {killed:?}"
    );
    assert!(
        jobs.iter().all(|j| j.provider == "openai"),
        "every job at OpenAI"
    );
    let stats = w.emulator.stats();
    let recorded = check_paid_once(&stats, &rows, &jobs);
    let attempts: i64 = rows
        .iter()
        .map(|r| r.attempts.as_ref().map_or(0, |a| a.total) as i64)
        .sum();
    let sent: usize = stats.submissions.values().map(Vec::len).sum();
    eprintln!(
        "1,000 rows in {:?}: by kind, status and rule {by_status:?}; {} jobs ({recorded} with a batch), {} batches created ({} probes), {} token-limit failures, {} creates rate-limited, {} answers lost, {} GETs 404; {attempts} attempts, {sent} requests sent ({} ran)",
        started.elapsed(),
        jobs.len(),
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
        stats.token_limit_failures,
        stats.create_rejections,
        stats.create_answers_lost,
        stats.gets_not_found,
        stats
            .submissions
            .values()
            .flatten()
            .filter(|s| ran(s.outcome))
            .count(),
    );
    w.stop().await;
}

/// What a refused upload left: the pause, the jobs, the emulator's stats.
struct UploadRefused {
    pause: pb::LedgerPause,
    jobs: Vec<pb::Job>,
    stats: Stats,
}

/// Runs a worker of the create path at `base` (the emulator's API URL, or
/// a wrong one) until the ledger pauses and its jobs close, then checks
/// what every refused upload must leave: the ledger paused as REFUSED with
/// the provider's `words` and status `code`; only the jobs already past
/// CreateJob when the pause came met the refusal (1 to 4); an upload per
/// job at most, none of which stored a file or made a batch; no row spent
/// an attempt and every one waits.
async fn upload_refused(
    w: &OpenAiWorld,
    ledger: &str,
    rows: usize,
    base: &str,
    code: &str,
    words: &str,
) -> UploadRefused {
    let mut worker =
        common::spawn_openai_worker(&w.stack.grpc, base, ledger, "refused-upload", &CREATE_FLAGS);
    common::until(Duration::from_secs(60), "the ledger pauses", || async {
        common::summary(&w.c, ledger).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    common::until(Duration::from_secs(30), "the jobs out close", || async {
        common::summary(&w.c, ledger).await.active_jobs == 0
    })
    .await;
    let s = common::summary(&w.c, ledger).await;
    let jobs = list_jobs(&w.c, ledger).await;
    let stats = w.emulator.stats();
    let pause = s.pause.clone().expect("a pause");
    let calls = stats.upload_rejections + stats.unknown_routes;
    println!(
        "{ledger} paused ({}): {:?}; {} jobs, {calls} provider calls",
        pause.reason,
        pause.message,
        jobs.len(),
    );
    assert_eq!(pause.reason, pb::LedgerPauseReason::Refused as i32);
    assert!(
        pause.message.contains("upload was refused")
            && pause.message.contains(code)
            && pause.message.contains(words),
        "the provider's words ({code}, {words:?}): {}",
        pause.message
    );
    assert!(
        (1..=4).contains(&jobs.len()),
        "only the jobs out when the pause came: {}",
        jobs.len()
    );
    // An upload per job, and at a wrong base URL the janitor's listing of
    // files at its start (a 404 too; elsewhere lists are not counted).
    assert!(
        calls <= jobs.len() as u64 + 1,
        "an upload per job at most: {calls}"
    );
    assert_eq!((stats.uploads, stats.batches_created), (0, 0));
    assert_eq!(s.attempts_total, 0, "no attempt spent on a refused upload");
    assert_eq!(s.pending, rows as i64, "every row waits, unattempted");
    worker.kill().await.ok();
    UploadRefused { pause, jobs, stats }
}

/// A key the provider refuses (401 `invalid_api_key` at the input file's
/// upload, before any batch): issue 51's loop, where every refused upload
/// gave the rows back and the worker claimed them again at once (1,003
/// jobs in 20 s). Invariants: those of [`upload_refused`] (paused, a
/// handful of jobs, no attempt, nothing stored); the refusal is the
/// emulator's key check, which no stats count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_upload_pauses_the_ledger_instead_of_looping() {
    const LEDGER: &str = "oai-upload-refused";
    const ROWS: usize = 40;
    let w = OpenAiWorld::start(LEDGER, ROWS, FaultPlan::default()).await;
    // The emulator knows only another key: the worker's is refused.
    let w = OpenAiWorld {
        emulator: {
            w.emulator.shutdown().await;
            Emulator::start(
                "127.0.0.1:0".parse().unwrap(),
                EmulatorConfig {
                    api_keys: vec!["sk-another-key".into()],
                    timing: Timing::fast(),
                    ..EmulatorConfig::default()
                },
            )
            .await
            .expect("emulator starts")
        },
        ..w
    };
    upload_refused(&w, LEDGER, ROWS, &w.url(), "401", "Incorrect API key").await;
    w.stop().await;
}

/// An upload the provider forbids (403 `request_forbidden`,
/// `unsupported_country_region_territory`, at every upload): the same
/// path as a refused key, the ledger paused with the provider's words
/// after a handful of refused uploads instead of one per claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forbidden_upload_pauses_the_ledger_after_a_handful_of_calls() {
    const LEDGER: &str = "oai-upload-forbidden";
    const ROWS: usize = 40;
    let w = OpenAiWorld::start(
        LEDGER,
        ROWS,
        plan(serde_json::json!({"upload_refused": {}})),
    )
    .await;
    let left = upload_refused(
        &w,
        LEDGER,
        ROWS,
        &w.url(),
        "403",
        "Country, region, or territory not supported",
    )
    .await;
    assert!(left.stats.upload_rejections >= 1, "{:?}", left.pause);
    w.stop().await;
}

/// A full file storage (400 "You have exceeded your file storage quota",
/// which no wait and no smaller batch cures): issue 51 saw 3,598 jobs in
/// 60 s. The ledger pauses with the provider's words after a handful of
/// refused uploads; every row waits unattempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_storage_pauses_the_ledger_after_a_handful_of_calls() {
    const LEDGER: &str = "oai-storage-full";
    const ROWS: usize = 40;
    let faults = plan(serde_json::json!({"storage_limit_bytes": 100}));
    let w = OpenAiWorld::start(LEDGER, ROWS, faults).await;
    let left = upload_refused(&w, LEDGER, ROWS, &w.url(), "400", "file storage quota").await;
    assert!(left.stats.upload_rejections >= 1, "{:?}", left.pause);
    w.stop().await;
}

/// A base URL that answers 404 (the emulator's own, without `/v1`, as a
/// new user might copy it from its start-up line): issue 51 saw 1,526
/// jobs in 30 s. The ledger pauses with the provider's words ("Invalid
/// URL") after a handful of calls; every row waits unattempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_base_url_answering_404_pauses_the_ledger_after_a_handful_of_calls() {
    const LEDGER: &str = "oai-wrong-url";
    const ROWS: usize = 40;
    let w = OpenAiWorld::start(LEDGER, ROWS, FaultPlan::default()).await;
    let left = upload_refused(
        &w,
        LEDGER,
        ROWS,
        &w.emulator.base_url(),
        "404",
        "Invalid URL",
    )
    .await;
    assert!(left.stats.unknown_routes >= 1, "{:?}", left.jobs);
    w.stop().await;
}

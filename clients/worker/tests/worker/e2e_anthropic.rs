//! The worker on Anthropic's Message Batches, end to end: the real tally
//! server in-process, the Anthropic emulator in-process (fast batches; no
//! webhooks: Anthropic sends none), and `tally-worker --provider
//! anthropic` processes.
//!
//! Anthropic's batches carry no tag, so these are the hardest checks of
//! "never pay twice": after a lost create answer or a crash before the
//! batch was recorded, only the results of the batches made in the
//! attempt's window say whether the rows were sent.
//!
//! Invariants (each assertion names the one it checks):
//! - a row's request runs at the provider exactly as many times as the row
//!   has attempts: a request that never ran (`canceled`, `expired`) is no
//!   attempt;
//! - nothing is sent again once the provider answered a row and tally
//!   accepted the answer;
//! - every batch the provider made is recorded on a job (none paid for
//!   behind tally's back);
//! - a worker killed after MarkCreating or after the create, or create
//!   answers lost while the list lags, leave every row sent once;
//! - one ledger whose rows name models of three providers completes at
//!   all three, each row at its own model's provider.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_anthropic:: -- --nocapture`.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anthropic_emulator::{
    Emulator, EmulatorConfig, FaultPlan, Models, Outcome, Stats, Submission, Timing,
};
use common::{
    API_KEY, CREATE_FLAGS, PROBE_KEY, Stack, all_rows, assert_batches_recorded, create_ledger,
    enroll_documents, exits_ok, first_job, list_jobs, register_prompt, spawn_api_worker,
    spawn_worker, start_server,
};
use tally_client::Clients;
use tally_proto::v1 as pb;
use tokio::process::Child;

/// The ledgers' Anthropic model.
const MODEL: &str = "claude-haiku-4-5";

/// tally, the Anthropic emulator, and a ledger of `rows` rows `row-00`…
/// on the `summarize` prompt for `model`.
struct AnthropicWorld {
    stack: Stack,
    emulator: Emulator,
    c: Clients,
}

impl AnthropicWorld {
    async fn start(ledger: &str, model: &str, rows: usize, faults: FaultPlan) -> AnthropicWorld {
        Self::start_models(ledger, model, rows, faults, Models::Any).await
    }

    /// [`AnthropicWorld::start`] with the emulator knowing only `models`.
    async fn start_models(
        ledger: &str,
        model: &str,
        rows: usize,
        faults: FaultPlan,
        models: Models,
    ) -> AnthropicWorld {
        let stack = start_server(100).await;
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: vec![API_KEY.into()],
                faults,
                timing: Timing {
                    in_progress: Duration::from_millis(300),
                    ..Timing::fast()
                },
                seed: 7,
                models,
                ..Default::default()
            },
        )
        .await
        .expect("emulator starts");
        let c = tally_client::connect(&stack.grpc, None).expect("connect");
        create_ledger(&c, ledger, model, pb::AttemptBudgets::default()).await;
        register_prompt(&c).await;
        enroll_documents(&c, ledger, "row-", rows, "").await;
        AnthropicWorld { stack, emulator, c }
    }

    fn worker(&self, ledger: &str, name: &str, extra: &[&str]) -> Child {
        let base = self.emulator.base_url();
        spawn_api_worker(&self.stack.grpc, "anthropic", &base, ledger, name, extra)
    }

    async fn stop(self) {
        self.emulator.shutdown().await;
        self.stack.server.stop().await.expect("server stops");
    }
}

/// The row key a custom_id carries (`{12 hex digits of the job's
/// mark}-{key}`: the test's keys all fit as themselves).
fn key_of(custom_id: &str) -> Option<&str> {
    let (mark, rest) = custom_id.split_at_checked(12)?;
    mark.bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| rest.strip_prefix('-'))
        .flatten()
}

/// Every submission of each row key, across the jobs (custom_ids) that
/// sent it, in batch creation order within each job.
fn by_key(stats: &Stats) -> BTreeMap<String, Vec<Submission>> {
    let mut out: BTreeMap<String, Vec<Submission>> = BTreeMap::new();
    for (id, subs) in &stats.submissions {
        if let Some(key) = key_of(id) {
            out.entry(key.to_owned())
                .or_default()
                .extend(subs.iter().cloned());
        }
    }
    out
}

/// Whether a submission's request ran at the provider (and counts as an
/// attempt).
fn ran(outcome: Outcome) -> bool {
    !matches!(
        outcome,
        Outcome::Pending | Outcome::Canceled | Outcome::Expired
    )
}

/// The never-pay-twice invariants over every row, and every batch made
/// recorded on a job. Answers how many batches jobs record.
fn check_paid_once(stats: &Stats, rows: &[pb::Row], jobs: &[pb::Job]) -> usize {
    let sent = by_key(stats);
    for r in rows {
        let subs = sent.get(&r.key).map(Vec::as_slice).unwrap_or(&[]);
        let runs = subs.iter().filter(|s| ran(s.outcome)).count();
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        assert_eq!(
            runs, attempts,
            "{} ran {runs} times for {attempts} attempts: {subs:?}",
            r.key
        );
        if r.status() == pb::RowStatus::Succeeded {
            assert_eq!(
                subs.iter()
                    .filter(|s| s.outcome == Outcome::Succeeded)
                    .count(),
                1,
                "{}: answered once, nothing sent after the answer tally accepted: {subs:?}",
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

fn plan(value: serde_json::Value) -> FaultPlan {
    serde_json::from_value(value).expect("a valid fault plan")
}

/// Worker A dies at `failpoint` on its first job (if any), then worker B
/// finishes the ledger: every row SUCCEEDED and sent once.
async fn create_path(ledger: &str, failpoint: Option<&str>, faults: FaultPlan) {
    let w = AnthropicWorld::start(ledger, MODEL, 30, faults).await;
    if let Some(point) = failpoint {
        let a = w.worker(
            ledger,
            "worker-a",
            &[
                &CREATE_FLAGS[..],
                &["--max-jobs", "1", "--failpoint", point],
            ]
            .concat(),
        );
        common::dies_at(a, point).await;
    }
    let b = w.worker(
        ledger,
        "worker-b",
        &[&CREATE_FLAGS[..], &["--exit-when-idle"]].concat(),
    );
    exits_ok(b, "worker-b").await;
    let jobs = list_jobs(&w.c, ledger).await;
    let rows = all_rows(&w.c, ledger).await;
    let stats = w.emulator.stats();
    let sent = by_key(&stats);
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(
            sent.get(&r.key).map_or(0, Vec::len),
            1,
            "{} sent once: {:?}",
            r.key,
            sent.get(&r.key)
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
        "{ledger}: {} jobs ({recorded} with a batch), {} batches created ({} probes), {} creates lost, {} rows each sent once",
        jobs.len(),
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
        stats.create_answers_lost,
        rows.len()
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_mark_creating_nothing_is_sent_twice() {
    create_path(
        "ant-marked",
        Some("after-mark-creating"),
        plan(serde_json::json!({"list_lag_ms": 1500})),
    )
    .await;
}

/// The batch exists but no job records it, and it carries no tag: the
/// adopter waits for it to end and knows it by its results.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_the_create_the_adopter_knows_the_batch_by_its_results() {
    create_path(
        "ant-created",
        Some("after-create"),
        plan(serde_json::json!({"list_lag_ms": 1500})),
    )
    .await;
}

/// Two create answers are lost (one as a 500, one as a dropped
/// connection) while the list shows new batches only after the lookup
/// window: the batches are found by their results, not made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_create_answers_are_found_not_created_again() {
    create_path(
        "ant-lost",
        None,
        plan(serde_json::json!({
            "create_answer_lost": {"times": 2},
            "list_lag_ms": 5000,
        })),
    )
    .await;
}

/// The lost-create search of [`lost_create_answers_are_found_not_created_again`]
/// while the list pages in `order` (Anthropic documents newest first; no
/// search may lean on it) and counts move while batches run: every row
/// SUCCEEDED and sent once, every batch made recorded on a job.
async fn lost_creates_listed(ledger: &str, order: &str) {
    create_path(
        ledger,
        None,
        plan(serde_json::json!({
            "create_answer_lost": {"times": 2},
            "list_lag_ms": 5000,
            "list_order": order,
            "moving_counts": true,
        })),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_creates_are_found_in_a_list_paged_oldest_first() {
    lost_creates_listed("ant-lost-oldest", "oldest_first").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_creates_are_found_in_a_list_paged_in_no_order() {
    lost_creates_listed("ant-lost-shuffled", "shuffled").await;
}

/// One kind of row in the fault run: its key prefix, how many, the fault
/// rule (if any, with how many times it fires), and the status and rule
/// it must end with.
struct Kind {
    prefix: &'static str,
    count: usize,
    fault: Option<(serde_json::Value, Option<u32>)>,
    status: pb::RowStatus,
    rule: &'static str,
}

/// The rows of the fault run. The rules are the classifier's: an
/// `invalid_request_error` result is `http_permanent` (400); a truncated
/// answer is `finish_reason_max_tokens`; a refusal is
/// `finish_reason_blocked`; an answer that is not the schema's JSON, or
/// none, spends the content budget (1 by default); an `overloaded_error`
/// (529) or `api_error` (500) result is retried.
fn kinds() -> Vec<Kind> {
    use pb::RowStatus::{Permanent, Succeeded};
    use serde_json::json;
    let k = |prefix, count, fault: Option<serde_json::Value>, status, rule| Kind {
        prefix,
        count,
        fault: fault.map(|f| (f, None)),
        status,
        rule,
    };
    let mut kinds = vec![
        k("ok-", 760, None, Succeeded, "success"),
        k(
            "h400-",
            40,
            Some(
                json!({"kind": "errored", "error": "invalid_request_error", "message": "messages.0: bad"}),
            ),
            Permanent,
            "http_permanent",
        ),
        k(
            "len-",
            40,
            Some(json!({"kind": "max_tokens"})),
            Permanent,
            "finish_reason_max_tokens",
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
        k(
            "empty-",
            40,
            Some(json!({"kind": "empty_content"})),
            Permanent,
            "content_attempts_exhausted",
        ),
    ];
    // Transient errors, once each: the retry succeeds.
    for (prefix, error) in [("over-", "overloaded_error"), ("api-", "api_error")] {
        let mut kind = k(prefix, 20, None, Succeeded, "success");
        kind.fault = Some((json!({"kind": "errored", "error": error}), Some(1)));
        kinds.push(kind);
    }
    kinds
}

/// 1,000 rows with every row fault, a batch that expires part-way, two
/// lost create answers, rate-limited creates, 404s, a lagging list, and a
/// worker killed after its create: every row ends as
/// its fault says, nothing is paid twice, and every batch is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_rows_with_every_fault_are_never_paid_twice() {
    const LEDGER: &str = "ant-faults";
    let rules: Vec<serde_json::Value> = kinds()
        .iter()
        .filter_map(|k| {
            let (fault, times) = k.fault.clone()?;
            let mut rule = serde_json::json!({
                // The key captured: `times` counts the row, whatever
                // job (custom_id) sends it.
                "match": {"custom_id_regex": format!("^[0-9a-f]{{12}}-({}.*)$", k.prefix)},
                "fault": fault,
            });
            if let Some(t) = times {
                rule["times"] = t.into();
            }
            Some(rule)
        })
        .collect();
    // Worker A makes its first batch under the row faults alone, and dies
    // right after the create; then every fault applies.
    let faults = serde_json::json!({
        "rows": rules,
        "batches": [{"match": {"nth": 2}, "fault": {"kind": "expired", "finished": 5}}],
        "rate_limit": {"times": 2, "retry_after_secs": 1},
        "create_answer_lost": {"times": 2},
        "get_not_found": {"times": 2},
        "list_lag_ms": 1500,
    });
    let first = plan(serde_json::json!({"rows": faults["rows"].clone()}));
    let w = AnthropicWorld::start(LEDGER, MODEL, 0, first).await;
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
    ];
    let a = w.worker(
        LEDGER,
        "worker-a",
        &[
            &flags[..],
            &["--max-jobs", "1", "--failpoint", "after-create"],
        ]
        .concat(),
    );
    common::dies_at(a, "after-create").await;
    w.emulator
        .set_faults(plan(faults))
        .expect("the fault plan applies");
    let b = w.worker(
        LEDGER,
        "worker-b",
        &[&flags[..], &["--exit-when-idle"]].concat(),
    );
    let c = w.worker(
        LEDGER,
        "worker-c",
        &[&flags[..], &["--exit-when-idle"]].concat(),
    );
    exits_ok(b, "worker-b").await;
    exits_ok(c, "worker-c").await;

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
    let jobs = list_jobs(&w.c, LEDGER).await;
    let killed = first_job(&jobs);
    assert!(
        killed.adoptions >= 1 && killed.end_time.is_some(),
        "the killed worker's job was adopted and closed: {killed:?}"
    );
    assert!(
        jobs.iter().all(|j| j.provider == "anthropic"),
        "every job at Anthropic"
    );
    let stats = w.emulator.stats();
    let recorded = check_paid_once(&stats, &rows, &jobs);
    let attempts: i64 = rows
        .iter()
        .map(|r| r.attempts.as_ref().map_or(0, |a| a.total) as i64)
        .sum();
    let sent = by_key(&stats);
    let all: Vec<&Submission> = sent.values().flatten().collect();
    eprintln!(
        "1,000 rows in {:?}: by kind, status and rule {by_status:?}; {} jobs ({recorded} with a batch), {} batches created ({} probes), {} expired, {} creates refused, {} answers lost, {} GETs 404; {attempts} attempts, {} requests sent ({} ran)",
        started.elapsed(),
        jobs.len(),
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
        stats.batches_expired,
        stats.create_rejections,
        stats.create_answers_lost,
        stats.gets_not_found,
        all.len(),
        all.iter().filter(|s| ran(s.outcome)).count(),
    );
    w.stop().await;
}

/// One Gemini ledger whose rows name a Gemini model (the ledger's), an
/// OpenAI model and an Anthropic model: a worker per provider claims only
/// its provider's rows, and all three finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_ledger_runs_each_row_at_its_models_provider_of_three() {
    const LEDGER: &str = "three";
    let w = AnthropicWorld::start(LEDGER, "gemini-2.5-flash", 0, FaultPlan::default()).await;
    let gemini = gemini_emulator::Emulator::start(
        "127.0.0.1:0".parse().unwrap(),
        gemini_emulator::EmulatorConfig {
            api_key: API_KEY.into(),
            timing: gemini_emulator::Timing {
                pending: Duration::from_millis(100),
                running: Duration::from_millis(200),
            },
            ..gemini_emulator::EmulatorConfig::default()
        },
    )
    .await
    .expect("gemini emulator starts");
    let openai = openai_emulator::Emulator::start(
        "127.0.0.1:0".parse().unwrap(),
        openai_emulator::EmulatorConfig {
            api_keys: vec![API_KEY.into()],
            timing: openai_emulator::Timing::fast(),
            ..openai_emulator::EmulatorConfig::default()
        },
    )
    .await
    .expect("openai emulator starts");
    enroll_documents(&w.c, LEDGER, "gem-", 20, "").await;
    enroll_documents(&w.c, LEDGER, "oai-", 20, "gpt-4o-mini").await;
    enroll_documents(&w.c, LEDGER, "ant-", 20, MODEL).await;

    let g = spawn_worker(
        &w.stack.grpc,
        &gemini.base_url(),
        LEDGER,
        "gemini-worker",
        &["--exit-when-idle"],
    );
    let o = spawn_api_worker(
        &w.stack.grpc,
        "openai",
        &format!("{}/v1", openai.base_url()),
        LEDGER,
        "openai-worker",
        &["--exit-when-idle"],
    );
    let a = w.worker(LEDGER, "anthropic-worker", &["--exit-when-idle"]);
    exits_ok(a, "the Anthropic worker").await;
    exits_ok(o, "the OpenAI worker").await;
    exits_ok(g, "the Gemini worker").await;

    let rows = all_rows(&w.c, LEDGER).await;
    assert_eq!(rows.len(), 60);
    let (at_anthropic, at_openai, at_gemini) =
        (by_key(&w.emulator.stats()), openai.stats(), gemini.stats());
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        let counts = [
            at_gemini.submission_count(&r.key),
            at_openai.submission_count(&r.key),
            at_anthropic.get(&r.key).map_or(0, Vec::len),
        ];
        let want = match &r.key[..4] {
            "gem-" => [1, 0, 0],
            "oai-" => [0, 1, 0],
            _ => [0, 0, 1],
        };
        assert_eq!(
            counts, want,
            "{} ran once, at its model's provider (Gemini, OpenAI, Anthropic)",
            r.key
        );
        if !r.key.starts_with("gem-") {
            let answer: serde_json::Value =
                serde_json::from_str(&r.result).expect("the answer is JSON");
            assert!(
                answer["summary"].is_string() && answer["score"].is_i64(),
                "{}: the prompt's schema went as OpenAI's response_format or Anthropic's output_config: {answer}",
                r.key
            );
        }
    }
    for j in list_jobs(&w.c, LEDGER).await {
        let want = match j.model.as_str() {
            m if m.starts_with("gpt-") => "openai",
            m if m.starts_with("claude-") => "anthropic",
            _ => "gemini",
        };
        assert_eq!(j.provider, want, "{j:?}");
    }
    openai.shutdown().await;
    gemini.shutdown().await;
    w.stop().await;
}

/// An account over its monthly spend cap answers every create 429
/// `rate_limit_error` with `error.details.error_code:
/// enforced_spend_limit_reached` and no `retry-after`, until the cap is
/// raised: the worker pauses the ledger (billing) after a handful of
/// creates instead of creating again every minute, and every row waits
/// without an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spend_capped_account_pauses_the_ledger_not_a_create_a_minute() {
    const LEDGER: &str = "anthropic-spend-cap";
    let w = AnthropicWorld::start(
        LEDGER,
        MODEL,
        12,
        plan(serde_json::json!({"spend_limit": {"times": 1000}})),
    )
    .await;
    let worker = w.worker(
        LEDGER,
        "capped",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );
    common::until(Duration::from_secs(60), "the ledger pauses", || async {
        common::summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    let s = common::summary(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    let pause = s.pause.clone().expect("a pause");
    assert_eq!(
        pause.reason,
        pb::LedgerPauseReason::Billing as i32,
        "{pause:?}"
    );
    assert!(
        pause.message.contains("spend limit"),
        "the provider's words: {}",
        pause.message
    );
    assert!(
        (1..=4).contains(&stats.create_rejections),
        "refused creates {}",
        stats.create_rejections
    );
    assert_eq!(stats.batches_created, 0);
    assert_eq!(s.attempts_total, 0, "no attempt spent on a refusal");
    drop(worker);
    w.stop().await;
}

/// An unknown or retired model: Anthropic accepts the batch and answers
/// every request `not_found_error`. The ledger pauses (model) with the
/// provider's words after that one batch, and its rows go back without an
/// attempt instead of all ending PERMANENT, batch after batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retired_model_pauses_the_ledger_and_burns_no_row() {
    const LEDGER: &str = "anthropic-retired";
    let w = AnthropicWorld::start_models(
        LEDGER,
        "claude-3-retired",
        12,
        FaultPlan::default(),
        Models::only(&[MODEL]),
    )
    .await;
    let worker = w.worker(
        LEDGER,
        "retired",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );
    common::until(Duration::from_secs(60), "the ledger pauses", || async {
        common::summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32
    })
    .await;
    common::until(Duration::from_secs(60), "the jobs out finish", || async {
        let s = common::summary(&w.c, LEDGER).await;
        s.active_jobs == 0 && s.running == 0
    })
    .await;
    let s = common::summary(&w.c, LEDGER).await;
    let pause = s.pause.clone().expect("a pause");
    assert_eq!(
        pause.reason,
        pb::LedgerPauseReason::Model as i32,
        "{pause:?}"
    );
    assert!(
        pause.message.contains("not_found_error"),
        "{}",
        pause.message
    );
    assert_eq!(s.permanent, 0, "no row burnt");
    assert_eq!(s.attempts_total, 0, "no attempt counted");
    assert_eq!(s.pending, 12);
    assert!(
        w.emulator.stats().batches_created <= 4,
        "a handful of batches, not one per claim: {}",
        w.emulator.stats().batches_created
    );
    drop(worker);
    w.stop().await;
}

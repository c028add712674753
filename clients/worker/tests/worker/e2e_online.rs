//! Synchronous lanes end to end: the real tally server in-process, the
//! OpenAI emulator's chat completions in-process, and `tally-worker
//! --lane flex` (or `standard`) processes.
//!
//! Invariants (each assertion names the one it checks):
//! - every row is answered by the model once (the emulator's count per
//!   prompt), whatever the provider refused before doing the work (429s,
//!   shed flex calls): those cost no attempt;
//! - an answer lost after the work is an attempt (`answer_lost`) and the
//!   row is sent again; nothing is sent again after an accepted answer;
//! - each attempt records its lane, the provider's request id and the tier
//!   granted, and the summary prices it at its lane;
//! - a worker killed mid-call leaves its rows to another worker, each
//!   lost call counted as an attempt.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_online:: -- --nocapture`.

use crate::common;

use std::time::Duration;

use common::{
    API_KEY, Stack, all_rows, create_ledger_with, exits_ok, register_prompt, spawn_openai_worker,
    start_server, test_policy, until,
};
use openai_emulator::{Emulator, EmulatorConfig, FaultPlan, OnlineConfig, Timing};
use tally_client::Clients;
use tally_proto::v1 as pb;

pub(crate) const MODEL: &str = "gpt-4o-mini";

/// tally, the OpenAI emulator and a ledger allowing synchronous lanes (the
/// other synchronous-lane modules start theirs here too).
pub(crate) struct Online {
    pub stack: Stack,
    pub emulator: Emulator,
    pub c: Clients,
}

impl Online {
    /// tally, the OpenAI emulator answering calls after `latency`, and a
    /// ledger allowing `lanes` with `rows` rows `row-00`… on the
    /// `summarize` prompt (each prompt names its row).
    pub async fn start(
        ledger: &str,
        lanes: &[pb::Lane],
        rows: usize,
        faults: FaultPlan,
        latency: Duration,
    ) -> Online {
        Online::start_with(ledger, lanes, rows, faults, latency, |_| {}).await
    }

    /// [`Online::start`] with `configure` applied to tally's flags.
    pub async fn start_with(
        ledger: &str,
        lanes: &[pb::Lane],
        rows: usize,
        faults: FaultPlan,
        latency: Duration,
        configure: impl FnOnce(&mut tally_server::config::ServeArgs),
    ) -> Online {
        let stack = common::start_server_with(100, configure).await;
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: vec![API_KEY.into()],
                faults,
                timing: Timing::fast(),
                online: OnlineConfig {
                    latency: openai_emulator::Latency {
                        standard: latency,
                        flex: latency,
                    },
                    ..OnlineConfig::default()
                },
                ..EmulatorConfig::default()
            },
        )
        .await
        .expect("emulator starts");
        let c = tally_client::connect(&stack.grpc, None).expect("connect");
        Online::ledger(&c, ledger, lanes, rows).await;
        Online { stack, emulator, c }
    }

    /// Creates a ledger allowing `lanes` with `rows` rows `row-00`… on the
    /// `summarize` prompt.
    pub async fn ledger(c: &Clients, ledger: &str, lanes: &[pb::Lane], rows: usize) {
        let policy = pb::LedgerPolicy {
            lanes: lanes.iter().map(|l| *l as i32).collect(),
            prices: vec![pb::ModelPrice {
                model: MODEL.into(),
                input_per_million: 1.0,
                output_per_million: 2.0,
                ..Default::default()
            }],
            ..test_policy(MODEL, pb::AttemptBudgets::default())
        };
        create_ledger_with(c, ledger, policy).await;
        register_prompt(c).await;
        common::enroll_documents(c, ledger, "row-", rows, "").await;
    }

    /// Enrolls `rows` in `ledger`.
    pub async fn enroll(&self, ledger: &str, rows: Vec<pb::RowInput>) {
        self.c
            .ledgers
            .clone()
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{ledger}"),
                rows,
            })
            .await
            .expect("enroll");
    }

    pub fn url(&self) -> String {
        format!("{}/v1", self.emulator.base_url())
    }

    pub fn worker(
        &self,
        ledger: &str,
        name: &str,
        lane: &str,
        extra: &[&str],
    ) -> tokio::process::Child {
        let mut flags = vec!["--lane", lane];
        if !extra.contains(&"--call-timeout") {
            flags.extend(["--call-timeout", "5s"]);
        }
        flags.extend_from_slice(extra);
        spawn_openai_worker(&self.stack.grpc, &self.url(), ledger, name, &flags)
    }

    /// How many times the model answered each row (by its prompt).
    pub fn answers_per_row(&self) -> Vec<usize> {
        self.emulator
            .stats()
            .online
            .by_prompt
            .values()
            .map(Vec::len)
            .collect()
    }
}

pub(crate) fn attempts(row: &pb::Row) -> i32 {
    row.attempts.map_or(0, |a| a.total)
}

// Invariant: a flex ledger's rows are answered once each by the model,
// every attempt records the flex lane, the request id and the tier, and
// the summary prices them at the flex price (the batch price here).
#[tokio::test]
async fn a_flex_ledger_is_answered_once_a_row_with_lane_and_price() {
    let w = Online::start(
        "flex",
        &[pb::Lane::Flex],
        24,
        FaultPlan::default(),
        Duration::from_millis(20),
    )
    .await;
    exits_ok(
        w.worker("flex", "w1", "flex", &["--exit-when-idle"]),
        "flex worker",
    )
    .await;
    let rows = all_rows(&w.c, "flex").await;
    assert_eq!(rows.len(), 24);
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        let a = &r.history[0];
        assert_eq!(a.lane(), pb::Lane::Flex, "the attempt records its lane");
        assert!(
            a.request_id.starts_with("req_"),
            "request id: {:?}",
            a.request_id
        );
        assert_eq!(a.tier, "flex");
        assert!(a.cost_usd > 0.0, "priced at the lane's price");
        assert!(a.batch.is_empty() && a.job.is_empty(), "no batch, no job");
    }
    assert_eq!(w.answers_per_row(), vec![1; 24], "each row answered once");
    let s = common::summary(&w.c, "flex").await;
    assert_eq!(s.cost_by_lane.len(), 1);
    assert_eq!(s.cost_by_lane[0].lane(), pb::Lane::Flex);
    assert!((s.cost_by_lane[0].cost_usd - s.estimated_cost_usd).abs() < 1e-12);
}

// Invariant: shed flex calls and a 429 storm cost no attempt and send no
// row twice: every row ends SUCCEEDED with one attempt, answered once.
#[tokio::test]
async fn shed_calls_and_429s_cost_nothing_and_send_nothing_twice() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "online": {
            "shed": {"every": 3, "retry_after_secs": 0},
            "rate_limited": {"times": 4, "retry_after_secs": 1}
        }
    }))
    .unwrap();
    let w = Online::start(
        "shed",
        &[pb::Lane::Flex],
        20,
        faults,
        Duration::from_millis(10),
    )
    .await;
    exits_ok(
        w.worker("shed", "w1", "flex", &["--exit-when-idle"]),
        "flex worker",
    )
    .await;
    let rows = all_rows(&w.c, "shed").await;
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        assert_eq!(
            attempts(r),
            1,
            "{}: a refusal before the work is no attempt",
            r.key
        );
    }
    let online = w.emulator.stats().online;
    assert!(online.shed > 0 && online.rate_limited >= 4, "{online:?}");
    assert_eq!(w.answers_per_row(), vec![1; 20], "each row answered once");
}

// Invariant: an answer lost after the work is an attempt (answer_lost) and
// the row goes again; a row is never sent after its accepted answer.
#[tokio::test]
async fn a_lost_answer_is_an_attempt_and_the_row_goes_again() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "online": {"lost": {"times": 3, "mode": "drop"}}
    }))
    .unwrap();
    let w = Online::start(
        "lost",
        &[pb::Lane::Standard],
        10,
        faults,
        Duration::from_millis(10),
    )
    .await;
    exits_ok(
        w.worker("lost", "w1", "standard", &["--exit-when-idle"]),
        "standard worker",
    )
    .await;
    let rows = all_rows(&w.c, "lost").await;
    let mut lost = 0;
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        let n = attempts(r);
        if n == 2 {
            lost += 1;
            assert_eq!(r.history[0].rule, "answer_lost");
            assert_eq!(r.history[0].budget(), pb::Budget::Provider);
        } else {
            assert_eq!(n, 1);
        }
    }
    assert_eq!(lost, 3, "each lost answer cost its row an attempt");
    let per_row = w.answers_per_row();
    assert_eq!(
        per_row.iter().sum::<usize>(),
        13,
        "10 answers and 3 lost ones"
    );
    assert_eq!(w.emulator.stats().online.lost, 3);
}

// Invariant: a call that outlasts --call-timeout is an attempt whose
// answer was lost (answer_lost: the provider did, and billed, the work),
// counted against the row's provider budget (4): the row is sent exactly
// that many times, each an attempt, and then stops, PERMANENT, never sent
// again.
#[tokio::test]
async fn a_call_past_its_timeout_is_a_lost_answer_within_the_budget() {
    let w = Online::start(
        "timeout",
        &[pb::Lane::Standard],
        3,
        FaultPlan::default(),
        Duration::from_secs(2),
    )
    .await;
    exits_ok(
        w.worker(
            "timeout",
            "w1",
            "standard",
            &["--call-timeout", "300ms", "--exit-when-idle"],
        ),
        "standard worker",
    )
    .await;
    let rows = all_rows(&w.c, "timeout").await;
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.status(), pb::RowStatus::Permanent, "{}", r.key);
        assert_eq!(attempts(r), 4, "{}: the provider budget", r.key);
        let rules: Vec<&str> = r.history.iter().map(|a| a.rule.as_str()).collect();
        assert_eq!(
            rules,
            [
                "answer_lost",
                "answer_lost",
                "answer_lost",
                "provider_attempts_exhausted"
            ],
            "{}: each a lost answer, the last one past the budget",
            r.key
        );
        assert!(r.last_error.contains("lost"), "{}: {}", r.key, r.last_error);
    }
    // The provider did the work of every call the worker gave up on (the
    // emulator finishes a request whatever its caller does): each was an
    // attempt, and no row was sent more often than its attempts.
    until(
        Duration::from_secs(20),
        "the abandoned calls finish",
        || async { w.answers_per_row().iter().sum::<usize>() == 12 },
    )
    .await;
    assert_eq!(
        w.answers_per_row(),
        vec![4; 3],
        "answers = attempts, row by row"
    );
}

// Invariant: a worker killed while its calls are out leaves nothing held:
// another worker finishes every row; a row whose call was out when the
// first died has that attempt counted (lease_expired), and, row by row, no
// row is answered by the provider more often than once plus its attempts
// lost with the killed worker (so none is sent after an accepted answer,
// and none the first worker never held is sent twice).
#[tokio::test]
async fn a_worker_killed_mid_call_leaves_its_rows_to_another() {
    const ROWS: usize = 40;
    let w = Online::start(
        "kill",
        &[pb::Lane::Standard],
        ROWS,
        FaultPlan::default(),
        Duration::from_secs(3),
    )
    .await;
    // The tests' workers take a 3 s lease, heartbeats every 500 ms. Small
    // claims and few calls: the first worker holds only part of the ledger
    // when it dies.
    let small = ["--claim-size", "8", "--calls", "4"];
    let mut first = w.worker("kill", "w1", "standard", &small);
    until(Duration::from_secs(20), "calls out", || async {
        w.emulator.stats().online.peak_arrivals_per_minute > 0
    })
    .await;
    first.kill().await.expect("kill -9");
    let _ = first.wait().await;
    exits_ok(
        w.worker("kill", "w2", "standard", &["--exit-when-idle"]),
        "second worker",
    )
    .await;
    let by_prompt = w.emulator.stats().online.by_prompt;
    let answers = |i: usize| -> usize {
        let needle = format!("document {i} in one line");
        by_prompt
            .iter()
            .filter(|(prompt, _)| prompt.contains(&needle))
            .map(|(_, a)| a.len())
            .sum()
    };
    let rows = all_rows(&w.c, "kill").await;
    assert_eq!(rows.len(), ROWS);
    let (mut expired_rows, mut untouched) = (0, 0);
    for r in &rows {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        let last = r.history.last().expect("an attempt");
        assert_eq!(last.outcome(), pb::RowStatus::Succeeded);
        let lost = r
            .history
            .iter()
            .filter(|a| a.rule == "lease_expired")
            .count();
        let i: usize = r.key.trim_start_matches("row-").parse().unwrap();
        let n = answers(i);
        assert!(n >= 1, "{}: answered", r.key);
        assert!(
            n <= 1 + lost,
            "{}: {n} answers but only {lost} attempt(s) lost with the killed worker",
            r.key
        );
        if lost > 0 {
            expired_rows += 1;
        } else {
            untouched += 1;
        }
    }
    assert!(expired_rows > 0, "the killed worker's calls were counted");
    // The emulator finishes a call whatever its caller does, so the killed
    // worker's calls out were done (and would be billed): those rows were
    // answered twice, each with its lost attempt counted above.
    assert!(
        (0..ROWS).any(|i| answers(i) == 2),
        "the calls out when the worker died reached the provider"
    );
    assert!(
        untouched > 0,
        "the killed worker held only part of the ledger"
    );
}

// Invariant: Gemini's flex lane answers every row once, each attempt
// recording the flex tier the provider granted (its header) and the
// response id; a row fault answers as it would in a batch (SAFETY is
// PERMANENT at once).
#[tokio::test]
async fn gemini_flex_answers_once_and_reads_the_granted_tier() {
    let faults: gemini_emulator::FaultPlan = serde_json::from_value(serde_json::json!({
        "rows": [{"match": {"prompt_contains": "document 3"}, "fault": {"kind": "safety"}}]
    }))
    .unwrap();
    let policy = pb::LedgerPolicy {
        lanes: vec![pb::Lane::Flex as i32],
        ..test_policy("gemini-2.5-flash", pb::AttemptBudgets::default())
    };
    let w = common::World::start_policy(
        "gflex",
        8,
        faults,
        gemini_emulator::Timing::default(),
        policy,
        |_| {},
    )
    .await;
    exits_ok(
        w.worker("gflex", "w1", &["--lane", "flex", "--exit-when-idle"]),
        "gemini flex worker",
    )
    .await;
    for r in all_rows(&w.c, "gflex").await {
        let a = &r.history[0];
        assert_eq!(
            (a.lane(), a.tier.as_str()),
            (pb::Lane::Flex, "flex"),
            "{}",
            r.key
        );
        assert!(!a.request_id.is_empty(), "{}: the response id", r.key);
        let expected = if r.key == "row-03" {
            pb::RowStatus::Permanent
        } else {
            pb::RowStatus::Succeeded
        };
        assert_eq!(r.status(), expected, "{}: {}", r.key, r.last_error);
    }
    let per_row: Vec<usize> = w
        .emulator
        .stats()
        .online
        .by_prompt
        .values()
        .map(Vec::len)
        .collect();
    assert_eq!(per_row, vec![1; 8], "each row answered once");
    w.stop().await;
}

// Invariant: Anthropic's standard lane answers every row once, with the
// provider's request id and the standard tier; a flex worker for Anthropic
// is refused at start (it has no flex).
#[tokio::test]
async fn anthropic_standard_answers_once_and_flex_is_refused() {
    let stack = start_server(100).await;
    let emulator = anthropic_emulator::Emulator::start(
        "127.0.0.1:0".parse().unwrap(),
        anthropic_emulator::EmulatorConfig {
            api_keys: vec![API_KEY.into()],
            timing: anthropic_emulator::Timing::fast(),
            ..Default::default()
        },
    )
    .await
    .expect("emulator starts");
    let c = tally_client::connect(&stack.grpc, None).expect("connect");
    let policy = pb::LedgerPolicy {
        lanes: vec![pb::Lane::Standard as i32],
        ..test_policy("claude-haiku-4-5", pb::AttemptBudgets::default())
    };
    create_ledger_with(&c, "astd", policy).await;
    register_prompt(&c).await;
    common::enroll_documents(&c, "astd", "row-", 6, "").await;
    let base = emulator.base_url();
    let refused = common::spawn_api_worker(
        &stack.grpc,
        "anthropic",
        &base,
        "astd",
        "wflex",
        &["--lane", "flex"],
    )
    .wait_with_output()
    .await
    .expect("worker runs");
    assert!(!refused.status.success(), "Anthropic has no flex lane");
    exits_ok(
        common::spawn_api_worker(
            &stack.grpc,
            "anthropic",
            &base,
            "astd",
            "w1",
            &["--lane", "standard", "--exit-when-idle"],
        ),
        "anthropic standard worker",
    )
    .await;
    for r in all_rows(&c, "astd").await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        let a = &r.history[0];
        assert_eq!(
            (a.lane(), a.tier.as_str()),
            (pb::Lane::Standard, "standard")
        );
        assert!(a.request_id.starts_with("req_"), "{:?}", a.request_id);
    }
    assert_eq!(emulator.stats().online.answered.values().sum::<u64>(), 6);
}

/// Registers `page`/`v1`: a page's summary, continuing from the page
/// before when there is one (its answer, `deps.previous`).
async fn register_page_prompt(c: &Clients) {
    c.ledgers
        .clone()
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "page".into(),
            version: "v1".into(),
            template: "Page {{ page }}.{% if deps is defined %} Before: {{ deps.previous.summary }}{% endif %}"
                .into(),
            response_schema: serde_json::json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"]
            })
            .to_string(),
            ..Default::default()
        })
        .await
        .expect("register prompt");
}

// Invariant: a page's request carries the answer of the page it depends
// on (the provider saw it in the prompt), each page is answered once, and
// each page records the hash of the answer it used as its input.
#[tokio::test]
async fn each_page_is_asked_with_the_answer_of_the_page_before() {
    let w = Online::start(
        "pages",
        &[pb::Lane::Flex],
        0,
        FaultPlan::default(),
        Duration::from_millis(5),
    )
    .await;
    register_page_prompt(&w.c).await;
    let pages = 4;
    w.enroll("pages", chained_pages(pages)).await;
    exits_ok(
        w.worker("pages", "w1", "flex", &["--exit-when-idle"]),
        "flex worker",
    )
    .await;
    let mut rows = all_rows(&w.c, "pages").await;
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let prompts: Vec<String> = w
        .emulator
        .stats()
        .online
        .by_prompt
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        w.answers_per_row(),
        vec![1; pages],
        "each page answered once"
    );
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
        if i == 0 {
            assert!(r.inputs.is_empty());
            continue;
        }
        let before = &rows[i - 1];
        let summary: serde_json::Value = serde_json::from_str(&before.result).unwrap();
        let summary = summary["summary"].as_str().unwrap();
        let asked = format!("Page {i}. Before: {summary}");
        assert!(
            prompts
                .iter()
                .any(|p| asked.starts_with(p.as_str()) || p == &asked),
            "page {i} was asked with page {}'s answer {summary:?}; the provider saw {prompts:?}",
            i - 1
        );
        assert_eq!(r.inputs.len(), 1);
        assert_eq!(r.inputs[0].key, before.key);
        assert_eq!(r.inputs[0].name, "previous");
        assert_eq!(
            r.inputs[0].used_hash,
            tally_core::payload::vars_hash(&before.result),
            "the input recorded is the answer given"
        );
    }
}

/// Pages `p0`…`p{n-1}` of ledger `pages`, each depending on the one before
/// and naming it `previous` in its prompt.
fn chained_pages(n: usize) -> Vec<pb::RowInput> {
    (0..n)
        .map(|i| pb::RowInput {
            key: format!("p{i}"),
            payload: serde_json::json!({ "page": i }).to_string(),
            prompt: Some(pb::PromptRef {
                name: "page".into(),
                version: "v1".into(),
            }),
            depends_on: (i > 0).then(|| format!("p{}", i - 1)).into_iter().collect(),
            dependency_names: (i > 0)
                .then(|| (format!("p{}", i - 1), "previous".to_string()))
                .into_iter()
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// Four chained pages answered by flex, page 0's first answer resampled
/// (the model answers it differently the next time), then page 0 asked
/// again by an operator and the worker run again; with `rerun` the ledger
/// re-runs dependants. Answers how many times the model was asked each
/// page, the dry run's answer, and the rows.
async fn ask_page_zero_again(rerun: bool) -> (Vec<usize>, pb::RedriveRowsResponse, Vec<pb::Row>) {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "rows": [{"match": {"custom_id_regex": "^Page 0\\."}, "fault": {"kind": "resampled"}, "times": 1}]
    }))
    .unwrap();
    let w = Online::start(
        "pages",
        &[pb::Lane::Flex],
        0,
        faults,
        Duration::from_millis(5),
    )
    .await;
    register_page_prompt(&w.c).await;
    w.c.ledgers
        .clone()
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: "ledgers/pages".into(),
                policy: Some(pb::LedgerPolicy {
                    rerun_dependants: rerun,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["policy.rerun_dependants".into()],
            }),
        })
        .await
        .expect("update ledger");
    w.enroll("pages", chained_pages(4)).await;
    exits_ok(
        w.worker("pages", "w1", "flex", &["--exit-when-idle"]),
        "first run",
    )
    .await;
    let redrive = |validate_only| {
        let mut l = w.c.ledgers.clone();
        async move {
            l.redrive_rows(pb::RedriveRowsRequest {
                parent: "ledgers/pages".into(),
                target: Some(pb::redrive_rows_request::Target::Keys(pb::RowKeys {
                    keys: vec!["p0".into()],
                })),
                validate_only,
                include_succeeded: true,
                reason: "answer again".into(),
            })
            .await
            .expect("redrive")
            .into_inner()
        }
    };
    let dry = redrive(true).await;
    let done = redrive(false).await;
    assert_eq!(done.reanswered, 1);
    exits_ok(
        w.worker("pages", "w2", "flex", &["--exit-when-idle"]),
        "second run",
    )
    .await;
    let prompts = w.emulator.stats().online.by_prompt;
    let asked = (0..4)
        .map(|i| {
            prompts
                .iter()
                .filter(|(p, _)| p.starts_with(&format!("Page {i}.")))
                .map(|(_, answers)| answers.len())
                .sum()
        })
        .collect();
    let mut rows = all_rows(&w.c, "pages").await;
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    (asked, dry, rows)
}

// Invariant (issue 49): when an operator asks page 0 again and it answers
// differently, a ledger that re-runs dependants asks each later page again
// exactly once while the answer it used changed (page 1 used page 0's,
// page 2 page 1's; page 2's new answer is the same as its old, so page 3
// is not asked), each with the new answer of the page before; a ledger
// that does not only marks page 1's input changed. The dry run names the
// dependants at risk and prices the re-run; every row ends SUCCEEDED.
#[tokio::test]
async fn a_changed_answer_re_runs_the_pages_that_used_it_once_and_only_when_asked() {
    let ((asked, dry, rows), (kept_asked, kept_dry, kept)) =
        tokio::join!(ask_page_zero_again(true), ask_page_zero_again(false));
    assert_eq!(asked, [2, 2, 2, 1], "asks per page, rerun_dependants on");
    assert_eq!(
        kept_asked,
        [2, 1, 1, 1],
        "asks per page, rerun_dependants off"
    );
    for dry in [&dry, &kept_dry] {
        assert_eq!((dry.reanswered, dry.dependants_at_risk), (1, 3), "{dry:?}");
        assert_eq!(dry.at_risk_keys, ["p1", "p2", "p3"]);
        assert!(dry.estimated_cost_usd > 0.0, "priced: {dry:?}");
    }
    assert!(
        dry.estimated_cost_usd > kept_dry.estimated_cost_usd,
        "re-running dependants is priced in: {dry:?} vs {kept_dry:?}"
    );
    for r in rows.iter().chain(&kept) {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{}: {}",
            r.key,
            r.last_error
        );
    }
    let summary = |r: &pb::Row| -> String {
        let v: serde_json::Value = serde_json::from_str(&r.result).unwrap();
        v["summary"].as_str().unwrap().to_owned()
    };
    assert!(
        !summary(&rows[0]).starts_with("resampled"),
        "page 0 answered anew"
    );
    assert!(
        summary(&rows[1]).contains(&summary(&rows[0])),
        "page 1 was asked with page 0's new answer"
    );
    assert_eq!(
        rows[1].inputs[0].used_hash,
        tally_core::payload::vars_hash(&rows[0].result)
    );
    assert!(rows.iter().all(|r| r.inputs.iter().all(|i| !i.changed)));
    assert!(kept[1].inputs[0].changed, "page 1 used page 0's old answer");
    assert!(!kept[2].inputs[0].changed);
}

// Invariant (issue 51): synchronous 429s that name no delay are waited out
// as a batch create's are (--refusal-cooldown, doubling in a row) and
// never for ever: the seventh wait in a row pauses the ledger (QUOTA) with
// the provider's words, after the six waits (1 + 2 + … + 32 s); no row
// spent an attempt or was answered; every row waits PENDING; the calls the
// model refused are bounded by the waits (7 rounds of at most --calls
// each), not one a moment.
#[tokio::test]
async fn sync_429s_naming_no_delay_back_off_then_pause() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "online": {"rate_limited": {"retry_after_secs": 0}}
    }))
    .unwrap();
    // No limits of tally's own: only the provider's refusals hold calls
    // back (refused calls count against the account's window otherwise).
    let w = Online::start_with(
        "storm",
        &[pb::Lane::Standard],
        4,
        faults,
        Duration::from_millis(10),
        |args| {
            args.provider.provider_rpm = vec!["0".into()];
            args.provider.provider_tpm = vec!["0".into()];
        },
    )
    .await;
    let mut worker = w.worker(
        "storm",
        "w1",
        "standard",
        &["--calls", "4", "--refusal-cooldown", "1s"],
    );
    // Six doubling waits from 1 s (63 s in all), then the pause.
    let started = std::time::Instant::now();
    common::until(Duration::from_secs(300), "the ledger pauses", || async {
        common::summary(&w.c, "storm").await.state == pb::LedgerState::Paused as i32
    })
    .await;
    let waited = started.elapsed();
    worker.kill().await.ok();
    let s = common::summary(&w.c, "storm").await;
    let pause = s.pause.clone().expect("a pause");
    let refused = w.emulator.stats().online.rate_limited;
    println!(
        "paused after {waited:?} ({}): {:?}; {refused} calls refused",
        pause.reason, pause.message
    );
    assert!(
        waited >= Duration::from_secs(63),
        "the waits doubled: {waited:?}"
    );
    assert_eq!(pause.reason, pb::LedgerPauseReason::Quota as i32);
    assert!(
        pause.message.contains("named no delay") && pause.message.contains("429"),
        "{}",
        pause.message
    );
    assert_eq!(
        s.attempts_total, 0,
        "a refusal before the work is no attempt"
    );
    assert_eq!(s.pending, 4, "every row waits");
    assert!(w.answers_per_row().is_empty(), "nothing answered");
    assert!(
        (7..=7 * 4).contains(&refused),
        "{refused} refused calls: 7 waits of at most 4 calls"
    );
}

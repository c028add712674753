//! The worker against every fault the provider can throw, end to end: the
//! real tally server in-process on a fresh database (webhook listener on,
//! signed), the gemini emulator in-process delivering its webhooks to the
//! server twice at once and once more late (out of order with other
//! batches' events), 1,000 rows with every row fault and two
//! whole-job faults mixed in by key, and two real `tally-worker` processes,
//! one of them SIGKILLed while its job is at the provider.
//!
//! Invariants checked (each assertion names the one it checks):
//! - every row ends in the state and rule its fault implies (exact counts
//!   per fault kind);
//! - no row is sent to the provider after it succeeded, and every row was
//!   sent exactly as many times as it has attempts (a row never runs
//!   twice for one attempt, not even across the killed worker's job);
//! - attempts and tokens summed over rows and over attempt histories equal
//!   the ledger's totals;
//! - duplicated and late webhooks were dropped by the reducer
//!   (drops recorded) and no operation ended in another state than its
//!   batch at the provider;
//! - the killed worker's submitted job was adopted and reconciled, not
//!   re-sent.
//!
//! The provider is also at its least obliging where it promised nothing
//! (issue 29): batches listed oldest first, a list lag (6s) longer than the
//! lookup window (4s) with a create answer lost under it, the documented
//! webhook payloads (no responses file in a failed event), an
//! enqueued-token quota (600) far below what tally admits (so batches are
//! halved until they fit), and a second ledger whose model the provider
//! does not know: that ledger ends paused (reason `model`), its rows
//! unattempted.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_faults:: -- --nocapture`
//! (uses DATABASE_URL's server when set, else a private cluster).

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::{
    API_KEY, SECRET, all_rows, list_jobs, register_prompt, secs_f, spawn_worker, start_server,
};
use gemini_emulator::{
    Emulator, EmulatorConfig, FaultPlan, JobFault, JobMatch, JobRule, Outcome, RowFault, RowMatch,
    RowRule, Timing, WebhookTarget,
};
use tally_client::Clients;
use tally_proto::v1 as pb;
use tokio::process::Child;

const LEDGER: &str = "faults";
/// Larger than one row of `huge-` but far above a 100-row batch.
const MAX_BYTES_PER_BATCH: usize = 200_000;
/// The server's rows-per-call limit: reports of 100-row jobs must be split.
const MAX_ROWS_PER_CALL: usize = 50;

/// One kind of row: its key prefix, how many, and what it must end as.
struct Kind {
    prefix: &'static str,
    count: usize,
    status: pb::RowStatus,
    /// The rule of the final verdict (None: not checked, e.g. BLOCKED).
    rule: Option<&'static str>,
    /// Provider-budget attempts it must end with (None: not checked).
    provider_attempts: Option<i32>,
}

fn kinds() -> Vec<Kind> {
    use pb::RowStatus::*;
    let k = |prefix, count, status, rule, provider_attempts| Kind {
        prefix,
        count,
        status,
        rule,
        provider_attempts,
    };
    vec![
        k(
            "safety-",
            20,
            Permanent,
            Some("finish_reason_blocked"),
            Some(0),
        ),
        k("blocked-", 20, Permanent, Some("prompt_blocked"), Some(0)),
        // 429 twice, then answered: two provider attempts, then success.
        k("t429-", 30, Succeeded, Some("success"), Some(2)),
        // 503 once, then answered.
        k("t503-", 30, Succeeded, Some("success"), Some(1)),
        k(
            "empty-",
            20,
            Permanent,
            Some("content_attempts_exhausted"),
            Some(0),
        ),
        k(
            "badjson-",
            20,
            Permanent,
            Some("content_attempts_exhausted"),
            Some(0),
        ),
        // Never in the output: missing_from_output until the provider cap (4).
        k(
            "missing-",
            10,
            Permanent,
            Some("provider_attempts_exhausted"),
            Some(4),
        ),
        // An output line's google.rpc.Status code 3 (INVALID_ARGUMENT):
        // permanent on its first answer, never re-sent.
        k("perm400-", 20, Permanent, Some("status_permanent"), Some(1)),
        // A chain behind perm400-000: blocked, never sent.
        k("chain-", 5, Blocked, None, Some(0)),
        // Larger than a batch on its own: invalid input, never sent.
        k("huge-", 3, Permanent, Some("http_permanent"), Some(1)),
        // Cut short by the output budget: a retry would pay for the same.
        k(
            "maxtok-",
            10,
            Permanent,
            Some("finish_reason_max_tokens"),
            Some(0),
        ),
        k(
            "recite-",
            5,
            Permanent,
            Some("finish_reason_blocked"),
            Some(0),
        ),
        // OTHER may pass, but the content budget is 1.
        k(
            "otherfin-",
            5,
            Permanent,
            Some("content_attempts_exhausted"),
            Some(0),
        ),
        k("ok-", 802, Succeeded, Some("success"), Some(0)),
    ]
}

fn fault_plan() -> FaultPlan {
    let row = |prefix: &str, fault| RowRule {
        matcher: RowMatch {
            key_prefix: Some(prefix.into()),
            ..Default::default()
        },
        fault,
    };
    let job = |nth, fault| JobRule {
        matcher: JobMatch {
            nth: Some(nth),
            display_name_contains: None,
        },
        fault,
        times: 1,
    };
    FaultPlan {
        rows: vec![
            row("safety-", RowFault::Safety),
            row("blocked-", RowFault::PromptBlocked),
            row(
                "t429-",
                RowFault::Transient {
                    code: 429,
                    times: 2,
                },
            ),
            row(
                "t503-",
                RowFault::Transient {
                    code: 503,
                    times: 1,
                },
            ),
            row("empty-", RowFault::EmptyText),
            row("badjson-", RowFault::InvalidJson),
            row("missing-", RowFault::Missing),
            row("perm400-", RowFault::PermanentError { code: 400 }),
            row("maxtok-", RowFault::MaxTokens),
            row("recite-", RowFault::Recitation),
            row("otherfin-", RowFault::OtherFinish),
        ],
        jobs: vec![
            job(
                2,
                JobFault::Failed {
                    message: "boom".into(),
                    partial: false,
                },
            ),
            job(4, JobFault::Expired),
            // Fails after answering half its rows: those are reported from
            // the partial responses file, never sent again.
            job(
                6,
                JobFault::Failed {
                    message: "internal error after half the batch".into(),
                    partial: true,
                },
            ),
        ],
        // The provider's own ways to be awkward: a create whose answer is
        // lost under list lag (longer than the worker's
        // --create-lookup-window, 4s).
        shared: serde_json::from_value(serde_json::json!({
            "rate_limit": {"times": 2, "retry_after_secs": 1},
            "create_answer_lost": {"times": 1},
            "list_lag_ms": 6000,
        }))
        .unwrap(),
        finalize_error_body: Some(serde_json::from_value(serde_json::json!({"times": 2})).unwrap()),
        // An output not downloadable at first, a refused JSONL MIME type.
        list_order: gemini_emulator::ListOrder::OldestFirst,
        // About 60 rows' worth: 100-row batches are refused with 429 and
        // halved until they fit.
        enqueued_tokens: Some(gemini_emulator::faults::EnqueuedTokens {
            limit: 600,
            retry_after_secs: 1,
        }),
        output_unavailable: Some(
            serde_json::from_value(serde_json::json!({"times": 1, "code": 404})).unwrap(),
        ),
        mime_refusal: Some(serde_json::from_value(serde_json::json!({"times": 1})).unwrap()),
        ..FaultPlan::default()
    }
}

fn kind_of(key: &str) -> &'static str {
    kinds()
        .into_iter()
        .find(|k| key.starts_with(k.prefix))
        .map(|k| k.prefix)
        .expect("every key has a kind")
}

/// The 1,000 rows, kinds interleaved so every batch mixes them.
fn rows() -> Vec<pb::RowInput> {
    let mut keys = Vec::new();
    for k in kinds() {
        for i in 0..k.count {
            keys.push(format!("{}{i:03}", k.prefix));
        }
    }
    assert_eq!(keys.len(), 1000);
    // A fixed permutation (7919 is prime to 1000), then dependencies after
    // what they depend on.
    let mut order: Vec<String> = (0..1000).map(|i| keys[(i * 7919) % 1000].clone()).collect();
    order.sort_by_key(|k| k.starts_with("chain-"));
    order
        .into_iter()
        .map(|key| {
            let text = if key.starts_with("huge-") {
                "x".repeat(MAX_BYTES_PER_BATCH + 1000)
            } else {
                format!("document {key}")
            };
            let depends_on = match key.strip_prefix("chain-") {
                Some("000") => vec!["perm400-000".to_string()],
                Some(n) => vec![format!("chain-{:03}", n.parse::<u32>().unwrap() - 1)],
                None => vec![],
            };
            pb::RowInput {
                payload: serde_json::json!({"text": text}).to_string(),
                depends_on,
                prompt: Some(pb::PromptRef {
                    name: "summarize".into(),
                    version: "v1".into(),
                }),
                model: String::new(),
                key,
                ..Default::default()
            }
        })
        .collect()
}

fn add(total: &mut pb::Usage, u: Option<&pb::Usage>) {
    if let Some(u) = u {
        total.input_tokens += u.input_tokens;
        total.output_tokens += u.output_tokens;
        total.thinking_tokens += u.thinking_tokens;
        total.cached_tokens += u.cached_tokens;
    }
}

/// A worker on this test's ledger, with its batch bounds.
fn worker(grpc: &str, gemini: &str, name: &str, extra: &[&str]) -> Child {
    let bytes = MAX_BYTES_PER_BATCH.to_string();
    let report = MAX_ROWS_PER_CALL.to_string();
    let mut args = vec![
        "--claim-size",
        "100",
        "--max-rows-per-batch",
        "100",
        "--max-bytes-per-batch",
        &bytes,
        "--max-rows-per-report",
        &report,
        "--create-lookup-window",
        "4s",
        // A witness of an unresolved create is a batch made 5s after it.
        "--http-timeout",
        "5s",
        "--provider-clock-skew",
        "0s",
    ];
    args.extend_from_slice(extra);
    spawn_worker(grpc, gemini, LEDGER, name, &args)
}

/// The ledger whose model the provider does not know, and its rows.
const TYPO_LEDGER: &str = "faults-typo";
const TYPO_MODEL: &str = "gemini-2.5-flahs";
const TYPO_ROWS: usize = 20;

async fn setup_typo_ledger(c: &Clients) {
    let mut l = c.ledgers.clone();
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: TYPO_LEDGER.into(),
        policy: Some(pb::LedgerPolicy {
            model: TYPO_MODEL.into(),
            max_active_jobs: 2,
            ..Default::default()
        }),
    })
    .await
    .expect("create the typo ledger");
    let rows = (0..TYPO_ROWS)
        .map(|i| pb::RowInput {
            key: format!("typo-{i:03}"),
            payload: serde_json::json!({"text": format!("typo {i}")}).to_string(),
            prompt: Some(pb::PromptRef {
                name: "summarize".into(),
                version: "v1".into(),
            }),
            ..Default::default()
        })
        .collect();
    l.enroll_rows(pb::EnrollRowsRequest {
        parent: format!("ledgers/{TYPO_LEDGER}"),
        rows,
    })
    .await
    .expect("enroll the typo ledger");
}

async fn setup_ledger(c: &Clients) {
    let mut l = c.ledgers.clone();
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: LEDGER.into(),
        policy: Some(pb::LedgerPolicy {
            model: "gemini-2.5-flash".into(),
            budgets: Some(pb::AttemptBudgets {
                provider: 4,
                content: 1,
                infra: 3,
            }),
            max_active_jobs: 4,
            ..Default::default()
        }),
    })
    .await
    .expect("create ledger");
    // Zero backoff: a retryable row is claimable at once (zero on create
    // means "the default", so it is set by update).
    l.update_ledger(pb::UpdateLedgerRequest {
        ledger: Some(pb::Ledger {
            name: format!("ledgers/{LEDGER}"),
            policy: Some(pb::LedgerPolicy {
                backoff: Some(pb::Backoff {
                    initial: Some(secs_f(Duration::ZERO)),
                    max: Some(secs_f(Duration::ZERO)),
                    multiplier: 1.0,
                    jitter: 0.0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["policy.backoff".into()],
        }),
    })
    .await
    .expect("zero backoff");
    register_prompt(c).await;
    for chunk in rows().chunks(MAX_ROWS_PER_CALL) {
        let r = l
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{LEDGER}"),
                rows: chunk.to_vec(),
            })
            .await
            .expect("enroll")
            .into_inner();
        assert_eq!(r.enrolled as usize, chunk.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_rows_with_every_fault_end_where_their_fault_says() {
    let started = Instant::now();
    let stack = start_server(MAX_ROWS_PER_CALL).await;
    let (grpc, hook) = (stack.grpc.clone(), stack.hook.clone());

    let mut target = WebhookTarget::new(hook, SECRET);
    target.duplicate = true;
    // Each event again 2s later: after other batches' events and, often,
    // after the worker has read the batch by polling.
    target.redeliver_after = Some(Duration::from_secs(2));
    let emulator = Emulator::start(
        "127.0.0.1:0".parse().unwrap(),
        EmulatorConfig {
            api_key: API_KEY.into(),
            faults: fault_plan(),
            // Long enough that a submitted job is observably at the
            // provider when the first worker is killed.
            timing: Timing {
                pending: Duration::from_millis(300),
                running: Duration::from_millis(500),
            },
            webhook: Some(target),
            seed: 7,
            ..EmulatorConfig::default()
        },
    )
    .await
    .expect("emulator starts");
    let gemini = emulator.base_url();

    let c = tally_client::connect(&grpc, None).expect("connect");
    setup_ledger(&c).await;
    setup_typo_ledger(&c).await;
    let mut typo = spawn_worker(
        &grpc,
        &gemini,
        TYPO_LEDGER,
        "worker-typo",
        &["--claim-size", "5", "--max-rows-per-batch", "5"],
    );

    // Worker A runs one job at a time, so once its job is SUBMITTED it is
    // only waiting on the provider: killing it then leaves exactly one
    // submitted, unreconciled job and no batch made without a record.
    // Worker B starts only then: running alone, A is sure of a job slot
    // (B would otherwise take all of policy.max_active_jobs on a slow
    // machine, and A might never get one).
    let mut a = worker(&grpc, &gemini, "worker-a", &["--max-jobs", "1"]);

    let victim = common::submitted_job_of(&c, LEDGER, "worker-a").await;
    let mut b = worker(&grpc, &gemini, "worker-b", &["--exit-when-idle"]);
    a.start_kill().expect("SIGKILL worker-a");
    let status = a.wait().await.expect("worker-a reaped");
    assert!(!status.success(), "worker-a was killed, not finished");
    eprintln!(
        "killed worker-a at {:?} while {} was {:?}",
        started.elapsed(),
        victim.job_id,
        victim.state()
    );

    let status = tokio::time::timeout(Duration::from_secs(150), b.wait())
        .await
        .expect("worker-b finishes the ledger within 150s")
        .expect("worker-b reaped");
    assert!(status.success(), "worker-b exits 0 when idle: {status:?}");
    let work_done = started.elapsed();

    // ---- the unknown model: its ledger paused, its rows unattempted --------
    let mut l = c.ledgers.clone();
    let typo_summary = l
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{TYPO_LEDGER}"),
            ..Default::default()
        })
        .await
        .expect("summarize the typo ledger")
        .into_inner();
    typo.start_kill().expect("stop worker-typo");
    let _ = typo.wait().await;
    let pause = typo_summary
        .pause
        .clone()
        .expect("the typo ledger is paused");
    assert_eq!(
        pause.reason,
        pb::LedgerPauseReason::Model as i32,
        "{pause:?}"
    );
    assert!(
        pause.message.contains("is not found for API version"),
        "the provider's words: {}",
        pause.message
    );
    assert_eq!(
        typo_summary.attempts_total, 0,
        "no attempt spent on a refusal"
    );
    assert_eq!(typo_summary.pending, TYPO_ROWS as i64);

    // ---- every row where its fault says ------------------------------------
    let rows = all_rows(&c, LEDGER).await;
    assert_eq!(rows.len(), 1000);
    let stats = emulator.stats();
    let mut by_kind: BTreeMap<&str, Vec<&pb::Row>> = BTreeMap::new();
    for r in &rows {
        by_kind.entry(kind_of(&r.key)).or_default().push(r);
    }
    for k in kinds() {
        let rows = &by_kind[k.prefix];
        assert_eq!(rows.len(), k.count, "{}", k.prefix);
        for r in rows {
            assert_eq!(
                r.status(),
                k.status,
                "end state of {} ({:?})",
                r.key,
                r.rule
            );
            if let Some(rule) = k.rule {
                assert_eq!(r.rule, rule, "rule of {}", r.key);
            }
            if let Some(n) = k.provider_attempts {
                let got = r.attempts.as_ref().map_or(0, |a| a.provider);
                assert_eq!(got, n, "provider attempts of {}: {:?}", r.key, r.history);
            }
        }
    }

    // ---- never sent after success; sent once per attempt --------------------
    assert_eq!(
        stats.resubmitted_after_success(),
        Vec::<String>::new(),
        "rows sent again after they succeeded"
    );
    let mut failed_job_rows = 0;
    for r in &rows {
        let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
        let sent = stats.submission_count(&r.key);
        match kind_of(&r.key) {
            "huge-" => assert_eq!((sent, attempts), (0, 1), "{}", r.key),
            "chain-" => assert_eq!((sent, attempts), (0, 0), "{}", r.key),
            _ => assert_eq!(
                sent,
                attempts,
                "{} was sent {sent} times for {attempts} attempts: {:?} / {:?}",
                r.key,
                r.history
                    .iter()
                    .map(|a| (&a.rule, &a.batch, &a.actor))
                    .collect::<Vec<_>>(),
                stats.submissions.get(&r.key)
            ),
        }
        if r.status() == pb::RowStatus::Succeeded {
            let subs = &stats.submissions[&r.key];
            assert_eq!(
                subs.iter()
                    .filter(|s| s.outcome == Outcome::Success)
                    .count(),
                1,
                "{} answered successfully more than once",
                r.key
            );
            assert_eq!(subs.last().unwrap().outcome, Outcome::Success);
        }
        failed_job_rows += r.history.iter().filter(|a| a.rule == "job_failed").count();
    }
    // A row of a failed or expired batch: one the batch never answered, or
    // (a batch that failed after answering half its rows) one its answered
    // half left out, which the partial output cannot tell from unanswered.
    // (A probe batch a search made is no row: its key is left out.)
    let row_submissions = || {
        stats
            .submissions
            .iter()
            .filter(|(key, _)| key.as_str() != common::PROBE_KEY)
            .flat_map(|(_, subs)| subs)
    };
    let failed_batches: std::collections::HashSet<&str> = row_submissions()
        .filter(|s| matches!(s.outcome, Outcome::JobFailed | Outcome::JobExpired))
        .map(|s| s.batch.as_str())
        .collect();
    let whole_job_failures: usize = row_submissions()
        .filter(|s| {
            matches!(s.outcome, Outcome::JobFailed | Outcome::JobExpired)
                || (s.outcome == Outcome::Missing && failed_batches.contains(s.batch.as_str()))
        })
        .count();
    assert!(whole_job_failures > 0, "the failed and expired jobs ran");
    assert_eq!(
        failed_job_rows, whole_job_failures,
        "every row of a failed or expired batch has one job_failed attempt"
    );

    // ---- attempts and tokens add up -------------------------------------
    let summary = c
        .ledgers
        .clone()
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: format!("ledgers/{LEDGER}"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (mut row_usage, mut history_usage) = (pb::Usage::default(), pb::Usage::default());
    let (mut row_attempts, mut history_attempts) = (0i64, 0i64);
    for r in &rows {
        add(&mut row_usage, r.usage.as_ref());
        row_attempts += i64::from(r.attempts.as_ref().map_or(0, |a| a.total));
        history_attempts += r.history.len() as i64;
        for a in &r.history {
            add(&mut history_usage, a.usage.as_ref());
        }
    }
    assert_eq!(
        summary.attempts_total, row_attempts,
        "attempts: ledger = rows"
    );
    assert_eq!(row_attempts, history_attempts, "attempts: rows = history");
    assert_eq!(
        summary.usage.as_ref(),
        Some(&row_usage),
        "tokens: ledger = rows"
    );
    assert_eq!(row_usage, history_usage, "tokens: rows = history");
    assert!(row_usage.input_tokens > 0 && row_usage.output_tokens > 0);
    let expect_count = |s: pb::RowStatus| {
        kinds()
            .iter()
            .filter(|k| k.status == s)
            .map(|k| k.count as i64)
            .sum::<i64>()
    };
    assert_eq!(summary.succeeded, expect_count(pb::RowStatus::Succeeded));
    assert_eq!(summary.permanent, expect_count(pb::RowStatus::Permanent));
    assert_eq!(summary.blocked, expect_count(pb::RowStatus::Blocked));
    assert_eq!(
        (
            summary.pending,
            summary.running,
            summary.retryable,
            summary.active_jobs
        ),
        (0, 0, 0, 0)
    );

    // ---- webhooks: duplicated and late, nothing regressed --------------------
    let ops = c
        .operations
        .clone()
        .list_operations(pb::ListOperationsRequest {
            states: vec![],
            page_size: 1000,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .operations;
    let http = reqwest::Client::new();
    let mut drops: HashMap<String, i64> = HashMap::new();
    for op in &ops {
        for (reason, n) in &op.drops {
            *drops.entry(reason.clone()).or_default() += n;
        }
        let id = op.name.rsplit('/').next().unwrap();
        let at_provider: serde_json::Value = http
            .get(format!("{gemini}/v1beta/batches/{id}"))
            .header("x-goog-api-key", API_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let provider_state = at_provider["metadata"]["state"].as_str().unwrap();
        let expected = match provider_state {
            "BATCH_STATE_SUCCEEDED" => pb::OperationState::Succeeded,
            "BATCH_STATE_FAILED" => pb::OperationState::Failed,
            "BATCH_STATE_EXPIRED" => pb::OperationState::Expired,
            "BATCH_STATE_CANCELLED" => pb::OperationState::Cancelled,
            other => panic!("batch {id} still {other}"),
        };
        assert_eq!(op.state(), expected, "operation {} vs its batch", op.name);
    }
    assert_eq!(
        ops.len() as u64,
        stats.batches_created,
        "one operation per batch"
    );
    assert!(
        drops.get("duplicate_event").copied().unwrap_or(0) > 0,
        "duplicated webhooks were seen and dropped: {drops:?}"
    );

    // ---- jobs: all closed; the victim adopted, reconciled, not re-sent -------
    let jobs = list_jobs(&c, LEDGER).await;
    for j in &jobs {
        assert!(
            j.end_time.is_some(),
            "job {} still open: {:?}",
            j.job_id,
            j.state()
        );
    }
    let victim = jobs
        .iter()
        .find(|j| j.job_id == victim.job_id)
        .expect("the victim job");
    assert_eq!(victim.state(), pb::JobState::Reconciled);
    assert_eq!(
        victim.owner, "worker-b",
        "the killed worker's job was adopted"
    );
    assert!(victim.adoptions >= 1);
    // The victim's batch was made once: no other batch carries its job id.
    let mut same_name = 0;
    let mut token = String::new();
    loop {
        let page: serde_json::Value = http
            .get(format!("{gemini}/v1beta/batches"))
            .query(&[("pageSize", "100"), ("pageToken", token.as_str())])
            .header("x-goog-api-key", API_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        same_name += page["operations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|op| {
                op["metadata"]["displayName"]
                    .as_str()
                    .is_some_and(|d| d.ends_with(&format!("/{}", victim.job_id)))
            })
            .count();
        match page["nextPageToken"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    assert_eq!(
        same_name, 1,
        "the killed worker's job was not submitted again"
    );

    // Every batch the provider made is recorded on a job (the lost create
    // answer included): no orphan batch, so nothing was paid twice.
    common::assert_no_orphan_batch(&jobs, &stats);
    assert_eq!(stats.create_answers_lost, 1);
    assert_eq!(stats.downloads_refused, 1);
    assert_eq!(stats.mime_refusals, 1);
    let sent: usize = rows.iter().map(|r| stats.submission_count(&r.key)).sum();
    let attempts: i64 = rows
        .iter()
        .map(|r| i64::from(r.attempts.as_ref().map_or(0, |a| a.total)))
        .sum();
    let mut by_rule: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for r in &rows {
        *by_rule
            .entry((format!("{:?}", r.status()), r.rule.as_str()))
            .or_default() += 1;
    }
    eprintln!(
        "e2e_faults: 1000 rows, {} jobs, {} batches ({} create 429s, {} finalize error bodies, \
         {} create answers lost, {} outputs refused, {} MIME refusals), {} webhooks, \
         drops {drops:?}; rows sent {sent} for {attempts} attempts; rows by status and rule \
         {by_rule:?}; workers done in {work_done:?}, test wall time {:?}",
        jobs.len(),
        stats.batches_created,
        stats.create_rejections,
        stats.finalize_errors,
        stats.create_answers_lost,
        stats.downloads_refused,
        stats.mime_refusals,
        stats.webhooks_sent,
        started.elapsed()
    );
    emulator.shutdown().await;
    stack.server.stop().await.expect("server stops");
}

//! "For 60 s" (issue 51, what it must show): a worker given a refused
//! key, a forbidden upload, a base URL that answers 404, a full storage, a
//! spend-capped account or a retired model makes at most a handful of
//! provider calls in a whole minute, pauses the ledger with the
//! provider's words, and gives every row back without an attempt. Each
//! case starts tally, one emulator and one worker process, lets the
//! worker run for [`WINDOW`], and counts every call the emulator answered
//! (`requests`, refused ones and unknown routes too, not only the calls
//! that reached a resource).
//!
//! Every case holds the same invariants ([`Seen::check`]):
//! - at most [`MOST_CALLS`] provider calls in the window, and none once
//!   the ledger paused and its jobs closed;
//! - one job made: the worker never claimed again after the refusal;
//! - the ledger PAUSED for the case's reason (a 404 at a wrong base URL
//!   is REFUSED: it names no model), its message carrying the provider's
//!   words;
//! - no attempt counted (`attempts_total == 0`), every row PENDING.
//!
//! One test runs every case side by side (each waits its whole window):
//! `cargo test -p tally-worker --test worker e2e_sixty:: -- --nocapture`
//! takes about 70 s.

use crate::common::{self, API_KEY, Stack, World};
use crate::png::png;

use std::time::Duration;

use gemini_emulator::RequestStats;
use pb::LedgerPauseReason::{Billing, Model, Refused};
use sha2::Digest as _;
use tally_client::Clients;
use tally_proto::v1 as pb;
use tokio::process::Child;

/// How long each case's worker runs.
const WINDOW: Duration = Duration::from_secs(60);

/// The workers' lease: twelve stacks share the machine, and under that
/// load the tests' usual 3 s lease can lapse between two heartbeats (its
/// rows then charged `lease_expired`, as a dead worker's are).
const LEASE: &str = "60s";

/// The most provider calls a case may see in [`WINDOW`]. Each worker runs
/// one job at a time (`--max-jobs 1`) on a ledger of [`ROWS`] rows claimed
/// [`CLAIM`] at a time, so a worker that claimed again after a refusal
/// (issue 51's loop: a job and a refused call per claim, a thousand in
/// 20 s) would show three claims' calls and more. One job's calls fit:
/// the start-up listings (the janitor's of files, and at Gemini of
/// batches: 1 or 2), then the refused call (1: an upload or a create);
/// or, for a batch the provider takes and fails, the upload, the create,
/// the polls until it has failed (2: one at once, one a poll interval
/// later) and the results or the input file's deletion (OpenAI's
/// `model_not_found`: 1 + 1 + 1 + 2 + 1 = 6; Anthropic's retired model:
/// create, 2 polls, results = 4).
const MOST_CALLS: u64 = 6;

/// Rows per ledger, and per claim (and batch): three claims' worth.
const ROWS: usize = 12;
const CLAIM: &str = "4";

/// The worker flags every case runs with: small claims and batches, one
/// job at a time.
const FLAGS: [&str; 6] = [
    "--claim-size",
    CLAIM,
    "--max-rows-per-batch",
    CLAIM,
    "--max-jobs",
    "1",
];

/// What a case's minute left: the calls the emulator answered (when the
/// ledger had paused with its jobs closed, and at the window's end), the
/// ledger and its rows.
struct Seen {
    case: &'static str,
    at_pause: Option<u64>,
    requests: RequestStats,
    summary: pb::LedgerSummary,
    rows: Vec<pb::Row>,
    jobs: usize,
}

/// Runs the worker for [`WINDOW`], noting the calls counted by
/// `requests` once the ledger has paused and its jobs closed, then kills
/// it and reads what the minute left.
async fn watch<F>(
    case: &'static str,
    c: &Clients,
    ledger: &str,
    mut worker: Child,
    requests: F,
) -> Seen
where
    F: Fn() -> RequestStats,
{
    let end = tokio::time::Instant::now() + WINDOW;
    let mut at_pause = None;
    while tokio::time::Instant::now() < end {
        if at_pause.is_none() {
            let s = common::summary(c, ledger).await;
            if s.state == pb::LedgerState::Paused as i32 && s.active_jobs == 0 {
                at_pause = Some(requests().total);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let requests = requests();
    worker.kill().await.ok();
    Seen {
        case,
        at_pause,
        requests,
        summary: common::summary(c, ledger).await,
        rows: common::all_rows(c, ledger).await,
        jobs: common::list_jobs(c, ledger).await.len(),
    }
}

impl Seen {
    /// The invariants every case holds (see the module's header), the
    /// pause for `reason` with each of `words` in its message.
    fn check(&self, reason: pb::LedgerPauseReason, words: &[&str]) {
        let calls = self.requests.total;
        let pause = self.summary.pause.clone().unwrap_or_default();
        println!(
            "{}: {calls} provider calls in {}s ({} at the pause), {} jobs: {:?}; paused ({}): {:?}",
            self.case,
            WINDOW.as_secs(),
            self.at_pause.map_or("none".into(), |n| n.to_string()),
            self.jobs,
            self.requests.by_route,
            pause.reason,
            pause.message,
        );
        assert_eq!(
            self.summary.state,
            pb::LedgerState::Paused as i32,
            "{}: the ledger pauses",
            self.case
        );
        assert_eq!(pause.reason, reason as i32, "{}: {pause:?}", self.case);
        for w in words {
            assert!(
                pause.message.contains(w),
                "{}: the provider's words ({w:?}): {}",
                self.case,
                pause.message
            );
        }
        assert!(
            (1..=MOST_CALLS).contains(&calls),
            "{}: a handful of provider calls in a minute, not a loop: {calls} {:?}",
            self.case,
            self.requests.by_route
        );
        assert_eq!(
            self.at_pause,
            Some(calls),
            "{}: no provider call once the ledger paused and its jobs closed",
            self.case
        );
        assert_eq!(self.jobs, 1, "{}: one job, no claim after it", self.case);
        assert_eq!(
            self.summary.attempts_total, 0,
            "{}: no attempt spent",
            self.case
        );
        assert_eq!(self.rows.len(), ROWS, "{}", self.case);
        for r in &self.rows {
            assert_eq!(
                (r.status(), r.attempts.as_ref().map_or(0, |a| a.total)),
                (pb::RowStatus::Pending, 0),
                "{}: {} waits unattempted ({})",
                self.case,
                r.key,
                r.last_error
            );
        }
    }
}

/// Database connections each case's tally may hold: the cases run side
/// by side, and a dozen servers at the tests' usual 16 would pass the
/// database's 100.
const DB_CONNECTIONS: u32 = 6;

/// tally with a ledger of [`ROWS`] rows `row-00`… on the `summarize`
/// prompt for `model`.
async fn tally(ledger: &str, model: &str) -> (Stack, Clients) {
    let stack = common::start_server_with(100, |a| a.db_max_connections = DB_CONNECTIONS).await;
    let c = tally_client::connect(&stack.grpc, None).expect("connect");
    common::create_ledger(&c, ledger, model, pb::AttemptBudgets::default()).await;
    common::register_prompt(&c).await;
    common::enroll_documents(&c, ledger, "row-", ROWS, "").await;
    (stack, c)
}

/// Every case side by side: each waits its whole window, so together they
/// take about one window whatever the number of test threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refusal_held_for_a_minute() {
    tokio::join!(
        anthropic::a_refused_key(),
        anthropic::a_base_url_answering_404(),
        anthropic::a_spend_capped_account(),
        anthropic::a_retired_model(),
        openai::a_refused_key(),
        openai::a_forbidden_upload(),
        openai::a_base_url_answering_404(),
        openai::a_full_storage(),
        openai::a_model_not_found(),
        gemini::a_refused_key(),
        gemini::a_base_url_answering_404(),
        gemini::a_forbidden_media_upload(),
    );
}

// ---- Anthropic ---------------------------------------------------------------

mod anthropic {
    use super::*;
    use anthropic_emulator::{Emulator, EmulatorConfig, FaultPlan, Models, Timing};

    const MODEL: &str = "claude-haiku-4-5";

    /// The Anthropic emulator taking `keys`, knowing `models`, under
    /// `faults`; its batches end in 300 ms.
    async fn emulator(keys: &[&str], models: Models, faults: serde_json::Value) -> Emulator {
        let faults: FaultPlan = serde_json::from_value(faults).expect("a valid fault plan");
        Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
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
        .expect("emulator starts")
    }

    /// One case: tally with a ledger for `model`, the emulator `emu`, a
    /// worker at `base` (the emulator's URL unless `wrong_path`) for
    /// [`WINDOW`].
    async fn case(
        case: &'static str,
        model: &str,
        emu: Emulator,
        wrong_path: Option<&str>,
    ) -> (Seen, Stack, Emulator) {
        let (stack, c) = tally(case, model).await;
        let base = format!("{}{}", emu.base_url(), wrong_path.unwrap_or(""));
        let worker = common::spawn_api_worker_leased(
            &stack.grpc,
            "anthropic",
            &base,
            case,
            case,
            LEASE,
            &FLAGS,
        );
        let seen = watch(case, &c, case, worker, || emu.stats().requests).await;
        (seen, stack, emu)
    }

    async fn stop(stack: Stack, emu: Emulator) {
        emu.shutdown().await;
        stack.server.stop().await.expect("server stops");
    }

    /// A key Anthropic refuses: every create answers 401
    /// `authentication_error`. The ledger pauses (REFUSED) with the
    /// provider's words after the first.
    pub(super) async fn a_refused_key() {
        let emu = emulator(&["sk-ant-another"], Models::Any, serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-ant-key", MODEL, emu, None).await;
        seen.check(Refused, &["401", "invalid x-api-key"]);
        assert_eq!(emu.stats().batches_created, 0);
        stop(stack, emu).await;
    }

    /// A base URL that answers 404 to every call (a wrong path before
    /// `/v1`): the first create's `not_found_error` pauses the ledger.
    pub(super) async fn a_base_url_answering_404() {
        let emu = emulator(&[API_KEY], Models::Any, serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-ant-404", MODEL, emu, Some("/wrong")).await;
        seen.check(Refused, &["404"]);
        assert_eq!(emu.stats().batches_created, 0);
        stop(stack, emu).await;
    }

    /// An account over its monthly spend cap: every create answers 429
    /// `rate_limit_error` with `error.details.error_code:
    /// enforced_spend_limit_reached` and no `retry-after`. The ledger
    /// pauses (BILLING) instead of creating again every minute.
    pub(super) async fn a_spend_capped_account() {
        let plan = serde_json::json!({"spend_limit": {"times": 1_000_000}});
        let emu = emulator(&[API_KEY], Models::Any, plan).await;
        let (seen, stack, emu) = case("sixty-ant-spend", MODEL, emu, None).await;
        seen.check(Billing, &["spend limit"]);
        assert_eq!(emu.stats().batches_created, 0);
        stop(stack, emu).await;
    }

    /// A retired model: Anthropic takes the batch and answers every
    /// request `not_found_error`. The ledger pauses (MODEL) after that
    /// one batch, and its rows go back without an attempt.
    pub(super) async fn a_retired_model() {
        let emu = emulator(&[API_KEY], Models::only(&[MODEL]), serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-ant-retired", "claude-3-retired", emu, None).await;
        seen.check(Model, &["not_found_error"]);
        assert_eq!(emu.stats().batches_created, 1, "one batch, not one a claim");
        stop(stack, emu).await;
    }
}

// ---- OpenAI ------------------------------------------------------------------

mod openai {
    use super::*;
    use openai_emulator::{Emulator, EmulatorConfig, FaultPlan, Models, Timing};

    const MODEL: &str = "gpt-4o-mini";

    /// The OpenAI emulator taking `keys`, knowing `models`, under
    /// `faults`, with fast batches.
    async fn emulator(keys: &[&str], models: Models, faults: serde_json::Value) -> Emulator {
        let faults: FaultPlan = serde_json::from_value(faults).expect("a valid fault plan");
        Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
                faults,
                timing: Timing::fast(),
                seed: 7,
                models,
                ..EmulatorConfig::default()
            },
        )
        .await
        .expect("emulator starts")
    }

    /// One case: tally with a ledger for `model`, the emulator `emu`, a
    /// worker at its API URL (`/v1`, unless `unversioned`: its bare base
    /// URL, as a new user might copy it) for [`WINDOW`].
    async fn case(
        case: &'static str,
        model: &str,
        emu: Emulator,
        unversioned: bool,
    ) -> (Seen, Stack, Emulator) {
        let (stack, c) = tally(case, model).await;
        let base = match unversioned {
            true => emu.base_url(),
            false => format!("{}/v1", emu.base_url()),
        };
        let worker = common::spawn_api_worker_leased(
            &stack.grpc,
            "openai",
            &base,
            case,
            case,
            LEASE,
            &FLAGS,
        );
        let seen = watch(case, &c, case, worker, || emu.stats().requests).await;
        (seen, stack, emu)
    }

    async fn stop(stack: Stack, emu: Emulator) {
        emu.shutdown().await;
        stack.server.stop().await.expect("server stops");
    }

    /// Nothing was stored or made at the provider.
    fn nothing_made(emu: &Emulator) {
        let stats = emu.stats();
        assert_eq!((stats.uploads, stats.batches_created), (0, 0));
    }

    /// A key OpenAI refuses: the input file's upload answers 401
    /// `invalid_api_key` (issue 51: 1,003 jobs and refused uploads in
    /// 20 s). The ledger pauses (REFUSED) with the provider's words.
    pub(super) async fn a_refused_key() {
        let emu = emulator(&["sk-another-key"], Models::Any, serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-oai-key", MODEL, emu, false).await;
        seen.check(Refused, &["upload was refused", "401", "Incorrect API key"]);
        nothing_made(&emu);
        stop(stack, emu).await;
    }

    /// An upload OpenAI forbids (403 `unsupported_country_region_territory`).
    pub(super) async fn a_forbidden_upload() {
        let plan = serde_json::json!({"upload_refused": {}});
        let emu = emulator(&[API_KEY], Models::Any, plan).await;
        let (seen, stack, emu) = case("sixty-oai-forbidden", MODEL, emu, false).await;
        seen.check(
            Refused,
            &[
                "upload was refused",
                "403",
                "Country, region, or territory not supported",
            ],
        );
        nothing_made(&emu);
        stop(stack, emu).await;
    }

    /// A base URL without `/v1` (the emulator's own start-up line, as a
    /// new user might copy it): every call answers 404 "Invalid URL"
    /// (issue 51: 1,526 jobs in 30 s).
    pub(super) async fn a_base_url_answering_404() {
        let emu = emulator(&[API_KEY], Models::Any, serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-oai-404", MODEL, emu, true).await;
        seen.check(Refused, &["404", "Invalid URL"]);
        nothing_made(&emu);
        stop(stack, emu).await;
    }

    /// A full file storage (400 "You have exceeded your file storage
    /// quota", which no wait cures; issue 51: 3,598 jobs in 60 s).
    pub(super) async fn a_full_storage() {
        let plan = serde_json::json!({"storage_limit_bytes": 100});
        let emu = emulator(&[API_KEY], Models::Any, plan).await;
        let (seen, stack, emu) = case("sixty-oai-storage", MODEL, emu, false).await;
        seen.check(
            Refused,
            &["upload was refused", "400", "file storage quota"],
        );
        nothing_made(&emu);
        stop(stack, emu).await;
    }

    /// A model the account cannot batch: the batch is taken, then fails
    /// at validation with `errors.data[0].code: model_not_found`. The
    /// ledger pauses (MODEL) after that one batch.
    pub(super) async fn a_model_not_found() {
        let emu = emulator(&[API_KEY], Models::only(&[MODEL]), serde_json::json!({})).await;
        let (seen, stack, emu) = case("sixty-oai-model", "gpt-4.5-preview", emu, false).await;
        seen.check(Model, &["model_not_found"]);
        assert_eq!(emu.stats().batches_created, 1, "one batch, not one a claim");
        stop(stack, emu).await;
    }
}

// ---- Gemini ------------------------------------------------------------------

mod gemini {
    use super::*;
    use gemini_emulator::FaultPlan;

    /// A world (tally, the Gemini emulator under `faults`, the ledger
    /// `case` of [`ROWS`] rows, pages under `media` when given) and a
    /// worker at `base` of the emulator's base URL, with `extra` flags,
    /// for [`WINDOW`].
    async fn case(
        case: &'static str,
        faults: FaultPlan,
        media: Option<&std::path::Path>,
        base: fn(String) -> String,
        extra: &[String],
    ) -> (Seen, World) {
        let rows = if media.is_some() { 0 } else { ROWS };
        let timing = gemini_emulator::Timing {
            pending: Duration::from_millis(200),
            running: Duration::from_millis(300),
        };
        let budgets = pb::AttemptBudgets::default();
        let w = World::start_configured(case, rows, faults, budgets, timing, |a| {
            a.db_max_connections = DB_CONNECTIONS
        })
        .await;
        let mut args: Vec<String> = FLAGS.map(str::to_owned).to_vec();
        args.extend_from_slice(extra);
        if let Some(root) = media {
            enroll_pages(&w, case, root).await;
            args.extend(["--media-root".into(), root.display().to_string()]);
            // Pages larger than this go by the Files API, not inline.
            args.extend(["--media-inline-max".into(), "4096".into()]);
        }
        let base = base(w.emulator.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let worker =
            common::worker_command_leased(&w.stack.grpc, &base, case, case, Some(LEASE), &args)
                .spawn()
                .expect("spawn tally-worker");
        let seen = watch(case, &w.c, case, worker, || w.emulator.stats().requests).await;
        (seen, w)
    }

    /// [`ROWS`] pages of 64×64 (about 12 KB each, past the inline
    /// bound) written under `root` and enrolled on an OCR prompt whose
    /// `page` variable is the row's image.
    async fn enroll_pages(w: &World, ledger: &str, root: &std::path::Path) {
        w.c.ledgers
            .clone()
            .register_prompt(pb::RegisterPromptRequest {
                prompt_id: "ocr".into(),
                version: "v1".into(),
                template: "Transcribe page {{ n }}.".into(),
                media: vec!["page".into()],
                ..Default::default()
            })
            .await
            .expect("register the prompt");
        std::fs::create_dir_all(root).unwrap();
        let rows = (0..ROWS)
            .map(|i| {
                let bytes = png(64, 64, i as u64);
                let path = format!("p{i:02}.png");
                std::fs::write(root.join(&path), &bytes).unwrap();
                let sha = hex::encode(sha2::Sha256::digest(&bytes));
                pb::RowInput {
                    key: format!("page-{i:02}"),
                    payload: serde_json::json!({"n": i, "page": {"uri": path, "sha256": sha}})
                        .to_string(),
                    prompt: Some(pb::PromptRef {
                        name: "ocr".into(),
                        version: "v1".into(),
                    }),
                    ..Default::default()
                }
            })
            .collect();
        w.c.ledgers
            .clone()
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{ledger}"),
                rows,
            })
            .await
            .expect("enroll the pages");
    }

    /// A key Gemini refuses (400 `API_KEY_INVALID`, as the provider
    /// answers an unknown key): the ledger pauses (REFUSED) with the
    /// provider's words.
    pub(super) async fn a_refused_key() {
        let key = std::env::temp_dir().join(format!("tally-sixty-key-{}", std::process::id()));
        std::fs::write(&key, "not-the-key").unwrap();
        let extra = ["--gemini-api-key-file".into(), key.display().to_string()];
        let plan = FaultPlan::default();
        let (seen, w) = case("sixty-gem-key", plan, None, |b| b, &extra).await;
        seen.check(Refused, &["API key not valid"]);
        assert_eq!(w.emulator.stats().batches_created, 0);
        std::fs::remove_file(&key).ok();
        w.stop().await;
    }

    /// A base URL that answers 404 to every call (issue 51: 823 jobs in
    /// 10 s).
    pub(super) async fn a_base_url_answering_404() {
        let wrong = |base| format!("{base}/wrong/path");
        let plan = FaultPlan::default();
        let (seen, w) = case("sixty-gem-404", plan, None, wrong, &[]).await;
        seen.check(Refused, &["404"]);
        assert_eq!(w.emulator.stats().batches_created, 0);
        w.stop().await;
    }

    /// Pages whose media uploads Gemini forbids (403 `PERMISSION_DENIED`
    /// "The caller does not have permission" at the start of every Files
    /// API upload): the refusal is the account's, not the pages', so the
    /// first pauses the ledger (REFUSED) and no page is burnt.
    pub(super) async fn a_forbidden_media_upload() {
        let root = std::env::temp_dir().join(format!("tally-sixty-media-{}", std::process::id()));
        let plan = serde_json::json!({"upload_refusal": {"code": 403}});
        let plan: FaultPlan = serde_json::from_value(plan).expect("a valid fault plan");
        let (seen, w) = case("sixty-gem-media", plan, Some(&root), |b| b, &[]).await;
        seen.check(
            Refused,
            &[
                "a media upload was refused",
                "The caller does not have permission",
            ],
        );
        let stats = w.emulator.stats();
        assert!(stats.upload_rejections >= 1, "the refusal met");
        assert_eq!((stats.uploads, stats.batches_created), (0, 0));
        std::fs::remove_dir_all(&root).ok();
        w.stop().await;
    }
}

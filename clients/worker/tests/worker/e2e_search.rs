//! Lost creates behind a long list, and input files not yet visible, at
//! the OpenAI emulator (issue 51, items 3 and 4): the real tally server
//! in-process, the OpenAI emulator in-process holding 100,001 batches of
//! another client, and `tally-worker --provider openai`.
//!
//! Invariants (each test names the ones it checks):
//! - no row is sent twice, whatever the list's order or lag;
//! - a search reads a bounded number of pages and makes a bounded number
//!   of probes;
//! - a lost create the list cannot bound is reported to the operator
//!   (`tally_worker_create_searches_flagged`), its rows held, never
//!   released on a guess; an operator who finds the batch ends the
//!   search, and the batch is followed;
//! - a create refused because its input file is not visible yet is sent
//!   again a bounded number of times and succeeds; the ledger never
//!   pauses.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_search:: -- --nocapture`.

use crate::common;

use std::time::Duration;

use common::{
    API_KEY, CREATE_FLAGS, PROBE_KEY, Stack, all_rows, create_ledger, enroll_documents, exits_ok,
    list_jobs, register_prompt, spawn_openai_worker, start_server, summary, until, worker_args,
};
use openai_emulator::{Emulator, EmulatorConfig, FaultPlan, Stats, Timing};
use tally_client::Clients;
use tally_proto::v1 as pb;
use tally_telemetry::exposition;

const MODEL: &str = "gpt-4o-mini";
/// Batches the account holds before the run: past OpenAI's 100,000, more
/// than a search may read (`--max-list-pages 20`: 2,000 batches).
const SEEDED: u64 = 100_001;
const ROWS: usize = 30;
const MAX_PAGES: &str = "20";

struct SearchWorld {
    stack: Stack,
    emulator: Emulator,
    c: Clients,
}

impl SearchWorld {
    async fn start(ledger: &str, faults: serde_json::Value, seed_batches: u64) -> SearchWorld {
        let stack = start_server(100).await;
        let faults: FaultPlan = serde_json::from_value(faults).expect("a valid fault plan");
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            EmulatorConfig {
                api_keys: vec![API_KEY.into()],
                faults,
                timing: Timing::fast(),
                seed: 11,
                seed_batches,
                ..EmulatorConfig::default()
            },
        )
        .await
        .expect("emulator starts");
        let c = tally_client::connect(&stack.grpc, None).expect("connect");
        create_ledger(&c, ledger, MODEL, pb::AttemptBudgets::default()).await;
        register_prompt(&c).await;
        enroll_documents(&c, ledger, "row-", ROWS, "").await;
        SearchWorld { stack, emulator, c }
    }

    fn url(&self) -> String {
        format!("{}/v1", self.emulator.base_url())
    }

    async fn stop(self) {
        self.emulator.shutdown().await;
        self.stack.server.stop().await.expect("server stops");
    }
}

/// The create path's short settings, the page bound, and `extra`.
fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = CREATE_FLAGS.to_vec();
    args.extend(["--max-list-pages", MAX_PAGES]);
    args.extend_from_slice(extra);
    args
}

/// No row sent more than once (and each SUCCEEDED row exactly once).
fn check_never_twice(stats: &Stats, rows: &[pb::Row]) {
    for r in rows {
        let sent = stats.submission_count(&r.key);
        assert!(
            sent <= 1,
            "{} sent {sent} times: {:?}",
            r.key,
            stats.submissions.get(&r.key)
        );
        if r.status() == pb::RowStatus::Succeeded {
            assert_eq!(sent, 1, "{}", r.key);
        }
    }
}

/// Invariants: a create whose answer was lost, behind 100,001 batches
/// listed newest first while each new batch lags in the list by its own
/// time (1.5 to 3.5 s: the list fills out of creation order), is found:
/// every row SUCCEEDED and sent once; each search stopped a page past the
/// attempt's window instead of reading the list whole (1,001 pages), so
/// all searches together read fewer pages than one whole read; at most 3
/// probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_create_behind_a_long_newest_first_list_is_found_in_a_few_pages() {
    const LEDGER: &str = "search-newest";
    let w = SearchWorld::start(
        LEDGER,
        serde_json::json!({
            "create_answer_lost": {"times": 1},
            "list_lag_ms": 1500,
            "list_lag_spread_ms": 2000,
        }),
        SEEDED,
    )
    .await;
    let worker = spawn_openai_worker(
        &w.stack.grpc,
        &w.url(),
        LEDGER,
        "searcher",
        &flags(&["--exit-when-idle"]),
    );
    exits_ok(worker, "searcher").await;
    let rows = all_rows(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    assert_eq!(stats.create_answers_lost, 1);
    assert_eq!(stats.batches_seeded, SEEDED);
    assert!(
        rows.iter().all(|r| r.status() == pb::RowStatus::Succeeded),
        "every row succeeded"
    );
    check_never_twice(&stats, &rows);
    let jobs = list_jobs(&w.c, LEDGER).await;
    common::assert_batches_recorded(
        &jobs,
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
    );
    println!(
        "{} jobs, {} batches created ({} probes), {} list pages read in all",
        jobs.len(),
        stats.batches_created,
        stats.submission_count(PROBE_KEY),
        stats.batch_list_pages
    );
    assert!(
        stats.batch_list_pages < 1_001,
        "the searches read {} pages: fewer than one read of the whole list",
        stats.batch_list_pages
    );
    assert!(stats.submission_count(PROBE_KEY) <= 3, "at most 3 probes");
    w.stop().await;
}

/// Invariants: a create whose answer was lost, behind 100,001 batches
/// listed in no order (shuffled), cannot be proven absent within 20 pages:
/// the search is reported to the operator
/// (`tally_worker_create_searches_flagged_total` 1,
/// `tally_worker_create_searches_unresolved` 1, the job CREATING with
/// `create_unresolved` naming the tag) unless it happened on the
/// batch; its rows are never released on a guess: every row is sent at
/// most once; every search read at most 20 pages; at most 3 probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_create_behind_a_long_shuffled_list_is_flagged_not_guessed() {
    const LEDGER: &str = "search-shuffled";
    let w = SearchWorld::start(
        LEDGER,
        serde_json::json!({
            "create_answer_lost": {"times": 1},
            "list_order": "shuffled",
        }),
        SEEDED,
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = w.url();
    let args = worker_args(
        &w.stack.grpc,
        "http://127.0.0.1:9",
        LEDGER,
        "searcher",
        &flags(&["--provider", "openai", "--openai-base-url", &url]),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let worker = tokio::spawn(tally_worker::run_serving(
        args,
        tally_worker::ApiKey::new(API_KEY.into()),
        async move { stopped.cancelled().await },
        Some(listener),
    ));
    let metrics = format!("http://{addr}/metrics");
    let scrape = || async {
        let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        exposition::parse(&text).expect("the text format parses")
    };
    let lost_job_done = || async {
        let jobs = list_jobs(&w.c, LEDGER).await;
        jobs.iter().all(|j| j.end_time.is_some()) && jobs.len() >= 3
    };
    until(
        Duration::from_secs(90),
        "the search is flagged (or finds the batch)",
        || async {
            let s = scrape().await;
            s.sample("tally_worker_create_searches_flagged_total", &[]) == Some(1.0)
                || lost_job_done().await
        },
    )
    .await;
    let s = scrape().await;
    let flagged = s.sample("tally_worker_create_searches_flagged_total", &[]);
    let pages = s
        .sample("tally_worker_create_search_pages_total", &[])
        .unwrap_or(0.0);
    let stats = w.emulator.stats();
    let rows = all_rows(&w.c, LEDGER).await;
    check_never_twice(&stats, &rows);
    let held = summary(&w.c, LEDGER).await;
    println!(
        "flagged {flagged:?}; {pages} pages read by searches, {} list pages served; {} probes; ledger {:?} succeeded {} of {ROWS}",
        stats.batch_list_pages,
        stats.submission_count(PROBE_KEY),
        held.state,
        held.succeeded
    );
    if flagged == Some(1.0) {
        assert_eq!(
            s.sample("tally_worker_create_searches_unresolved", &[]),
            Some(1.0),
            "the flagged search is still running, its rows held"
        );
        assert!(
            held.succeeded < ROWS as i64,
            "the lost job's rows are held, not released"
        );
        // The job says so to operators: CREATING, unresolved, with why.
        until(
            Duration::from_secs(30),
            "the job shows the flag",
            || async {
                list_jobs(&w.c, LEDGER)
                    .await
                    .iter()
                    .any(|j| !j.create_unresolved.is_empty())
            },
        )
        .await;
        let jobs = list_jobs(&w.c, LEDGER).await;
        let flagged_job = jobs
            .iter()
            .find(|j| !j.create_unresolved.is_empty())
            .unwrap();
        println!("job flagged: {}", flagged_job.create_unresolved);
        assert_eq!(flagged_job.state, pb::JobState::Creating as i32);
        assert!(flagged_job.create_unresolved_time.is_some());
        assert!(
            flagged_job.create_unresolved.contains("tally/"),
            "names the tag to look for: {}",
            flagged_job.create_unresolved
        );
        // A search reads at most 20 pages; one that read them all waits
        // longer before the next.
        assert!(pages >= 20.0, "the search read up to its bound");
        assert!(pages <= 3.0 * 20.0, "{pages} pages: a few searches at most");
    }
    assert!(stats.submission_count(PROBE_KEY) <= 3, "at most 3 probes");
    assert_ne!(held.state, pb::LedgerState::Paused as i32);
    stop.cancel();
    worker.await.unwrap().expect("the worker stops cleanly");
    // Stopped with the create unresolved: left for adoption, rows held.
    check_never_twice(&w.emulator.stats(), &all_rows(&w.c, LEDGER).await);
    w.stop().await;
}

/// Invariants: each input file is invisible to its first 2 creates (OpenAI's
/// 400 "Cannot find file …" right after the upload): the worker checks the
/// file, creates again after a short pause, and every row SUCCEEDED, sent
/// once; the ledger never paused; each job's create was refused at most
/// twice (3 jobs: 6 refusals), no more than the fault made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_not_yet_visible_is_waited_for_not_refused() {
    const LEDGER: &str = "file-lag";
    let w = SearchWorld::start(
        LEDGER,
        serde_json::json!({"file_visibility_lag": {"creates": 2}}),
        0,
    )
    .await;
    let worker = spawn_openai_worker(
        &w.stack.grpc,
        &w.url(),
        LEDGER,
        "waiter",
        &flags(&["--exit-when-idle"]),
    );
    exits_ok(worker, "waiter").await;
    let rows = all_rows(&w.c, LEDGER).await;
    let stats = w.emulator.stats();
    let jobs = list_jobs(&w.c, LEDGER).await;
    let s = summary(&w.c, LEDGER).await;
    println!(
        "{} jobs, {} batches, {} creates refused as not visible, ledger {:?}",
        jobs.len(),
        stats.batches_created,
        stats.creates_file_not_visible,
        s.state
    );
    assert!(
        rows.iter().all(|r| r.status() == pb::RowStatus::Succeeded),
        "every row succeeded"
    );
    check_never_twice(&stats, &rows);
    assert!(s.pause.is_none(), "the ledger never paused: {:?}", s.pause);
    assert_eq!(s.attempts_total, ROWS as i64, "one attempt per row");
    let made = jobs.iter().filter(|j| !j.batch.is_empty()).count() as u64;
    assert_eq!(made, stats.batches_created, "every batch recorded");
    assert_eq!(
        stats.creates_file_not_visible,
        2 * stats.uploads,
        "each upload's create refused exactly its 2 times, then made"
    );
    assert_eq!(stats.create_rejections, stats.creates_file_not_visible);
    w.stop().await;
}

/// Invariants: an operator ends a lost create's search with the batch
/// they found at the provider (what `tallyctl jobs resolve-create --batch`
/// sends: GetJob, then MarkSubmitted under the job's claim) while the
/// list will not show it for ten minutes: the searching worker follows
/// that batch at once; every row SUCCEEDED, sent once, one attempt each;
/// the ledger never paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_ends_a_lost_create_search_with_the_batch_found() {
    const LEDGER: &str = "search-operator";
    let w = SearchWorld::start(
        LEDGER,
        serde_json::json!({
            "create_answer_lost": {"times": 1},
            "list_lag_ms": 600_000,
        }),
        0,
    )
    .await;
    let worker = spawn_openai_worker(
        &w.stack.grpc,
        &w.url(),
        LEDGER,
        "searcher",
        &flags(&["--exit-when-idle"]),
    );
    // The other jobs end; the lost one is CREATING, searching.
    until(
        Duration::from_secs(60),
        "all but the lost job's rows succeed",
        || async { summary(&w.c, LEDGER).await.succeeded == (ROWS - 10) as i64 },
    )
    .await;
    let lost = list_jobs(&w.c, LEDGER)
        .await
        .into_iter()
        .find(|j| j.state() == pb::JobState::Creating)
        .expect("the lost create's job is CREATING");
    // The operator looks at the provider: the batch holding its rows.
    let stats = w.emulator.stats();
    let held: Vec<pb::Row> = all_rows(&w.c, LEDGER)
        .await
        .into_iter()
        .filter(|r| r.status() != pb::RowStatus::Succeeded)
        .collect();
    let batches: std::collections::BTreeSet<String> = held
        .iter()
        .flat_map(|r| stats.submissions[&r.key].iter().map(|s| s.batch.clone()))
        .collect();
    assert_eq!(
        batches.len(),
        1,
        "the held rows went in one batch: {batches:?}"
    );
    let batch = batches.into_iter().next().unwrap();
    let mut jobs = w.c.jobs.clone();
    jobs.mark_submitted(pb::MarkSubmittedRequest {
        name: lost.name.clone(),
        claim: lost.claim.clone(),
        batch: format!("batches/{batch}"),
        input_file: lost.input_file.clone(),
    })
    .await
    .expect("the operator's MarkSubmitted");
    exits_ok(worker, "searcher").await;
    let rows = all_rows(&w.c, LEDGER).await;
    let s = summary(&w.c, LEDGER).await;
    println!(
        "resolved by the operator as {batch}: {} of {ROWS} succeeded, {} attempts",
        s.succeeded, s.attempts_total
    );
    assert!(
        rows.iter().all(|r| r.status() == pb::RowStatus::Succeeded),
        "every row succeeded"
    );
    check_never_twice(&w.emulator.stats(), &rows);
    assert_eq!(s.attempts_total, ROWS as i64, "one attempt per row");
    assert!(s.pause.is_none(), "{:?}", s.pause);
    w.stop().await;
}

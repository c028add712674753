//! The page reaches the model (issue 31): rows whose prompt declares a
//! media variable carry a page image, generated here as real PNG files.
//! Small images go inline, larger ones are uploaded once and referenced by
//! every attempt (a transient fault makes some rows run twice) and by the
//! worker that adopts the job of one killed after its create. A missing
//! image and one changed on disk after enrollment are PERMANENT
//! (`media_unreadable`, naming the file); re-enrolling a page whose image
//! changed is a CONFLICT. A worker without `--media-root` stops instead of
//! burning rows.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_media:: -- --nocapture`.

use crate::common::{World, all_rows, exits_ok, list_jobs};
use crate::png::png;

use gemini_emulator::{FaultPlan, RowFault, RowMatch, RowRule};
use sha2::Digest as _;
use std::collections::HashMap;
use std::path::Path;
use tally_proto::v1 as pb;

const LEDGER: &str = "pages";
const PAGES: usize = 12;
/// Images up to this many bytes go inline (a 16×16 page is about 800
/// bytes, a 64×64 one about 12 KB).
const INLINE_MAX: &str = "4096";

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn row(key: &str, n: usize, uri: &str, hash: &str) -> pb::RowInput {
    pb::RowInput {
        key: key.into(),
        payload: serde_json::json!({
            "book": "b", "n": n,
            "page": {"uri": uri, "sha256": hash},
        })
        .to_string(),
        prompt: Some(pb::PromptRef {
            name: "ocr".into(),
            version: "v1".into(),
        }),
        ..Default::default()
    }
}

async fn enroll(w: &World, rows: Vec<pb::RowInput>) -> pb::EnrollRowsResponse {
    w.c.ledgers
        .clone()
        .enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{LEDGER}"),
            rows,
        })
        .await
        .expect("enroll")
        .into_inner()
}

/// The `ocr@v1` prompt, whose `page` variable is the row's image.
async fn register_ocr(w: &World) {
    w.c.ledgers
        .clone()
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "ocr".into(),
            version: "v1".into(),
            template: "Transcribe page {{ n }} of {{ book }}.".into(),
            response_schema: serde_json::json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })
            .to_string(),
            media: vec!["page".into()],
            ..Default::default()
        })
        .await
        .expect("register the prompt");
}

/// A worker started without `--media-root` on rows whose pages are local
/// files is a mistake of the worker's, not of the rows: it exits with an
/// error naming the flag, and every row is still PENDING with no attempt
/// (nothing PERMANENT, nothing BLOCKED behind it); started again with its
/// media root, every row succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_without_its_media_root_stops_and_burns_no_row() {
    let w = World::start(
        LEDGER,
        0,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    register_ocr(&w).await;
    let rows = (0..6)
        .map(|i| {
            row(
                &format!("page-{i}"),
                i,
                &format!("book/p{i}.png"),
                &sha(&png(16, 16, i as u64)),
            )
        })
        .collect();
    enroll(&w, rows).await;
    let mut worker = w.worker(
        LEDGER,
        "rootless",
        &["--claim-size", "3", "--max-rows-per-batch", "3"],
    );
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), worker.wait())
        .await
        .expect("the worker stops within 60 s")
        .expect("reaped");
    assert!(!status.success(), "a settings error: {status:?}");
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(r.status(), pb::RowStatus::Pending, "{} ({})", r.key, r.rule);
        assert_eq!(r.attempts.map_or(0, |a| a.total), 0, "{}", r.key);
    }
    assert_eq!(w.emulator.stats().batches_created, 0);

    // Started again with its media root, the same worker finishes every
    // row, each attempted once (issue 55).
    let root = std::env::temp_dir().join(format!("tally-rootless-{}", std::process::id()));
    std::fs::create_dir_all(root.join("book")).unwrap();
    for i in 0..6 {
        std::fs::write(root.join(format!("book/p{i}.png")), png(16, 16, i as u64)).unwrap();
    }
    let root_arg = root.display().to_string();
    let fixed = w.worker(
        LEDGER,
        "rootless",
        &[
            "--media-root",
            root_arg.as_str(),
            "--claim-size",
            "3",
            "--max-rows-per-batch",
            "3",
            "--exit-when-idle",
        ],
    );
    exits_ok(fixed, "the worker with its media root").await;
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(r.attempts.map_or(0, |a| a.total), 1, "{}", r.key);
    }
    std::fs::remove_dir_all(&root).unwrap();
    w.stop().await;
}

/// A media root (its name after `name`) of four 64×64 pages, and a world
/// whose ledger has them enrolled on the OCR prompt.
async fn four_pages(name: &str) -> (std::path::PathBuf, World) {
    pages(name, 4).await
}

/// A media root (its name after `name`) of `n` 64×64 pages `page-{i}`
/// (about 12 KB each), and a world whose ledger has them enrolled on the
/// OCR prompt.
async fn pages(name: &str, n: usize) -> (std::path::PathBuf, World) {
    let root = std::env::temp_dir().join(format!("tally-{name}-{}", std::process::id()));
    std::fs::create_dir_all(root.join("book")).unwrap();
    let w = World::start(
        LEDGER,
        0,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
    )
    .await;
    register_ocr(&w).await;
    let rows = (0..n)
        .map(|i| {
            let bytes = png(64, 64, i as u64);
            let path = format!("book/p{i}.png");
            std::fs::write(root.join(&path), &bytes).unwrap();
            row(&format!("page-{i}"), i, &path, &sha(&bytes))
        })
        .collect();
    enroll(&w, rows).await;
    (root, w)
}

/// Pages to upload with a key the provider refuses (issue 51): the
/// refusal is the account's, not the pages', so the first refused upload
/// pauses the ledger (REFUSED, the provider's words) and stops the claim:
/// no row is attempted, none is PERMANENT, only the jobs already out met
/// the refusal, nothing was uploaded; resumed, with the right key every
/// page then succeeds at one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_refused_for_the_key_burn_no_page() {
    let (root, w) = four_pages("refused").await;
    let wrong = root.join("wrong-key");
    std::fs::write(&wrong, "not-the-key").unwrap();
    let root_arg = root.display().to_string();
    let wrong_arg = wrong.display().to_string();
    let mut refused = crate::common::spawn_worker(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "refused",
        &[
            "--media-root",
            root_arg.as_str(),
            "--media-inline-max",
            INLINE_MAX,
            "--gemini-api-key-file",
            wrong_arg.as_str(),
        ],
    );
    let (_, pause) = crate::common::paused(&w, LEDGER, std::time::Duration::from_secs(60)).await;
    refused.kill().await.expect("kill");
    let jobs = list_jobs(&w.c, LEDGER).await;
    println!(
        "paused ({}): {:?}; {} jobs",
        pause.reason,
        pause.message,
        jobs.len()
    );
    assert_eq!(pause.reason, pb::LedgerPauseReason::Refused as i32);
    assert!(
        pause.message.contains("a media upload was refused"),
        "{}",
        pause.message
    );
    assert!((1..=4).contains(&jobs.len()), "{} jobs", jobs.len());
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Pending,
            "{} ({})",
            r.key,
            r.last_error
        );
        assert_eq!(r.attempts.map_or(0, |a| a.total), 0, "{}", r.key);
    }
    let stats = w.emulator.stats();
    assert_eq!((stats.uploads, stats.batches_created), (0, 0));
    crate::common::resume(&w.c, LEDGER).await;

    let fixed = w.worker(
        LEDGER,
        "fixed",
        &[
            "--media-root",
            root_arg.as_str(),
            "--media-inline-max",
            INLINE_MAX,
            "--exit-when-idle",
        ],
    );
    exits_ok(fixed, "the worker with the right key").await;
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(r.attempts.map_or(0, |a| a.total), 1, "{}", r.key);
    }
    remove(&root);
    w.stop().await;
}

/// Pages to upload into a full media storage (the account's
/// `--provider-storage-bytes` taken): the first page that cannot be
/// uploaded stops its claim, whose rows go back unread and unattempted,
/// and the worker waits `--refusal-cooldown` before claiming again
/// (issue 51: a full storage gave the rows back and the worker claimed
/// them again at once). Invariants: one job in the wait, not a loop; no
/// attempt; nothing uploaded; the ledger not paused (storage frees).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_media_storage_waits_instead_of_looping() {
    let (root, w) = four_pages("full").await;
    let root_arg = root.display().to_string();
    let mut worker = crate::common::spawn_worker(
        &w.stack.grpc,
        &w.emulator.base_url(),
        LEDGER,
        "full",
        &[
            "--media-root",
            root_arg.as_str(),
            "--media-inline-max",
            INLINE_MAX,
            "--provider-storage-bytes",
            "1",
            "--refusal-cooldown",
            "60s",
        ],
    );
    crate::common::until(
        std::time::Duration::from_secs(30),
        "a job closes",
        || async {
            list_jobs(&w.c, LEDGER)
                .await
                .iter()
                .any(|j| j.end_time.is_some())
        },
    )
    .await;
    // The worker now waits its cool-down: a loop would make a job a claim.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    worker.kill().await.expect("kill");
    let jobs = list_jobs(&w.c, LEDGER).await;
    let s = crate::common::summary(&w.c, LEDGER).await;
    println!("{} jobs; ledger state {}", jobs.len(), s.state);
    assert_eq!(jobs.len(), 1, "one claim, then the wait");
    assert_eq!(s.attempts_total, 0, "no attempt spent on a full storage");
    assert_eq!(s.pending, 4, "every page waits, unattempted");
    assert_ne!(s.state, pb::LedgerState::Paused as i32);
    assert_eq!(w.emulator.stats().uploads, 0);
    remove(&root);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_request_carries_its_page_uploaded_once() {
    let root = std::env::temp_dir().join(format!("tally-pages-{}", std::process::id()));
    std::fs::create_dir_all(root.join("book")).unwrap();
    let faults = FaultPlan {
        // page-1, page-10, page-11 fail once (429) and run twice.
        rows: vec![RowRule {
            matcher: RowMatch {
                key_prefix: Some("page-1".into()),
                ..Default::default()
            },
            fault: RowFault::Transient {
                code: 429,
                times: 1,
            },
        }],
        ..Default::default()
    };
    let w = World::start(LEDGER, 0, faults, pb::AttemptBudgets::default()).await;
    register_ocr(&w).await;

    let mut hashes: HashMap<String, (String, usize)> = HashMap::new();
    let mut rows = Vec::new();
    for i in 0..PAGES {
        let side = if i % 2 == 0 { 16 } else { 64 };
        let bytes = png(side, side, i as u64);
        let path = format!("book/p{i}.png");
        std::fs::write(root.join(&path), &bytes).unwrap();
        let key = format!("page-{i}");
        hashes.insert(key.clone(), (sha(&bytes), bytes.len()));
        rows.push(row(&key, i, &path, &sha(&bytes)));
    }
    // An image that is not there, and one that changes after enrollment.
    rows.push(row(
        "page-missing",
        98,
        "book/missing.png",
        &sha(b"never written"),
    ));
    let before = png(64, 64, 99);
    std::fs::write(root.join("book/changed.png"), &before).unwrap();
    rows.push(row("page-changed", 99, "book/changed.png", &sha(&before)));
    let r = enroll(&w, rows).await;
    assert_eq!(r.enrolled as usize, PAGES + 2);
    std::fs::write(root.join("book/changed.png"), png(64, 64, 100)).unwrap();
    // The same page with another image: a CONFLICT, not a silent reuse.
    let other = png(16, 16, 12345);
    let again = enroll(&w, vec![row("page-0", 0, "book/p0.png", &sha(&other))]).await;
    assert_eq!(again.conflicts, 1);

    let root_arg = root.display().to_string();
    let flags = |extra: &[&'static str]| {
        let mut f = vec![
            "--media-root",
            root_arg.as_str(),
            "--media-inline-max",
            INLINE_MAX,
            "--claim-size",
            "4",
            "--max-rows-per-batch",
            "4",
        ];
        f.extend_from_slice(extra);
        f
    };
    // Worker A dies right after its first create; B adopts that job and
    // finishes the ledger.
    let mut a = w.worker(
        LEDGER,
        "worker-a",
        &flags(&["--max-jobs", "1", "--failpoint", "after-create"]),
    );
    let status = a.wait().await.expect("worker-a reaped");
    assert!(!status.success(), "worker-a died at its failpoint");
    let b = w.worker(LEDGER, "worker-b", &flags(&["--exit-when-idle"]));
    exits_ok(b, "worker-b").await;

    let stats = w.emulator.stats();
    let jobs = list_jobs(&w.c, LEDGER).await;
    assert!(
        jobs.iter().any(|j| j.adoptions > 0),
        "the killed worker's job was adopted"
    );
    let mut uploads = 0;
    for r in all_rows(&w.c, LEDGER).await {
        match r.key.as_str() {
            "page-missing" | "page-changed" => {
                assert_eq!(r.status(), pb::RowStatus::Permanent, "{}", r.key);
                assert_eq!(r.rule, "media_unreadable", "{}", r.key);
                let says = if r.key == "page-missing" {
                    "book/missing.png"
                } else {
                    "changed since"
                };
                assert!(r.last_error.contains(says), "{}: {}", r.key, r.last_error);
                assert_eq!(stats.submission_count(&r.key), 0, "{} never sent", r.key);
            }
            key => {
                assert_eq!(r.status(), pb::RowStatus::Succeeded, "{key} ({})", r.rule);
                let (hash, size) = &hashes[key];
                let sent = stats.submission_count(key);
                let carried = stats.media.get(key).cloned().unwrap_or_default();
                assert_eq!(carried.len(), sent, "{key}: every request carried its page");
                assert!(carried.iter().all(|h| h == hash), "{key}: its own page");
                let attempts = r.attempts.as_ref().map_or(0, |a| a.total) as usize;
                assert_eq!(sent, attempts, "{key}: sent once per attempt");
                let uploaded = stats.media_uploads.get(hash).copied().unwrap_or(0);
                if *size > 4096 {
                    assert_eq!(
                        uploaded, 1,
                        "{key}: uploaded once across retries and workers"
                    );
                    uploads += 1;
                } else {
                    assert_eq!(uploaded, 0, "{key}: small, sent inline");
                }
            }
        }
    }
    assert_eq!(uploads, PAGES / 2);
    assert!(stats.resubmitted_after_success().is_empty());
    println!(
        "{PAGES} pages: {} batches, {} media uploads, retried rows: {}",
        stats.batches_created,
        stats.media_uploads.values().sum::<u64>(),
        ["page-1", "page-10", "page-11"]
            .iter()
            .map(|k| stats.submission_count(k))
            .sum::<usize>()
    );
    w.stop().await;
    remove(&root);
}

fn remove(root: &Path) {
    let _ = std::fs::remove_dir_all(root);
}

/// Rows claimed ≈ rows sent when inline media fill a batch long before
/// its claim runs out (issue 51: 5,776 rows claimed to send 300 images).
/// 60 pages of 64×64 (about 16 KB inline each) under a 64 KB batch bound,
/// claims of 20. Invariants: the first row that does not fit ends the
/// batch (the rest go back unread) and the next claim asks for what fit,
/// so the rows claimed (the jobs' rows) are at most the rows sent plus
/// one whole first claim plus one row a job (a claim growing back by a
/// quarter overshoots by at most that); every page SUCCEEDED at one
/// attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_asks_for_the_rows_a_full_batch_takes() {
    const ROWS: usize = 60;
    const CLAIM: usize = 20;
    let (root, w) = pages("fit", ROWS).await;
    let root_arg = root.display().to_string();
    let claim = CLAIM.to_string();
    let worker = w.worker(
        LEDGER,
        "fit",
        &[
            "--media-root",
            root_arg.as_str(),
            "--media-inline-max",
            "1000000",
            "--claim-size",
            claim.as_str(),
            "--max-rows-per-batch",
            claim.as_str(),
            "--max-bytes-per-batch",
            "65536",
            "--max-jobs",
            "1",
            "--exit-when-idle",
        ],
    );
    exits_ok(worker, "the worker").await;
    let jobs = list_jobs(&w.c, LEDGER).await;
    let claimed: usize = jobs
        .iter()
        .map(|j| j.counts.unwrap_or_default().rows as usize)
        .sum();
    let sent: usize = jobs.iter().filter(|j| !j.batch.is_empty()).count();
    println!(
        "{ROWS} pages: {} jobs ({sent} batches), {claimed} rows claimed",
        jobs.len()
    );
    for r in all_rows(&w.c, LEDGER).await {
        assert_eq!(
            r.status(),
            pb::RowStatus::Succeeded,
            "{} ({})",
            r.key,
            r.rule
        );
        assert_eq!(r.attempts.map_or(0, |a| a.total), 1, "{}", r.key);
    }
    assert!(sent >= 3, "the bound split the pages: {sent} batches");
    assert!(
        claimed <= ROWS + CLAIM + jobs.len(),
        "{claimed} rows claimed to send {ROWS} in {} jobs",
        jobs.len()
    );
    std::fs::remove_dir_all(&root).unwrap();
    w.stop().await;
}

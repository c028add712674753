//! Rows through gRPC: enrollment idempotency, listing with filters and
//! paging, the attempts history, dependencies and redrive.

use crate::harness::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use tally_proto::v1 as pb;
use tally_proto::v1::redrive_rows_request::Target;

/// Invariant 2: enrolling an existing key never changes that row. The same
/// content (dependencies in any order) is ALREADY_PRESENT; another payload,
/// model or prompt is CONFLICT and the stored row is left as it was;
/// enrollers racing on the same keys enroll each key exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enrolling_again_never_changes_a_row() {
    let env = env().await;
    env.ledger("l").await;
    env.client()
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "ocr".into(),
            version: "v1".into(),
            template: "Read {{page}}".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    env.enroll(
        "l",
        vec![row("p1"), row("p2"), row_deps("a", &["p1", "p2"]), row("b")],
    )
    .await;
    let stored = env.get_row("l", "b").await;

    let r = env
        .enroll(
            "l",
            vec![
                row_deps("a", &["p2", "p1", "p1"]),
                row_payload("b", r#"{"text": "changed"}"#),
                pb::RowInput {
                    model: "gemini-pro".into(),
                    ..row("p1")
                },
                pb::RowInput {
                    prompt: Some(pb::PromptRef {
                        name: "ocr".into(),
                        version: "v1".into(),
                    }),
                    ..row("p2")
                },
                row("c"),
            ],
        )
        .await;
    let outcomes: Vec<_> = r.results.iter().map(|r| r.outcome()).collect();
    use pb::EnrollOutcome::*;
    assert_eq!(
        outcomes,
        [AlreadyPresent, Conflict, Conflict, Conflict, Enrolled]
    );
    assert_eq!((r.enrolled, r.already_present, r.conflicts), (1, 1, 3));
    assert_eq!(env.get_row("l", "b").await, stored, "a conflict changed b");
    let full = env
        .client()
        .list_rows(pb::ListRowsRequest {
            parent: ledger_name("l"),
            view: pb::RowView::Full as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let b = full.rows.iter().find(|r| r.key == "b").unwrap();
    assert_eq!(b.payload, r#"{"text": "b"}"#);

    // Racing enrollers, each sending the keys in its own order: every key
    // is ENROLLED by exactly one of them, and none fails.
    let keys: Vec<String> = (0..400).map(|i| format!("race-{i}")).collect();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let mut client = env.client();
        let mut rows: Vec<pb::RowInput> = keys.iter().map(|k| row(k)).collect();
        rows.rotate_left(t * 70);
        if t % 2 == 1 {
            rows.reverse();
        }
        tasks.push(tokio::spawn(async move {
            client
                .enroll_rows(pb::EnrollRowsRequest {
                    parent: ledger_name("l"),
                    rows,
                })
                .await
                .unwrap()
                .into_inner()
        }));
    }
    let mut enrolled = HashMap::new();
    for t in tasks {
        for r in t.await.unwrap().results {
            match r.outcome() {
                Enrolled => *enrolled.entry(r.key).or_insert(0) += 1,
                AlreadyPresent => {}
                other => panic!("{} was {other:?}", r.key),
            }
        }
    }
    assert_eq!(enrolled.len(), keys.len());
    assert!(enrolled.values().all(|n| *n == 1), "{enrolled:?}");
    env.stop().await;
}

/// Walks every page of a listing; asserts no page is larger than asked and
/// no row comes twice; returns the keys.
async fn walk(env: &Env, filter: Option<pb::RowFilter>, page_size: i32) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = env
            .client()
            .list_rows(pb::ListRowsRequest {
                parent: ledger_name("l"),
                filter: filter.clone(),
                page_size,
                page_token: token,
                view: pb::RowView::Basic as i32,
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(page.rows.len() <= page_size as usize);
        for r in page.rows {
            assert!(r.payload.is_empty(), "BASIC view carries the payload");
            assert!(keys.insert(r.key.clone()), "{} listed twice", r.key);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
        assert!(pages < 10_000, "paging does not end");
    }
    keys
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// ListRows paging walks every row exactly once (any page size, pages never
/// larger than asked), and filters by status, rule, model and prompt name
/// and version, alone and combined, page through exactly the matching rows.
#[tokio::test]
async fn list_rows_pages_and_filters() {
    let env = env().await;
    env.ledger("l").await;
    for version in ["v1", "v2"] {
        env.client()
            .register_prompt(pb::RegisterPromptRequest {
                prompt_id: "ocr".into(),
                version: version.into(),
                template: format!("Read {{{{page}}}} ({version})"),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let prompted = |key: &str, version: &str| pb::RowInput {
        prompt: Some(pb::PromptRef {
            name: "ocr".into(),
            version: version.into(),
        }),
        ..row(key)
    };
    let pro = |key: &str| pb::RowInput {
        model: "gemini-pro".into(),
        ..row(key)
    };
    env.enroll(
        "l",
        vec![
            prompted("a1", "v1"),
            prompted("a2", "v1"),
            prompted("a3", "v1"),
            prompted("a4", "v2"),
            prompted("a5", "v2"),
            prompted("a6", "v2"),
            pro("b1"),
            pro("b2"),
            pro("b3"),
            pro("b4"),
            row_deps("c1", &["a3"]),
        ],
    )
    .await;
    // Bulk rows so paging has something to walk.
    for chunk in 0..3 {
        let rows = (0..20).map(|i| row(&format!("z{chunk}-{i}"))).collect();
        env.enroll("l", rows).await;
    }

    let flash = env
        .claim_with(pb::ClaimRowsRequest {
            parent: ledger_name("l"),
            max_rows: 6,
            model: "gemini-flash-latest".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(flash.keys(), ["a1", "a2", "a3", "a4", "a5", "a6"]);
    env.report(
        &flash.claim.name,
        vec![
            success("a1", 1, 1),
            failure("a2", 503),
            failure("a3", 400),
            success("a4", 1, 1),
            success("a5", 1, 1),
        ],
    )
    .await;
    let pro_claim = env
        .claim_with(pb::ClaimRowsRequest {
            parent: ledger_name("l"),
            max_rows: 2,
            model: "gemini-pro".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pro_claim.keys(), ["b1", "b2"]);
    env.report(
        &pro_claim.claim.name,
        vec![success("b1", 1, 1), failure("b2", 400)],
    )
    .await;

    let every = walk(&env, None, 1000).await;
    assert_eq!(every.len(), 71);
    for size in [1, 7, 70, 71, 72] {
        assert_eq!(walk(&env, None, size).await, every, "page size {size}");
    }

    use pb::RowStatus::*;
    let statuses = |s: &[pb::RowStatus]| pb::RowFilter {
        statuses: s.iter().map(|s| *s as i32).collect(),
        ..Default::default()
    };
    let cases: Vec<(pb::RowFilter, BTreeSet<String>)> = vec![
        (statuses(&[Succeeded]), set(&["a1", "a4", "a5", "b1"])),
        (statuses(&[Retryable]), set(&["a2"])),
        (statuses(&[Running]), set(&["a6"])),
        (statuses(&[Permanent, Blocked]), set(&["a3", "b2", "c1"])),
        (
            pb::RowFilter {
                rule: "http_permanent".into(),
                ..Default::default()
            },
            set(&["a3", "b2"]),
        ),
        (
            pb::RowFilter {
                rule: "dependency_failed".into(),
                ..Default::default()
            },
            set(&["c1"]),
        ),
        (
            pb::RowFilter {
                rule: "success".into(),
                ..Default::default()
            },
            set(&["a1", "a4", "a5", "b1"]),
        ),
        (
            pb::RowFilter {
                model: "gemini-pro".into(),
                ..Default::default()
            },
            set(&["b1", "b2", "b3", "b4"]),
        ),
        (
            pb::RowFilter {
                model: "gemini-pro".into(),
                ..statuses(&[Pending])
            },
            set(&["b3", "b4"]),
        ),
        (
            pb::RowFilter {
                prompt_name: "ocr".into(),
                ..Default::default()
            },
            set(&["a1", "a2", "a3", "a4", "a5", "a6"]),
        ),
        (
            pb::RowFilter {
                prompt_name: "ocr".into(),
                prompt_version: "v2".into(),
                ..Default::default()
            },
            set(&["a4", "a5", "a6"]),
        ),
        (
            pb::RowFilter {
                prompt_version: "v1".into(),
                ..statuses(&[Succeeded, Permanent])
            },
            set(&["a1", "a3"]),
        ),
        (
            pb::RowFilter {
                model: "no-such-model".into(),
                ..Default::default()
            },
            set(&[]),
        ),
    ];
    for (filter, want) in cases {
        for size in [1, 3, 1000] {
            assert_eq!(
                walk(&env, Some(filter.clone()), size).await,
                want,
                "{filter:?} by {size}"
            );
        }
    }
    let pending = walk(&env, Some(statuses(&[Pending])), 50).await;
    assert_eq!(pending.len(), 60 + 2);
    env.stop().await;
}

/// GetRow shows every attempt, oldest first, with its provenance: the
/// claim that made it, model, prompt identity, the payload's hash, outcome,
/// rule, budget, tokens, error and actor (`system` for a lease expiry); the
/// row's counts and usage are the sums over that history (invariant 10).
#[tokio::test]
async fn get_row_shows_the_attempts_history_with_provenance() {
    let env = env().await;
    env.ledger("l").await;
    env.client()
        .register_prompt(pb::RegisterPromptRequest {
            prompt_id: "ocr".into(),
            version: "v1".into(),
            template: "Read {{page}}".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let payload = r#"{"page": 4}"#;
    env.enroll(
        "l",
        vec![pb::RowInput {
            key: "page-4".into(),
            payload: payload.into(),
            model: "gemini-pro".into(),
            prompt: Some(pb::PromptRef {
                name: "ocr".into(),
                version: "v1".into(),
            }),
            ..Default::default()
        }],
    )
    .await;

    let first = env.claim("l", 1).await.unwrap();
    let mut transient = failure("page-4", 503);
    transient.usage = Some(usage(10, 0));
    env.report(&first.claim.name, vec![transient]).await;
    let second = env.claim("l", 1).await.unwrap();
    env.expire(&second.claim).await;
    let third = env.claim("l", 1).await.expect("rescued and claimed again");
    env.report(&third.claim.name, vec![success("page-4", 100, 20)])
        .await;

    let r = env.get_row("l", "page-4").await;
    assert_eq!(r.status(), pb::RowStatus::Succeeded);
    assert_eq!(r.result, r#"{"answer": "page-4"}"#);
    assert_eq!(r.payload, payload);
    let counts = r.attempts.unwrap();
    assert_eq!(
        (counts.provider, counts.content, counts.infra, counts.total),
        (1, 0, 1, 3)
    );
    let u = r.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (110, 20));

    let h = &r.history;
    assert_eq!(h.len(), 3);
    let want = [
        (
            1,
            &first.claim.name,
            pb::RowStatus::Retryable,
            "http_transient",
            pb::Budget::Provider,
            "anonymous",
            (10, 0),
        ),
        (
            2,
            &second.claim.name,
            pb::RowStatus::Retryable,
            "lease_expired",
            pb::Budget::Infra,
            "system",
            (0, 0),
        ),
        (
            3,
            &third.claim.name,
            pb::RowStatus::Succeeded,
            "success",
            pb::Budget::Unspecified,
            "anonymous",
            (100, 20),
        ),
    ];
    let vars_hash = &h[0].vars_hash;
    assert_eq!(vars_hash.len(), 64, "a hex sha-256: {vars_hash}");
    for (a, (n, claim, outcome, rule, budget, actor, (input, output))) in h.iter().zip(want) {
        assert_eq!(a.number, n);
        assert_eq!(&a.claim, claim, "attempt {n}");
        assert_eq!(a.outcome(), outcome, "attempt {n}");
        assert_eq!(a.rule, rule, "attempt {n}");
        assert_eq!(a.budget(), budget, "attempt {n}");
        assert_eq!(a.actor, actor, "attempt {n}");
        let au = a.usage.unwrap();
        assert_eq!((au.input_tokens, au.output_tokens), (input, output));
        assert_eq!(a.model, "gemini-pro");
        let p = a.prompt.clone().unwrap();
        assert_eq!((p.name.as_str(), p.version.as_str()), ("ocr", "v1"));
        assert_eq!(&a.vars_hash, vars_hash);
        assert!(a.time.is_some());
    }
    assert!(h[0].error.contains("503"), "{}", h[0].error);
    assert!(h[2].error.is_empty(), "{}", h[2].error);
    env.stop().await;
}

/// Invariants 10 and 6: attempts and tokens summed over the history
/// (SummarizeLedger, and the FULL listing) equal what the workers reported,
/// over rounds of mixed successes, transient and permanent failures and
/// workers that die holding a claim; and every row ends SUCCEEDED, PERMANENT
/// or BLOCKED.
#[tokio::test]
async fn attempts_and_tokens_add_up() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll_n("l", "k", 60).await;
    let (mut attempts, mut input, mut output) = (0i64, 0i64, 0i64);
    let mut round = 0usize;
    while let Some(g) = env.claim("l", 13).await {
        round += 1;
        if round.is_multiple_of(4) {
            // This claim's worker dies: its rows count an infra attempt.
            attempts += g.rows.len() as i64;
            env.expire(&g.claim).await;
            continue;
        }
        let outcomes: Vec<pb::RowOutcome> = g
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| match (i + round) % 5 {
                0 => failure(&r.key, 503),
                1 => failure(&r.key, 400),
                _ => success(&r.key, 7 + i as i64, 3),
            })
            .collect();
        for o in &outcomes {
            let u = o.usage.unwrap();
            attempts += 1;
            input += u.input_tokens;
            output += u.output_tokens;
        }
        env.report(&g.claim.name, outcomes).await;
        assert!(round < 100, "the ledger does not settle");
    }
    let s = env.summary("l").await;
    assert_eq!(s.attempts_total, attempts);
    let u = s.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (input, output));
    assert_eq!(s.pending + s.running + s.retryable, 0, "{}", s.summary_line);
    assert_eq!(s.total, 60);

    let full = env
        .client()
        .list_rows(pb::ListRowsRequest {
            parent: ledger_name("l"),
            page_size: 1000,
            view: pb::RowView::Full as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let history: i64 = full.rows.iter().map(|r| r.history.len() as i64).sum();
    let totals: i64 = full
        .rows
        .iter()
        .map(|r| i64::from(r.attempts.unwrap().total))
        .sum();
    let tokens: i64 = full
        .rows
        .iter()
        .flat_map(|r| &r.history)
        .map(|a| a.usage.unwrap().input_tokens)
        .sum();
    assert_eq!((history, totals, tokens), (attempts, attempts, input));
    env.stop().await;
}

fn keys(k: &[&str]) -> Option<Target> {
    Some(Target::Keys(pb::RowKeys {
        keys: k.iter().map(|k| k.to_string()).collect(),
    }))
}

/// Invariant 5: a row is never claimed before all its dependencies
/// SUCCEEDED; dependants of a PERMANENT row become BLOCKED (transitively,
/// and at enrollment for new dependants); RedriveRows by keys and by filter
/// sends PERMANENT rows back to PENDING with renewed budgets and unblocks
/// their dependants; validate_only answers the same counts and writes
/// nothing; rows that are not PERMANENT or BLOCKED are skipped.
#[tokio::test]
async fn dependencies_block_and_redrive_unblocks() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll(
        "l",
        vec![
            row("p3"),
            row_deps("p4", &["p3"]),
            row_deps("p5", &["p4"]),
            row("p12"),
        ],
    )
    .await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(sorted(g.keys()), ["p12", "p3"]);
    env.report(
        &g.claim.name,
        vec![success("p3", 1, 1), failure("p12", 400)],
    )
    .await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["p4"]);
    env.report(&g.claim.name, vec![failure("p4", 404)]).await;
    assert_eq!(env.status_of("l", "p5").await, pb::RowStatus::Blocked);
    env.enroll("l", vec![row_deps("p6", &["p5"])]).await;
    let p6 = env.get_row("l", "p6").await;
    assert_eq!(
        (p6.status(), p6.rule.as_str()),
        (pb::RowStatus::Blocked, "dependency_failed")
    );
    assert!(env.claim("l", 10).await.is_none());

    let redrive = |target: Option<Target>, validate_only: bool| {
        let mut client = env.client();
        let req = pb::RedriveRowsRequest {
            parent: ledger_name("l"),
            target,
            validate_only,
            reason: "input fixed".into(),
            ..Default::default()
        };
        async move { client.redrive_rows(req).await.unwrap().into_inner() }
    };

    let before = env.snapshot().await;
    let dry = redrive(keys(&["p4", "p3"]), true).await;
    assert_eq!((dry.redriven, dry.unblocked, dry.skipped), (1, 2, 1));
    assert_eq!(env.snapshot().await, before, "validate_only wrote");

    let done = redrive(keys(&["p4", "p3"]), false).await;
    assert_eq!((done.redriven, done.unblocked, done.skipped), (1, 2, 1));
    assert_eq!(done.sample_keys, ["p4"]);
    let p4 = env.get_row("l", "p4").await;
    let c = p4.attempts.unwrap();
    assert_eq!(
        (p4.status(), c.provider, c.total),
        (pb::RowStatus::Pending, 0, 1),
        "budgets renewed, history kept"
    );
    for k in ["p5", "p6"] {
        assert_eq!(env.status_of("l", k).await, pb::RowStatus::Pending, "{k}");
    }
    assert_eq!(env.status_of("l", "p12").await, pb::RowStatus::Permanent);

    // Only p4 is claimable; its dependants wait for it again.
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["p4"]);
    env.report(&g.claim.name, vec![success("p4", 1, 1)]).await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["p5"]);
    env.report(&g.claim.name, vec![success("p5", 1, 1)]).await;

    // By filter: every PERMANENT row with rule http_permanent.
    let filter = Some(Target::Filter(pb::RowFilter {
        statuses: vec![pb::RowStatus::Permanent as i32],
        rule: "http_permanent".into(),
        ..Default::default()
    }));
    let before = env.snapshot().await;
    let dry = redrive(filter.clone(), true).await;
    assert_eq!((dry.redriven, dry.unblocked), (1, 0));
    assert_eq!(env.snapshot().await, before, "validate_only wrote");
    let done = redrive(filter.clone(), false).await;
    assert_eq!(
        (done.redriven, done.sample_keys.clone()),
        (1, vec!["p12".to_string()])
    );
    let again = redrive(filter, false).await;
    assert_eq!((again.redriven, again.skipped), (0, 0));

    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(sorted(g.keys()), ["p12", "p6"]);
    let claimed: HashSet<String> = g.keys().into_iter().collect();
    assert!(!claimed.contains("p5"));
    env.stop().await;
}

/// Invariant 5 when one report settles two dependencies of the same row:
/// `a` SUCCEEDED and `b` PERMANENT in one report leave `x` (waiting for both)
/// and its dependant `y` BLOCKED, with `x` counted down for `a` all the same:
/// once `b` is redriven and succeeds, `x` is claimable and `y` after it.
#[tokio::test]
async fn one_report_that_frees_and_blocks_a_dependant_blocks_it() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll(
        "l",
        vec![
            row("a"),
            row("b"),
            row_deps("x", &["a", "b"]),
            row_deps("y", &["x"]),
        ],
    )
    .await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(sorted(g.keys()), ["a", "b"]);
    env.report(&g.claim.name, vec![success("a", 1, 1), failure("b", 400)])
        .await;
    for k in ["x", "y"] {
        let r = env.get_row("l", k).await;
        assert_eq!(
            (r.status(), r.rule.as_str()),
            (pb::RowStatus::Blocked, "dependency_failed"),
            "{k}"
        );
    }
    assert!(
        env.claim("l", 10).await.is_none(),
        "a BLOCKED row was queued"
    );

    let mut client = env.client();
    let done = client
        .redrive_rows(pb::RedriveRowsRequest {
            parent: ledger_name("l"),
            target: keys(&["b"]),
            validate_only: false,
            reason: "input fixed".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((done.redriven, done.unblocked), (1, 2));
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["b"], "x still waits for b");
    env.report(&g.claim.name, vec![success("b", 1, 1)]).await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["x"], "a was counted when it succeeded");
    env.report(&g.claim.name, vec![success("x", 1, 1)]).await;
    let g = env.claim("l", 10).await.unwrap();
    assert_eq!(g.keys(), ["y"]);
    env.stop().await;
}

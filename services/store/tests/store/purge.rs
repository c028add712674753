//! Deleting ledgers at the store: the mark refuses active work unless
//! forced and hides the ledger from every work path at once; the purge
//! removes everything keyed by the ledger and nothing of another, in
//! batches no larger than asked, and resumes after an interrupted batch.
//! One fresh database per test; each test names the invariant it checks.

use crate::common;

use common::*;
use std::time::Duration;
use tally_core::delivery::{DeadReason, Kind, NackFate, Settings, Start, WebhookTarget};
use tally_core::operation::{OpEvent, OpState};
use tally_core::scope::Patterns;
use tally_store::consumers::{NewConsumer, PostRecord, ReceiveRequest};
use tally_store::operations::{EventSource, IncomingEvent};
use tally_store::purge::{DeleteLedger, PurgeStep};
use tally_store::types::RedriveTarget;
use tally_store::{Store, StoreError};

/// Every table keyed by a ledger, with the SQL that counts one ledger's
/// entries in it (`$1` the ledger's id). Operations belong to the ledger
/// of the job whose batch they are.
const KEYED: &[(&str, &str)] = &[
    ("rows", "SELECT count(*) FROM rows WHERE ledger_id = $1"),
    (
        "row_deps",
        "SELECT count(*) FROM row_deps WHERE ledger_id = $1",
    ),
    (
        "runnable",
        "SELECT count(*) FROM runnable WHERE ledger_id = $1",
    ),
    (
        "ledger_models",
        "SELECT count(*) FROM ledger_models WHERE ledger_id = $1",
    ),
    ("claims", "SELECT count(*) FROM claims WHERE ledger_id = $1"),
    (
        "attempts",
        "SELECT count(*) FROM attempts WHERE ledger_id = $1",
    ),
    ("jobs", "SELECT count(*) FROM jobs WHERE ledger_id = $1"),
    (
        "job_events",
        "SELECT count(*) FROM job_events WHERE ledger_id = $1",
    ),
    (
        "redrives",
        "SELECT count(*) FROM redrives WHERE ledger_id = $1",
    ),
    (
        "ledger_alerts",
        "SELECT count(*) FROM ledger_alerts WHERE ledger_id = $1",
    ),
    (
        "alert_outbox",
        "SELECT count(*) FROM alert_outbox WHERE ledger_id = $1",
    ),
    (
        "operations",
        "SELECT count(*) FROM operations WHERE name LIKE 'batches/' || $1 || '-%'",
    ),
    (
        "operation_events",
        "SELECT count(*) FROM operation_events WHERE operation LIKE 'batches/' || $1 || '-%'",
    ),
    (
        "operation_deliveries",
        "SELECT count(*) FROM operation_deliveries WHERE operation LIKE 'batches/' || $1 || '-%'",
    ),
    (
        "result_log",
        "SELECT count(*) FROM result_log WHERE ledger_id = $1",
    ),
    (
        "consumers",
        "SELECT count(*) FROM consumers WHERE ledger_id = $1",
    ),
    (
        "consumer_leases",
        "SELECT count(*) FROM consumer_leases x JOIN consumers c ON c.id = x.consumer_id
         WHERE c.ledger_id = $1",
    ),
    (
        "consumer_dead_letters",
        "SELECT count(*) FROM consumer_dead_letters d JOIN consumers c ON c.id = d.consumer_id
         WHERE c.ledger_id = $1",
    ),
    (
        "webhook_deliveries",
        "SELECT count(*) FROM webhook_deliveries w JOIN consumers c ON c.id = w.consumer_id
         WHERE c.ledger_id = $1",
    ),
    (
        "ledger_purges",
        "SELECT count(*) FROM ledger_purges WHERE ledger_id = $1",
    ),
    ("ledgers", "SELECT count(*) FROM ledgers WHERE id = $1"),
];

async fn counts(store: &Store, id: i64) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for (table, sql) in KEYED {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(*sql))
            .bind(id)
            .fetch_one(store.pool())
            .await
            .unwrap();
        out.push((*table, n));
    }
    out
}

async fn ledger_id(store: &Store, name: &str) -> i64 {
    sqlx::query_scalar("SELECT id FROM ledgers WHERE name = $1")
        .bind(name)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

fn op_event(op: &str, state: OpState, time: i64, id: &str) -> IncomingEvent {
    IncomingEvent {
        operation: op.into(),
        source: EventSource::Webhook,
        event_id: Some(id.into()),
        raw_state: format!("BATCH_STATE_{}", state.as_str()),
        event: OpEvent {
            state,
            update_time: Some(time),
        },
        output_file: None,
        error_code: None,
        error_message: None,
    }
}

/// A ledger with something in every ledger-keyed table: rows with
/// dependencies, queued, claimed, reported (attempts, a PERMANENT row
/// redriven), a submitted job whose operation has events and deliveries,
/// and alert state. Its operations are named `batches/{id}-…` (`id` the
/// ledger's id) so they can be counted per ledger.
async fn populate(store: &Store, ledger: &str, rows: usize) -> i64 {
    store.create_ledger(ledger, &fast_policy()).await.unwrap();
    let id = ledger_id(store, ledger).await;
    let mut batch = vec![row("root", &[])];
    for i in 0..rows {
        let k = format!("r{i:05}");
        batch.push(if i % 10 == 0 {
            row_with(&k, "{\"n\": 1}", &["root"])
        } else {
            row(&k, &[])
        });
    }
    store.enroll(ledger, &batch).await.unwrap();
    // Attempts: a success, a permanent failure (then redriven), a retry.
    let g = claim(store, ledger, 3).await.unwrap();
    let keys: Vec<String> = g.rows.iter().map(|r| r.key.clone()).collect();
    let items = vec![
        success(&keys[0], 10),
        failure(&keys[1], 400),
        failure(&keys[2], 503),
    ];
    store
        .report(ledger, g.claim.token, &items, "w")
        .await
        .unwrap();
    consumers(store, ledger).await;
    store
        .redrive(
            ledger,
            &RedriveTarget::Keys(vec![keys[1].clone()]),
            false,
            false,
            "op",
            "test",
        )
        .await
        .unwrap();
    // A submitted job with its provider operation.
    let g = claim(store, ledger, 5).await.unwrap();
    let job = store.create_job(ledger, g.claim.token, "w").await.unwrap();
    let op = format!("batches/{id}-job");
    store
        .mark_submitted(ledger, &job.public_id, g.claim.token, &op, "files/in", "w")
        .await
        .unwrap();
    for (i, state) in [OpState::Pending, OpState::Running].into_iter().enumerate() {
        store
            .ingest_event(&op_event(&op, state, i as i64 + 1, &format!("d{i}")))
            .await
            .unwrap();
    }
    // Alert state, as the alert evaluator leaves it.
    sqlx::query("INSERT INTO ledger_alerts (ledger_id, above) VALUES ($1, true)")
        .bind(id)
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO alert_outbox (ledger_id, msg_id, kind, url, body)
         VALUES ($1, $2, 'crossed', 'http://alerts.invalid/', '{}')",
    )
    .bind(id)
    .bind(format!("msg-{id}"))
    .execute(store.pool())
    .await
    .unwrap();
    id
}

/// A pull consumer holding a lease and a dead letter, and a webhook
/// consumer with an entry in its delivery log: the ledger's two results
/// (a success, a PERMANENT) are logged by then.
async fn consumers(store: &Store, ledger: &str) {
    let pull = Settings {
        kind: Kind::Pull,
        visibility: Duration::from_secs(30),
        max_deliveries: 3,
        webhook: None,
    };
    let hook = Settings {
        kind: Kind::Webhook,
        webhook: Some(WebhookTarget {
            url: "https://hooks.invalid/".into(),
            batch: 10,
        }),
        ..pull.clone()
    };
    for (name, settings) in [("sink", &pull), ("hook", &hook)] {
        store
            .create_consumer(&NewConsumer {
                ledger,
                name,
                settings,
                secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                start: Start::Beginning,
                actor: "t",
            })
            .await
            .unwrap();
    }
    let req = ReceiveRequest {
        max_rows: 10,
        max_bytes: 1 << 20,
        visibility: None,
        include_payload: false,
    };
    let got = store.receive(ledger, "sink", &req).await.unwrap();
    assert_eq!(got.deliveries.len(), 2);
    let dead = NackFate::Dead(DeadReason::Refused("no".into()));
    let first = got.deliveries[0].position;
    store.nack(ledger, "sink", &[first], &dead).await.unwrap();
    let hook = store.get_consumer(ledger, "hook").await.unwrap();
    store
        .record_webhook_post(
            hook.id,
            &PostRecord {
                message_id: "m".into(),
                rows: 1,
                first,
                last: first,
                http_status: Some(200),
                error: String::new(),
                duration: Duration::from_millis(1),
            },
        )
        .await
        .unwrap();
}

fn forced<'a>(ledger: &'a str) -> DeleteLedger<'a> {
    DeleteLedger {
        ledger,
        force: true,
        etag: None,
        content_etag: None,
        actor: "op",
    }
}

/// Runs purge steps until none has work; answers every step taken.
async fn purge_all(store: &Store, batch: i64) -> Vec<PurgeStep> {
    let mut steps = Vec::new();
    loop {
        let step = store.purge_step(batch, Duration::ZERO).await.unwrap();
        if step == PurgeStep::Idle {
            return steps;
        }
        steps.push(step);
        assert!(steps.len() < 10_000, "the purge does not end");
    }
}

// Invariant: a purge removes every entry keyed by the deleted ledger, in
// every table (operations of its jobs included), and leaves another
// ledger's entries exactly as they were; no batch deletes more than asked.
#[tokio::test]
async fn the_purge_removes_everything_of_the_ledger_and_nothing_of_another() {
    let env = env().await;
    let doomed = populate(&env.store, "doomed", 400).await;
    let kept = populate(&env.store, "kept", 400).await;
    let before_doomed = counts(&env.store, doomed).await;
    for (table, n) in &before_doomed {
        if *table != "ledger_purges" {
            assert!(*n > 0, "the fixture leaves something in {table}");
        }
    }
    let before_kept = counts(&env.store, kept).await;

    let marked = env.store.delete_ledger(&forced("doomed")).await.unwrap();
    let deletion = marked
        .deletion
        .expect("a deleting ledger shows its deletion");
    assert_eq!(
        deletion.rows_total, None,
        "counted by the purge, not the call"
    );
    assert_eq!(deletion.rows_purged, 0);
    assert!(deletion.forced);
    assert_eq!((deletion.claims_expired, deletion.jobs_abandoned), (1, 1));

    let steps = purge_all(&env.store, 50).await;
    assert_eq!(
        steps.first(),
        Some(&PurgeStep::Counted {
            ledger: "doomed".into(),
            rows: 401
        }),
        "the purge counts the rows first"
    );
    for s in &steps {
        if let PurgeStep::Batch {
            deleted, attempts, ..
        } = s
        {
            assert!(*deleted <= 50 && *attempts <= 50 * 4, "{s:?}");
        }
    }
    let rows_batches = steps
        .iter()
        .filter(|s| matches!(s, PurgeStep::Batch { table: "rows", .. }))
        .count();
    assert_eq!(rows_batches, 401usize.div_ceil(50), "rows go 50 at a time");
    assert_eq!(
        steps.last(),
        Some(&PurgeStep::Finished {
            ledger: "doomed".into()
        })
    );
    for (table, n) in counts(&env.store, doomed).await {
        assert_eq!(n, 0, "{table} still holds entries of the deleted ledger");
    }
    assert_eq!(counts(&env.store, kept).await, before_kept);
    assert_queue_consistent(&env.store).await;
    // The other ledger still works.
    assert!(claim(&env.store, "kept", 10).await.is_some());
    // The name is free again, for a new, empty ledger.
    env.store
        .create_ledger("doomed", &fast_policy())
        .await
        .unwrap();
    assert_eq!(
        env.store.summarize("doomed").await.unwrap().counts.total(),
        0
    );
}

// Invariant: from the mark on, the ledger is NOT_FOUND to every work path
// and to GetLedger-for-work, visible (with its deletion) only to describe
// and to lists that ask for deleted ledgers, and its name is taken
// ("being deleted") until the purge has finished.
#[tokio::test]
async fn a_deleting_ledger_is_invisible_to_work_and_its_name_stays_taken() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("gone", &fast_policy()).await.unwrap();
    s.enroll("gone", &[row("a", &[]), row("b", &[])])
        .await
        .unwrap();
    let g = claim(s, "gone", 1).await.unwrap();
    s.delete_ledger(&forced("gone")).await.unwrap();

    let not_found = |r: Result<(), StoreError>, what: &str| match r {
        Err(StoreError::NotFound { .. }) => {}
        other => panic!("{what}: expected NOT_FOUND, got {other:?}"),
    };
    not_found(s.get_ledger("gone").await.map(drop), "get_ledger");
    not_found(s.enroll("gone", &[row("c", &[])]).await.map(drop), "enroll");
    not_found(s.claim_rows("gone", &claim_req(5)).await.map(drop), "claim");
    let late = vec![success(&g.rows[0].key, 1)];
    not_found(
        s.report("gone", g.claim.token, &late, "w").await.map(drop),
        "late report",
    );
    not_found(
        s.create_job("gone", g.claim.token, "w").await.map(drop),
        "create_job",
    );
    not_found(s.get_row("gone", "a").await.map(drop), "get_row");
    // The backlog (every replica's metrics refresh) says it is going, so
    // each replica drops the ledger's series (issue 34).
    let backlog = s.backlog().await.unwrap();
    let listed = backlog.ledgers.iter().find(|l| l.name == "gone").unwrap();
    assert!(listed.deleting, "{listed:?}");
    not_found(s.summarize("gone").await.map(drop), "summarize");
    not_found(s.ledger_id("gone").await.map(drop), "watch jobs");
    not_found(
        s.list_rows("gone", &Default::default(), None, 10, None)
            .await
            .map(drop),
        "list_rows",
    );
    assert!(
        s.list_ledgers(None, 10, false, &Patterns::all())
            .await
            .unwrap()
            .is_empty(),
        "left out of lists by default"
    );
    let shown = s
        .list_ledgers(None, 10, true, &Patterns::all())
        .await
        .unwrap();
    assert_eq!(shown.len(), 1);
    assert!(shown[0].deletion.is_some());
    assert!(s.describe_ledger("gone").await.unwrap().deletion.is_some());
    match s.create_ledger("gone", &fast_policy()).await {
        Err(StoreError::LedgerDeleting { name }) => assert_eq!(name, "ledgers/gone"),
        other => panic!("expected LedgerDeleting, got {other:?}"),
    }
    // Deleting again changes nothing and answers the same deletion.
    let again = s.delete_ledger(&forced("gone")).await.unwrap();
    assert_eq!(
        again.deletion.unwrap().delete_time,
        s.describe_ledger("gone")
            .await
            .unwrap()
            .deletion
            .unwrap()
            .delete_time
    );
    // With a settle time the rows go but the name stays taken.
    let mut steps = Vec::new();
    loop {
        let step = s.purge_step(100, Duration::from_secs(3600)).await.unwrap();
        if !step.busy() {
            steps.push(step);
            break;
        }
        steps.push(step);
    }
    assert_eq!(
        steps.last(),
        Some(&PurgeStep::Settling {
            ledger: "gone".into()
        })
    );
    assert!(matches!(
        s.create_ledger("gone", &fast_policy()).await,
        Err(StoreError::LedgerDeleting { .. })
    ));
    purge_all(s, 100).await;
    s.create_ledger("gone", &fast_policy()).await.unwrap();
}

// Invariant: without force, a ledger with live claims or open jobs is not
// deleted (FAILED_PRECONDITION with the counts) and nothing is written; a
// stale etag is ABORTED; once the work is done the delete goes through.
#[tokio::test]
async fn delete_refuses_active_work_unless_forced() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("busy", &fast_policy()).await.unwrap();
    let rows: Vec<_> = (0..6).map(|i| row(&format!("k{i}"), &[])).collect();
    s.enroll("busy", &rows).await.unwrap();
    let plain = |etag| DeleteLedger {
        ledger: "busy",
        force: false,
        etag,
        content_etag: None,
        actor: "op",
    };
    let g1 = claim(s, "busy", 2).await.unwrap();
    let g2 = claim(s, "busy", 2).await.unwrap();
    s.create_job("busy", g2.claim.token, "w").await.unwrap();
    match s.delete_ledger(&plain(None)).await {
        Err(StoreError::LedgerActive {
            live_claims,
            open_jobs,
            ..
        }) => assert_eq!((live_claims, open_jobs), (2, 1)),
        other => panic!("expected LedgerActive, got {other:?}"),
    }
    let still = s.get_ledger("busy").await.unwrap();
    assert!(still.deletion.is_none());
    // An expired claim is not live work.
    expire(s, &g1).await;
    s.release_claim("busy", g2.claim.token, None, "w")
        .await
        .unwrap();
    let etag = s.get_ledger("busy").await.unwrap().etag;
    match s.delete_ledger(&plain(Some(etag + 7))).await {
        Err(StoreError::Aborted(_)) => {}
        other => panic!("expected ABORTED, got {other:?}"),
    }
    let deleted = s.delete_ledger(&plain(Some(etag))).await.unwrap();
    let d = deleted.deletion.unwrap();
    assert!(!d.forced);
    assert_eq!((d.claims_expired, d.jobs_abandoned), (0, 0));
    // The expired claim was closed by the mark: the sweep leaves it alone.
    let state: i16 = sqlx::query_scalar("SELECT state FROM claims WHERE token = $1")
        .bind(g1.claim.token)
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(state, 3);
    assert_eq!(s.rescue_expired(None).await.unwrap().rows, 0);
}

// Invariant: a batch in flight on one purger (its transaction holding the
// purge's lock) makes another purger skip the ledger instead of waiting;
// when that batch dies uncommitted (a crash), the purge resumes from what
// was committed, and counts every row exactly once.
#[tokio::test]
async fn an_interrupted_purge_resumes_and_purgers_do_not_wait_for_each_other() {
    let env = env().await;
    let s = &env.store;
    let id = populate(s, "big", 1000).await;
    s.delete_ledger(&forced("big")).await.unwrap();
    // Some batches, then a purger dies in the middle of one.
    let mut rows_seen = 0;
    while rows_seen < 300 {
        if let PurgeStep::Batch {
            table: "rows",
            deleted,
            ..
        } = s.purge_step(100, Duration::ZERO).await.unwrap()
        {
            rows_seen += deleted;
        }
    }
    let progress = s.describe_ledger("big").await.unwrap().deletion.unwrap();
    assert_eq!(progress.rows_purged, 300);
    assert_eq!(progress.rows_total, Some(1001));
    let mut crashed = s.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM ledger_purges WHERE ledger_id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *crashed)
        .await
        .unwrap();
    sqlx::query("DELETE FROM rows WHERE id IN (SELECT id FROM rows WHERE ledger_id = $1 LIMIT 50)")
        .bind(id)
        .execute(&mut *crashed)
        .await
        .unwrap();
    // Another replica's purger does not wait on it.
    let other = Store::from_pool(s.pool().clone());
    let skipped = tokio::time::timeout(
        Duration::from_secs(5),
        other.purge_step(100, Duration::ZERO),
    )
    .await
    .expect("a purger never waits for another's batch")
    .unwrap();
    assert_eq!(skipped, PurgeStep::Idle);
    drop(crashed.rollback().await);
    // Resumed by the other replica from what was committed.
    let steps = purge_all(&other, 100).await;
    let rows_after: i64 = steps
        .iter()
        .map(|s| match s {
            PurgeStep::Batch {
                table: "rows",
                deleted,
                ..
            } => *deleted,
            _ => 0,
        })
        .sum();
    assert_eq!(
        rows_seen + rows_after,
        1001,
        "every row purged exactly once"
    );
    for (table, n) in counts(s, id).await {
        assert_eq!(n, 0, "{table}");
    }
}

fn after_export<'a>(ledger: &'a str, content_etag: &'a str) -> DeleteLedger<'a> {
    DeleteLedger {
        ledger,
        force: false,
        etag: None,
        content_etag: Some(content_etag),
        actor: "op",
    }
}

/// Invariant: a delete that carries the content etag read before an
/// export is refused (FAILED_PRECONDITION LEDGER_CHANGED, nothing marked)
/// once a row was enrolled, reported or redriven since; claims and
/// releases leave the etag; an unchanged ledger is deleted.
#[tokio::test]
async fn a_delete_after_an_export_is_refused_when_the_ledger_changed() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("arch", &fast_policy()).await.unwrap();
    let rows: Vec<_> = (0..3).map(|i| row(&format!("k{i}"), &[])).collect();
    s.enroll("arch", &rows).await.unwrap();
    let refused = |r: tally_store::Result<_>| match r {
        Err(StoreError::FailedPrecondition { reason, .. }) => assert_eq!(reason, "LEDGER_CHANGED"),
        other => panic!("expected LEDGER_CHANGED, got {other:?}"),
    };

    // Enrolled after the export began.
    let read = s.summarize("arch").await.unwrap().content_etag;
    s.enroll("arch", &[row("late", &[])]).await.unwrap();
    refused(s.delete_ledger(&after_export("arch", &read)).await);
    assert!(s.get_ledger("arch").await.unwrap().deletion.is_none());

    // Reported after the export began (the claim itself moves nothing).
    let read = s.summarize("arch").await.unwrap().content_etag;
    let g = claim(s, "arch", 1).await.unwrap();
    s.release_claim("arch", g.claim.token, None, "w")
        .await
        .unwrap();
    assert_eq!(s.summarize("arch").await.unwrap().content_etag, read);
    let g = claim(s, "arch", 1).await.unwrap();
    s.report("arch", g.claim.token, &[success(&g.rows[0].key, 5)], "w")
        .await
        .unwrap();
    refused(s.delete_ledger(&after_export("arch", &read)).await);

    // Redriven after the export began.
    let g = claim(s, "arch", 1).await.unwrap();
    s.report("arch", g.claim.token, &[failure(&g.rows[0].key, 400)], "w")
        .await
        .unwrap();
    let read = s.summarize("arch").await.unwrap().content_etag;
    s.redrive(
        "arch",
        &RedriveTarget::Keys(vec![g.rows[0].key.clone()]),
        false,
        false,
        "op",
        "retry",
    )
    .await
    .unwrap();
    refused(s.delete_ledger(&after_export("arch", &read)).await);

    // Unchanged since it was read: deleted, and then an enrollment is
    // NOT_FOUND.
    let read = s.summarize("arch").await.unwrap().content_etag;
    let deleted = s.delete_ledger(&after_export("arch", &read)).await.unwrap();
    assert!(deleted.deletion.is_some());
    assert!(matches!(
        s.enroll("arch", &[row("after", &[])]).await,
        Err(StoreError::NotFound { .. })
    ));
}

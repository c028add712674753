//! Delivery at the store: result versions, the results log in commit
//! order, and consumers (receive, ack, nack, visibility, dead letters,
//! reset). One fresh database per test; each test names the invariant it
//! checks. Leases are made visible again by moving their time on the
//! database clock, never by sleeping.

use crate::common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tally_core::delivery::{Kind, NackFate, Position, Settings, Start};
use tally_core::job::FinalState;
use tally_store::consumers::{NewConsumer, ReceiveRequest, Received};
use tally_store::types::{FinishRequest, RedriveTarget};
use tally_store::{Store, StoreError};

fn pull() -> Settings {
    Settings {
        kind: Kind::Pull,
        visibility: Duration::from_secs(30),
        max_deliveries: 3,
        webhook: None,
    }
}

async fn consumer(store: &Store, ledger: &str, name: &str, start: Start) {
    store
        .create_consumer(&NewConsumer {
            ledger,
            name,
            settings: &pull(),
            secret: None,
            start,
            actor: "test",
        })
        .await
        .unwrap();
}

fn req(max_rows: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_rows,
        max_bytes: 4 << 20,
        visibility: None,
        include_payload: false,
    }
}

async fn receive(store: &Store, ledger: &str, name: &str, n: u32) -> Received {
    store.receive(ledger, name, &req(n)).await.unwrap()
}

/// Receives and acks until nothing is left; answers (key, version) in the
/// order handed out.
async fn drain(store: &Store, ledger: &str, name: &str) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    loop {
        let got = receive(store, ledger, name, 100).await;
        if got.deliveries.is_empty() {
            return out;
        }
        let positions: Vec<Position> = got.deliveries.iter().map(|d| d.position).collect();
        let acked = store.ack(ledger, name, &positions, None).await.unwrap();
        assert_eq!(acked.acked, positions.len());
        out.extend(got.deliveries.into_iter().map(|d| (d.key, d.version)));
    }
}

/// Settles rows `keys` (claimed first): the ones in `fail` PERMANENT (a
/// 400), the others SUCCEEDED.
async fn settle(store: &Store, ledger: &str, n: i64, fail: &HashSet<String>) {
    let g = claim(store, ledger, n).await.expect("rows to claim");
    let items: Vec<_> = g
        .rows
        .iter()
        .map(|r| {
            if fail.contains(&r.key) {
                failure(&r.key, 400)
            } else {
                success(&r.key, 1)
            }
        })
        .collect();
    store
        .report(ledger, g.claim.token, &items, "w")
        .await
        .unwrap();
}

async fn enroll_n(store: &Store, ledger: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("k{i:05}")).collect();
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    store.enroll(ledger, &rows).await.unwrap();
    keys
}

/// The results log agrees with the rows: no (row, version) logged twice;
/// every final row's current version logged; nothing logged above a row's
/// version; each ledger's `upto` is the running count of its entries.
pub async fn assert_log_matches_rows(store: &Store) {
    let bad: (i64, i64, i64, i64) = sqlx::query_as(
        "WITH logged AS (
             SELECT e.ledger_id, x.row_id, x.version
             FROM result_log e, unnest(e.row_ids, e.versions) AS x(row_id, version)
         )
         SELECT
           (SELECT count(*) FROM (SELECT row_id, version FROM logged
                                  GROUP BY 1, 2 HAVING count(*) > 1) d),
           (SELECT count(*) FROM rows r WHERE r.status IN (4, 5) AND NOT EXISTS (
                SELECT 1 FROM logged l WHERE l.row_id = r.id AND l.version = r.result_version)),
           (SELECT count(*) FROM logged l JOIN rows r ON r.id = l.row_id
             WHERE l.version > r.result_version OR l.ledger_id <> r.ledger_id),
           (SELECT count(*) FROM (
                SELECT upto, sum(n) OVER (PARTITION BY ledger_id ORDER BY seq) AS running
                FROM result_log) u WHERE upto <> running)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        bad,
        (0, 0, 0, 0),
        "(logged twice, final but unlogged, logged above the row's version, upto off)"
    );
}

/// Makes every lease of consumer `name` visible again now.
async fn expire_leases(store: &Store, name: &str) {
    sqlx::query(
        "UPDATE consumer_leases SET visible_time = now() - interval '1 second'
         WHERE consumer_id = (SELECT id FROM consumers WHERE name = $1)",
    )
    .bind(name)
    .execute(store.pool())
    .await
    .unwrap();
}

// Invariant: every way a row becomes final (a report through the claim
// cache, a report under the claim's lock, a job's end, an expired lease at
// its cap) logs it once at its version, and a redrive's new final result
// is logged again at a higher version.
#[tokio::test]
async fn every_final_result_is_logged_once_at_its_version() {
    let env = env().await;
    let s = &env.store;
    let mut policy = fast_policy();
    policy.caps.infra = 1;
    s.create_ledger("l", &policy).await.unwrap();
    enroll_n(s, "l", 40).await;
    // Guarded path (this process's claim), successes and PERMANENT rows.
    settle(s, "l", 10, &HashSet::from(["k00001".to_string()])).await;
    // A job: half reported (locked path), the rest failed by the job's end.
    let g = claim(s, "l", 10).await.unwrap();
    let job = s.create_job("l", g.claim.token, "w").await.unwrap();
    s.mark_submitted("l", &job.public_id, g.claim.token, "batches/b1", "f", "w")
        .await
        .unwrap();
    let half: Vec<_> = g.rows[..5].iter().map(|r| success(&r.key, 1)).collect();
    s.report("l", g.claim.token, &half, "w").await.unwrap();
    let failed = FinishRequest {
        final_state: FinalState::Failed,
        output_file: String::new(),
        error: "the batch failed".into(),
        not_run: Vec::new(),
    };
    s.finish_job("l", &job.public_id, g.claim.token, &failed, "w")
        .await
        .unwrap();
    // An expired lease at its infra cap (1): PERMANENT by the rescue.
    let g = claim(s, "l", 10).await.unwrap();
    expire(s, &g).await;
    let rescued = s.rescue_expired(None).await.unwrap();
    assert_eq!(rescued.rows, 10);
    assert_log_matches_rows(s).await;
    let finals: i64 = sqlx::query_scalar("SELECT count(*) FROM rows WHERE status IN (4, 5)")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let logged: i64 = sqlx::query_scalar("SELECT coalesce(sum(n), 0) FROM result_log")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(finals, logged, "one log entry per final row so far");
    // A redrive and a new answer: version 2, logged once more.
    let permanent: Vec<String> =
        sqlx::query_scalar("SELECT key FROM rows WHERE status = 5 ORDER BY key")
            .fetch_all(s.pool())
            .await
            .unwrap();
    assert!(!permanent.is_empty());
    s.redrive(
        "l",
        &RedriveTarget::Keys(permanent.clone()),
        false,
        false,
        "op",
        "",
    )
    .await
    .unwrap();
    while let Some(g) = claim(s, "l", 100).await {
        let items: Vec<_> = g.rows.iter().map(|r| success(&r.key, 1)).collect();
        s.report("l", g.claim.token, &items, "w").await.unwrap();
    }
    assert_log_matches_rows(s).await;
    let v2: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rows WHERE key = ANY($1) AND result_version = 2 AND status = 4",
    )
    .bind(&permanent)
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(v2 as usize, permanent.len());
    // Succeeded rows asked again (issue 49): each new answer is logged
    // once more, as the row's next version.
    let again: Vec<String> = sqlx::query_scalar(
        "SELECT key FROM rows WHERE status = 4 AND result_version = 1 ORDER BY key LIMIT 3",
    )
    .fetch_all(s.pool())
    .await
    .unwrap();
    assert_eq!(again.len(), 3);
    let asked = s
        .redrive(
            "l",
            &RedriveTarget::Keys(again.clone()),
            false,
            true,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!(asked.reanswered, 3);
    assert_log_matches_rows(s).await;
    while let Some(g) = claim(s, "l", 100).await {
        let items: Vec<_> = g.rows.iter().map(|r| success(&r.key, 1)).collect();
        s.report("l", g.claim.token, &items, "w").await.unwrap();
    }
    assert_log_matches_rows(s).await;
    let logged: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM result_log e, unnest(e.row_ids, e.versions) AS x(row_id, version)
         JOIN rows r ON r.id = x.row_id WHERE r.key = ANY($1) AND x.version = 2",
    )
    .bind(&again)
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(logged, 3, "each new answer logged once, as version 2");
}

// Invariant: a consumer from the beginning gets every final result once,
// in commit order, and after its acks nothing is handed out again; its lag
// reaches zero.
#[tokio::test]
async fn a_consumer_gets_every_result_once_in_commit_order() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    let keys = enroll_n(s, "l", 250).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    let mut settled_order = Vec::new();
    for _ in 0..5 {
        let g = claim(s, "l", 50).await.unwrap();
        let items: Vec<_> = g.rows.iter().map(|r| success(&r.key, 1)).collect();
        s.report("l", g.claim.token, &items, "w").await.unwrap();
        let mut batch: Vec<String> = g.rows.iter().map(|r| r.key.clone()).collect();
        batch.sort();
        settled_order.extend(batch);
    }
    let before = s.get_consumer("l", "sink").await.unwrap();
    assert_eq!(before.lag_rows, 250);
    assert!(before.oldest_unacked.is_some());
    let got = drain(s, "l", "sink").await;
    let got_keys: Vec<String> = got.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        got_keys, settled_order,
        "commit order, id order within a report"
    );
    assert!(got.iter().all(|(_, v)| *v == 1));
    let mut sorted = got_keys.clone();
    sorted.sort();
    assert_eq!(sorted, keys);
    let after = s.get_consumer("l", "sink").await.unwrap();
    assert_eq!((after.lag_rows, after.in_flight), (0, 0));
    assert_eq!(after.acked_position, after.read_position);
    assert!(after.oldest_unacked.is_none());
    expire_leases(s, "sink").await;
    assert!(receive(s, "l", "sink", 100).await.deliveries.is_empty());
}

// Invariant: receiving one result at a time crosses from one log entry to
// the next: a used-up entry at the cursor never stalls a consumer.
#[tokio::test]
async fn one_at_a_time_crosses_log_entries() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 6).await;
    for _ in 0..3 {
        settle(s, "l", 2, &HashSet::new()).await;
    }
    consumer(s, "l", "sink", Start::Beginning).await;
    let mut got = Vec::new();
    loop {
        let r = receive(s, "l", "sink", 1).await;
        let Some(d) = r.deliveries.first() else { break };
        s.ack("l", "sink", &[d.position], None).await.unwrap();
        got.push(d.key.clone());
    }
    assert_eq!(got.len(), 6);
}

// Invariant: what is handed out and not acknowledged within its visibility
// is handed out again (to any instance), with its delivery count; what is
// acknowledged never is; an ack by a second instance of a result the first
// already acknowledged acknowledges nothing more.
#[tokio::test]
async fn unacknowledged_results_are_handed_out_again_after_their_visibility() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 10).await;
    settle(s, "l", 10, &HashSet::new()).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    let first = receive(s, "l", "sink", 10).await;
    assert_eq!(first.deliveries.len(), 10);
    // Still leased: a second instance gets nothing.
    assert!(receive(s, "l", "sink", 10).await.deliveries.is_empty());
    let acked: Vec<Position> = first.deliveries[..4].iter().map(|d| d.position).collect();
    assert_eq!(s.ack("l", "sink", &acked, None).await.unwrap().acked, 4);
    expire_leases(s, "sink").await;
    let again = receive(s, "l", "sink", 10).await;
    let again_keys: Vec<&str> = again.deliveries.iter().map(|d| d.key.as_str()).collect();
    let expected: Vec<&str> = first.deliveries[4..]
        .iter()
        .map(|d| d.key.as_str())
        .collect();
    assert_eq!(again_keys, expected);
    assert!(again.deliveries.iter().all(|d| d.deliveries == 2));
    // The first instance acks late what the second now holds: acknowledged
    // once; the second's ack then finds nothing.
    let late: Vec<Position> = again.deliveries.iter().map(|d| d.position).collect();
    let a = s.ack("l", "sink", &late, None).await.unwrap();
    assert_eq!((a.acked, a.not_leased), (6, 0));
    let b = s.ack("l", "sink", &late, None).await.unwrap();
    assert_eq!((b.acked, b.not_leased), (0, 6));
    let c = s.get_consumer("l", "sink").await.unwrap();
    assert_eq!((c.in_flight, c.lag_rows), (0, 0));
}

// Invariant: concurrent instances of one consumer never hold the same
// result at once, and together they get every result.
#[tokio::test]
async fn concurrent_instances_never_share_a_lease() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 600).await;
    for _ in 0..6 {
        settle(s, "l", 100, &HashSet::new()).await;
    }
    consumer(s, "l", "sink", Start::Beginning).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let r = s.receive("l", "sink", &req(7)).await.unwrap();
                if r.deliveries.is_empty() {
                    return got;
                }
                got.extend(r.deliveries.into_iter().map(|d| d.key));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 600, "no result handed out twice while leased");
    assert_eq!(distinct.len(), 600);
}

// Invariant: results committed while a consumer reads are never skipped:
// with reports committing concurrently, a consumer that keeps receiving
// ends with every result exactly once (the log is in commit order).
#[tokio::test]
async fn a_consumer_tailing_concurrent_reports_misses_nothing() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 2000).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    let mut reporters = Vec::new();
    for _ in 0..4 {
        let s = s.clone();
        reporters.push(tokio::spawn(async move {
            while let Some(g) = claim(&s, "l", 25).await {
                let items: Vec<_> = g.rows.iter().map(|r| success(&r.key, 1)).collect();
                s.report("l", g.claim.token, &items, "w").await.unwrap();
            }
        }));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut done = false;
    loop {
        let r = receive(s, "l", "sink", 50).await;
        let positions: Vec<Position> = r.deliveries.iter().map(|d| d.position).collect();
        for d in r.deliveries {
            *seen.entry(d.key).or_default() += 1;
        }
        s.ack("l", "sink", &positions, None).await.unwrap();
        if positions.is_empty() {
            if done {
                break;
            }
            done = reporters.iter().all(|t| t.is_finished());
        }
    }
    for t in reporters {
        t.await.unwrap();
    }
    assert_eq!(seen.len(), 2000);
    assert!(seen.values().all(|n| *n == 1));
    assert_log_matches_rows(s).await;
}

// Invariant: a redrive that changes 100 results delivers those 100 again
// at a higher version, and nothing else.
#[tokio::test]
async fn a_redrive_delivers_the_changed_results_again_and_nothing_else() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    let keys = enroll_n(s, "l", 300).await;
    let failing: HashSet<String> = keys.iter().step_by(3).cloned().collect();
    assert_eq!(failing.len(), 100);
    for _ in 0..3 {
        settle(s, "l", 100, &failing).await;
    }
    consumer(s, "l", "sink", Start::Beginning).await;
    let first = drain(s, "l", "sink").await;
    assert_eq!(first.len(), 300);
    let failing_list: Vec<String> = failing.iter().cloned().collect();
    let r = s
        .redrive(
            "l",
            &RedriveTarget::Keys(failing_list),
            false,
            false,
            "op",
            "",
        )
        .await
        .unwrap();
    assert_eq!(r.redriven, 100);
    settle(s, "l", 100, &HashSet::new()).await;
    let again = drain(s, "l", "sink").await;
    let again_keys: HashSet<String> = again.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(again.len(), 100);
    assert_eq!(again_keys, failing);
    assert!(again.iter().all(|(_, v)| *v == 2), "a higher version");
    assert_log_matches_rows(s).await;
}

// Invariant: a result superseded before it was handed out (its row was
// redriven) is passed over; the consumer gets the new version only.
#[tokio::test]
async fn a_superseded_result_is_passed_over_for_its_new_version() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 2).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    settle(s, "l", 2, &HashSet::from(["k00000".to_string()])).await;
    s.redrive(
        "l",
        &RedriveTarget::Keys(vec!["k00000".into()]),
        false,
        false,
        "op",
        "",
    )
    .await
    .unwrap();
    // v1 of k00000 is in the log but superseded: only k00001 goes now.
    let now = drain(s, "l", "sink").await;
    assert_eq!(now, [("k00001".to_string(), 1)]);
    settle(s, "l", 1, &HashSet::new()).await;
    assert_eq!(drain(s, "l", "sink").await, [("k00000".to_string(), 2)]);
    let c = s.get_consumer("l", "sink").await.unwrap();
    assert_eq!(c.lag_rows, 0);
}

// Invariant: a result nacked for good, or handed out max_deliveries times
// without an ack, is dead-lettered (listed, never handed out again); a
// nack with a delay hands it out again after the delay only.
#[tokio::test]
async fn nacks_and_max_deliveries_dead_letter() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 3).await;
    settle(s, "l", 3, &HashSet::new()).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    let got = receive(s, "l", "sink", 3).await;
    let [a, b, c] = [0, 1, 2].map(|i| got.deliveries[i].position);
    let dead = NackFate::Dead(tally_core::delivery::DeadReason::Refused("bad row".into()));
    let n = s.nack("l", "sink", &[a], &dead).await.unwrap();
    assert_eq!(n.dead_lettered, 1);
    let later = NackFate::Retry(Duration::from_secs(3600));
    assert_eq!(s.nack("l", "sink", &[b], &later).await.unwrap().requeued, 1);
    // c is handed out until its max_deliveries (3), then dead-lettered.
    for expected in 2..=3 {
        expire_leases_at(s, c).await;
        let r = receive(s, "l", "sink", 3).await;
        assert_eq!(r.deliveries.len(), 1);
        assert_eq!(r.deliveries[0].deliveries, expected);
    }
    expire_leases_at(s, c).await;
    let r = receive(s, "l", "sink", 3).await;
    assert!(r.deliveries.is_empty(), "b waits an hour, c is dead");
    assert_eq!(r.dead_lettered, 1);
    let letters = s
        .list_dead_letters("l", "sink", Position::ORIGIN, 10)
        .await
        .unwrap();
    let listed: Vec<(Position, &str)> = letters
        .iter()
        .map(|d| (d.position, d.reason.as_str()))
        .collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].0, a);
    assert!(listed[0].1.contains("bad row"));
    assert_eq!(listed[1].0, c);
    assert!(listed[1].1.contains("max_deliveries"));
    let view = s.get_consumer("l", "sink").await.unwrap();
    assert_eq!((view.in_flight, view.dead_letters), (1, 2));
    assert_eq!(
        view.acked_position.raw(),
        b.raw() - 1,
        "b holds the watermark"
    );
}

async fn expire_leases_at(store: &Store, position: Position) {
    sqlx::query(
        "UPDATE consumer_leases SET visible_time = now() - interval '1 second' WHERE position = $1",
    )
    .bind(position.raw())
    .execute(store.pool())
    .await
    .unwrap();
}

// Invariant: a consumer started "now" sees only results logged after it
// was made; a reset to the beginning hands everything out again, and a
// reset drops what was leased.
#[tokio::test]
async fn start_now_and_reset() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 20).await;
    settle(s, "l", 10, &HashSet::new()).await;
    consumer(s, "l", "late", Start::Now).await;
    assert!(receive(s, "l", "late", 100).await.deliveries.is_empty());
    settle(s, "l", 10, &HashSet::new()).await;
    let got = receive(s, "l", "late", 100).await;
    assert_eq!(got.deliveries.len(), 10);
    let c = s
        .reset_consumer("l", "late", Start::Beginning, "op")
        .await
        .unwrap();
    assert_eq!(
        (c.in_flight, c.read_position, c.lag_rows),
        (0, Position::ORIGIN, 20)
    );
    assert_eq!(drain(s, "l", "late").await.len(), 20);
    let mid = got.deliveries[4].position;
    s.reset_consumer("l", "late", Start::After(mid), "op")
        .await
        .unwrap();
    assert_eq!(drain(s, "l", "late").await.len(), 5);
}

// Invariant: a consumer made at a saved position resumes exactly after it
// (what another consumer acked is not delivered again, nothing after it is
// skipped), and a position past the ledger's last result is refused at
// create and at reset, writing nothing: results logged later could sort
// before it and never be delivered.
#[tokio::test]
async fn a_saved_position_resumes_there_and_one_past_the_log_is_refused() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 12).await;
    settle(s, "l", 8, &HashSet::new()).await;
    consumer(s, "l", "first", Start::Beginning).await;
    let got = receive(s, "l", "first", 3).await;
    let saved = got.deliveries[2].position;
    s.ack("l", "first", &[], Some(saved)).await.unwrap();
    consumer(s, "l", "resumed", Start::After(saved)).await;
    assert_eq!(drain(s, "l", "resumed").await.len(), 5, "after the 3 acked");

    let head = s.get_consumer("l", "resumed").await.unwrap().acked_position;
    let past = Position::new(head.entry() + 1, 0).unwrap();
    let e = s
        .create_consumer(&NewConsumer {
            ledger: "l",
            name: "typo",
            settings: &pull(),
            secret: None,
            start: Start::After(past),
            actor: "t",
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::InvalidArgument(v) if v[0].field == "start.after_position"),
        "{e:?}"
    );
    assert!(s.get_consumer("l", "typo").await.is_err(), "nothing made");
    let e = s
        .reset_consumer("l", "resumed", Start::After(past), "op")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::InvalidArgument(v) if v[0].field == "to.after_position"),
        "{e:?}"
    );
    assert_eq!(
        s.get_consumer("l", "resumed").await.unwrap().acked_position,
        head,
        "the cursor did not move"
    );
    // The results logged after the refusal all reach the resumed consumer.
    settle(s, "l", 4, &HashSet::new()).await;
    assert_eq!(drain(s, "l", "resumed").await.len(), 4);
}

// Invariant: a ledger holds at most MAX_CONSUMERS_PER_LEDGER consumers;
// one more is FAILED_PRECONDITION TOO_MANY_CONSUMERS and makes nothing,
// and deleting one makes room again.
#[tokio::test]
async fn consumers_per_ledger_are_bounded() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    let max = tally_core::delivery::MAX_CONSUMERS_PER_LEDGER;
    for i in 0..max {
        consumer(s, "l", &format!("c{i}"), Start::Beginning).await;
    }
    let settings = pull();
    let more = |name: &'static str| NewConsumer {
        ledger: "l",
        name,
        settings: &settings,
        secret: None,
        start: Start::Beginning,
        actor: "t",
    };
    let e = s.create_consumer(&more("one-more")).await.unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::FailedPrecondition {
                reason: "TOO_MANY_CONSUMERS",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        s.get_consumer("l", "one-more").await.is_err(),
        "nothing made"
    );
    s.delete_consumer("l", "c0").await.unwrap();
    s.create_consumer(&more("one-more")).await.unwrap();
}

// Invariant: bad acks are refused whole and write nothing: a position
// after the cursor (never handed out) is INVALID_ARGUMENT, an unknown
// consumer NOT_FOUND, a consumer name taken ALREADY_EXISTS.
#[tokio::test]
async fn refusals_write_nothing() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    enroll_n(s, "l", 4).await;
    settle(s, "l", 4, &HashSet::new()).await;
    consumer(s, "l", "sink", Start::Beginning).await;
    let got = receive(s, "l", "sink", 2).await;
    let handed = got.deliveries[0].position;
    let beyond = Position::new(got.read_position.entry() + 5, 1).unwrap();
    let e = s
        .ack("l", "sink", &[handed, beyond], None)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)), "{e:?}");
    let e = s.ack("l", "sink", &[], Some(beyond)).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidArgument(_)), "{e:?}");
    assert_eq!(
        s.get_consumer("l", "sink").await.unwrap().in_flight,
        2,
        "nothing acked"
    );
    let e = s.ack("l", "nobody", &[handed], None).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    let e = s.receive("l", "nobody", &req(1)).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    let e = s
        .create_consumer(&NewConsumer {
            ledger: "l",
            name: "sink",
            settings: &pull(),
            secret: None,
            start: Start::Now,
            actor: "t",
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e:?}");
    // Acking up to what was handed out acknowledges both leases.
    let a = s
        .ack("l", "sink", &[], Some(got.read_position))
        .await
        .unwrap();
    assert_eq!(a.acked, 2);
}

// Invariant: a webhook consumer is taken by one sender at a time (others
// skip it until its turn is over or its lease runs out), only when it has
// something to send, and its delivery log keeps the newest entries only.
#[tokio::test]
async fn webhook_consumers_are_taken_by_one_sender_and_log_boundedly() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    let hook = Settings {
        kind: Kind::Webhook,
        webhook: Some(tally_core::delivery::WebhookTarget {
            url: "http://127.0.0.1:9/".into(),
            batch: 10,
        }),
        ..pull()
    };
    s.create_consumer(&NewConsumer {
        ledger: "l",
        name: "hook",
        settings: &hook,
        secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        start: Start::Beginning,
        actor: "t",
    })
    .await
    .unwrap();
    assert!(
        s.take_due_webhooks(10).await.unwrap().is_empty(),
        "nothing to send"
    );
    enroll_n(s, "l", 5).await;
    settle(s, "l", 5, &HashSet::new()).await;
    let due = s.take_due_webhooks(10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert!(s.take_due_webhooks(10).await.unwrap().is_empty(), "taken");
    let got = s.receive_for_webhook(&due[0], 1 << 20).await.unwrap();
    assert_eq!(got.deliveries.len(), 5);
    for i in 0..(tally_core::delivery::DELIVERY_LOG_KEPT + 5) {
        s.record_webhook_post(
            due[0].id,
            &tally_store::consumers::PostRecord {
                message_id: format!("m{i}"),
                rows: 5,
                first: got.deliveries[0].position,
                last: got.deliveries[4].position,
                http_status: Some(500),
                error: "answered 500".into(),
                duration: Duration::from_millis(3),
            },
        )
        .await
        .unwrap();
    }
    let log = s.list_webhook_posts("l", "hook", 0, 1000).await.unwrap();
    assert_eq!(log.len() as i64, tally_core::delivery::DELIVERY_LOG_KEPT);
    assert_eq!(
        log[0].message_id,
        format!("m{}", tally_core::delivery::DELIVERY_LOG_KEPT + 4)
    );
    s.webhook_turn_over(due[0].id, 1, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    let c = s.get_consumer("l", "hook").await.unwrap();
    assert_eq!(c.failures, 1);
    s.webhook_turn_over(due[0].id, 0, None).await.unwrap();
    // Due again (its leases are still held, nothing new): not taken.
    assert!(s.take_due_webhooks(10).await.unwrap().is_empty());
}

//! Reads whose answers stay bounded however much a row has been through
//! (issue 17, item 3): a history is cut to its newest attempts, and a FULL
//! page to a byte limit.

use crate::common;

use common::*;
use tally_store::rows::HISTORY_BYTES;
use tally_store::types::RowFilter;

/// Gives row `key` `n` attempts with `error_bytes`-byte errors, numbered
/// 1..=n (written directly: reaching hundreds of attempts through reports
/// takes redrive after redrive).
async fn attempts(env: &Env, key: &str, n: i32, error_bytes: usize) {
    sqlx::query(
        "INSERT INTO attempts (ledger_id, row_id, number, model, outcome, rule, error)
         SELECT r.ledger_id, r.id, g, 'm', 3, 'http_transient', repeat('e', $2)
         FROM rows r, generate_series(1, $3) g WHERE r.key = $1",
    )
    .bind(key)
    .bind(error_bytes as i32)
    .bind(n)
    .execute(env.store.pool())
    .await
    .unwrap();
}

/// Invariant: a row's history carries its newest attempts, oldest first,
/// within HISTORY_BYTES of text, and counts the rest in `history_omitted`;
/// a short history comes whole.
#[tokio::test]
async fn a_long_history_keeps_its_newest_attempts_and_counts_the_rest() {
    let env = env().await;
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
    env.store
        .enroll("l", &[row("long", &[]), row("short", &[])])
        .await
        .unwrap();
    attempts(&env, "long", 1000, 2000).await;
    attempts(&env, "short", 3, 2000).await;

    let long = env.store.get_row("l", "long").await.unwrap();
    let kept = long.history.len() as i64;
    assert!(kept > 100 && kept < 1000, "kept {kept}");
    assert_eq!(long.history_omitted, 1000 - kept);
    let numbers: Vec<i32> = long.history.iter().map(|a| a.number).collect();
    let newest: Vec<i32> = ((1000 - kept as i32 + 1)..=1000).collect();
    assert_eq!(numbers, newest, "the newest, oldest first");
    let text: usize = long.history.iter().map(|a| a.error.len()).sum();
    assert!(text as i64 <= HISTORY_BYTES, "{text} bytes of errors");

    let short = env.store.get_row("l", "short").await.unwrap();
    assert_eq!((short.history.len(), short.history_omitted), (3, 0));

    // The FULL view carries the same bounded histories.
    let page = env
        .store
        .list_rows("l", &RowFilter::default(), None, 10, Some(64 << 20))
        .await
        .unwrap();
    assert!(!page.cut);
    let listed: Vec<(String, usize, i64)> = page
        .rows
        .iter()
        .map(|r| (r.key.clone(), r.history.len(), r.history_omitted))
        .collect();
    assert_eq!(
        listed,
        [
            ("long".to_string(), kept as usize, 1000 - kept),
            ("short".to_string(), 3, 0)
        ]
    );
}

/// Invariant: a FULL page stops before the row that would pass its byte
/// limit (the first row always comes), says it was cut, and the rows after
/// the last one returned are the rest.
#[tokio::test]
async fn a_full_page_stops_at_its_byte_limit() {
    let env = env().await;
    env.store.create_ledger("l", &fast_policy()).await.unwrap();
    let big = format!(r#"{{"t": "{}"}}"#, "x".repeat(100_000));
    let rows: Vec<_> = (0..10)
        .map(|i| row_with(&format!("k{i}"), &big, &[]))
        .collect();
    env.store.enroll("l", &rows).await.unwrap();
    let all = RowFilter::default();
    let page = env
        .store
        .list_rows("l", &all, None, 100, Some(350_000))
        .await
        .unwrap();
    let keys: Vec<&str> = page.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["k0", "k1", "k2"]);
    assert!(page.cut);
    let one = env
        .store
        .list_rows("l", &all, None, 100, Some(1))
        .await
        .unwrap();
    assert_eq!((one.rows.len(), one.cut), (1, true), "the first row always");
    let rest = env
        .store
        .list_rows("l", &all, Some("k2"), 100, Some(64 << 20))
        .await
        .unwrap();
    assert_eq!(rest.rows.len(), 7);
    assert!(!rest.cut, "the whole rest fits");
    let basic = env
        .store
        .list_rows("l", &all, None, 100, None)
        .await
        .unwrap();
    assert_eq!((basic.rows.len(), basic.cut), (10, false));
}

//! ClaimRows' `fill_batch`: a claim that would take fewer rows than it asks
//! for waits while more can come, says why, and takes nothing; it goes once
//! the rows have been quiet long enough, and at once when the ledger turns
//! filling off. The queue is aged on the database clock, never by sleeping.

use crate::jobs::{clients, create_ledger, enroll, fast_policy, serve};
use tally_pg::TestDb;
use tally_proto::v1 as pb;

fn fill_claim(ledger: &str) -> pb::ClaimRowsRequest {
    pb::ClaimRowsRequest {
        parent: format!("ledgers/{ledger}"),
        max_rows: 10,
        worker: "w".into(),
        fill_batch: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_partial_batch_waits_for_arriving_rows_then_goes() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "f", fast_policy()).await;
    enroll(&mut l, "f", &["a", "b", "c"]).await;

    let held = l.claim_rows(fill_claim("f")).await.unwrap().into_inner();
    assert!(
        held.claim.is_none() && held.rows.is_empty(),
        "nothing taken"
    );
    let filling = held.filling.expect("says why it waits");
    assert_eq!(
        (filling.runnable_rows, filling.reason.as_str()),
        (3, "arriving")
    );
    assert!(filling.retry_after.unwrap().seconds <= 5);

    // The rows have been quiet for longer than the default 5 s.
    sqlx::query("UPDATE runnable SET ready_time = ready_time - interval '10 seconds'")
        .execute(r.store.pool())
        .await
        .unwrap();
    let went = l.claim_rows(fill_claim("f")).await.unwrap().into_inner();
    assert!(went.filling.is_none());
    assert_eq!(
        went.rows.len(),
        3,
        "a partial batch goes once nothing more can come"
    );
    r.stop().await.unwrap();
}

#[tokio::test]
async fn filling_off_or_a_full_claim_goes_at_once() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    create_ledger(
        &mut l,
        "off",
        pb::LedgerPolicy {
            batch_fill: Some(pb::BatchFill {
                max_wait: Some(prost_types::Duration::default()),
                ..Default::default()
            }),
            ..fast_policy()
        },
    )
    .await;
    enroll(&mut l, "off", &["a"]).await;
    let got = l.claim_rows(fill_claim("off")).await.unwrap().into_inner();
    assert_eq!(got.rows.len(), 1, "filling off");

    create_ledger(&mut l, "full", fast_policy()).await;
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    enroll(&mut l, "full", &keys).await;
    let got = l.claim_rows(fill_claim("full")).await.unwrap().into_inner();
    assert_eq!(got.rows.len(), 10, "a full claim");
    r.stop().await.unwrap();
}

/// A batch full by bytes goes, however few its rows: four rows of 400 KB
/// fill a claim's 1.3 MB response, so a claim of up to 10 takes what fits
/// instead of waiting for six more rows; under a 4 MiB response the same
/// rows are a partial batch, and wait.
#[tokio::test]
async fn a_batch_full_by_bytes_goes() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    let text = "x".repeat(400_000);
    for ledger in ["big", "wide"] {
        create_ledger(&mut l, ledger, fast_policy()).await;
        let rows = (0..4)
            .map(|i| pb::RowInput {
                key: format!("big-{i}"),
                payload: format!("{{\"text\": \"{text}\"}}"),
                ..Default::default()
            })
            .collect();
        l.enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{ledger}"),
            rows,
        })
        .await
        .unwrap();
    }
    let wide = l.claim_rows(fill_claim("wide")).await.unwrap().into_inner();
    assert!(wide.claim.is_none() && wide.filling.is_some(), "{wide:?}");
    let small = pb::ClaimRowsRequest {
        max_response_bytes: 1_300_000,
        ..fill_claim("big")
    };
    let got = l.claim_rows(small).await.unwrap().into_inner();
    assert!(got.filling.is_none(), "{:?}", got.filling);
    assert!(
        !got.rows.is_empty() && got.truncated,
        "what fits, the rest left runnable"
    );
    r.stop().await.unwrap();
}

//! GetRow and ListRows.

use super::BAD_LEDGER_NAMES;
use crate::harness::*;
use tally_proto::v1 as pb;

/// GetRow refuses malformed row names (bad ledger ids, empty, 257-character,
/// slashed and spaced keys) and answers NOT_FOUND with a ResourceInfo for
/// an unknown ledger and an unknown row.
#[tokio::test]
async fn get_row() {
    let env = env().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("known")]).await;
    let get = |name: &str| {
        let mut client = env.client();
        let req = pb::GetRowRequest {
            name: name.to_string(),
        };
        async move { client.get_row(req).await }
    };
    for name in [
        String::new(),
        "ledgers/l".into(),
        "ledgers/l/rows/".into(),
        "ledgers/l/rows/a b".into(),
        "ledgers/l/rows/a/b".into(),
        "ledgers/l/rows/é".into(),
        format!("ledgers/l/rows/{}", "k".repeat(257)),
        "ledgers/L/rows/known".into(),
        "ledgers/l/claims/known".into(),
        "rows/known".into(),
    ] {
        let s = env.rejected(get(&name)).await;
        assert_invalid(&s, &["name"]);
    }
    let s = env.rejected(get("ledgers/nope/rows/known")).await;
    assert_not_found(&s, "ledger", "ledgers/nope");
    let s = env.rejected(get("ledgers/l/rows/unknown")).await;
    assert_not_found(&s, "row", "ledgers/l/rows/unknown");
    assert_eq!(env.get_row("l", "known").await.key, "known");
    env.stop().await;
}

/// ListRows refuses malformed parents, unknown ledgers (NOT_FOUND), unknown
/// or unspecified statuses in the filter, malformed job names, over-long
/// filter strings, page sizes outside 0..=1000, unknown views, and page
/// tokens that are garbage or were issued for another filter, another
/// ledger or another list.
#[tokio::test]
async fn list_rows() {
    let env = env().await;
    env.ledger("l").await;
    env.ledger("m").await;
    env.enroll_n("l", "k", 3).await;
    env.enroll_n("m", "k", 3).await;
    let ok = || pb::ListRowsRequest {
        parent: ledger_name("l"),
        page_size: 1,
        ..Default::default()
    };
    let list = |req: pb::ListRowsRequest| {
        let mut client = env.client();
        async move { client.list_rows(req).await }
    };

    for bad in BAD_LEDGER_NAMES {
        let s = env
            .rejected(list(pb::ListRowsRequest {
                parent: bad.into(),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["parent"]);
    }
    let s = env
        .rejected(list(pb::ListRowsRequest {
            parent: "ledgers/nope".into(),
            ..ok()
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/nope");

    let filtered = |f: pb::RowFilter| pb::ListRowsRequest {
        filter: Some(f),
        ..ok()
    };
    let long = "x".repeat(129);
    let cases: Vec<(pb::RowFilter, Vec<&str>)> = vec![
        (
            pb::RowFilter {
                statuses: vec![pb::RowStatus::Pending as i32, 0],
                ..Default::default()
            },
            vec!["filter.statuses[1]"],
        ),
        (
            pb::RowFilter {
                statuses: vec![99],
                ..Default::default()
            },
            vec!["filter.statuses[0]"],
        ),
        (
            pb::RowFilter {
                job: "jobs/1".into(),
                ..Default::default()
            },
            vec!["filter.job"],
        ),
        (
            pb::RowFilter {
                in_job: "ledgers/l".into(),
                ..Default::default()
            },
            vec!["filter.in_job"],
        ),
        (
            pb::RowFilter {
                rule: long.clone(),
                model: long.clone(),
                prompt_name: long.clone(),
                prompt_version: long.clone(),
                ..Default::default()
            },
            vec![
                "filter.rule",
                "filter.model",
                "filter.prompt_name",
                "filter.prompt_version",
            ],
        ),
    ];
    for (f, fields) in cases {
        let s = env.rejected(list(filtered(f))).await;
        assert_invalid(&s, &fields);
    }
    for page_size in [-1, 1001, i32::MAX] {
        let s = env
            .rejected(list(pb::ListRowsRequest { page_size, ..ok() }))
            .await;
        assert_invalid(&s, &["page_size"]);
    }
    let s = env
        .rejected(list(pb::ListRowsRequest { view: 7, ..ok() }))
        .await;
    assert_invalid(&s, &["view"]);

    let token = list(ok()).await.unwrap().into_inner().next_page_token;
    assert!(!token.is_empty());
    let ledgers_token = env
        .client()
        .list_ledgers(pb::ListLedgersRequest {
            page_size: 1,
            page_token: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .next_page_token;
    assert!(!ledgers_token.is_empty());
    let other_filter = filtered(pb::RowFilter {
        statuses: vec![pb::RowStatus::Pending as i32],
        ..Default::default()
    });
    let other_ledger = pb::ListRowsRequest {
        parent: ledger_name("m"),
        ..ok()
    };
    for (req, token) in [
        (ok(), "garbage!".to_string()),
        (ok(), ledgers_token),
        (other_filter, token.clone()),
        (other_ledger, token.clone()),
    ] {
        let s = env
            .rejected(list(pb::ListRowsRequest {
                page_token: token,
                ..req
            }))
            .await;
        assert_invalid(&s, &["page_token"]);
    }
    // The token works where it was issued.
    let next = list(pb::ListRowsRequest {
        page_token: token,
        ..ok()
    })
    .await
    .unwrap()
    .into_inner();
    assert_eq!(next.rows[0].key, "k1");
    env.stop().await;
}

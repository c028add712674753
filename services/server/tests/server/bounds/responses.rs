//! Responses within their client's receive limit (issue 17, item 3).

use crate::bounds::support::*;
use prost::Message as _;
use std::collections::BTreeSet;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::edge::responses::{CLAIMED_ROW_OVERHEAD, DEFAULT_CLIENT_RECEIVE, ENVELOPE};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

fn payload(bytes: usize) -> String {
    format!(r#"{{"t":"{}"}}"#, "x".repeat(bytes - 8))
}

/// Creates ledger `id` with `n` rows `k00`, `k01`, … of `bytes`-byte payloads.
async fn ledger_of_big_rows(
    l: &mut LedgerServiceClient<Channel>,
    id: &str,
    n: usize,
    bytes: usize,
) {
    l.create_ledger(pb::CreateLedgerRequest {
        ledger_id: id.into(),
        policy: None,
    })
    .await
    .expect("create ledger");
    let rows = (0..n)
        .map(|i| pb::RowInput {
            key: format!("k{i:02}"),
            payload: payload(bytes),
            ..Default::default()
        })
        .collect();
    let r = l
        .enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{id}"),
            rows,
        })
        .await
        .expect("enroll")
        .into_inner();
    assert_eq!(r.enrolled as usize, n);
}

async fn counts(l: &mut LedgerServiceClient<Channel>, id: &str) -> pb::LedgerSummary {
    l.summarize_ledger(pb::SummarizeLedgerRequest {
        name: format!("ledgers/{id}"),
        ..Default::default()
    })
    .await
    .expect("summarize")
    .into_inner()
}

/// Invariant: a ClaimRows answer fits the client's `max_response_bytes`;
/// when rows were left out the answer says `truncated`, the left-out rows
/// are not claimed (PENDING, no attempt counted) and later claims hand
/// them out, each row exactly once. A limit below one largest row is
/// INVALID_ARGUMENT and claims nothing.
#[tokio::test]
async fn a_claim_stops_at_the_clients_receive_limit_and_leaves_the_rest_runnable() {
    let server = start(|_| {}).await;
    const LIMIT: usize = 2 * 1024 * 1024;
    const ROWS: usize = 12;
    const PAYLOAD: usize = 400_000;
    // The client refuses anything over LIMIT: every answer it decodes fits.
    let mut l = LedgerServiceClient::new(server.connect().await).max_decoding_message_size(LIMIT);
    ledger_of_big_rows(&mut l, "big", ROWS, PAYLOAD).await;
    let claim = |max_response_bytes: i64| pb::ClaimRowsRequest {
        parent: "ledgers/big".into(),
        max_rows: ROWS as i32,
        worker: "w".into(),
        max_response_bytes,
        ..Default::default()
    };

    let refused = l.claim_rows(claim(1_000_000)).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let fields: Vec<String> = refused
        .get_error_details()
        .bad_request()
        .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default();
    assert_eq!(fields, ["max_response_bytes"], "{refused:?}");
    assert_eq!(
        counts(&mut l, "big").await.running,
        0,
        "a refusal claims nothing"
    );

    let mut seen = BTreeSet::new();
    let mut answers = Vec::new();
    loop {
        let r = l
            .claim_rows(claim(LIMIT as i64))
            .await
            .expect("claim")
            .into_inner();
        let Some(c) = &r.claim else { break };
        let size = r.encoded_len();
        assert!(
            size <= LIMIT,
            "answer of {size} bytes over the {LIMIT}-byte limit"
        );
        assert_eq!(
            c.row_count as usize,
            r.rows.len(),
            "the claim holds what it answered"
        );
        for row in &r.rows {
            assert!(seen.insert(row.key.clone()), "{} handed out twice", row.key);
            assert_eq!(row.attempts.as_ref().map_or(0, |a| a.total), 0);
        }
        if answers.is_empty() {
            // Every row is the same size: the budget (the limit less the
            // envelope) holds exactly this many.
            let row = &r.rows[0];
            let text = row.key.len()
                + row.payload.len()
                + row.model.len()
                + row
                    .prompt
                    .as_ref()
                    .map_or(0, |p| p.name.len() + p.version.len());
            let fits = (LIMIT - ENVELOPE) / (text + CLAIMED_ROW_OVERHEAD as usize);
            assert_eq!(r.rows.len(), fits, "rows up to the byte budget");
            assert!(r.truncated, "rows were left out: the answer says so");
            let counts = counts(&mut l, "big").await;
            assert_eq!(
                counts.running as usize, fits,
                "only what was answered is held"
            );
            assert_eq!(
                counts.pending as usize,
                ROWS - fits,
                "the rest stay runnable"
            );
            // A row left out: not claimed, no attempt counted.
            let left = (0..ROWS)
                .map(|i| format!("k{i:02}"))
                .find(|k| !seen.contains(k))
                .unwrap();
            let row = l
                .get_row(pb::GetRowRequest {
                    name: format!("ledgers/big/rows/{left}"),
                })
                .await
                .expect("get row")
                .into_inner();
            assert_eq!(
                row.status(),
                pb::RowStatus::Pending,
                "{left} was not claimed"
            );
            assert_eq!(row.attempts.map_or(-1, |a| a.total), 0);
            assert!(row.history.is_empty());
        }
        answers.push((r.rows.len(), r.truncated, size));
        assert!(answers.len() <= ROWS, "claims never end: {answers:?}");
    }
    println!(
        "claims of {ROWS} rows of {PAYLOAD} bytes at a {LIMIT}-byte limit (rows, truncated, bytes): {answers:?}"
    );
    assert_eq!(seen.len(), ROWS, "every row claimed exactly once");
    assert!(answers.len() > 1);
    let (_, last_truncated, _) = answers.last().unwrap();
    assert!(!last_truncated, "the last claim took all that was left");
    let c = counts(&mut l, "big").await;
    assert_eq!((c.running as usize, c.pending), (ROWS, 0));
    assert_eq!(c.attempts_total, 0, "no attempt was spent by a cut claim");
    server.stop().await;
}

/// Invariant: ListRows in the FULL view answers pages under the default
/// 4 MiB receive limit, ending early by bytes; following
/// `next_page_token` returns every row exactly once, in key order.
#[tokio::test]
async fn full_pages_end_at_the_byte_limit_and_continue_after_the_last_row() {
    let server = start(|_| {}).await;
    const ROWS: usize = 30;
    const PAYLOAD: usize = 300_000;
    // A default client: 4 MiB receive limit.
    let mut l = LedgerServiceClient::new(server.connect().await);
    ledger_of_big_rows(&mut l, "pages", ROWS, PAYLOAD).await;
    let mut token = String::new();
    let mut keys = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = l
            .list_rows(pb::ListRowsRequest {
                parent: "ledgers/pages".into(),
                page_size: 1000,
                page_token: token.clone(),
                view: pb::RowView::Full as i32,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        let size = page.encoded_len();
        assert!(size <= DEFAULT_CLIENT_RECEIVE, "a page of {size} bytes");
        assert!(!page.rows.is_empty(), "a page with a token has rows");
        for row in &page.rows {
            assert_eq!(row.payload.len(), PAYLOAD, "FULL rows carry their payload");
            keys.push(row.key.clone());
        }
        pages.push((page.rows.len(), size));
        assert!(pages.len() <= ROWS, "pages never end: {pages:?}");
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    println!("FULL pages of {ROWS} rows of {PAYLOAD} bytes (rows, bytes): {pages:?}");
    let all: Vec<String> = (0..ROWS).map(|i| format!("k{i:02}")).collect();
    assert_eq!(keys, all, "every row once, in key order");
    assert!(pages.len() > 1, "the byte limit split the list");
    // BASIC pages by count only: the whole ledger in one page.
    let basic = l
        .list_rows(pb::ListRowsRequest {
            parent: "ledgers/pages".into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("list basic")
        .into_inner();
    assert_eq!(basic.rows.len(), ROWS);
    assert!(basic.next_page_token.is_empty());
    server.stop().await;
}

/// A policy at every bound of its lists and texts: about 110 KiB encoded.
fn largest_policy() -> pb::LedgerPolicy {
    let text = |c: char| c.to_string().repeat(tally_core::policy::MAX_MATCH_TEXT);
    pb::LedgerPolicy {
        overrides: (0..tally_core::policy::MAX_OVERRIDES)
            .map(|i| pb::ClassifierOverride {
                name: format!("rule-{i}"),
                status: text('s'),
                message_contains: text('m'),
                finish_reason: text('f'),
                verdict: pb::RowStatus::Permanent as i32,
                ..Default::default()
            })
            .collect(),
        prices: (0..tally_core::policy::MAX_PRICES)
            .map(|i| pb::ModelPrice {
                model: format!(
                    "m{i:03}{}",
                    "p".repeat(tally_core::policy::MAX_MATCH_TEXT - 4)
                ),
                input_per_million: 1.0,
                output_per_million: 2.0,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Invariant: a ledger's policy is bounded (one entry past a list bound is
/// INVALID_ARGUMENT naming the field, and nothing is created), and
/// ListLedgers pages of the largest policies stay within a default client's
/// 4 MiB, continuing after the last ledger: every ledger once, in order.
#[tokio::test]
async fn ledger_pages_end_at_the_byte_limit_and_policies_are_bounded() {
    let server = start(|_| {}).await;
    let mut l = LedgerServiceClient::new(server.connect().await);
    let mut too_many = largest_policy();
    too_many.overrides.push(too_many.overrides[0].clone());
    let refused = l
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "too-big".into(),
            policy: Some(too_many),
        })
        .await
        .expect_err("101 overrides are refused");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let fields: Vec<String> = refused
        .get_details_bad_request()
        .expect("field violations")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["policy.overrides"]);
    const LEDGERS: usize = 50;
    for i in 0..LEDGERS {
        l.create_ledger(pb::CreateLedgerRequest {
            ledger_id: format!("big-{i:02}"),
            policy: Some(largest_policy()),
        })
        .await
        .expect("a policy at its bounds is accepted");
    }
    let mut token = String::new();
    let mut names = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = l
            .list_ledgers(pb::ListLedgersRequest {
                page_size: 1000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("list ledgers")
            .into_inner();
        let size = page.encoded_len();
        assert!(size <= DEFAULT_CLIENT_RECEIVE, "a page of {size} bytes");
        assert!(!page.ledgers.is_empty(), "a page with a token has ledgers");
        names.extend(page.ledgers.iter().map(|x| x.name.clone()));
        pages.push((page.ledgers.len(), size));
        assert!(pages.len() <= LEDGERS, "pages never end: {pages:?}");
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    println!("ListLedgers pages of {LEDGERS} largest policies (ledgers, bytes): {pages:?}");
    let all: Vec<String> = (0..LEDGERS)
        .map(|i| format!("ledgers/big-{i:02}"))
        .collect();
    assert_eq!(names, all, "every ledger once, in name order");
    assert!(pages.len() > 1, "the byte limit split the list");
    server.stop().await;
}

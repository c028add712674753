//! RedriveRows.

use super::{BAD_LEDGER_NAMES, bad_keys};
use crate::harness::*;
use tally_proto::v1 as pb;
use tally_proto::v1::redrive_rows_request::Target;

const LIMIT: usize = 5;

fn by_keys(keys: &[&str]) -> Option<Target> {
    Some(Target::Keys(pb::RowKeys {
        keys: keys.iter().map(|k| k.to_string()).collect(),
    }))
}

/// RedriveRows refuses, redriving nothing even when some named rows are
/// PERMANENT: malformed parents, unknown ledgers (NOT_FOUND), no target, an
/// empty key list, malformed keys, more keys than max_rows_per_call, keys
/// with no row, bad filters and over-long reasons.
#[tokio::test]
async fn redrive_rows() {
    let env = Env::start_with(|a| a.limits.max_rows_per_call = LIMIT).await;
    env.ledger("l").await;
    env.enroll("l", vec![row("failed"), row("fine")]).await;
    let g = env.claim("l", 2).await.unwrap();
    env.report(
        &g.claim.name,
        vec![failure("failed", 400), success("fine", 1, 1)],
    )
    .await;
    assert_eq!(env.status_of("l", "failed").await, pb::RowStatus::Permanent);
    let ok = || pb::RedriveRowsRequest {
        parent: ledger_name("l"),
        target: by_keys(&["failed"]),
        validate_only: false,
        reason: "fixed".into(),
        ..Default::default()
    };
    let redrive = |req: pb::RedriveRowsRequest| {
        let mut client = env.client();
        async move { client.redrive_rows(req).await }
    };

    for bad in BAD_LEDGER_NAMES {
        let s = env
            .rejected(redrive(pb::RedriveRowsRequest {
                parent: bad.into(),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["parent"]);
    }
    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            parent: "ledgers/nope".into(),
            ..ok()
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/nope");

    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            target: None,
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["target"]);
    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            target: by_keys(&[]),
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["keys.keys"]);
    for key in bad_keys() {
        let s = env
            .rejected(redrive(pb::RedriveRowsRequest {
                target: by_keys(&["failed", &key]),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["keys.keys[1]"]);
    }
    let many: Vec<String> = (0..=LIMIT).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            target: by_keys(&many),
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["keys.keys"]);
    // A key with no row rejects the whole call, even with a redrivable row
    // named beside it, and even as a dry run.
    for validate_only in [false, true] {
        let s = env
            .rejected(redrive(pb::RedriveRowsRequest {
                target: by_keys(&["failed", "ghost"]),
                validate_only,
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["keys.keys[1]"]);
    }

    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            target: Some(Target::Filter(pb::RowFilter {
                statuses: vec![0],
                job: "nope".into(),
                ..Default::default()
            })),
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["filter.statuses[0]", "filter.job"]);
    let s = env
        .rejected(redrive(pb::RedriveRowsRequest {
            reason: "r".repeat(1025),
            ..ok()
        }))
        .await;
    assert_invalid(&s, &["reason"]);

    assert_eq!(env.status_of("l", "failed").await, pb::RowStatus::Permanent);
    let done = redrive(ok()).await.unwrap().into_inner();
    assert_eq!((done.redriven, done.skipped), (1, 0));
    env.stop().await;
}

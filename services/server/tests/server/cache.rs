//! The result cache over gRPC: the policy as UpdateLedger takes and
//! GetLedger shows it, bad lookups refused by field with nothing written,
//! a ledger without the cache refused, and a hit settling its row.

use crate::jobs::{claim, clients, create_ledger, enroll, fast_policy, get_row, ok, serve};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tonic::Code;
use tonic_types::StatusExt;

fn lookup(claim: &str, requests: Vec<pb::CacheRequest>) -> pb::SettleFromCacheRequest {
    pb::SettleFromCacheRequest {
        claim: claim.into(),
        requests,
    }
}

fn req(key: &str, request: &str) -> pb::CacheRequest {
    pb::CacheRequest {
        key: key.into(),
        request: request.into(),
    }
}

fn cache_on() -> pb::LedgerPolicy {
    pb::LedgerPolicy {
        result_cache: Some(pb::ResultCachePolicy {
            max_age: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            scope: pb::CacheScope::Shared as i32,
        }),
        ..fast_policy()
    }
}

/// Invariants: the policy round-trips (an update mask turns it on and off);
/// a policy out of bounds and every malformed lookup is INVALID_ARGUMENT
/// naming its field; a lookup on a ledger without the cache is
/// FAILED_PRECONDITION; none of them writes anything.
#[tokio::test]
async fn the_policy_and_bad_lookups() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    create_ledger(&mut l, "c", fast_policy()).await;
    enroll(&mut l, "c", &["a", "b"]).await;
    let held = claim(&mut l, "c", "w", 2).await;
    let name = held.claim.as_ref().unwrap().name.clone();
    assert!(!held.claim.unwrap().result_cache, "off by default");

    let off = l
        .settle_from_cache(lookup(&name, vec![req("a", "{}")]))
        .await
        .unwrap_err();
    assert_eq!(off.code(), Code::FailedPrecondition, "{off:?}");
    assert!(off.message().contains("result_cache"), "{off:?}");

    let update = |policy: pb::LedgerPolicy| pb::UpdateLedgerRequest {
        ledger: Some(pb::Ledger {
            name: "ledgers/c".into(),
            policy: Some(policy),
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["policy.result_cache".into()],
        }),
    };
    let bad_policy = |seconds: i64, scope: i32| pb::LedgerPolicy {
        result_cache: Some(pb::ResultCachePolicy {
            max_age: Some(prost_types::Duration { seconds, nanos: 0 }),
            scope,
        }),
        ..Default::default()
    };
    for (policy, field) in [
        (bad_policy(3600, 7), "policy.result_cache.scope"),
        (bad_policy(0, 1), "policy.result_cache.max_age"),
        (bad_policy(400 * 86400, 1), "policy.result_cache.max_age"),
        (bad_policy(-1, 1), "policy.result_cache.max_age"),
    ] {
        let s = l.update_ledger(update(policy)).await.unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument);
        let details = s.get_error_details();
        let v = details.bad_request().expect("BadRequest");
        assert_eq!(v.field_violations[0].field, field, "{s:?}");
    }

    let on = l
        .update_ledger(update(cache_on()))
        .await
        .unwrap()
        .into_inner();
    let got = on.policy.unwrap().result_cache.expect("on");
    assert_eq!(got.max_age.unwrap().seconds, 3600);
    assert_eq!(got.scope(), pb::CacheScope::Shared);

    let big = "x".repeat(tally_core::cache::MAX_REQUEST_BYTES + 1);
    let many: Vec<_> = (0..1001).map(|i| req(&format!("k{i}"), "{}")).collect();
    for (bad, field) in [
        (lookup(&name, vec![req("a", "")]), "requests[0].request"),
        (lookup(&name, vec![req("a", &big)]), "requests[0].request"),
        (
            lookup(&name, vec![req("a", "{}"), req("a", "{}")]),
            "requests[1].key",
        ),
        (
            lookup(&name, vec![req("bad key!", "{}")]),
            "requests[0].key",
        ),
        (lookup(&name, many), "requests"),
        (
            lookup("ledgers/c/claims/nope", vec![req("a", "{}")]),
            "claim",
        ),
    ] {
        let s = l.settle_from_cache(bad).await.unwrap_err();
        assert!(
            matches!(s.code(), Code::InvalidArgument | Code::ResourceExhausted),
            "{field}: {s:?}"
        );
        if s.code() == Code::InvalidArgument {
            let details = s.get_error_details();
            let v = details.bad_request().expect("BadRequest");
            assert_eq!(v.field_violations[0].field, field, "{s:?}");
        }
    }
    let row = get_row(&mut l, "c", "a").await;
    assert_eq!(row.status(), pb::RowStatus::Running, "nothing written");
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM cache_requests")
        .fetch_one(r.store.pool())
        .await
        .unwrap();
    assert_eq!(n, 0);
    r.stop().await.unwrap();
}

/// Invariants: a claim says the ledger uses the cache; a request answered
/// in one ledger is a hit in another (settled SUCCEEDED over gRPC, its
/// attempt naming its source); the dry run answers the same without
/// writing; the summary counts hits and misses.
#[tokio::test]
async fn a_hit_over_grpc() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, _) = clients(r.grpc_addr).await;
    for ledger in ["one", "two"] {
        create_ledger(&mut l, ledger, cache_on()).await;
        enroll(&mut l, ledger, &["a", "b"]).await;
    }
    let held = claim(&mut l, "one", "w", 2).await.claim.unwrap();
    assert!(held.result_cache);
    let got = l
        .settle_from_cache(lookup(&held.name, vec![req("a", "{\"q\":1}")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.hits.len(), got.misses), (0, 1));
    l.report_outcomes(pb::ReportOutcomesRequest {
        claim: held.name.clone(),
        outcomes: vec![ok("a"), ok("b")],
        claim_next: None,
    })
    .await
    .unwrap();

    let dry = l
        .estimate_from_cache(pb::EstimateFromCacheRequest {
            parent: "ledgers/two".into(),
            requests: vec![req("a", "{\"q\":1}"), req("b", "{\"q\":2}")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dry.hits.len(), 1);
    assert_eq!((dry.hits[0].key.as_str(), dry.misses), ("a", 1));
    assert_eq!(
        get_row(&mut l, "two", "a").await.status(),
        pb::RowStatus::Pending,
        "the dry run writes nothing"
    );

    let held = claim(&mut l, "two", "w", 2).await.claim.unwrap();
    let got = l
        .settle_from_cache(lookup(
            &held.name,
            vec![req("a", "{\"q\":1}"), req("b", "{\"q\":2}")],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.hits, got.misses), (vec!["a".to_string()], 1));
    let a = get_row(&mut l, "two", "a").await;
    assert_eq!(a.status(), pb::RowStatus::Succeeded);
    assert_eq!(a.result, "{\"ok\": true}");
    let cached = a.history[0].cached.as_ref().expect("cached");
    assert_eq!(
        (cached.row.as_str(), cached.attempt),
        ("ledgers/one/rows/a", 1)
    );
    let s = l
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: "ledgers/two".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let c = s.result_cache.unwrap();
    assert_eq!((c.hits, c.misses), (1, 1));
    r.stop().await.unwrap();
}

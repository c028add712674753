//! Outbound safety of alerts (issue 17, item 5): alert URLs that reach
//! loopback, link-local (metadata), private or other non-public addresses
//! are refused when a policy is set and again when sending (after resolving
//! a name once), redirects are not followed, and a refused alert is given
//! up with its reason. `--alerts-allow-private-hosts` lifts the address
//! rule (a receiver on this host): the tests that need a local receiver to
//! be reached turn it on, and say so.

use crate::security::common::*;
use axum::http::{HeaderMap, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tally_core::outbound::Reach;
use tally_core::webhook::Secret;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::tasks::alerts::{Failure, Sender};
use tally_store::types::OutboxAlert;
use tonic::Code;
use tonic_types::StatusExt as _;

/// Literal forbidden targets, one per class, with the class the refusal
/// names.
const FORBIDDEN: [(&str, &str); 7] = [
    ("http://127.0.0.1:9/alerts", "loopback"),
    ("http://[::1]:9/alerts", "loopback"),
    ("http://10.20.30.40/alerts", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[::ffff:127.0.0.1]:9/alerts", "loopback"),
    ("http://100.64.0.1/alerts", "shared address space"),
    ("http://[fd00::1]/alerts", "private"),
];

/// A local HTTP receiver that counts requests and answers each with
/// `status` (and `location`, if given).
async fn receiver(status: StatusCode, location: Option<String>) -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let hits = counted.clone();
        let location = location.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let mut headers = HeaderMap::new();
            if let Some(l) = location {
                headers.insert("location", l.parse().unwrap());
            }
            (status, headers, "")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, hits)
}

fn alert(url: String) -> OutboxAlert {
    OutboxAlert {
        id: 1,
        ledger: "a".into(),
        msg_id: "msg_1".into(),
        kind: "threshold_crossed".into(),
        url,
        body: "{}".into(),
        tries: 1,
    }
}

fn sender(reach: Reach) -> Sender {
    Sender::new(Secret::from_bytes(vec![7; 32]).unwrap(), reach).unwrap()
}

fn field_violations(status: &tonic::Status) -> Vec<(String, String)> {
    status
        .get_error_details()
        .bad_request()
        .map(|b| {
            b.field_violations
                .iter()
                .map(|f| (f.field.clone(), f.description.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn create(
    l: &mut LedgerServiceClient<tonic::transport::Channel>,
    id: &str,
    url: &str,
) -> Result<pb::Ledger, tonic::Status> {
    l.create_ledger(authed(
        pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: Some(pb::LedgerPolicy {
                review_threshold: 1,
                alert_url: url.into(),
                ..Default::default()
            }),
        },
        Some(OPERATOR),
    ))
    .await
    .map(|r| r.into_inner())
}

#[tokio::test]
async fn alert_urls_with_forbidden_literal_addresses_are_refused_when_set() {
    // Invariant: CreateLedger and UpdateLedger refuse an alert_url whose
    // host is a non-public literal address (each class, IPv4-mapped
    // included) with INVALID_ARGUMENT on policy.alert_url, and write
    // nothing; only http and https are accepted; names pass (checked when
    // sending).
    let server = start(|_| {}).await;
    let mut l = LedgerServiceClient::new(server.connect().await);
    for (i, (url, class)) in FORBIDDEN.iter().enumerate() {
        let id = format!("refused-{i}");
        let err = create(&mut l, &id, url).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{url}: {err:?}");
        let v = field_violations(&err);
        assert_eq!(v.len(), 1, "{url}: {v:?}");
        assert_eq!(v[0].0, "policy.alert_url");
        assert!(v[0].1.contains(class), "{url}: {}", v[0].1);
        assert!(
            v[0].1.contains("--alerts-allow-private-hosts"),
            "{}",
            v[0].1
        );
        let missing = l
            .get_ledger(authed(
                pb::GetLedgerRequest {
                    name: format!("ledgers/{id}"),
                },
                Some(OPERATOR),
            ))
            .await
            .unwrap_err();
        assert_eq!(missing.code(), Code::NotFound, "nothing written for {url}");
    }
    let ftp = create(&mut l, "ftp", "ftp://example.com/x")
        .await
        .unwrap_err();
    assert_eq!(field_violations(&ftp)[0].0, "policy.alert_url");

    let public = "https://alerts.example.com/tally";
    create(&mut l, "named", "http://localhost:9/alerts")
        .await
        .expect("names are checked when sending");
    let ledger = create(&mut l, "public", public).await.expect("public url");
    let update = l
        .update_ledger(authed(
            pb::UpdateLedgerRequest {
                ledger: Some(pb::Ledger {
                    name: "ledgers/public".into(),
                    policy: Some(pb::LedgerPolicy {
                        alert_url: "http://169.254.169.254/".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["policy.alert_url".into()],
                }),
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap_err();
    assert_eq!(update.code(), Code::InvalidArgument);
    assert_eq!(field_violations(&update)[0].0, "policy.alert_url");
    let after = l
        .get_ledger(authed(
            pb::GetLedgerRequest {
                name: "ledgers/public".into(),
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.policy.unwrap().alert_url, public);
    assert_eq!(after.etag, ledger.etag, "the refused update wrote nothing");
    server.stop().await;

    // With the flag, the same literal addresses are accepted.
    let allowed = start(|a| a.alerts_allow_private_hosts = true).await;
    let mut l = LedgerServiceClient::new(allowed.connect().await);
    for (i, (url, _)) in FORBIDDEN.iter().enumerate() {
        create(&mut l, &format!("allowed-{i}"), url)
            .await
            .unwrap_or_else(|e| panic!("{url} with the flag: {e:?}"));
    }
    allowed.stop().await;
}

#[tokio::test]
async fn the_sender_refuses_forbidden_targets_without_connecting() {
    // Invariant: without the flag, every forbidden literal address and a
    // name resolving to loopback (`localhost`) is refused before any
    // connection is made: a receiver on loopback sees no request.
    let (port, hits) = receiver(StatusCode::OK, None).await;
    let public_only = sender(Reach::PublicOnly);
    let mut urls: Vec<(String, &str)> = FORBIDDEN
        .iter()
        .map(|(u, c)| (u.replace(":9/", &format!(":{port}/")), *c))
        .collect();
    urls.push((format!("http://localhost:{port}/alerts"), "loopback"));
    for (url, class) in &urls {
        let started = std::time::Instant::now();
        match public_only.deliver(&alert(url.clone())).await {
            Err(Failure::Refused(why)) => {
                assert!(why.contains(class), "{url}: {why}");
                assert!(why.contains("--alerts-allow-private-hosts"), "{why}");
            }
            other => panic!("{url}: {other:?}"),
        }
        // Refused, not timed out trying (10.x and 169.254.x would hang).
        assert!(started.elapsed() < Duration::from_secs(5), "{url}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no request reached loopback"
    );

    // With the flag the same receiver is reached, by address and by name.
    let any = sender(Reach::AnyHost);
    for url in [
        format!("http://127.0.0.1:{port}/alerts"),
        format!("http://localhost:{port}/alerts"),
    ] {
        assert_eq!(any.deliver(&alert(url)).await, Ok(()));
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    // Invariant: a 3xx answer is a failed delivery; its Location (here a
    // second loopback receiver) is never requested, even with the flag on
    // (the flag is needed to reach the first receiver at all).
    let (target, target_hits) = receiver(StatusCode::OK, None).await;
    for status in [StatusCode::FOUND, StatusCode::TEMPORARY_REDIRECT] {
        let (port, hits) =
            receiver(status, Some(format!("http://127.0.0.1:{target}/internal"))).await;
        let got = sender(Reach::AnyHost)
            .deliver(&alert(format!("http://127.0.0.1:{port}/alerts")))
            .await;
        match got {
            Err(Failure::Failed(why)) => {
                assert!(why.contains(status.as_str()), "{why}");
                assert!(why.contains("not followed"), "{why}");
            }
            other => panic!("{status}: {other:?}"),
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }
    assert_eq!(
        target_hits.load(Ordering::SeqCst),
        0,
        "no redirect followed"
    );
}

#[tokio::test]
async fn a_refused_alert_is_given_up_at_once_with_its_reason() {
    // Invariant: an alert whose host resolves to a forbidden address is
    // given up on its first try (not retried), with the reason recorded
    // in the outbox and counted as given_up; nothing reaches the host.
    let (port, hits) = receiver(StatusCode::OK, None).await;
    let server = start(|a| {
        a.alert_secret = Some(Secret::from_bytes(vec![9; 32]).unwrap());
        a.alert_interval = Duration::from_millis(50);
    })
    .await;
    let policy = pb::LedgerPolicy {
        review_threshold: 1,
        alert_url: format!("http://localhost:{port}/alerts"),
        ..Default::default()
    };
    let claim = claimed(&server, "watched", Some(policy), 1).await;
    LedgerServiceClient::new(server.connect().await)
        .report_outcomes(authed(
            pb::ReportOutcomesRequest {
                claim,
                outcomes: vec![pb::RowOutcome {
                    key: "k0".into(),
                    outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
                        kind: pb::FailureKind::ProviderError as i32,
                        http_code: 400,
                        message: "invalid argument".into(),
                        ..Default::default()
                    })),
                    usage: None,
                    ..Default::default()
                }],
                claim_next: None,
            },
            Some(WORKER),
        ))
        .await
        .expect("report");
    let pool = server.running.store.pool();
    let given_up = || async {
        sqlx::query_as::<_, (i32, Option<String>)>(
            "SELECT tries, last_error FROM alert_outbox WHERE failed_time IS NOT NULL",
        )
        .fetch_optional(pool)
        .await
        .unwrap()
    };
    eventually("the alert to be given up", || async {
        given_up().await.is_some()
    })
    .await;
    let (tries, error) = given_up().await.unwrap();
    assert_eq!(tries, 1, "given up on the first try");
    let error = error.unwrap_or_default();
    assert!(
        error.contains("localhost") && error.contains("loopback"),
        "{error}"
    );
    let given_up = tally_server::metrics::ResultLabels { result: "given_up" };
    let retry = tally_server::metrics::ResultLabels { result: "retry" };
    let m = &server.running.metrics.alert_deliveries;
    assert_eq!(m.get_or_create(&given_up).get(), 1);
    assert_eq!(m.get_or_create(&retry).get(), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    server.stop().await;
}

#[tokio::test]
async fn alert_errors_never_carry_url_credentials() {
    // Invariant: a failed delivery's reason (logged, and kept as the
    // outbox's last_error) names what went wrong without the URL's user,
    // password or secret query values.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://alice:s3cret-pw@127.0.0.1:{closed}/alerts?token=tok-123&x=1");
    match sender(Reach::AnyHost).deliver(&alert(url)).await {
        Err(Failure::Failed(why)) => {
            assert!(why.contains("post failed"), "{why}");
            assert!(!why.contains("s3cret-pw"), "{why}");
            assert!(!why.contains("tok-123"), "{why}");
            assert!(!why.contains("alice"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

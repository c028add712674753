//! The metrics endpoint through a real server on port 0 and a fresh
//! database: per-call counters and durations from the request-metrics
//! layer, and the row counters of the ledger handlers, as scraped over HTTP
//! from `/metrics`.

use std::net::SocketAddr;
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::server;
use tonic::Code;

async fn scrape(addr: SocketAddr) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape /metrics");
    assert!(response.status().is_success());
    response.text().await.unwrap()
}

/// The value of the sample line `series` (name with its labels, as
/// rendered), if the text has one.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// One OK call and one NOT_FOUND call are counted by method and code and
/// timed; enrolled and reported rows are counted by ledger (and verdict).
#[tokio::test]
async fn calls_and_rows_are_counted_on_the_metrics_endpoint() {
    let db = TestDb::new().await;
    let running = server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts");
    let mut ledgers = LedgerServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();

    ledgers
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "m".into(),
            policy: Some(pb::LedgerPolicy::default()),
        })
        .await
        .unwrap();
    let missing = ledgers
        .get_ledger(pb::GetLedgerRequest {
            name: "ledgers/nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    let rows = ["a", "b"]
        .iter()
        .map(|k| pb::RowInput {
            key: (*k).into(),
            payload: format!("{{\"text\": \"{k}\"}}"),
            ..Default::default()
        })
        .collect();
    let enrolled = ledgers
        .enroll_rows(pb::EnrollRowsRequest {
            parent: "ledgers/m".into(),
            rows,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(enrolled.enrolled, 2);
    let claim = ledgers
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/m".into(),
            max_rows: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let claim_name = claim.claim.unwrap().name;
    let outcomes = claim
        .rows
        .iter()
        .map(|r| pb::RowOutcome {
            key: r.key.clone(),
            outcome: Some(pb::row_outcome::Outcome::Result("{\"ok\": true}".into())),
            usage: None,
        })
        .collect();
    let report = ledgers
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claim_name,
            outcomes,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.succeeded, 2);

    let text = scrape(running.metrics_addr).await;
    let calls = |method: &str, code: &str| {
        value(
            &text,
            &format!(
                "tally_grpc_requests_total{{code=\"{code}\",method=\"{method}\",service=\"tally.v1.LedgerService\"}}"
            ),
        )
    };
    assert_eq!(calls("CreateLedger", "OK"), Some(1.0), "{text}");
    assert_eq!(calls("GetLedger", "NOT_FOUND"), Some(1.0), "{text}");
    assert_eq!(calls("GetLedger", "OK"), None, "{text}");
    assert_eq!(calls("EnrollRows", "OK"), Some(1.0), "{text}");
    assert!(text.contains("# TYPE tally_grpc_requests_total counter"));
    assert!(text.contains("# TYPE tally_grpc_request_duration_seconds histogram"));
    let timed = |method: &str, suffix: &str| {
        value(
            &text,
            &format!(
                "tally_grpc_request_duration_seconds_{suffix}{{method=\"{method}\",service=\"tally.v1.LedgerService\"}}"
            ),
        )
    };
    assert_eq!(timed("GetLedger", "count"), Some(1.0), "{text}");
    assert_eq!(timed("CreateLedger", "count"), Some(1.0), "{text}");
    assert_eq!(
        value(
            &text,
            "tally_grpc_request_duration_seconds_bucket{method=\"GetLedger\",service=\"tally.v1.LedgerService\",le=\"+Inf\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "tally_rows_enrolled_total{ledger=\"m\"}"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "tally_rows_reported_total{ledger=\"m\",status=\"SUCCEEDED\"}"
        ),
        Some(2.0),
        "{text}"
    );
    running.stop().await.unwrap();
}

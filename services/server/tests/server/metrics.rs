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
use tally_telemetry::exposition::parse;
use tonic::Code;

async fn scrape(addr: SocketAddr) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape /metrics");
    assert!(response.status().is_success());
    response.text().await.unwrap()
}

/// One OK call and one NOT_FOUND call are counted by method and code and
/// timed; health checks are not; enrolled, claimed and reported rows are
/// counted by ledger (and verdict and rule), unreported verdicts sit at
/// zero; every family has its type and help.
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

    // Probes: served, never counted.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for _ in 0..3 {
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
    }

    let text = scrape(running.metrics_addr).await;
    let s = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let ledger_calls = |method: &str, code: &str| {
        s.sample(
            "tally_grpc_requests_total",
            &[
                ("service", "tally.v1.LedgerService"),
                ("method", method),
                ("code", code),
            ],
        )
    };
    assert_eq!(ledger_calls("CreateLedger", "OK"), Some(1.0), "{text}");
    assert_eq!(ledger_calls("GetLedger", "NOT_FOUND"), Some(1.0), "{text}");
    assert_eq!(ledger_calls("GetLedger", "OK"), None, "{text}");
    assert_eq!(ledger_calls("EnrollRows", "OK"), Some(1.0), "{text}");
    assert_eq!(
        s.sum(
            "tally_grpc_requests_total",
            &[("service", "grpc.health.v1.Health")]
        ),
        0.0,
        "health checks are not counted: {text}"
    );
    // Every family with series in this configuration (no webhooks, no
    // alerts, no jobs; the backlog gauges have their own test), with type
    // and help.
    for (family, kind) in [
        ("tally_grpc_requests", "counter"),
        ("tally_grpc_request_duration_seconds", "histogram"),
        ("tally_rows_enrolled", "counter"),
        ("tally_rows_claimed", "counter"),
        ("tally_rows_reported", "counter"),
        ("tally_row_verdicts", "counter"),
        ("tally_ledger_call_duration_seconds", "histogram"),
        ("tally_rpc_refused", "counter"),
        ("tally_database_up", "gauge"),
        ("tally_operation_events", "counter"),
        ("tally_operation_cas_conflicts", "counter"),
        ("tally_watch_streams", "gauge"),
        ("tally_queue_dead_entries", "gauge"),
        ("tally_queue_vacuums", "counter"),
        ("tally_rows_rescued", "counter"),
        ("tally_jobs_abandoned", "counter"),
        ("tally_rows_released", "counter"),
        ("tally_backlog_refresh_time_seconds", "gauge"),
        ("tally_db_pool_connections_in_use", "gauge"),
        ("tally_db_pool_connections_idle", "gauge"),
        ("tally_db_pool_connections_max", "gauge"),
        ("tally_build", "info"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        let f = s
            .family(family)
            .unwrap_or_else(|| panic!("no family {family}: {text}"));
        assert_eq!(f.kind, kind, "{family}");
        assert!(!f.help.is_empty(), "{family} has help");
    }
    let timed = |method: &str, suffix: &str| {
        s.sample(
            &format!("tally_grpc_request_duration_seconds_{suffix}"),
            &[("service", "tally.v1.LedgerService"), ("method", method)],
        )
    };
    assert_eq!(timed("GetLedger", "count"), Some(1.0), "{text}");
    assert_eq!(timed("CreateLedger", "count"), Some(1.0), "{text}");
    assert_eq!(
        s.sample(
            "tally_grpc_request_duration_seconds_bucket",
            &[
                ("service", "tally.v1.LedgerService"),
                ("method", "GetLedger"),
                ("le", "+Inf")
            ]
        ),
        Some(1.0),
        "{text}"
    );
    let m = [("ledger", "m")];
    assert_eq!(s.sample("tally_rows_enrolled_total", &m), Some(2.0));
    assert_eq!(s.sample("tally_rows_claimed_total", &m), Some(2.0));
    let reported = |status| {
        s.sample(
            "tally_rows_reported_total",
            &[("ledger", "m"), ("status", status)],
        )
    };
    assert_eq!(reported("SUCCEEDED"), Some(2.0), "{text}");
    // Pre-initialised: present at zero before any PERMANENT report.
    assert_eq!(reported("PERMANENT"), Some(0.0), "{text}");
    assert_eq!(
        s.sample(
            "tally_row_verdicts_total",
            &[
                ("ledger", "m"),
                ("verdict", "SUCCEEDED"),
                ("rule", "success")
            ]
        ),
        Some(2.0),
        "{text}"
    );
    for call in ["claim", "report", "enroll"] {
        assert_eq!(
            s.sample(
                "tally_ledger_call_duration_seconds_count",
                &[("call", call)]
            ),
            Some(1.0),
            "{call}: {text}"
        );
    }
    assert_eq!(s.sample("tally_database_up", &[]), Some(1.0));
    assert!(s.sample("tally_db_pool_connections_max", &[]).unwrap() >= 1.0);
    assert_eq!(
        s.sum(
            "tally_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    running.stop().await.unwrap();
}

/// The backlog gauges follow the ledger without a count per scrape: after
/// ANALYZE, the estimate of rows by status is exact at this size, the held
/// rows are the claim's, and a queued row ready in the past has an age.
#[tokio::test]
async fn backlog_gauges_follow_the_ledger() {
    let db = TestDb::new().await;
    let running = server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts");
    let mut ledgers = LedgerServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    ledgers
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: "b".into(),
            policy: Some(pb::LedgerPolicy::default()),
        })
        .await
        .unwrap();
    let rows = (0..5)
        .map(|i| pb::RowInput {
            key: format!("k{i}"),
            payload: "{}".into(),
            ..Default::default()
        })
        .collect();
    ledgers
        .enroll_rows(pb::EnrollRowsRequest {
            parent: "ledgers/b".into(),
            rows,
        })
        .await
        .unwrap();
    ledgers
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/b".into(),
            max_rows: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    running.store.analyze_rows().await.unwrap();
    // The refresher runs every 200ms in tests: wait for a refresh that
    // saw the ANALYZE (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let s = loop {
        let text = scrape(running.metrics_addr).await;
        let s = parse(&text).unwrap();
        let pending = s.sample(
            "tally_ledger_rows",
            &[("ledger", "b"), ("status", "PENDING")],
        );
        if pending == Some(5.0) {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refreshed estimate: {text}"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let b = [("ledger", "b")];
    assert_eq!(
        s.sample(
            "tally_ledger_rows",
            &[("ledger", "b"), ("status", "SUCCEEDED")]
        ),
        Some(0.0)
    );
    assert_eq!(s.sample("tally_ledger_rows_held", &b), Some(2.0));
    assert!(
        s.sample("tally_ledger_oldest_runnable_age_seconds", &b)
            .is_some_and(|age| age >= 0.0)
    );
    assert!(s.sample("tally_backlog_refresh_time_seconds", &[]).unwrap() > 0.0);
    running.stop().await.unwrap();
}

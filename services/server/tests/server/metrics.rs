//! The metrics endpoint through a real server on port 0 and a fresh
//! database: per-call counters and durations from the request-metrics
//! layer, and the row counters of the ledger handlers, as scraped over HTTP
//! from `/metrics`.

use std::net::SocketAddr;
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server;
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

/// Creates ledger `id` with `n` rows of empty payloads (`k0`, `k1`, …).
async fn ledger_of_empty_rows(
    ledgers: &mut LedgerServiceClient<tonic::transport::Channel>,
    id: &str,
    n: usize,
) {
    ledgers
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.into(),
            policy: Some(pb::LedgerPolicy::default()),
        })
        .await
        .unwrap();
    let rows = (0..n)
        .map(|i| pb::RowInput {
            key: format!("k{i}"),
            payload: "{}".into(),
            ..Default::default()
        })
        .collect();
    ledgers
        .enroll_rows(pb::EnrollRowsRequest {
            parent: format!("ledgers/{id}"),
            rows,
        })
        .await
        .unwrap();
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
            ..Default::default()
        })
        .collect();
    let report = ledgers
        .report_outcomes(pb::ReportOutcomesRequest {
            claim: claim_name,
            outcomes,
            claim_next: None,
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
    ledger_of_empty_rows(&mut ledgers, "b", 5).await;
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

/// Every sample of `s` whose `ledger` label is `ledger`.
fn series_of(s: &tally_telemetry::exposition::Scrape, ledger: &str) -> Vec<String> {
    s.samples
        .iter()
        .filter(|x| x.labels.get("ledger").map(String::as_str) == Some(ledger))
        .map(|x| format!("{} {:?}", x.name, x.labels))
        .collect()
}

/// Issue 34: a deleted ledger's series leave `/metrics` at once, counters
/// and gauges alike, and a ledger made again under its name counts from
/// zero instead of adding to the old counts; a batch's turnaround is
/// observed once per job (a repeated FinishJob adds nothing), under its
/// provider and model.
#[tokio::test]
async fn a_deleted_ledgers_series_go_and_each_batch_is_timed_once() {
    use tally_proto::v1::job_service_client::JobServiceClient;
    use tally_server::metrics::TURNAROUND_BUCKETS;

    let db = TestDb::new().await;
    let running = server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts");
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut ledgers = LedgerServiceClient::new(channel.clone());
    let mut jobs = JobServiceClient::new(channel);
    let create = |id: &str| pb::CreateLedgerRequest {
        ledger_id: id.into(),
        policy: Some(pb::LedgerPolicy {
            model: "gemini-2.5-flash".into(),
            ..Default::default()
        }),
    };
    let enroll_in = |ledger: &str, keys: &[&str]| pb::EnrollRowsRequest {
        parent: format!("ledgers/{ledger}"),
        rows: keys
            .iter()
            .map(|k| pb::RowInput {
                key: (*k).into(),
                payload: "{}".into(),
                ..Default::default()
            })
            .collect(),
    };
    ledgers.create_ledger(create("gone")).await.unwrap();
    ledgers.create_ledger(create("kept")).await.unwrap();
    ledgers
        .enroll_rows(enroll_in("gone", &["a", "b"]))
        .await
        .unwrap();
    ledgers
        .enroll_rows(enroll_in("kept", &["a"]))
        .await
        .unwrap();
    let claim = ledgers
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/gone".into(),
            max_rows: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .claim
        .unwrap()
        .name;
    let job = jobs
        .create_job(pb::CreateJobRequest {
            claim: claim.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    jobs.mark_submitted(pb::MarkSubmittedRequest {
        name: job.name.clone(),
        claim: claim.clone(),
        batch: "batches/b1".into(),
        input_file: "files/f1".into(),
    })
    .await
    .unwrap();
    let finish = pb::FinishJobRequest {
        name: job.name.clone(),
        claim: claim.clone(),
        final_state: pb::JobState::Succeeded as i32,
        output_file: String::new(),
        error: String::new(),
        not_run: Vec::new(),
    };
    jobs.finish_job(finish.clone()).await.unwrap();
    jobs.finish_job(finish).await.unwrap();

    let s = parse(&scrape(running.metrics_addr).await).unwrap();
    let model = [("provider", "gemini"), ("model", "gemini-2.5-flash")];
    assert_eq!(
        s.sample("tally_batch_turnaround_seconds_count", &model),
        Some(1.0),
        "one job, timed once"
    );
    assert_eq!(TURNAROUND_BUCKETS[0], 1.0);
    assert_eq!(
        s.sample(
            "tally_batch_turnaround_seconds_bucket",
            &[model[0], model[1], ("le", "1.0")]
        ),
        Some(1.0),
        "submitted and finished within a second"
    );
    assert_eq!(
        s.sample("tally_rows_enrolled_total", &[("ledger", "gone")]),
        Some(2.0)
    );
    assert!(!series_of(&s, "gone").is_empty());

    ledgers
        .delete_ledger(pb::DeleteLedgerRequest {
            name: "ledgers/gone".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // The series go with the delete, at once: a backlog refresh (every
    // 200 ms here) that read the ledger before the delete leaves it out
    // (tasks::backlog::tests::a_ledger_deleted_during_a_read_does_not_come_back).
    let s = parse(&scrape(running.metrics_addr).await).unwrap();
    assert_eq!(series_of(&s, "gone"), Vec::<String>::new());
    assert!(
        !series_of(&s, "kept").is_empty(),
        "other ledgers keep theirs"
    );

    // Once purged, the name is free: the new ledger counts from zero.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match ledgers.create_ledger(create("gone")).await {
            Ok(_) => break,
            Err(e) if e.code() == Code::AlreadyExists => {
                assert!(std::time::Instant::now() < deadline, "never purged: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    ledgers
        .enroll_rows(enroll_in("gone", &["c"]))
        .await
        .unwrap();
    let s = parse(&scrape(running.metrics_addr).await).unwrap();
    assert_eq!(
        s.sample("tally_rows_enrolled_total", &[("ledger", "gone")]),
        Some(1.0)
    );
}

/// The families `deploy/README.md` lists for the server (its first table
/// under "Metrics") with their types, parsed from the markdown: a counter
/// `x_total` is the family `x`, an info `x_info` the family `x`.
fn documented_families(readme: &str) -> Vec<(String, Option<String>)> {
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .expect("deploy/README.md has a Metrics section");
    let table: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    let mut out = Vec::new();
    for line in table {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let names: Vec<&str> = cells[0]
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| !n.is_empty())
            .collect();
        let kinds: Vec<&str> = cells[1].split(',').map(str::trim).collect();
        let mut full: Vec<String> = Vec::new();
        for name in names {
            // `tally_db_pool_connections_in_use`, `_idle`: the first
            // name's stem with another ending.
            let name = if name.starts_with('_') {
                let first = full[0].as_str();
                let stem = first
                    .strip_suffix("_in_use")
                    .unwrap_or_else(|| first.rsplit_once('_').map_or(first, |(s, _)| s));
                format!("{stem}{name}")
            } else {
                name.to_string()
            };
            full.push(name);
        }
        let one_kind = (kinds.len() == 1).then(|| kinds[0].to_string());
        for (i, name) in full.iter().enumerate() {
            // "counter, gauges": the first is the counter, the rest gauges.
            let kind = one_kind.clone().or_else(|| {
                let k = kinds[i.min(kinds.len() - 1)];
                Some(k.trim_end_matches('s').to_string())
            });
            let family = match kind.as_deref() {
                Some("counter") => name.trim_end_matches("_total").to_string(),
                Some("info") => name.trim_end_matches("_info").to_string(),
                _ => name.clone(),
            };
            out.push((family, kind));
        }
    }
    out
}

/// A table that grew by more than a fifth since its statistics were taken
/// is analyzed by the server without waiting for autovacuum (so the planner
/// does not plan for a table of a few pages), counted by table; once
/// analyzed, its statistics are current and it is left alone.
#[tokio::test]
async fn a_table_grown_past_its_statistics_is_analyzed() {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    args.queue_vacuum_interval = std::time::Duration::from_millis(100);
    let running = server::start(args).await.expect("server starts");
    let mut ledgers = LedgerServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    // Autovacuum analyzing it first would leave the server nothing to do.
    sqlx::query("ALTER TABLE rows SET (autovacuum_enabled = false)")
        .execute(running.store.pool())
        .await
        .unwrap();
    ledger_of_empty_rows(&mut ledgers, "grow", 3_000).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = scrape(running.metrics_addr).await;
        let s = parse(&text).unwrap();
        if s.sample("tally_table_analyzes_total", &[("table", "rows")]) >= Some(1.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rows was not analyzed: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let stats = running.store.hot_table_stats().await.unwrap();
    let rows = stats.iter().find(|t| t.table == "rows").expect("rows");
    assert!(
        rows.estimated >= 3_000 && !rows.stale(),
        "the planner's estimate is the table's: {rows:?}"
    );
}

/// Issue 34: `deploy/README.md` lists exactly the families the server's
/// `/metrics` serves, each with its type: a family added without a line
/// there, or a line for a family the server lost, fails here.
#[tokio::test]
async fn deploy_readme_lists_exactly_the_families_metrics_serves() {
    let readme = include_str!("../../../../deploy/README.md");
    let documented = documented_families(readme);
    let db = TestDb::new().await;
    let running = server::start(ServeArgs::for_tests(db.url().to_string()))
        .await
        .expect("server starts");
    let text = scrape(running.metrics_addr).await;
    let s = parse(&text).unwrap();
    // What /metrics serves: every registered family (one without series
    // yet renders nothing) and the collectors' (pool, process, build).
    let mut kinds: std::collections::BTreeMap<&str, &str> = s
        .families
        .iter()
        .map(|(name, f)| (name.as_str(), f.kind.as_str()))
        .collect();
    for (name, kind) in running.metrics.registered() {
        kinds.insert(name, kind);
    }
    let served: std::collections::BTreeSet<&str> = kinds.keys().copied().collect();
    let listed: std::collections::BTreeSet<&str> =
        documented.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        served.difference(&listed).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "served by /metrics but not listed in deploy/README.md"
    );
    assert_eq!(
        listed.difference(&served).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "listed in deploy/README.md but not served by /metrics"
    );
    for (family, kind) in &documented {
        if let Some(kind) = kind {
            assert_eq!(kinds[family.as_str()], kind, "{family}");
        }
    }
}

//! DeliveryService through gRPC against a real server on port 0: consumers
//! receiving and acknowledging, a long poll woken by a report, lag in
//! `/metrics`, a deleted ledger's consumers gone with it, and a webhook
//! consumer against a receiver that fails every third request and is down
//! for thirty seconds. Who may call what (and the team boundary) is checked
//! with every other RPC in security/teams.rs. Each test states the
//! invariant it checks.

use axum::http::{HeaderMap, StatusCode};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally_core::webhook::{Headers, Secret, verify};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_client::DeliveryServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{self, Running};
use tally_telemetry::exposition::parse;
use tonic::Code;
use tonic::transport::Channel;

struct Env {
    _db: TestDb,
    server: Running,
    l: LedgerServiceClient<Channel>,
    d: DeliveryServiceClient<Channel>,
}

async fn env(tweak: impl FnOnce(&mut ServeArgs)) -> Env {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    tweak(&mut args);
    let server = server::start(args).await.expect("server starts");
    let ch = Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Env {
        _db: db,
        server,
        l: LedgerServiceClient::new(ch.clone()),
        d: DeliveryServiceClient::new(ch),
    }
}

impl Env {
    async fn ledger(&mut self, id: &str, rows: usize) {
        self.l
            .create_ledger(pb::CreateLedgerRequest {
                ledger_id: id.into(),
                policy: None,
            })
            .await
            .unwrap();
        let rows = (0..rows)
            .map(|i| pb::RowInput {
                key: format!("k{i:04}"),
                payload: format!("{{\"n\": {i}}}"),
                ..Default::default()
            })
            .collect();
        self.l
            .enroll_rows(pb::EnrollRowsRequest {
                parent: format!("ledgers/{id}"),
                rows,
            })
            .await
            .unwrap();
    }

    /// Claims up to `n` rows and reports each a success; answers how many.
    async fn settle(&mut self, id: &str, n: i32) -> usize {
        let claim = self
            .l
            .claim_rows(pb::ClaimRowsRequest {
                parent: format!("ledgers/{id}"),
                max_rows: n,
                worker: "w".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let Some(c) = claim.claim else { return 0 };
        let outcomes = claim
            .rows
            .iter()
            .map(|r| pb::RowOutcome {
                key: r.key.clone(),
                outcome: Some(pb::row_outcome::Outcome::Result(format!(
                    "{{\"label\": \"{}\"}}",
                    r.key
                ))),
                ..Default::default()
            })
            .collect();
        self.l
            .report_outcomes(pb::ReportOutcomesRequest {
                claim: c.name,
                outcomes,
                claim_next: None,
            })
            .await
            .unwrap();
        claim.rows.len()
    }

    async fn consumer(
        &mut self,
        id: &str,
        name: &str,
        webhook: Option<pb::WebhookTarget>,
    ) -> pb::Consumer {
        self.d
            .create_consumer(pb::CreateConsumerRequest {
                parent: format!("ledgers/{id}"),
                consumer_id: name.into(),
                consumer: Some(pb::Consumer {
                    webhook,
                    max_deliveries: 50,
                    ..Default::default()
                }),
                start: None,
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Up to `max_rows` results for consumer `name`, at once (no wait).
    async fn receive(&mut self, name: &str, max_rows: i32) -> pb::ReceiveResultsResponse {
        self.d
            .receive_results(pb::ReceiveResultsRequest {
                consumer: name.into(),
                max_rows,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Webhook consumer `name`'s delivery log (its first 1,000 POSTs).
    async fn webhook_log(&mut self, name: &str) -> Vec<pb::WebhookDelivery> {
        self.d
            .list_webhook_deliveries(pb::ListWebhookDeliveriesRequest {
                parent: name.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .deliveries
    }

    async fn get(&mut self, name: &str) -> pb::Consumer {
        self.d
            .get_consumer(pb::GetConsumerRequest { name: name.into() })
            .await
            .unwrap()
            .into_inner()
    }
}

fn secs(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: s,
        nanos: 0,
    })
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

// Invariant: a receive that waits is answered as soon as a result is
// committed (not at the end of its wait); what it hands out is leased, an
// ack releases it, and the consumer's lag is exported per consumer.
#[tokio::test]
async fn a_long_poll_wakes_on_a_report_and_lag_is_exported() {
    let mut env = env(|_| {}).await;
    env.ledger("l", 20).await;
    let c = env.consumer("l", "sink", None).await;
    assert_eq!(c.kind, pb::ConsumerKind::Pull as i32);
    let mut d = env.d.clone();
    let name = c.name.clone();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        d.receive_results(pb::ReceiveResultsRequest {
            consumer: name,
            max_rows: 100,
            wait: secs(10),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
    });
    assert_eq!(env.settle("l", 20).await, 20);
    let got = waiting.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "woken, not timed out"
    );
    assert_eq!(got.results.len(), 20);
    let r = &got.results[0];
    assert_eq!((r.version, r.delivery_count), (1, 1));
    assert_eq!(r.status, pb::RowStatus::Succeeded as i32);
    assert!(r.result.contains("label") && r.row.starts_with("ledgers/l/rows/"));
    let view = env.get(&c.name).await;
    assert_eq!((view.in_flight, view.lag_rows), (20, 20));
    let age = |v: &pb::Consumer| {
        v.lag_age
            .map_or(0, |d| d.seconds * 1_000_000_000 + i64::from(d.nanos))
    };
    assert!(
        age(&view) > 0,
        "unacknowledged results have an age: {view:?}"
    );
    // The backlog refresher (every 200 ms in tests) exports the lag, in
    // rows and in seconds.
    let env_metrics = env.server.metrics_addr;
    let lag = |want_rows: f64, aged: bool| async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = scrape(env_metrics).await;
            let s = parse(&text).unwrap();
            let labels = [("ledger", "l"), ("consumer", "sink")];
            let rows = s.sample("tally_consumer_lag_rows", &labels);
            let secs = s.sample("tally_consumer_lag_seconds", &labels);
            if rows == Some(want_rows) && secs.is_some_and(|x| (x > 0.0) == aged) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "lag not exported: rows {rows:?}, seconds {secs:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    lag(20.0, true).await;
    let acked = env
        .d
        .ack_results(pb::AckResultsRequest {
            consumer: c.name.clone(),
            positions: vec![],
            up_to_position: got.read_position,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(acked.acked, 20);
    let view = env.get(&c.name).await;
    assert_eq!((view.in_flight, view.lag_rows), (0, 0));
    assert_eq!(age(&view), 0, "nothing unacknowledged, no age");
    assert_eq!(view.acked_position, got.read_position);
    lag(0.0, false).await;
    env.server.stop().await.unwrap();
}

// Invariant: a consumer's cursor, leases and dead letters go with its
// ledger: once a deleted ledger is purged, the consumer is gone, and a
// ledger made again under the name starts with none.
#[tokio::test]
async fn a_deleted_ledgers_consumers_go_with_it() {
    let mut env = env(|_| {}).await;
    env.ledger("l", 10).await;
    let c = env.consumer("l", "sink", None).await;
    env.settle("l", 10).await;
    env.d
        .receive_results(pb::ReceiveResultsRequest {
            consumer: c.name.clone(),
            max_rows: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    env.l
        .delete_ledger(pb::DeleteLedgerRequest {
            name: "ledgers/l".into(),
            force: true,
            ..Default::default()
        })
        .await
        .unwrap();
    // At once: the consumer answers NOT_FOUND like everything of the ledger.
    let e = env
        .d
        .get_consumer(pb::GetConsumerRequest {
            name: c.name.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let pool = env.server.store.pool().clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM consumers), (SELECT count(*) FROM consumer_leases),
                    (SELECT count(*) FROM result_log)",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        let gone = env
            .l
            .get_ledger(pb::GetLedgerRequest {
                name: "ledgers/l".into(),
            })
            .await
            .is_err_and(|e| e.code() == Code::NotFound);
        if gone && left == (0, 0, 0) {
            break;
        }
        assert!(Instant::now() < deadline, "purge did not finish: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.ledger("l", 1).await;
    let list = env
        .d
        .list_consumers(pb::ListConsumersRequest {
            parent: "ledgers/l".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(list.consumers.is_empty());
    env.server.stop().await.unwrap();
}

/// What the test receiver saw.
#[derive(Default)]
struct Seen {
    requests: usize,
    /// (key, version) → times received in a POST that was answered 2xx.
    accepted: HashMap<(String, i32), usize>,
    /// Every (key, version) received, whatever the answer.
    received: HashSet<(String, i32)>,
    bad_signatures: usize,
}

/// A receiver on `listener` that verifies every POST's signature with
/// `secret`, and answers 500 to every third request.
async fn receiver(
    listener: tokio::net::TcpListener,
    secret: Secret,
    seen: Arc<Mutex<Seen>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: axum::body::Bytes| {
        let seen = seen.clone();
        let secret = secret.clone();
        async move {
            let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            let now = chrono::Utc::now().timestamp();
            let verified = verify(
                std::slice::from_ref(&secret),
                Headers {
                    id: h("webhook-id"),
                    timestamp: h("webhook-timestamp"),
                    signature: h("webhook-signature"),
                },
                &body,
                now,
                60,
            );
            let mut seen = seen.lock().unwrap();
            seen.requests += 1;
            if verified.is_err() {
                seen.bad_signatures += 1;
                return StatusCode::UNAUTHORIZED;
            }
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let results: Vec<(String, i32)> = v["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["key"].as_str().unwrap().to_string(),
                        r["version"].as_i64().unwrap() as i32,
                    )
                })
                .collect();
            seen.received.extend(results.iter().cloned());
            if seen.requests.is_multiple_of(3) {
                return StatusCode::INTERNAL_SERVER_ERROR;
            }
            for r in results {
                *seen.accepted.entry(r).or_default() += 1;
            }
            StatusCode::NO_CONTENT
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .unwrap();
}

// Invariant (issue 52): a webhook consumer against a receiver that fails
// every third request and is down for 30 s delivers every result and has
// each acknowledged, every POST carries a signature the receiver verifies
// with the consumer's secret, and the retries are bounded: during the
// outage the consumer backs off as a whole (a handful of tries, not one
// per result), and nothing is dead-lettered.
#[tokio::test]
async fn a_webhook_consumer_rides_out_failures_and_an_outage() {
    let mut env = env(|a| a.alerts_allow_private_hosts = true).await;
    env.ledger("l", 300).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let created = env
        .consumer(
            "l",
            "hook",
            Some(pb::WebhookTarget {
                url: format!("http://{addr}/tally"),
                secret: String::new(),
                max_batch_rows: 25,
            }),
        )
        .await;
    let secret_text = created.webhook.as_ref().unwrap().secret.clone();
    let secret = Secret::parse(&secret_text).expect("the server made a whsec_ secret");
    let shown = env.get(&created.name).await;
    assert_eq!(
        shown.webhook.unwrap().secret,
        "",
        "the secret is shown once"
    );
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let up = tokio::spawn(receiver(
        listener,
        secret.clone(),
        seen.clone(),
        stop.clone(),
    ));

    // 100 results while it is up (every third POST failing).
    for _ in 0..4 {
        env.settle("l", 25).await;
    }
    wait_acked(&mut env, &created.name, 100, Duration::from_secs(60)).await;

    // Down for 30 s, with 200 more results committed meanwhile.
    stop.cancel();
    up.await.unwrap();
    let down_at = Instant::now();
    let before_outage = seen.lock().unwrap().requests;
    for _ in 0..8 {
        env.settle("l", 25).await;
    }
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(down_at.elapsed())).await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    assert_eq!(
        seen.lock().unwrap().requests,
        before_outage,
        "nothing got through"
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let back = tokio::spawn(receiver(listener, secret, seen.clone(), stop.clone()));
    wait_acked(&mut env, &created.name, 300, Duration::from_secs(120)).await;

    let view = env.get(&created.name).await;
    assert_eq!(
        (view.in_flight, view.dead_letters, view.lag_rows),
        (0, 0, 0)
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.bad_signatures, 0, "every signature verified");
        assert_eq!(seen.accepted.len(), 300, "every result accepted");
        assert!(seen.accepted.keys().all(|(_, v)| *v == 1));
        assert_eq!(seen.received.len(), 300);
    }
    // The delivery log: failed POSTs during the outage got no answer.
    let log = env.webhook_log(&created.name).await;
    let unanswered = log.iter().filter(|p| p.http_status == 0).count();
    let answered_500 = log.iter().filter(|p| p.http_status == 500).count();
    let accepted = log.iter().filter(|p| p.http_status == 204).count();
    assert!(
        (1..=7).contains(&unanswered),
        "a 30 s outage costs a handful of tries (1s doubling): {unanswered}"
    );
    assert!(
        answered_500 <= accepted / 2 + 1,
        "every third request failed: {answered_500} failed, {accepted} accepted"
    );
    assert!(accepted >= 300 / 25);
    stop.cancel();
    back.await.unwrap();
    env.server.stop().await.unwrap();
}

/// Waits until consumer `name` has `n` results acknowledged (nothing in
/// flight, no lag) after `n` were logged.
async fn wait_acked(env: &mut Env, name: &str, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let c = env.get(name).await;
        let logged = c.lag_rows + acked_count(env, name).await;
        if logged >= n && c.lag_rows == 0 && c.in_flight == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "consumer {name}: lag {} in flight {} after {within:?}",
            c.lag_rows,
            c.in_flight
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Results of the consumer's ledger at or below its acknowledged position.
async fn acked_count(env: &Env, name: &str) -> i64 {
    let c: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(n), 0) FROM result_log e JOIN consumers c ON c.ledger_id = e.ledger_id
         WHERE c.name = $1 AND ((e.seq << 20) | e.n) <= c.read_position",
    )
    .bind(name.rsplit('/').next().unwrap())
    .fetch_one(env.server.store.pool())
    .await
    .unwrap();
    c
}

/// Every page of a paged list, by `page` (a page token in, items and the
/// next token out).
async fn all_pages<T, F, Fut>(mut page: F) -> (Vec<T>, usize)
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = (Vec<T>, String)>,
{
    let (mut out, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let (items, next) = page(token).await;
        out.extend(items);
        pages += 1;
        if next.is_empty() {
            return (out, pages);
        }
        token = next;
    }
}

// Invariant: what the store does for dead letters, resets, deletes and
// paging holds through gRPC: results nacked for good are listed as dead
// letters in position order, across pages, with their reason, and are not
// handed out again; a reset to a saved position hands out exactly what
// follows it; a deleted consumer is gone and the others stay; lists page
// with tokens and lose nothing.
#[tokio::test]
async fn dead_letters_resets_deletes_and_pages_through_grpc() {
    let mut env = env(|_| {}).await;
    env.ledger("l", 12).await;
    assert_eq!(env.settle("l", 12).await, 12);
    for name in ["a", "b", "c"] {
        env.consumer("l", name, None).await;
    }
    let d = env.d.clone();
    let (listed, pages) = all_pages(|page_token| {
        let mut d = d.clone();
        async move {
            let r = d
                .list_consumers(pb::ListConsumersRequest {
                    parent: "ledgers/l".into(),
                    page_size: 2,
                    page_token,
                })
                .await
                .unwrap()
                .into_inner();
            (r.consumers, r.next_page_token)
        }
    })
    .await;
    let names: Vec<String> = listed.into_iter().map(|c| c.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(pages, 2);

    let a = "ledgers/l/consumers/a".to_string();
    let got = env.receive(&a, 12).await;
    let positions: Vec<i64> = got.results.iter().map(|r| r.position).collect();
    assert_eq!(positions.len(), 12);
    let nacked = env
        .d
        .nack_results(pb::NackResultsRequest {
            consumer: a.clone(),
            positions: positions[..5].to_vec(),
            dead_letter: true,
            reason: "sink refused: no such customer".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(nacked.requeued, 0);
    env.d
        .ack_results(pb::AckResultsRequest {
            consumer: a.clone(),
            positions: positions[5..].to_vec(),
            up_to_position: 0,
        })
        .await
        .unwrap();
    let (dead, pages) = all_pages(|page_token| {
        let mut d = d.clone();
        let parent = a.clone();
        async move {
            let r = d
                .list_dead_letters(pb::ListDeadLettersRequest {
                    parent,
                    page_size: 2,
                    page_token,
                })
                .await
                .unwrap()
                .into_inner();
            (r.dead_letters, r.next_page_token)
        }
    })
    .await;
    assert_eq!(pages, 3);
    assert_eq!(
        dead.iter().map(|x| x.position).collect::<Vec<_>>(),
        positions[..5].to_vec(),
        "in position order, each once"
    );
    assert!(
        dead.iter()
            .all(|x| x.reason.contains("no such customer") && x.version == 1)
    );
    let view = env.get(&a).await;
    assert_eq!(
        (view.dead_letters, view.in_flight, view.lag_rows),
        (5, 0, 0)
    );
    let again = env.receive(&a, 12).await;
    assert!(again.results.is_empty(), "dead letters are not handed out");

    let reset = env
        .d
        .reset_consumer(pb::ResetConsumerRequest {
            name: a.clone(),
            to: Some(pb::ConsumerStart {
                at: Some(pb::consumer_start::At::AfterPosition(positions[6])),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reset.acked_position, positions[6]);
    let after = env.receive(&a, 12).await;
    assert_eq!(
        after.results.iter().map(|r| r.position).collect::<Vec<_>>(),
        positions[7..].to_vec()
    );

    env.d
        .delete_consumer(pb::DeleteConsumerRequest {
            name: "ledgers/l/consumers/b".into(),
        })
        .await
        .unwrap();
    let gone = env
        .d
        .get_consumer(pb::GetConsumerRequest {
            name: "ledgers/l/consumers/b".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let left = env
        .d
        .list_consumers(pb::ListConsumersRequest {
            parent: "ledgers/l".into(),
            page_size: 10,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .consumers;
    assert_eq!(left.len(), 2);
    env.server.stop().await.unwrap();
}

// Invariant: a webhook consumer whose URL names a host that resolves to a
// private address (here `localhost`) is refused when sending, as alerts
// are, unless the server allows private hosts: no request reaches the
// receiver, each refused POST is in the delivery log with its reason, and
// the results are dead-lettered after max_deliveries instead of tried for
// ever.
#[tokio::test]
async fn a_webhook_to_a_private_host_is_refused_at_send_and_dead_lettered() {
    let mut env = env(|_| {}).await;
    env.ledger("l", 3).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let accept = tokio::spawn(async move {
        while let Ok((_conn, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let created = env
        .d
        .create_consumer(pb::CreateConsumerRequest {
            parent: "ledgers/l".into(),
            consumer_id: "hook".into(),
            consumer: Some(pb::Consumer {
                webhook: Some(pb::WebhookTarget {
                    url: format!("http://localhost:{port}/tally"),
                    secret: String::new(),
                    max_batch_rows: 10,
                }),
                max_deliveries: 2,
                ..Default::default()
            }),
            start: None,
        })
        .await
        .expect("a name is not refused until it is resolved")
        .into_inner();
    assert_eq!(env.settle("l", 3).await, 3);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = env.get(&created.name).await;
        if view.dead_letters == 3 {
            assert_eq!((view.in_flight, view.lag_rows), (0, 0));
            break;
        }
        assert!(Instant::now() < deadline, "not dead-lettered: {view:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = env.webhook_log(&created.name).await;
    assert_eq!(log.len(), 2, "one refused POST per delivery: {log:?}");
    for post in &log {
        assert_eq!(post.http_status, 0, "{post:?}");
        assert!(
            post.error.contains("--alerts-allow-private-hosts"),
            "{post:?}"
        );
    }
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing reached loopback"
    );
    accept.abort();
    env.server.stop().await.unwrap();
}

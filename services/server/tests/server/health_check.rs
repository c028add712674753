//! `tally-server health` (the image's HEALTHCHECK) against a real server on
//! port 0 with a fresh database: SERVING on the plaintext health port and
//! on the gRPC port; unhealthy, naming the address, for an unknown service,
//! for a port nobody listens on, and once the server has stopped.

use std::time::{Duration, Instant};
use tally_pg::TestDb;
use tally_server::config::ServeArgs;
use tally_server::config::health::HealthArgs;
use tally_server::startup::health_check::check;
use tally_server::startup::server;

fn args(addr: std::net::SocketAddr, service: &str) -> HealthArgs {
    HealthArgs {
        addr: Some(addr),
        grpc_addr: "127.0.0.1:1".parse().unwrap(),
        service: service.into(),
        timeout: Duration::from_secs(3),
    }
}

/// Polls until the health watcher has seen the database (it starts
/// NOT_SERVING), failing after a deadline rather than sleeping blindly.
async fn until_serving(a: &HealthArgs) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check(a).await {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("never SERVING: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Invariant: the check says healthy exactly when the server answers
/// SERVING for the asked service, and every refusal names the address.
#[tokio::test]
async fn health_is_serving_only_from_a_live_server() {
    let db = TestDb::new().await;
    let mut serve = ServeArgs::for_tests(db.url().to_string());
    serve.security.health_addr = Some("127.0.0.1:0".parse().unwrap());
    let running = server::start(serve).await.expect("server starts");
    let health_addr = running.health_addr.expect("health listener");
    let grpc_addr = running.grpc_addr;

    let on_health_port = args(health_addr, "");
    until_serving(&on_health_port).await;
    // The gRPC port answers too (used when --addr is unset), per service.
    check(&args(grpc_addr, "tally.v1.LedgerService"))
        .await
        .expect("gRPC port SERVING");

    let unknown = check(&args(health_addr, "tally.v1.Nope"))
        .await
        .unwrap_err();
    assert!(unknown.contains(&health_addr.to_string()), "{unknown}");
    assert!(unknown.contains("NotFound"), "{unknown}");

    // A port nobody listens on: bound, then released.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free_addr = free.local_addr().unwrap();
    drop(free);
    let refused = check(&args(free_addr, "")).await.unwrap_err();
    assert!(
        refused.contains(&format!("cannot connect to {free_addr}")),
        "{refused}"
    );

    running.stop_token().cancel();
    running.wait().await.expect("clean stop");
    let stopped = check(&on_health_port).await.unwrap_err();
    assert!(stopped.contains(&health_addr.to_string()), "{stopped}");
}

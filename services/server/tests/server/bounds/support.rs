//! A real server on port 0 against a fresh database (authentication off:
//! these tests are about sizes and slots, not callers).

use std::future::Future;
use std::time::Duration;
use tally_pg::TestDb;
use tally_server::config::ServeArgs;
use tally_server::startup::server::{self, Running};
use tonic::transport::{Channel, Endpoint};

pub struct TestServer {
    pub running: Running,
    pub _db: TestDb,
}

/// Starts a server after `configure`.
pub async fn start(configure: impl FnOnce(&mut ServeArgs)) -> TestServer {
    let db = TestDb::new().await;
    let mut args = ServeArgs::for_tests(db.url().to_string());
    configure(&mut args);
    let running = server::start(args).await.expect("server starts");
    TestServer { running, _db: db }
}

impl TestServer {
    /// A new HTTP/2 connection.
    pub async fn connect(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    pub async fn stop(self) {
        self.running.stop().await.expect("clean stop");
    }
}

/// Polls `check` until it answers true; fails after 20 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! A server per test, its clients, and ways to look at its tables.

#![allow(dead_code)]

use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tally_server::config::ServeArgs;
use tally_server::server::{self, Running};
use tonic::transport::Channel;

pub struct Env {
    pub running: Running,
    _db: TestDb,
}

impl Env {
    pub async fn client(&self) -> OperationsServiceClient<Channel> {
        OperationsServiceClient::connect(format!("http://{}", self.running.grpc_addr))
            .await
            .expect("connect")
    }

    pub fn pool(&self) -> &sqlx::PgPool {
        self.running.store.pool()
    }

    /// Rows in each table an event could write to.
    pub async fn written(&self) -> (i64, i64, i64) {
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM operation_events),
                    (SELECT count(*) FROM operation_deliveries)",
        )
        .fetch_one(self.pool())
        .await
        .unwrap()
    }

    pub async fn stop(self) {
        self.running.stop().await.expect("clean stop");
    }
}

/// A server without webhooks.
pub async fn env() -> Env {
    start(ServeArgs::for_tests).await
}

async fn start(args: impl FnOnce(String) -> ServeArgs) -> Env {
    let db = TestDb::new().await;
    let running = server::start(args(db.url().to_string()))
        .await
        .expect("server starts");
    Env { running, _db: db }
}

pub fn ts(micros: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

pub fn event(op: &str, state: &str, micros: i64) -> pb::OperationEvent {
    pb::OperationEvent {
        operation: op.into(),
        state: state.into(),
        update_time: Some(ts(micros)),
        source: pb::EventSource::Poller as i32,
        ..Default::default()
    }
}

pub async fn ingest(
    client: &mut OperationsServiceClient<Channel>,
    event: pb::OperationEvent,
) -> pb::IngestEventResponse {
    client
        .ingest_event(pb::IngestEventRequest { event: Some(event) })
        .await
        .expect("ingest")
        .into_inner()
}

//! A server per test, its clients, and ways to look at its tables.

use std::net::SocketAddr;
use tally_core::webhook::{Secret, sign};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tally_server::config::{SecretText, ServeArgs};
use tally_server::startup::server::{self, Running};
use tonic::transport::Channel;

/// The Standard Webhooks specification's example secret.
pub const OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Another secret (32 bytes of 7).
pub const NEW_SECRET: &str = "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";
/// A secret the server does not know.
pub const STRANGER: &str = "whsec_CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=";

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

    pub fn http(&self) -> SocketAddr {
        self.running.http_addr.expect("webhooks enabled")
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

/// A server accepting webhooks signed with any of `secrets`.
pub async fn env_with_webhooks(secrets: &[&str]) -> Env {
    let secrets: Vec<SecretText> = secrets.iter().map(|s| SecretText::from(*s)).collect();
    start(move |url| {
        let mut args = ServeArgs::for_tests(url);
        args.http_addr = Some("127.0.0.1:0".parse().unwrap());
        args.webhook.secrets = secrets;
        args.webhook.max_body_bytes = 16 * 1024;
        args
    })
    .await
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

/// A signed delivery.
pub struct Delivery {
    pub id: String,
    pub timestamp: i64,
    pub body: String,
    pub signature: String,
}

impl Delivery {
    /// `body` signed with `secret`, timestamped now.
    pub fn signed(secret: &str, id: &str, body: &str) -> Delivery {
        Delivery::signed_at(secret, id, body, chrono::Utc::now().timestamp())
    }

    pub fn signed_at(secret: &str, id: &str, body: &str, timestamp: i64) -> Delivery {
        let secret = Secret::parse(secret).unwrap();
        Delivery {
            id: id.into(),
            timestamp,
            body: body.into(),
            signature: sign(&secret, id, timestamp, body.as_bytes()),
        }
    }
}

pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// POSTs a delivery; answers the status and the JSON body.
pub async fn post(env: &Env, d: &Delivery) -> (u16, serde_json::Value) {
    post_to(env, "gemini", d).await
}

/// [`post`] to `/webhooks/{provider}`.
pub async fn post_to(env: &Env, provider: &str, d: &Delivery) -> (u16, serde_json::Value) {
    let response = http_client()
        .post(format!("http://{}/webhooks/{provider}", env.http()))
        .header("content-type", "application/json")
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", d.timestamp.to_string())
        .header("webhook-signature", &d.signature)
        .body(d.body.clone())
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// A Gemini webhook body.
pub fn gemini_body(kind: &str, batch: &str, time: &str) -> String {
    serde_json::json!({
        "type": kind,
        "version": "v1",
        "timestamp": time,
        "data": {"id": batch, "output_file_uri": "files/out-1"}
    })
    .to_string()
}

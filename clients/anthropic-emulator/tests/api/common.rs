//! Shared helpers: an emulator on port 0, a small client speaking the
//! Message Batches wire shapes, and polling with a deadline.

use std::time::Duration;

use anthropic_emulator::{Emulator, EmulatorConfig, FaultPlan, Timing};
pub use emulator_kit::testing::{DEADLINE, eventually};
use serde_json::{Value, json};

pub const KEY: &str = "sk-ant-test";
pub const MODEL: &str = "claude-sonnet-4-6";
pub const VERSION: &str = "2023-06-01";

pub fn config(faults: FaultPlan) -> EmulatorConfig {
    EmulatorConfig {
        api_keys: vec![KEY.to_owned()],
        faults,
        timing: Timing::fast(),
        seed: 7,
        ..EmulatorConfig::default()
    }
}

/// A config whose batches stay in progress for a minute unless canceled.
pub fn slow(faults: FaultPlan) -> EmulatorConfig {
    EmulatorConfig {
        timing: Timing {
            in_progress: Duration::from_secs(60),
            ..Timing::fast()
        },
        ..config(faults)
    }
}

pub fn plan(v: Value) -> FaultPlan {
    serde_json::from_value(v).expect("a valid fault plan")
}

pub async fn start(config: EmulatorConfig) -> (Emulator, Api) {
    let emulator: Emulator = emulator_kit::testing::start(config).await;
    let api = Api {
        base: format!("{}/v1", emulator.base_url()),
        http: reqwest::Client::new(),
    };
    (emulator, api)
}

/// One request of a batch.
pub fn request(id: &str, prompt: &str) -> Value {
    json!({"custom_id": id, "params": {"model": MODEL, "max_tokens": 64,
        "messages": [{"role": "user", "content": prompt}]}})
}

pub fn requests(ids: &[&str]) -> Vec<Value> {
    ids.iter().map(|id| request(id, "a prompt")).collect()
}

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

/// A response's status, body (null if not JSON) and headers.
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Api {
    /// The request with the key and version headers the SDK sends.
    pub fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        req.header("x-api-key", KEY)
            .header("anthropic-version", VERSION)
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            body,
            headers,
        }
    }

    pub async fn call(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let a = self.send(self.authed(req)).await;
        (a.status, a.body)
    }

    pub async fn create(&self, requests: &[Value]) -> (u16, Value) {
        let body = json!({ "requests": requests });
        self.call(
            self.http
                .post(format!("{}/messages/batches", self.base))
                .json(&body),
        )
        .await
    }

    /// Creates a batch of `requests`; returns its id.
    pub async fn batch(&self, requests: &[Value]) -> String {
        let (status, body) = self.create(requests).await;
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str) -> (u16, Value) {
        self.call(self.http.post(format!("{}{path}", self.base)))
            .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    /// Polls the batch until it has ended.
    pub async fn ended(&self, id: &str) -> Value {
        eventually("an ended batch", || async {
            let (status, b) = self.get(&format!("/messages/batches/{id}")).await;
            (status == 200 && b["processing_status"] == "ended").then_some(b)
        })
        .await
    }

    /// The result lines at the batch's `results_url`, in the order served.
    pub async fn results(&self, batch: &Value) -> Vec<Value> {
        let url = batch["results_url"].as_str().expect("a results_url");
        let resp = self
            .authed(self.http.get(url))
            .send()
            .await
            .expect("results fetched");
        assert_eq!(resp.status(), 200);
        emulator_kit::testing::parse_jsonl(&resp.bytes().await.unwrap())
    }
}

/// The result of `custom_id` among `lines`.
pub fn result_of(lines: &[Value], custom_id: &str) -> Value {
    lines
        .iter()
        .find(|l| l["custom_id"] == custom_id)
        .unwrap_or_else(|| panic!("no result for {custom_id}"))["result"]
        .clone()
}

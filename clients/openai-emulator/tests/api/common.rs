//! Shared helpers: an emulator on port 0, a small client speaking the
//! OpenAI wire shapes, and polling with a deadline.

pub use emulator_kit::testing::{eventually, jsonl, parse_jsonl};
use openai_emulator::{Emulator, EmulatorConfig, FaultPlan, Timing};
use serde_json::{Value, json};

pub const KEY: &str = "sk-test";
pub const MODEL: &str = "gpt-4o-mini";
pub const CHAT: &str = "/v1/chat/completions";

pub fn config(faults: FaultPlan) -> EmulatorConfig {
    EmulatorConfig {
        api_keys: vec![KEY.to_owned()],
        faults,
        timing: Timing::fast(),
        seed: 7,
        ..EmulatorConfig::default()
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
        key: KEY.to_owned(),
    };
    (emulator, api)
}

pub fn line(id: &str, prompt: &str) -> Value {
    json!({"custom_id": id, "method": "POST", "url": CHAT,
        "body": {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}})
}

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub key: String,
}

impl Api {
    pub async fn call(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req
            .bearer_auth(&self.key)
            .send()
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn upload(&self, name: &str, bytes: Vec<u8>) -> String {
        let (status, body) = self.try_upload(name, bytes).await;
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// An upload of purpose `batch`, and what it answered.
    pub async fn try_upload(&self, name: &str, bytes: Vec<u8>) -> (u16, Value) {
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()),
            );
        self.call(
            self.http
                .post(format!("{}/files", self.base))
                .multipart(form),
        )
        .await
    }

    pub async fn create(&self, file: &str, metadata: Value) -> (u16, Value) {
        let body = json!({"input_file_id": file, "endpoint": CHAT, "completion_window": "24h", "metadata": metadata});
        self.call(self.http.post(format!("{}/batches", self.base)).json(&body))
            .await
    }

    /// Uploads `lines` and creates a batch of them; returns the batch id.
    pub async fn batch(&self, lines: &[Value]) -> String {
        let file = self.upload("in.jsonl", jsonl(lines)).await;
        let (status, body) = self.create(&file, Value::Null).await;
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn content(&self, file: &str) -> Vec<u8> {
        let resp = self
            .http
            .get(format!("{}/files/{file}/content", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap().to_vec()
    }

    /// Polls the batch until it reaches a terminal status.
    pub async fn finished(&self, id: &str) -> Value {
        eventually("a terminal status", || async {
            let (status, b) = self.get(&format!("/batches/{id}")).await;
            let s = b["status"].as_str().unwrap_or_default().to_owned();
            (status == 200 && ["completed", "failed", "expired", "cancelled"].contains(&s.as_str()))
                .then_some(b)
        })
        .await
    }

    pub async fn lines_of(&self, batch: &Value, field: &str) -> Vec<Value> {
        match batch[field].as_str() {
            Some(f) => parse_jsonl(&self.content(f).await),
            None => Vec::new(),
        }
    }
}

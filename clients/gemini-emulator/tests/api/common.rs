//! Shared test helpers: starting an emulator on port 0, a small REST client
//! speaking the Gemini wire shapes over real HTTP, and polling with a
//! deadline.

pub use emulator_kit::testing::{DEADLINE, eventually, jsonl};
use gemini_emulator::{Emulator, EmulatorConfig, FaultPlan, Timing};
use serde_json::{Value, json};

pub const KEY: &str = "test-key";
pub const MODEL: &str = "gemini-2.5-flash";

pub fn install_crypto() {
    emulator_kit::delivery::install_crypto();
}

pub fn config(faults: FaultPlan) -> EmulatorConfig {
    EmulatorConfig {
        api_key: KEY.to_owned(),
        faults,
        timing: Timing::fast(),
        webhook: None,
        seed: 7,
        ..EmulatorConfig::default()
    }
}

pub fn plan(json: Value) -> FaultPlan {
    serde_json::from_value(json).expect("a valid fault plan")
}

pub async fn start(config: EmulatorConfig) -> (Emulator, Api) {
    let emulator: Emulator = emulator_kit::testing::start(config).await;
    let api = Api::new(emulator.base_url());
    (emulator, api)
}

/// One request line of an input file.
pub fn line(key: &str, prompt: &str) -> Value {
    json!({"key": key, "request": {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}})
}

pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn new(base: String) -> Self {
        install_crypto();
        Self {
            http: reqwest::Client::new(),
            base,
        }
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .header("x-goog-api-key", KEY)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .header("x-goog-api-key", KEY)
    }

    /// Starts a resumable upload; returns the upload URL.
    pub async fn start_upload(&self, display_name: &str, len: usize) -> String {
        let response = self
            .post("/upload/v1beta/files")
            .header("X-Goog-Upload-Protocol", "resumable")
            .header("X-Goog-Upload-Command", "start")
            .header("X-Goog-Upload-Header-Content-Length", len.to_string())
            .header("X-Goog-Upload-Header-Content-Type", "application/jsonl")
            .json(&json!({"file": {"display_name": display_name}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-goog-upload-status"], "active");
        response.headers()["x-goog-upload-url"]
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// `upload, finalize` of all bytes at offset 0; the raw response.
    pub async fn finalize(&self, url: &str, bytes: &[u8]) -> reqwest::Response {
        self.http
            .post(url)
            .header("x-goog-api-key", KEY)
            .header("X-Goog-Upload-Command", "upload, finalize")
            .header("X-Goog-Upload-Offset", "0")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap()
    }

    /// Uploads `bytes`; returns the `file` resource.
    pub async fn upload(&self, display_name: &str, bytes: &[u8]) -> Value {
        let url = self.start_upload(display_name, bytes.len()).await;
        let response = self.finalize(&url, bytes).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-goog-upload-status"], "final");
        let body: Value = response.json().await.unwrap();
        body["file"].clone()
    }

    pub async fn create_raw(&self, display_name: &str, file_name: &str) -> reqwest::Response {
        self.post(&format!("/v1beta/models/{MODEL}:batchGenerateContent"))
            .json(&json!({"batch": {
                "displayName": display_name,
                "inputConfig": {"fileName": file_name}
            }}))
            .send()
            .await
            .unwrap()
    }

    /// Creates a batch; returns the operation.
    pub async fn create(&self, display_name: &str, file_name: &str) -> Value {
        let response = self.create_raw(display_name, file_name).await;
        assert_eq!(response.status(), 200, "create failed");
        response.json().await.unwrap()
    }

    /// Uploads `lines` and creates a batch from them; returns the batch name.
    pub async fn submit(&self, display_name: &str, lines: &[Value]) -> String {
        let file = self.upload(display_name, &jsonl(lines)).await;
        let op = self
            .create(display_name, file["name"].as_str().unwrap())
            .await;
        op["name"].as_str().unwrap().to_owned()
    }

    pub async fn operation(&self, name: &str) -> Value {
        let response = self.get(&format!("/v1beta/{name}")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    pub async fn wait_done(&self, name: &str) -> Value {
        eventually(&format!("{name} to finish"), || async {
            let op = self.operation(name).await;
            (op["done"] == true).then_some(op)
        })
        .await
    }

    /// Downloads a file's bytes through `/v1beta/files/{id}:download`
    /// (`download_prefix = false`) or `/download/v1beta/...`.
    pub async fn download(&self, file_name: &str, download_prefix: bool) -> Vec<Value> {
        let id = file_name.strip_prefix("files/").unwrap();
        let prefix = if download_prefix { "/download" } else { "" };
        let response = self
            .get(&format!("{prefix}/v1beta/files/{id}:download?alt=media"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        emulator_kit::testing::parse_jsonl(&response.bytes().await.unwrap())
    }

    /// Waits for `name` to finish and downloads its output lines.
    pub async fn results(&self, name: &str) -> Vec<Value> {
        let op = self.wait_done(name).await;
        let file = op["response"]["responsesFile"]
            .as_str()
            .unwrap_or_else(|| panic!("no responsesFile in {op}"));
        self.download(file, true).await
    }
}

/// The output line for `key`.
pub fn by_key<'a>(lines: &'a [Value], key: &str) -> Option<&'a Value> {
    lines.iter().find(|l| l["key"] == key)
}

/// The answer text of a response line.
pub fn text_of(line: &Value) -> &str {
    line["response"]["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {line}"))
}

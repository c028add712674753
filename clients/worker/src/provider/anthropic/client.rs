//! Anthropic's Message Batches API over REST, as Anthropic documents it
//! and as the official SDK sends it. The base URL is the host
//! (`https://api.anthropic.com`), as the SDK's `base_url` is; paths carry
//! `/v1`. Every call sends `x-api-key` (never logged) and
//! `anthropic-version: 2023-06-01`.
//!
//! - No upload: a batch's requests travel inline in its create
//!   (`{"requests": [{"custom_id", "params"}]}`), built from the job's
//!   input lines.
//! - No tag: a batch has no metadata or name of its own. Whose a batch is
//!   shows only in its results' custom_ids ([`crate::tags::custom_id`]),
//!   and results exist only once it ended ([`Anthropic::owner`]).
//! - Create is not idempotent: a create whose answer was lost is never
//!   sent again; the caller searches (`job/create.rs`).
//! - The list is newest first (`after_id` pages to older batches);
//!   an ended batch can be deleted.
//! - The results (`results_url`, an absolute URL) are one JSONL stream, in
//!   no particular order; they are fetched only from the API's own origin
//!   (the key goes with the request).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::jsonl::LineSink;
use crate::provider::http::{self, ApiKey, ProviderError};
use crate::provider::online::OnlineFail;
use crate::provider::rest::{Authorize, Rest};
use crate::provider::types::OnlineAnswer;
use crate::provider::{Listed, Owner, Page};

/// The API version tally speaks (the one the official SDK sends).
pub const VERSION: &str = "2023-06-01";

/// Batches asked for per list page (the API's most).
const PAGE: &str = "1000";

/// Most bytes of a results stream read to learn whose a batch is.
const OWNER_PROBE_BYTES: usize = 64 * 1024 * 1024;

/// An Anthropic API client.
#[derive(Debug, Clone)]
pub struct Anthropic {
    pub rest: Rest,
    /// Whose each ended batch is (the mark of its first result's
    /// custom_id; `None`: not tally's): an ended batch never changes.
    owners: Arc<Mutex<HashMap<String, Owner>>>,
}

impl Anthropic {
    pub fn new(base_url: &str, key: ApiKey, timeout: Duration) -> Result<Self, ProviderError> {
        let authorize: Authorize = |req, key| {
            req.header("x-api-key", key.expose())
                .header("anthropic-version", VERSION)
        };
        Ok(Self {
            rest: Rest::new(base_url, key, timeout, authorize, error_of)?,
            owners: Arc::default(),
        })
    }

    /// The account behind the key, as tally names it: see [`http::account`].
    pub fn account(&self) -> String {
        self.rest.account()
    }

    fn url(&self, path: &str) -> String {
        self.rest.url(&format!("/v1{path}"))
    }

    /// One synchronous call (`body` from [`super::online::body`]), waiting
    /// at most `timeout` for its answer.
    pub async fn online(
        &self,
        body: &Value,
        timeout: Duration,
    ) -> Result<OnlineAnswer, OnlineFail> {
        self.rest
            .online(&self.url(super::online::PATH), body, timeout)
            .await
    }

    /// Creates a batch of the requests in `lines` (the job's input, one
    /// `{"custom_id", "params"}` per line); answers `batches/{id}`. Not
    /// retried.
    pub async fn create_batch(&self, lines: &Bytes) -> Result<String, ProviderError> {
        let parts = requests_body(lines);
        let got = self
            .rest
            .json(
                self.rest
                    .http()
                    .post(self.url("/messages/batches"))
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header(reqwest::header::CONTENT_LENGTH, length(&parts))
                    .body(reqwest::Body::wrap_stream(futures::stream::iter(
                        parts.into_iter().map(Ok::<_, std::io::Error>),
                    ))),
            )
            .await?;
        Ok(format!("batches/{}", id_of(&got)?))
    }

    /// A one-request batch for `model` (a witness for [`crate::lookup`];
    /// one output token, no row).
    pub async fn create_probe(&self, model: &str) -> Result<(), ProviderError> {
        let line = json!({
            "custom_id": "tally-probe",
            "params": {
                "model": model,
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "."}],
            },
        });
        self.create_batch(&Bytes::from(format!("{line}\n")))
            .await
            .map(|_| ())
    }

    /// One page of the account's batches, newest first (`after_id` the
    /// previous page's last id).
    pub async fn list_batches(&self, after: &str) -> Result<Page<Listed>, ProviderError> {
        let query = vec![("limit", PAGE.to_string())];
        let url = self.url("/messages/batches");
        let page = self
            .rest
            .page("list batches", &url, query, "after_id", after)
            .await?;
        Ok(listed(&page))
    }

    /// `GET /v1/messages/batches/{id}`.
    pub async fn get_batch(&self, name: &str) -> Result<Value, ProviderError> {
        let url = self.url(&format!("/messages/batches/{}", id_in(name)));
        self.rest.get("get batch", &url).await
    }

    /// Asks to cancel: the batch goes `canceling`, then `ended` with what
    /// it finished.
    pub async fn cancel_batch(&self, name: &str) -> Result<(), ProviderError> {
        let url = self.url(&format!("/messages/batches/{}/cancel", id_in(name)));
        self.rest.post("cancel batch", &url).await
    }

    /// Deletes an ended batch; one already gone is not an error.
    pub async fn delete_batch(&self, name: &str) -> Result<(), ProviderError> {
        let url = self.url(&format!("/messages/batches/{}", id_in(name)));
        self.rest.delete("delete batch", &url, &[404]).await
    }

    /// Downloads a batch's results (`results_url`) line by line into
    /// `sink`.
    pub async fn download(
        &self,
        results_url: &str,
        sink: &mut (dyn LineSink + Send),
    ) -> Result<(), ProviderError> {
        let url = self.own_url(results_url)?;
        self.rest.download(&url, &[], sink).await
    }

    /// Whose the batch `name` is: the job mark of its results' first
    /// custom_id, once it ended. Remembered once known.
    pub async fn owner(&self, name: &str) -> Result<Owner, ProviderError> {
        if let Some(known) = self.owners.lock().expect("owners").get(name) {
            return Ok(known.clone());
        }
        let batch = self.get_batch(name).await?;
        if batch["processing_status"] != "ended" {
            return Ok(Owner::Unknown);
        }
        let Some(results) = batch["results_url"].as_str().filter(|u| !u.is_empty()) else {
            return Err(ProviderError::Protocol(format!(
                "{name} ended without a results_url"
            )));
        };
        let url = self.own_url(results)?;
        let first = self
            .rest
            .patience
            .retrying("read results", || async {
                first_custom_id(self.rest.send(self.rest.http().get(&url)).await?).await
            })
            .await?;
        let owner = match first.as_deref().and_then(crate::tags::mark_of) {
            Some(mark) => Owner::Job(mark.to_owned()),
            None => Owner::Other,
        };
        self.owners
            .lock()
            .expect("owners")
            .insert(name.to_owned(), owner.clone());
        Ok(owner)
    }

    /// `url` if it is on the API's own origin (the key goes with every
    /// request), else a protocol error.
    fn own_url(&self, url: &str) -> Result<String, ProviderError> {
        let origin = |u: &str| {
            reqwest::Url::parse(u)
                .ok()
                .map(|u| u.origin().ascii_serialization())
        };
        match (origin(url), origin(self.rest.base())) {
            (Some(a), Some(b)) if a == b => Ok(url.to_owned()),
            _ => Err(ProviderError::Protocol(format!(
                "results at {url}, not on the API's origin {}: not fetched with the key",
                self.rest.base()
            ))),
        }
    }
}

/// The create's body: the input lines as the `requests` array (a line is
/// one JSON value with no raw newline, so the lines joined by commas are
/// the array's items), in parts that share the lines' buffer: the body is
/// streamed from the job's one copy, never copied whole.
fn requests_body(lines: &Bytes) -> Vec<Bytes> {
    let trimmed = lines.slice(..lines.strip_suffix(b"\n").unwrap_or(lines).len());
    let mut parts = vec![Bytes::from_static(b"{\"requests\":[")];
    let mut start = 0;
    for (i, _) in trimmed.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        parts.push(trimmed.slice(start..i));
        parts.push(Bytes::from_static(b","));
        start = i + 1;
    }
    parts.push(trimmed.slice(start..));
    parts.push(Bytes::from_static(b"]}"));
    parts
}

/// The bytes of a body in `parts`.
fn length(parts: &[Bytes]) -> usize {
    parts.iter().map(Bytes::len).sum()
}

/// The first custom_id of a results stream, read no further than its
/// first line that has one (or the stream's end, or [`OWNER_PROBE_BYTES`]).
async fn first_custom_id(mut resp: reqwest::Response) -> Result<Option<String>, ProviderError> {
    let mut carry: Vec<u8> = Vec::new();
    let mut read = 0;
    loop {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| ProviderError::Transport(http::without_url(e)))?;
        let end = chunk.is_none();
        if let Some(c) = chunk {
            read += c.len();
            carry.extend_from_slice(&c);
        }
        let mut lines = carry.split(|&b| b == b'\n').peekable();
        while let Some(line) = lines.next() {
            // The last piece is a whole line only at the end of the stream.
            if lines.peek().is_none() && !end {
                break;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(line)
                && let Some(id) = v["custom_id"].as_str()
            {
                return Ok(Some(id.to_owned()));
            }
        }
        if end || read > OWNER_PROBE_BYTES {
            return Ok(None);
        }
        if let Some(cut) = carry.iter().rposition(|&b| b == b'\n') {
            carry.drain(..=cut);
        }
    }
}

/// The id at the end of a name (`batches/msgbatch_abc` → `msgbatch_abc`).
fn id_in(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The `id` of a created batch.
fn id_of(body: &Value) -> Result<String, ProviderError> {
    body["id"]
        .as_str()
        .filter(|id| !id.is_empty() && body["type"].as_str().is_none_or(|t| t == "message_batch"))
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::Protocol(format!("an answer without a batch id: {body}")))
}

/// The error an answer with status `code` and `body` means: the body's
/// `{"type": "error", "error": {type, message, details}}`, named by its
/// type (`rate_limit_error`, `overloaded_error`, …), with the typed
/// `details.error_code` when there is one (`enforced_spend_limit_reached`).
pub fn error_of(code: u16, body: &str, retry_after: Option<Duration>) -> ProviderError {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let error = parsed.as_ref().map(|v| &v["error"]);
    let text = |k: &str| error.and_then(|e| e[k].as_str()).filter(|s| !s.is_empty());
    ProviderError::Http {
        code,
        message: text("message").map_or_else(|| body.chars().take(2048).collect(), str::to_owned),
        retry_after,
        status: text("type").unwrap_or_default().to_owned(),
        error_codes: error
            .and_then(|e| e["details"]["error_code"].as_str())
            .filter(|c| !c.is_empty() && c.len() <= 128)
            .map(str::to_owned)
            .into_iter()
            .collect(),
    }
}

/// A page of `GET /v1/messages/batches` as the provider layer lists it
/// (no batch carries a tag).
pub fn listed(page: &Value) -> Page<Listed> {
    let items: Vec<Listed> = page["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| {
            let id = b["id"].as_str()?;
            Some(Listed {
                name: format!("batches/{id}"),
                tag: None,
                create_time: b["created_at"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339_weak(t).ok()),
                done: b["processing_status"] == "ended",
            })
        })
        .collect();
    Page {
        items,
        next: http::next_after(page),
    }
}

/// When a listed batch was made, for tests.
#[cfg(test)]
fn at(secs: u64) -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: the create's body holds every input line, in order, as
    // one `requests` array, and its length is the parts' bytes.
    #[test]
    fn input_lines_become_the_requests_array() {
        let lines = Bytes::from(
            "{\"custom_id\":\"a\",\"params\":{\"x\":\"1\\n2\"}}\n{\"custom_id\":\"b\",\"params\":{}}\n",
        );
        let whole = |lines: &Bytes| {
            let parts = requests_body(lines);
            let body: Vec<u8> = parts.concat();
            assert_eq!(body.len(), length(&parts));
            body
        };
        let body: Value = serde_json::from_slice(&whole(&lines)).unwrap();
        assert_eq!(
            body,
            json!({"requests": [{"custom_id": "a", "params": {"x": "1\n2"}},
                                {"custom_id": "b", "params": {}}]})
        );
        let one: Value =
            serde_json::from_slice(&whole(&Bytes::from("{\"custom_id\":\"a\"}"))).unwrap();
        assert_eq!(one["requests"].as_array().unwrap().len(), 1);
    }

    // Invariant: a page lists every batch with no tag, ended ones done,
    // and says where the next starts only while the provider says there
    // is more.
    #[test]
    fn pages_follow_has_more_and_the_last_id() {
        let page = json!({"has_more": true, "first_id": "msgbatch_b", "last_id": "msgbatch_a",
            "data": [
                {"id": "msgbatch_b", "processing_status": "in_progress",
                 "created_at": "1970-01-01T00:00:20Z"},
                {"id": "msgbatch_a", "processing_status": "ended",
                 "created_at": "1970-01-01T00:00:10.5Z"}]});
        let p = listed(&page);
        assert_eq!(p.next.as_deref(), Some("msgbatch_a"));
        assert_eq!(p.items[0].name, "batches/msgbatch_b");
        assert!(!p.items[0].done && p.items[1].done);
        assert!(p.items.iter().all(|b| b.tag.is_none()));
        assert_eq!(p.items[0].create_time, Some(at(20)));
        assert_eq!(
            listed(&json!({"has_more": false, "last_id": "x", "data": []})).next,
            None
        );
    }

    #[test]
    fn errors_are_named_by_their_type() {
        let body = r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_1"}"#;
        match error_of(529, body, Some(Duration::from_secs(3))) {
            ProviderError::Http {
                code,
                status,
                message,
                retry_after,
                ..
            } => {
                assert_eq!((code, status.as_str()), (529, "overloaded_error"));
                assert_eq!(message, "Overloaded");
                assert_eq!(retry_after, Some(Duration::from_secs(3)));
            }
            other => panic!("{other:?}"),
        }
        let capped = r#"{"type": "error", "error": {"type": "rate_limit_error", "message": "over", "details": {"error_code": "enforced_spend_limit_reached"}}}"#;
        assert!(matches!(error_of(429, capped, None),
            ProviderError::Http { error_codes, .. } if error_codes == ["enforced_spend_limit_reached"]));
        assert!(matches!(error_of(502, "<html>bad gateway</html>", None),
            ProviderError::Http { message, status, .. } if message.contains("bad gateway") && status.is_empty()));
    }

    // Invariant: results are fetched with the key only from the API's own
    // origin.
    #[test]
    fn results_only_from_the_apis_origin() {
        let a = Anthropic::new(
            "http://127.0.0.1:9/",
            ApiKey::new("k".into()),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(
            a.own_url("http://127.0.0.1:9/v1/messages/batches/b/results")
                .is_ok()
        );
        assert!(
            a.own_url("http://127.0.0.1:10/v1/messages/batches/b/results")
                .is_err()
        );
        assert!(a.own_url("https://evil.example/results").is_err());
        assert_eq!(
            a.url("/messages/batches"),
            "http://127.0.0.1:9/v1/messages/batches"
        );
    }
}

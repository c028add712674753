//! The OpenAI Batch API over REST (`/v1/files`, `/v1/batches`), as OpenAI
//! documents it and as OpenAI-compatible servers (vLLM, SGLang, Groq,
//! Together, …) copy it. The base URL includes the version
//! (`https://api.openai.com/v1`), as the official SDK's `base_url` does.
//!
//! - The input file is uploaded (`POST /files`, multipart, `purpose=batch`)
//!   under a file name made from tally's tag, so the janitor can tell its
//!   own files; a batch is created from it for `/v1/chat/completions` with
//!   the tag in its `metadata` (`{"tally": "tally/{ledger}/{job}"}`).
//! - Create is not idempotent (the SDK sends no idempotency key, and the
//!   API takes none): a create whose answer was lost is never sent again;
//!   the caller searches the batch list for the tag (`job/create.rs`).
//! - An ended batch names an output file (the lines that succeeded) and an
//!   error file (the lines that failed, expired or were cancelled); either
//!   may be absent.
//! - Batches cannot be deleted: the list only grows.
//!
//! The key travels as `Authorization: Bearer` and is never logged.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Value, json};

use super::online::OnlineApi;
use crate::jsonl::LineSink;
use crate::provider::http::{self, ApiKey, ProviderError};
use crate::provider::online::OnlineFail;
use crate::provider::rest::{Authorize, Rest};
use crate::provider::types::OnlineAnswer;
use crate::provider::{Listed, ListedFile, Page};

/// The only endpoint tally runs.
pub use super::request::ENDPOINT;

/// The metadata key holding tally's tag.
pub const TAG_KEY: &str = "tally";

/// Batches (and files) asked for per list page (the API's most: 100 for
/// batches).
const PAGE: &str = "100";

/// An OpenAI (or OpenAI-compatible) API client.
#[derive(Debug, Clone)]
pub struct OpenAi {
    pub rest: Rest,
    /// Where synchronous calls go.
    pub online: OnlineApi,
}

impl OpenAi {
    pub fn new(
        base_url: &str,
        key: ApiKey,
        timeout: Duration,
        online: OnlineApi,
    ) -> Result<Self, ProviderError> {
        let authorize: Authorize = |req, key| req.bearer_auth(key.expose());
        Ok(Self {
            rest: Rest::new(base_url, key, timeout, authorize, error_of)?,
            online,
        })
    }

    /// The account (organization and project behind the key), as tally
    /// names it: see [`http::account`].
    pub fn account(&self) -> String {
        self.rest.account()
    }

    fn url(&self, path: &str) -> String {
        self.rest.url(path)
    }

    /// One synchronous call (`body` from [`super::online::body`] for its
    /// API), waiting at most `timeout` for its answer.
    pub async fn online(
        &self,
        body: &Value,
        timeout: Duration,
    ) -> Result<OnlineAnswer, OnlineFail> {
        self.rest
            .online(&self.url(self.online.path()), body, timeout)
            .await
    }

    /// Uploads a batch's input file; answers its id (`file-…`). A failed
    /// upload made no file anyone uses (an orphan at worst: the janitor's).
    pub async fn upload_input(&self, tag: &str, bytes: &Bytes) -> Result<String, ProviderError> {
        let url = self.url("/files");
        let body = self
            .rest
            .patience
            .retrying("upload", || {
                let part = reqwest::multipart::Part::stream_with_length(
                    reqwest::Body::from(bytes.clone()),
                    bytes.len() as u64,
                )
                .file_name(file_name(tag))
                .mime_str("application/jsonl")
                .expect("a valid MIME type");
                let form = reqwest::multipart::Form::new()
                    .text("purpose", "batch")
                    .part("file", part);
                self.rest.json(self.rest.http().post(&url).multipart(form))
            })
            .await?;
        id_of(&body, "file")
    }

    /// Creates the batch of `input_file` (its lines name `model`), tagged
    /// `tag` in its metadata; answers `batches/{id}`. Not retried, except
    /// while the input file is not visible yet ([`super::visible`]), each
    /// time after `resend` recorded the new attempt at tally (so a search
    /// for a lost answer counts from the last send, not the first).
    pub async fn create_batch(
        &self,
        _model: &str,
        tag: &str,
        input_file: &str,
        resend: &crate::provider::Resend<'_>,
    ) -> Result<String, ProviderError> {
        let mut pauses = super::visible::pauses(super::visible::WAIT).into_iter();
        loop {
            let e = match self.post_batch(tag, input_file).await {
                Ok(name) => return Ok(name),
                Err(e) if super::visible::names_missing_file(&e, input_file) => e,
                Err(e) => return Err(e),
            };
            // The provider answered that it cannot find the input file: a
            // create refused so made no batch, so sending the same create
            // again cannot make a second one (unlike a create whose
            // answer was lost, which is never sent again).
            let url = self.url(&format!("/files/{}", id_in(input_file)));
            let got = self.rest.get("get file", &url).await;
            match super::visible::file_state(&got) {
                super::visible::FileState::There => {}
                super::visible::FileState::Gone => {
                    return Err(super::visible::gone(e, input_file));
                }
                super::visible::FileState::Failed => return Err(e),
            }
            let Some(pause) = pauses.next() else {
                tracing::warn!(file = input_file, error = %e, "the input file stayed invisible to the create; the refusal stands");
                return Err(e);
            };
            tracing::info!(file = input_file, retry_in = ?pause, "the input file is stored but not visible to the create yet; creating again");
            tokio::time::sleep(pause).await;
            if !resend().await {
                // The new attempt is not on record: sending again could
                // make a batch no search would count from. No batch was
                // made: the rows go back, with no pause.
                return Err(super::visible::retry_later(
                    e,
                    "the create's new attempt could not be recorded at tally",
                ));
            }
        }
    }

    /// One `POST /batches`.
    async fn post_batch(&self, tag: &str, input_file: &str) -> Result<String, ProviderError> {
        let body = json!({
            "input_file_id": input_file,
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            "metadata": {TAG_KEY: tag},
        });
        let got = self
            .rest
            .json(self.rest.http().post(self.url("/batches")).json(&body))
            .await?;
        Ok(format!("batches/{}", id_of(&got, "batch")?))
    }

    /// A one-request batch tagged `tag` for `model` (a witness for
    /// [`crate::lookup`]; one output token, no row). Its input file is an
    /// orphan once the batch ran: the janitor deletes it.
    pub async fn create_probe(&self, model: &str, tag: &str) -> Result<(), ProviderError> {
        let line = json!({
            "custom_id": "tally-probe",
            "method": "POST",
            "url": ENDPOINT,
            "body": {
                "model": model,
                "messages": [{"role": "user", "content": "."}],
                "max_completion_tokens": 1,
            },
        });
        let file = self
            .upload_input(tag, &Bytes::from(format!("{line}\n")))
            .await?;
        // A probe sent again makes at most one more probe (a token, no
        // row): nothing to record first.
        let resend = || -> futures::future::BoxFuture<'static, bool> { Box::pin(async { true }) };
        self.create_batch(model, tag, &file, &resend)
            .await
            .map(|_| ())
    }

    /// One page of the account's batches (`GET /batches`, `after` the
    /// previous page's last id).
    pub async fn list_batches(&self, after: &str) -> Result<Page<Listed>, ProviderError> {
        let query = vec![("limit", PAGE.to_string())];
        let url = self.url("/batches");
        let page = self
            .rest
            .page("list batches", &url, query, "after", after)
            .await?;
        Ok(listed(&page))
    }

    /// `GET /batches/{id}`.
    pub async fn get_batch(&self, name: &str) -> Result<Value, ProviderError> {
        let url = self.url(&format!("/batches/{}", id_in(name)));
        self.rest.get("get batch", &url).await
    }

    /// `POST /batches/{id}/cancel`: the batch goes `cancelling`, then
    /// `cancelled` with what it finished.
    pub async fn cancel_batch(&self, name: &str) -> Result<(), ProviderError> {
        let url = self.url(&format!("/batches/{}/cancel", id_in(name)));
        self.rest.post("cancel batch", &url).await
    }

    /// One page of the account's batch input files (`GET /files`).
    pub async fn list_files(&self, after: &str) -> Result<Page<ListedFile>, ProviderError> {
        let query = vec![
            ("limit", PAGE.to_string()),
            ("purpose", "batch".to_string()),
        ];
        let url = self.url("/files");
        let page = self
            .rest
            .page("list files", &url, query, "after", after)
            .await?;
        Ok(listed_files(&page))
    }

    /// A file's size in bytes (`GET /files/{id}`).
    pub async fn file_bytes(&self, file: &str) -> Result<u64, ProviderError> {
        let url = self.url(&format!("/files/{}", id_in(file)));
        let got = self.rest.get("get file", &url).await?;
        got["bytes"]
            .as_u64()
            .ok_or_else(|| ProviderError::Protocol(format!("a file without its size: {got}")))
    }

    /// `DELETE /files/{id}`; a file already gone is not an error.
    pub async fn delete_file(&self, file: &str) -> Result<(), ProviderError> {
        let url = self.url(&format!("/files/{}", id_in(file)));
        self.rest.delete("delete file", &url, &[404]).await
    }

    /// Downloads a file (`GET /files/{id}/content`) line by line into
    /// `sink`.
    pub async fn download(
        &self,
        file: &str,
        sink: &mut (dyn LineSink + Send),
    ) -> Result<(), ProviderError> {
        let url = self.url(&format!("/files/{}/content", id_in(file)));
        self.rest.download(&url, &[], sink).await
    }
}

/// The id at the end of a name (`batches/batch_abc` → `batch_abc`).
fn id_in(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The `id` of an answer that must be an `object`.
fn id_of(body: &Value, object: &str) -> Result<String, ProviderError> {
    body["id"]
        .as_str()
        .filter(|id| !id.is_empty() && body["object"].as_str().is_none_or(|o| o == object))
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::Protocol(format!("an answer without a {object} id: {body}")))
}

/// The file name an input file tagged `tag` is uploaded as: the tag with
/// `/` as `~` (a file name has no directories), and `.jsonl`, which the
/// Batch API requires.
pub fn file_name(tag: &str) -> String {
    format!("{}.jsonl", tag.replace('/', "~"))
}

/// The tag a file name carries ([`file_name`] read back).
pub fn tag_of_file(name: &str) -> Option<String> {
    name.strip_suffix(".jsonl").map(|t| t.replace('~', "/"))
}

/// The error an answer with status `code` and `body` means: the body's
/// `{"error": {message, type, param, code}}`, named by its `code` (else its
/// `type`).
pub fn error_of(code: u16, body: &str, retry_after: Option<Duration>) -> ProviderError {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let error = parsed.as_ref().map(|v| &v["error"]);
    let text = |k: &str| error.and_then(|e| e[k].as_str()).filter(|s| !s.is_empty());
    ProviderError::Http {
        code,
        message: text("message").map_or_else(|| body.chars().take(2048).collect(), str::to_owned),
        retry_after,
        status: text("code")
            .or_else(|| text("type"))
            .unwrap_or_default()
            .to_owned(),
        error_codes: Vec::new(),
    }
}

/// A unix-seconds time.
fn unix(v: &Value) -> Option<SystemTime> {
    v.as_u64()
        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

/// A page of `GET /batches` as the provider layer lists it.
pub fn listed(page: &Value) -> Page<Listed> {
    let items: Vec<Listed> = page["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| {
            let id = b["id"].as_str()?;
            Some(Listed {
                name: format!("batches/{id}"),
                tag: b["metadata"][TAG_KEY].as_str().map(str::to_owned),
                create_time: unix(&b["created_at"]),
                done: tally_core::operation::openai_state(b["status"].as_str().unwrap_or(""))
                    .is_terminal(),
            })
        })
        .collect();
    Page {
        next: http::next_after(page),
        items,
    }
}

/// A page of `GET /files` as the provider layer lists it.
pub fn listed_files(page: &Value) -> Page<ListedFile> {
    let items = page["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            Some(ListedFile {
                name: f["id"].as_str()?.to_owned(),
                tag: f["filename"].as_str().and_then(tag_of_file),
                create_time: unix(&f["created_at"]),
            })
        })
        .collect();
    Page {
        next: http::next_after(page),
        items,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_the_tag_both_ways() {
        assert_eq!(file_name("tally/l/j1"), "tally~l~j1.jsonl");
        assert_eq!(
            tag_of_file("tally~l~j1.jsonl").as_deref(),
            Some("tally/l/j1")
        );
        assert_eq!(tag_of_file("notes.txt"), None);
    }

    // Invariant: a page says where the next starts only while the provider
    // says there is more; the tag comes from the metadata.
    #[test]
    fn pages_follow_has_more_and_the_last_id() {
        let page = json!({"object": "list", "has_more": true, "first_id": "batch_a",
            "last_id": "batch_b", "data": [
                {"id": "batch_a", "status": "completed", "created_at": 10,
                 "metadata": {"tally": "tally/l/j1"}},
                {"id": "batch_b", "status": "in_progress", "created_at": 20, "metadata": null}]});
        let p = listed(&page);
        assert_eq!(p.next.as_deref(), Some("batch_b"));
        assert_eq!(p.items[0].name, "batches/batch_a");
        assert_eq!(p.items[0].tag.as_deref(), Some("tally/l/j1"));
        assert!(p.items[0].done);
        assert_eq!(p.items[1].tag, None);
        assert!(!p.items[1].done);
        assert_eq!(
            p.items[1].create_time,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(20))
        );
        let last = json!({"has_more": false, "last_id": "x", "data": []});
        assert_eq!(listed(&last).next, None);
    }

    #[test]
    fn errors_are_named_by_their_code_or_type() {
        let quota = r#"{"error": {"message": "You exceeded your current quota",
            "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
        match error_of(429, quota, Some(Duration::from_secs(2))) {
            ProviderError::Http {
                code,
                status,
                message,
                retry_after,
                ..
            } => {
                assert_eq!((code, status.as_str()), (429, "insufficient_quota"));
                assert!(message.contains("quota"));
                assert_eq!(retry_after, Some(Duration::from_secs(2)));
            }
            other => panic!("{other:?}"),
        }
        let typed = r#"{"error": {"message": "m", "type": "tokens", "code": null}}"#;
        assert!(matches!(error_of(429, typed, None),
            ProviderError::Http { status, .. } if status == "tokens"));
        assert!(matches!(error_of(502, "<html>bad gateway</html>", None),
            ProviderError::Http { message, .. } if message.contains("bad gateway")));
    }
}

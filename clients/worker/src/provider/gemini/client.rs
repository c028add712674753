//! The Gemini Batch API over REST: resumable upload of the input file,
//! batch create / get / list, output download. Retries live here, where
//! the failure is understood:
//!
//! - an upload whose finalize answers 200 with an `error` body failed and
//!   is started again;
//! - a create answered 429 is not retried here: the rows go back and the
//!   model cools down for every worker (the body's `RetryInfo`, or a
//!   `Retry-After` header, says how long; see `job/create.rs`);
//! - a create whose answer was lost (timeout, connection reset, 5xx after
//!   the request went out) may have made the batch: it is never sent again;
//!   the caller searches for the batch by its display name (the tally job
//!   id, unique) over the provider's list lag (`job/create.rs`).
//!
//! The API key travels in the `x-goog-api-key` header and is never logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::jsonl::LineSink;
use crate::provider::http::ApiKey;
use crate::provider::online::OnlineFail;
use crate::provider::rest::{Authorize, Rest};
use crate::provider::types::OnlineAnswer;
use crate::provider::{Listed, ListedFile, Page, Upload, Uploaded};

/// The Gemini flavour of [`crate::provider::ProviderError`] (every client answers
/// the same error).
pub use crate::provider::http::ProviderError as GeminiError;

/// A Gemini API client.
#[derive(Debug, Clone)]
pub struct Gemini {
    pub rest: Rest,
    /// `application/jsonl` was refused once: upload as `text/plain`.
    plain_text: Arc<AtomicBool>,
}

impl Gemini {
    pub fn new(base_url: &str, key: ApiKey, timeout: Duration) -> Result<Self, GeminiError> {
        // Every request carries x-goog-api-key: no redirect is followed.
        let authorize: Authorize = |req, key| req.header("x-goog-api-key", key.expose());
        Ok(Self {
            rest: Rest::new(base_url, key, timeout, authorize, error_of)?,
            plain_text: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The provider account this client sends to, as tally names it: the
    /// first 16 hex digits of SHA-256 over the base URL and the key. Two
    /// workers with the same key share a project's quota; the key itself
    /// never leaves the worker.
    pub fn account(&self) -> String {
        self.rest.account()
    }

    fn url(&self, path: &str) -> String {
        self.rest.url(path)
    }

    /// One synchronous call of `model` (`body` from
    /// [`super::online::body`]), waiting at most `timeout` for its answer.
    pub async fn online(
        &self,
        model: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<OnlineAnswer, OnlineFail> {
        self.rest
            .online(&self.url(&super::online::path(model)), body, timeout)
            .await
    }

    /// Runs `op` with retries on transient failures.
    async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, GeminiError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, GeminiError>>,
    {
        self.rest.patience.retrying(what, op).await
    }

    /// Uploads `bytes` as a JSONL file; answers its name (`files/…`).
    ///
    /// `application/jsonl` is sometimes refused ("Unsupported MIME type",
    /// even as a 200 with an error body); then the file is sent as
    /// `text/plain`, which the Batch API reads the same, and so are later
    /// uploads of this client.
    pub async fn upload_jsonl(
        &self,
        display_name: &str,
        bytes: &Bytes,
    ) -> Result<String, GeminiError> {
        if !self.plain_text.load(Ordering::Relaxed) {
            match self
                .retrying("upload", || {
                    self.upload_once(display_name, bytes, "application/jsonl")
                })
                .await
            {
                Err(e) if is_mime_refusal(&e) => {
                    tracing::warn!(error = %e, "application/jsonl refused; uploading as text/plain from now on");
                    self.plain_text.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        self.retrying("upload", || {
            self.upload_once(display_name, bytes, "text/plain")
        })
        .await
    }

    async fn upload_once(
        &self,
        display_name: &str,
        bytes: &Bytes,
        mime: &str,
    ) -> Result<String, GeminiError> {
        file_name_of(&self.upload_file_once(display_name, bytes, mime).await?)
    }

    /// Uploads a row's media file (resumable, `mime`); answers the file
    /// resource (`name`, `uri`, `expirationTime`, `state`).
    pub async fn upload_media(
        &self,
        display_name: &str,
        mime: &str,
        bytes: &Bytes,
    ) -> Result<Value, GeminiError> {
        let done = self
            .retrying("upload media", || {
                self.upload_file_once(display_name, bytes, mime)
            })
            .await?;
        file_name_of(&done)?;
        Ok(done.get("file").cloned().unwrap_or(done))
    }

    /// `GET files/{id}`: the file resource.
    /// [`Gemini::upload_media`], then waits while the file is
    /// `PROCESSING` (large media, video, are a while), up to a minute.
    pub async fn upload_media_ready(
        &self,
        display_name: &str,
        mime: &str,
        bytes: &Bytes,
    ) -> Result<Upload, GeminiError> {
        let mut file = self.upload_media(display_name, mime, bytes).await?;
        for _ in 0..60 {
            if file["state"].as_str() != Some("PROCESSING") {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let name = file["name"].as_str().unwrap_or_default().to_owned();
            file = self.get_file(&name).await?;
        }
        if file["state"].as_str() == Some("FAILED") {
            return Ok(Upload::Unusable(file["error"].to_string()));
        }
        let (Some(name), Some(uri)) = (file["name"].as_str(), file["uri"].as_str()) else {
            return Err(GeminiError::Protocol(format!(
                "the upload answered no file name and URI: {file}"
            )));
        };
        Ok(Upload::Ready(Uploaded {
            name: name.to_owned(),
            uri: uri.to_owned(),
            expire: file["expirationTime"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339_weak(t).ok()),
        }))
    }

    pub async fn get_file(&self, name: &str) -> Result<Value, GeminiError> {
        let id = name.trim_start_matches("files/");
        let url = self.url(&format!("/v1beta/files/{id}"));
        self.rest.get("get file", &url).await
    }

    /// One resumable upload; answers the finalize's body (`{"file": …}`,
    /// or an `error` body the provider answered with 200).
    async fn upload_file_once(
        &self,
        display_name: &str,
        bytes: &Bytes,
        mime: &str,
    ) -> Result<Value, GeminiError> {
        let start = self
            .rest
            .send(
                self.rest
                    .http()
                    .post(self.url("/upload/v1beta/files"))
                    .header("X-Goog-Upload-Protocol", "resumable")
                    .header("X-Goog-Upload-Command", "start")
                    .header(
                        "X-Goog-Upload-Header-Content-Length",
                        bytes.len().to_string(),
                    )
                    .header("X-Goog-Upload-Header-Content-Type", mime)
                    .json(&json!({"file": {"display_name": display_name}})),
            )
            .await?;
        let upload_url = start
            .headers()
            .get("x-goog-upload-url")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| GeminiError::Protocol("upload start without x-goog-upload-url".into()))?
            .to_string();
        let done = self
            .rest
            .json(
                self.rest
                    .http()
                    .post(upload_url)
                    .header("X-Goog-Upload-Command", "upload, finalize")
                    .header("X-Goog-Upload-Offset", "0")
                    // A reference to the one copy: every try sends it again
                    // without copying it.
                    .body(bytes.clone()),
            )
            .await?;
        // An error body is a failure (transient when its code says so).
        file_name_of(&done)?;
        Ok(done)
    }

    /// Creates the batch (display name = the tally job id) and answers its
    /// operation JSON. Nothing is retried here: a refusal that proves
    /// nothing was made (4xx; a 429 is the project's quota) goes back to the
    /// caller, which gives the rows back and, for a 429, puts the model in
    /// the cool-down tally shares with every worker; any other failure may
    /// have made the batch: the caller resolves it by searching (see
    /// `job/create.rs`), never by creating again.
    pub async fn create_batch(
        &self,
        model: &str,
        display_name: &str,
        input_file: &str,
    ) -> Result<Value, GeminiError> {
        let model = model.trim_start_matches("models/");
        let body = json!({"batch": {
            "model": format!("models/{model}"),
            "displayName": display_name,
            "inputConfig": {"fileName": input_file},
        }});
        let url = self.url(&format!("/v1beta/models/{model}:batchGenerateContent"));
        self.rest
            .json(self.rest.http().post(&url).json(&body))
            .await
    }

    /// One page of the project's batches (`GET batches`, 100 a page, in
    /// whatever order the provider keeps: see [`crate::lookup`]).
    pub async fn list_batches(&self, page_token: &str) -> Result<Value, GeminiError> {
        let query = vec![("pageSize", "100".to_string())];
        let url = self.url("/v1beta/batches");
        self.rest
            .page("list batches", &url, query, "pageToken", page_token)
            .await
    }

    /// Creates a one-request batch named `display_name` for `model`: a
    /// witness for [`crate::lookup`] when no other batch was made after a
    /// lost create (one short request with one output token; no row).
    /// Not retried: a lost answer made the probe anyway, a refusal made
    /// nothing; either way the caller asks again later.
    pub async fn create_probe(
        &self,
        model: &str,
        display_name: &str,
    ) -> Result<Value, GeminiError> {
        let model = model.trim_start_matches("models/");
        let body = json!({"batch": {
            "model": format!("models/{model}"),
            "displayName": display_name,
            "inputConfig": {"requests": {"requests": [{
                "request": {
                    "contents": [{"role": "user", "parts": [{"text": "."}]}],
                    "generationConfig": {"maxOutputTokens": 1},
                },
                "metadata": {"key": "tally-probe"},
            }]}},
        }});
        let url = self.url(&format!("/v1beta/models/{model}:batchGenerateContent"));
        self.rest
            .json(self.rest.http().post(&url).json(&body))
            .await
    }

    /// `DELETE batches/{id}`: the batch leaves the project's list (the
    /// worker deletes only batches that ended). A batch already gone is not
    /// an error.
    pub async fn delete_batch(&self, name: &str) -> Result<(), GeminiError> {
        let id = name.rsplit('/').next().unwrap_or(name);
        let url = self.url(&format!("/v1beta/batches/{id}"));
        self.rest.delete("delete batch", &url, &[404]).await
    }

    /// `GET /v1beta/batches/{id}`: the batch's operation JSON.
    pub async fn get_batch(&self, name: &str) -> Result<Value, GeminiError> {
        let id = name.rsplit('/').next().unwrap_or(name);
        let url = self.url(&format!("/v1beta/batches/{id}"));
        self.rest.get("get batch", &url).await
    }

    /// One page of the project's files (`GET files`, 100 a page).
    pub async fn list_files(&self, page_token: &str) -> Result<Value, GeminiError> {
        let query = vec![("pageSize", "100".to_string())];
        let url = self.url("/v1beta/files");
        self.rest
            .page("list files", &url, query, "pageToken", page_token)
            .await
    }

    /// `POST batches/{id}:cancel`. Cancelling a finished batch is harmless.
    pub async fn cancel_batch(&self, name: &str) -> Result<(), GeminiError> {
        let id = name.rsplit('/').next().unwrap_or(name);
        let url = self.url(&format!("/v1beta/batches/{id}:cancel"));
        self.rest.post("cancel batch", &url).await
    }

    /// Deletes `file` (`files/…`): input files count against the project's
    /// file storage until they expire. A file already gone (404, or the 403
    /// the API answers for a file it does not have) is not an error.
    pub async fn delete_file(&self, file: &str) -> Result<(), GeminiError> {
        let id = file.trim_start_matches("files/");
        let url = self.url(&format!("/v1beta/files/{id}"));
        self.rest.delete("delete file", &url, &[403, 404]).await
    }

    /// Downloads a generated file (a batch's output) line by line into
    /// `sink` (`GET download/v1beta/files/{id}:download?alt=media`).
    pub async fn download(
        &self,
        file: &str,
        sink: &mut (dyn LineSink + Send),
    ) -> Result<(), GeminiError> {
        let id = file.trim_start_matches("files/");
        let url = self.url(&format!("/download/v1beta/files/{id}:download"));
        self.rest.download(&url, &[("alt", "media")], sink).await
    }
}

/// A batch's display name, as the list shows it.
pub fn display_name(op: &Value) -> Option<&str> {
    op["metadata"]["displayName"]
        .as_str()
        .or_else(|| op["displayName"].as_str())
}

/// A batch's `createTime`.
pub fn create_time(op: &Value) -> Option<SystemTime> {
    op["metadata"]["createTime"]
        .as_str()
        .or_else(|| op["createTime"].as_str())
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// A page of `GET batches` (`operations`) as the provider layer lists it.
pub fn listed(page: &Value) -> Page<Listed> {
    let items = page["operations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|op| Listed {
            name: op["name"].as_str().unwrap_or_default().to_owned(),
            tag: display_name(op).map(str::to_owned),
            create_time: create_time(op),
            done: op["done"] == true,
        })
        .collect();
    Page {
        items,
        next: next_token(page),
    }
}

/// A page of `GET files` as the provider layer lists it.
pub fn listed_files(page: &Value) -> Page<ListedFile> {
    let items = page["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            Some(ListedFile {
                name: f["name"].as_str()?.to_owned(),
                tag: f["displayName"].as_str().map(str::to_owned),
                create_time: f["createTime"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339_weak(t).ok()),
            })
        })
        .collect();
    Page {
        items,
        next: next_token(page),
    }
}

fn next_token(page: &Value) -> Option<String> {
    page["nextPageToken"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// The file name in a finalize answer; an `error` body (a 200 that failed)
/// is an error, transient when its code says so.
/// A 400 that names the MIME type: the file's type was refused.
fn is_mime_refusal(e: &GeminiError) -> bool {
    matches!(e, GeminiError::Http { code: 400, message, .. } if message.to_ascii_lowercase().contains("mime type"))
}

pub fn file_name_of(body: &Value) -> Result<String, GeminiError> {
    if let Some(error) = body.get("error") {
        let code = error["code"].as_u64().unwrap_or(500) as u16;
        return Err(GeminiError::Http {
            code,
            message: format!(
                "upload finalize answered 200 with an error: {}",
                error["message"].as_str().unwrap_or("")
            ),
            retry_after: None,
            status: error["status"].as_str().unwrap_or_default().to_string(),
            error_codes: Vec::new(),
        });
    }
    body["file"]["name"]
        .as_str()
        .or_else(|| body["name"].as_str())
        .filter(|n| n.starts_with("files/"))
        .map(str::to_owned)
        .ok_or_else(|| {
            GeminiError::Protocol(format!("finalize answer without a file name: {body}"))
        })
}

/// The error an answer with status `code` and `body` means: the body's
/// `{"error": {code, message, status, details}}`, named by its `status`,
/// with the `quotaId`s of its QuotaFailure. The provider says when to come
/// back in the body (RetryInfo); a proxy may add a `Retry-After` header:
/// the longer one wins.
pub fn error_of(code: u16, body: &str, header: Option<Duration>) -> GeminiError {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let from_body = parsed
        .as_ref()
        .and_then(|v| super::output::retry_delay(&v["error"]))
        .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32));
    let retry_after = header.max(from_body);
    let error = parsed.as_ref().map(|v| &v["error"]);
    let status = error
        .and_then(|e| e["status"].as_str())
        .unwrap_or_default()
        .to_string();
    let error_codes = error.map(super::output::error_codes).unwrap_or_default();
    let message = error
        .and_then(|e| e["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_owned());
    GeminiError::Http {
        code,
        message,
        retry_after,
        status,
        error_codes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::http::Patience;

    /// A finalize that answers 200 with an error body is a transient
    /// failure (retried), not a file.
    #[test]
    fn a_finalize_error_body_is_a_failure() {
        let e = file_name_of(&json!({"error": {"code": 500, "message": "retry"}})).unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert_eq!(
            file_name_of(&json!({"file": {"name": "files/abc"}})).unwrap(),
            "files/abc"
        );
        assert!(file_name_of(&json!({"file": {}})).is_err());
    }

    /// Invariant: a redirect is never followed, so the API key (sent on
    /// every request, and not stripped by reqwest on a redirect) never
    /// reaches the address a 3xx points at: the call fails and nothing
    /// connects there.
    #[tokio::test]
    async fn redirects_are_not_followed_with_the_key() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        elsewhere.set_nonblocking(true).unwrap();
        let target = elsewhere.local_addr().unwrap();
        let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", redirector.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = redirector.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nlocation: http://{target}/stolen\r\n\
                     content-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        let mut g = Gemini::new(
            &base,
            ApiKey::new("AIzaSECRET".into()),
            Duration::from_secs(5),
        )
        .unwrap();
        g.rest.patience = Patience {
            tries: 1,
            initial: Duration::from_millis(1),
            max: Duration::from_millis(1),
        };
        let got = g.get_batch("batches/b").await;
        assert!(
            matches!(got, Err(GeminiError::Http { code: 302, .. })),
            "{got:?}"
        );
        assert_eq!(
            elsewhere.accept().map_err(|e| e.kind()).err(),
            Some(std::io::ErrorKind::WouldBlock),
            "nothing connected where the redirect pointed"
        );
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let g = Gemini::new(
            "http://x",
            ApiKey::new("AIzaSECRET".into()),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!format!("{g:?}").contains("SECRET"));
    }

    #[test]
    fn create_times_are_read_in_the_providers_forms() {
        let t = create_time(&json!({"metadata": {"createTime": "2026-11-27T08:00:00.123456Z"}}));
        assert!(t.is_some());
        assert!(create_time(&json!({"createTime": "2026-11-27T08:00:00Z"})).is_some());
        assert!(create_time(&json!({"metadata": {}})).is_none());
    }
}

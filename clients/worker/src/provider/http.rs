//! What every provider client shares: the API key, how hard to try, the
//! error every call answers with, and the retry loop.

use std::time::Duration;

/// The API key. Its `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        Self(key)
    }

    /// The key itself, to put in a header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// What a provider call answered instead of what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The API answered with an error status.
    #[error("the provider answered {code}: {message}")]
    Http {
        code: u16,
        message: String,
        retry_after: Option<Duration>,
        /// The error's name: Gemini's `status` (`PERMISSION_DENIED`, …),
        /// OpenAI's `code` (`insufficient_quota`, …) or else its `type`;
        /// empty if none.
        status: String,
        /// Typed codes among its details: the `quotaId`s of a
        /// `google.rpc.QuotaFailure` (Gemini), `error.details.error_code`
        /// (Anthropic).
        error_codes: Vec<String>,
    },
    /// No answer: the request may or may not have been acted on.
    #[error("the provider is unreachable: {0}")]
    Transport(String),
    /// An answer we cannot use.
    #[error("unexpected answer from the provider: {0}")]
    Protocol(String),
}

impl ProviderError {
    /// Worth trying again unchanged.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Http { code, .. } => matches!(code, 408 | 429 | 500..=599),
            ProviderError::Transport(_) => true,
            ProviderError::Protocol(_) => false,
        }
    }

    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            ProviderError::Transport(_) | ProviderError::Protocol(_) => None,
        }
    }

    /// The HTTP status, if the provider answered one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ProviderError::Http { code, .. } => Some(*code),
            ProviderError::Transport(_) | ProviderError::Protocol(_) => None,
        }
    }
}

/// How hard to try before giving up on one operation.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    pub tries: u32,
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            tries: 8,
            initial: Duration::from_millis(250),
            max: Duration::from_secs(30),
        }
    }
}

impl Patience {
    pub(crate) fn pause(&self, n: u32, asked: Option<Duration>) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        let backoff = self.initial.saturating_mul(factor).min(self.max);
        asked.map_or(backoff, |a| a.min(Duration::from_secs(300)).max(backoff))
    }

    /// Runs `op` until it succeeds, fails for good, or the tries are spent;
    /// `before` runs before every try (a download starts its sink afresh).
    pub(crate) async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        mut op: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut n = 0;
        loop {
            n += 1;
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && n < self.tries => {
                    let pause = self.pause(n, e.retry_after());
                    tracing::warn!(call = what, error = %e, retry_in = ?pause, "provider call failed; retrying");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// An HTTP client for a provider: a timeout, and no redirect followed
/// (every request carries the key, which reqwest does not strip on a
/// redirect: a 3xx is answered as an error, never followed).
pub(crate) fn client(timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ProviderError::Protocol(format!("http client: {e}")))
}

/// The provider account a client sends to, as tally names it: the first 16
/// hex digits of SHA-256 over the base URL and the key. Two workers with
/// the same key share a project's quota; the key itself never leaves the
/// worker.
pub(crate) fn account(base: &str, key: &ApiKey) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::new()
        .chain_update(base.as_bytes())
        .chain_update(b"\n")
        .chain_update(key.0.as_bytes())
        .finalize();
    hex::encode(&digest[..8])
}

/// How a provider reads an error answer: its status, body and
/// `Retry-After` into the error (each folder's `error_of`).
pub(crate) type ErrorOf = fn(u16, &str, Option<Duration>) -> ProviderError;

/// Sends `req` (its key already set): the response when it is a 2xx, else
/// the error `error_of` reads from it; no answer is [`ProviderError::Transport`].
/// Every failed call is counted in `errors`, by status.
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    errors: &crate::metrics::ProviderErrors,
    error_of: ErrorOf,
) -> Result<reqwest::Response, ProviderError> {
    let resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) => {
            errors.count(None);
            return Err(ProviderError::Transport(without_url(e)));
        }
    };
    if resp.status().is_success() {
        return Ok(resp);
    }
    let code = resp.status().as_u16();
    errors.count(Some(code));
    let retry_after = retry_after_header(resp.headers());
    let body = resp.text().await.unwrap_or_default();
    Err(error_of(code, &body, retry_after))
}

/// A `Retry-After` in seconds (`retry-after-ms` too, as OpenAI sends it).
pub(crate) fn retry_after_header(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let ms = text("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Duration::from_secs_f64(v / 1000.0));
    let secs = text(reqwest::header::RETRY_AFTER.as_str())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64);
    ms.or(secs)
}

/// reqwest errors name the URL; ours carry no secret (the key is a
/// header), but keep messages short.
pub(crate) fn without_url(e: reqwest::Error) -> String {
    e.without_url().to_string()
}

/// One read of a file, line by line into `sink`, never holding more than
/// one line (at most `max_line` bytes) besides a chunk.
pub(crate) async fn stream_lines(
    mut resp: reqwest::Response,
    max_line: usize,
    sink: &mut (dyn crate::jsonl::LineSink + Send),
) -> Result<(), ProviderError> {
    let mut split = crate::jsonl::LineSplitter::new(max_line);
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ProviderError::Transport(without_url(e)))?
    {
        split.chunk(&chunk, sink);
    }
    split.finish(sink);
    Ok(())
}

/// Downloads with `read` (one try) into `sink`, trying again on transient
/// failures; each try starts the sink afresh.
pub(crate) async fn download_retrying<F, Fut>(
    patience: &Patience,
    sink: &mut (dyn crate::jsonl::LineSink + Send),
    mut read: F,
) -> Result<(), ProviderError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<reqwest::Response, ProviderError>>,
{
    let mut n = 0;
    loop {
        n += 1;
        sink.reset();
        let got = match read().await {
            Ok(resp) => stream_lines(resp, MAX_OUTPUT_LINE, sink).await,
            Err(e) => Err(e),
        };
        match got {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() && n < patience.tries => {
                let pause = patience.pause(n, e.retry_after());
                tracing::warn!(call = "download", error = %e, retry_in = ?pause, "provider call failed; retrying");
                tokio::time::sleep(pause).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Where the next page of an OpenAI or Anthropic list starts: after its
/// last id, while `has_more`.
pub(crate) fn next_after(page: &serde_json::Value) -> Option<String> {
    if page["has_more"] != true {
        return None;
    }
    page["last_id"]
        .as_str()
        .or_else(|| page["data"].as_array()?.last()?["id"].as_str())
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// Most bytes of one output line the worker keeps; a longer line is
/// counted unreadable (its row is then missing from the output, retried).
pub const MAX_OUTPUT_LINE: usize = 64 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_longer_than_the_backoff_wins() {
        let p = Patience {
            tries: 5,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(p.pause(1, None), Duration::from_millis(100));
        assert_eq!(p.pause(3, None), Duration::from_millis(400));
        assert_eq!(
            p.pause(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(p.pause(9, None), Duration::from_secs(1));
    }

    #[test]
    fn retry_after_headers_in_seconds_or_milliseconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after_header(&h), None);
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after_header(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after_header(&h), Some(Duration::from_millis(1500)));
    }
}

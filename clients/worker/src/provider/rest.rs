//! What every provider client is built on: the HTTP client, the base URL
//! and the key, how hard to try, where failed calls are counted, and the
//! calls each client makes the same way (a JSON answer, a retried GET, list
//! page, POST or DELETE, a synchronous call, a download). A provider folder
//! says how its key travels, how its errors read and where its paths are.

use std::time::Duration;

use serde_json::Value;

use super::http::{self, ApiKey, ErrorOf, Patience, ProviderError};
use super::online::{self, OnlineFail};
use super::types::OnlineAnswer;
use crate::jsonl::LineSink;

/// How a provider puts its key (and any header every call carries) on a
/// request.
pub(crate) type Authorize = fn(reqwest::RequestBuilder, &ApiKey) -> reqwest::RequestBuilder;

/// One provider's REST client (see the module docs).
#[derive(Debug, Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    key: ApiKey,
    pub patience: Patience,
    /// Where failed calls are counted, by status code.
    pub errors: crate::metrics::ProviderErrors,
    authorize: Authorize,
    error_of: ErrorOf,
}

impl Rest {
    /// A client of the API at `base_url` (a trailing `/` dropped), its
    /// calls given up after `timeout`.
    pub(crate) fn new(
        base_url: &str,
        key: ApiKey,
        timeout: Duration,
        authorize: Authorize,
        error_of: ErrorOf,
    ) -> Result<Self, ProviderError> {
        Ok(Self {
            http: http::client(timeout)?,
            base: base_url.trim_end_matches('/').to_string(),
            key,
            patience: Patience::default(),
            errors: Default::default(),
            authorize,
            error_of,
        })
    }

    /// The base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The account behind the key, as tally names it: see [`http::account`].
    pub fn account(&self) -> String {
        http::account(&self.base, &self.key)
    }

    /// `path` under the base URL.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The HTTP client, to build a request for [`Rest::send`].
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends `req` with the key, once: a 2xx response, else the provider's
    /// error (counted).
    pub(crate) async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        http::send(
            (self.authorize)(req, &self.key),
            &self.errors,
            self.error_of,
        )
        .await
    }

    /// Sends `req` once and reads its JSON answer.
    pub(crate) async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        self.send(req)
            .await?
            .json()
            .await
            .map_err(|e| ProviderError::Transport(http::without_url(e)))
    }

    /// `GET url`, retried: its JSON answer.
    pub(crate) async fn get(&self, what: &str, url: &str) -> Result<Value, ProviderError> {
        self.patience
            .retrying(what, || self.json(self.http.get(url)))
            .await
    }

    /// One page of a list at `url`, retried: `query` always, and `token`
    /// under `token_param` unless it is empty (the first page).
    pub(crate) async fn page(
        &self,
        what: &str,
        url: &str,
        mut query: Vec<(&'static str, String)>,
        token_param: &'static str,
        token: &str,
    ) -> Result<Value, ProviderError> {
        if !token.is_empty() {
            query.push((token_param, token.to_string()));
        }
        self.patience
            .retrying(what, || self.json(self.http.get(url).query(&query)))
            .await
    }

    /// `POST url` with no body, retried; its answer is not read further
    /// (a cancel).
    pub(crate) async fn post(&self, what: &str, url: &str) -> Result<(), ProviderError> {
        self.patience
            .retrying(what, || self.json(self.http.post(url)))
            .await
            .map(|_| ())
    }

    /// `DELETE url`, retried; an answer in `gone` (the thing is not there)
    /// is not an error.
    pub(crate) async fn delete(
        &self,
        what: &str,
        url: &str,
        gone: &[u16],
    ) -> Result<(), ProviderError> {
        match self
            .patience
            .retrying(what, || self.send(self.http.delete(url)))
            .await
        {
            Ok(_) => Ok(()),
            Err(ProviderError::Http { code, .. }) if gone.contains(&code) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One synchronous call: `body` POSTed to `url`, waiting at most
    /// `timeout` for its answer.
    pub(crate) async fn online(
        &self,
        url: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<OnlineAnswer, OnlineFail> {
        let req = self.http.post(url).json(body).timeout(timeout);
        online::exchange(
            (self.authorize)(req, &self.key),
            &self.errors,
            self.error_of,
        )
        .await
    }

    /// Downloads `url` (with `query`) line by line into `sink`, trying again
    /// on transient failures.
    pub(crate) async fn download(
        &self,
        url: &str,
        query: &[(&str, &str)],
        sink: &mut (dyn LineSink + Send),
    ) -> Result<(), ProviderError> {
        http::download_retrying(&self.patience, sink, || {
            let req = self.http.get(url);
            let req = if query.is_empty() {
                req
            } else {
                req.query(query)
            };
            self.send(req)
        })
        .await
    }
}

//! The one error shape of the API, `{"error": {message, type, param, code}}`,
//! and the statuses it goes with (what the SDK maps to its error classes).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// The wait a `retry-after` header (whole seconds, rounded up) and a
    /// `retry-after-ms` header name.
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    pub fn new(status: u16, kind: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind: kind.to_owned(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    pub fn code(mut self, code: &str) -> Self {
        self.code = Some(code.to_owned());
        self
    }

    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", message)
    }

    /// 404 `invalid_request_error`, as the API answers unknown ids and paths.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "invalid_request_error", message)
    }

    /// 500 `server_error`, in the API's words.
    pub fn server_error() -> Self {
        Self::new(
            500,
            "server_error",
            "The server had an error while processing your request. Sorry about that!",
        )
    }

    /// 401 for a request without a key (the API's words, `code` null).
    pub fn missing_key() -> Self {
        Self::new(
            401,
            "invalid_request_error",
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        )
    }

    /// 401 `invalid_api_key` for a key the emulator does not know.
    pub fn invalid_key(key: &str) -> Self {
        let shown: String = key.chars().take(4).collect();
        Self::new(
            401,
            "invalid_request_error",
            format!("Incorrect API key provided: {shown}****. You can find your API key at https://platform.openai.com/account/api-keys."),
        )
        .code("invalid_api_key")
    }

    /// The body: `{"error": {...}}`.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            for (name, value) in [
                ("retry-after", secs.to_string()),
                ("retry-after-ms", wait.as_millis().to_string()),
            ] {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(name, v);
                }
            }
        }
        response
    }
}

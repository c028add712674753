//! Google-style API errors: `{"error": {"code", "message", "status"}}` with
//! the HTTP status in `code`, the canonical status name in `status` and,
//! where Google sends them, typed `details` (`google.rpc.ErrorInfo`,
//! `RetryInfo`, `QuotaFailure`). The one place HTTP codes are mapped to
//! status names.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The canonical status name Google pairs with an HTTP code.
pub fn status_name(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        412 => "FAILED_PRECONDITION",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    }
}

/// The gRPC canonical code (`google.rpc.Code`) Google pairs with an HTTP
/// code: what a per-line `google.rpc.Status` carries.
pub fn grpc_code(http: u16) -> i32 {
    match http {
        400 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        409 => 10,
        412 => 9,
        429 => 8,
        499 => 1,
        500 => 13,
        501 => 12,
        502 | 503 => 14,
        504 => 4,
        _ => 2,
    }
}

/// The error object (without the `error` wrapper) for `code`.
pub fn error_object(code: u16, message: &str) -> Value {
    json!({"code": code, "message": message, "status": status_name(code)})
}

/// An error answer of the REST surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub message: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
    /// `google.rpc` detail messages, each with its `@type`.
    pub details: Vec<Value>,
    /// The status name when it is not the one paired with `code` (a 400
    /// FAILED_PRECONDITION).
    pub status: Option<String>,
}

impl ApiError {
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
            details: Vec::new(),
            status: None,
        }
    }

    /// What the provider answers a key it does not know: 400 with an
    /// `ErrorInfo` whose reason is `API_KEY_INVALID` (not 401).
    pub fn api_key_invalid() -> Self {
        let mut error = Self::invalid("API key not valid. Please pass a valid API key.");
        error.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        }));
        error
    }

    /// A quota refusal as the provider words it: 429 with `QuotaFailure`
    /// naming the violated quota and `RetryInfo` saying when to come back.
    pub fn quota_exhausted(message: impl Into<String>, quota_id: &str, retry_secs: u64) -> Self {
        let metric = if quota_id.contains("PerDay") {
            "generativelanguage.googleapis.com/generate_requests_per_day"
        } else if quota_id.contains("FileStorage") {
            "generativelanguage.googleapis.com/file_storage_bytes"
        } else {
            "generativelanguage.googleapis.com/batch_enqueued_tokens"
        };
        let mut error = Self::new(429, message);
        error.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{
                "quotaMetric": metric,
                "quotaId": quota_id,
            }],
        }));
        error.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{retry_secs}s"),
        }));
        error
    }

    /// A project that cannot be billed: 403 PERMISSION_DENIED, or 400
    /// FAILED_PRECONDITION (how the provider answers where its free tier
    /// is not offered), each naming billing.
    pub fn billing(code: u16) -> Self {
        if code == 400 {
            let mut error = Self::invalid(
                "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.",
            );
            error.status = Some("FAILED_PRECONDITION".to_owned());
            error
        } else {
            Self::new(
                403,
                "This API method requires billing to be enabled. Please enable billing on your project and retry.",
            )
        }
    }

    /// A refusal with any `code`, `status` and message (the refusal
    /// fault); defaults: the code's canonical status and a generic message.
    pub fn refusal(code: u16, status: Option<&str>, message: Option<&str>) -> Self {
        let mut error = Self::new(
            code,
            message.unwrap_or("The request was refused by the emulator's create_refusal fault."),
        );
        error.status = status.map(str::to_owned);
        error
    }

    /// An upload refused by the `upload_refusal` fault: a 403 without a
    /// message says Google's "The caller does not have permission".
    pub fn upload_refusal(code: u16, status: Option<&str>, message: Option<&str>) -> Self {
        let message = message.unwrap_or(match code {
            403 => "The caller does not have permission",
            _ => "The upload was refused by the emulator's upload_refusal fault.",
        });
        Self::refusal(code, status, Some(message))
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }

    pub fn body(&self) -> Value {
        let mut error = error_object(self.code, &self.message);
        if let Some(status) = &self.status {
            error["status"] = json!(status);
        }
        if !self.details.is_empty() {
            error["details"] = Value::Array(self.details.clone());
        }
        json!({"error": error})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_have_googles_shape() {
        let e = ApiError::new(429, "slow down");
        assert_eq!(
            e.body(),
            json!({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}})
        );
        assert_eq!(status_name(503), "UNAVAILABLE");
        assert_eq!(status_name(418), "UNKNOWN");
    }

    #[test]
    fn quota_and_key_errors_carry_typed_details() {
        let body = ApiError::quota_exhausted("too many", "BatchEnqueuedTokens", 7).body();
        assert_eq!(body["error"]["code"], 429);
        assert_eq!(body["error"]["details"][1]["retryDelay"], "7s");
        assert!(
            body["error"]["details"][0]["@type"]
                .as_str()
                .unwrap()
                .ends_with("google.rpc.QuotaFailure")
        );
        let key = ApiError::api_key_invalid().body();
        assert_eq!(key["error"]["code"], 400);
        assert_eq!(key["error"]["status"], "INVALID_ARGUMENT");
        assert_eq!(key["error"]["details"][0]["reason"], "API_KEY_INVALID");
    }
}

//! The one error shape of the API, `{"type": "error", "error": {type,
//! message}, "request_id"}`, its error types and the statuses they go with
//! (what the SDK maps to its error classes). The same types name the
//! errors of `errored` batch results.

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `error.type`s of the API, each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorType {
    #[serde(rename = "invalid_request_error")]
    InvalidRequest,
    #[serde(rename = "authentication_error")]
    Authentication,
    #[serde(rename = "billing_error")]
    Billing,
    #[serde(rename = "permission_error")]
    Permission,
    #[serde(rename = "not_found_error")]
    NotFound,
    #[serde(rename = "request_too_large")]
    RequestTooLarge,
    #[serde(rename = "rate_limit_error")]
    RateLimit,
    #[serde(rename = "api_error")]
    Api,
    #[serde(rename = "timeout_error")]
    Timeout,
    #[serde(rename = "overloaded_error")]
    Overloaded,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "invalid_request_error",
            ErrorType::Authentication => "authentication_error",
            ErrorType::Billing => "billing_error",
            ErrorType::Permission => "permission_error",
            ErrorType::NotFound => "not_found_error",
            ErrorType::RequestTooLarge => "request_too_large",
            ErrorType::RateLimit => "rate_limit_error",
            ErrorType::Api => "api_error",
            ErrorType::Timeout => "timeout_error",
            ErrorType::Overloaded => "overloaded_error",
        }
    }

    /// The HTTP status the API answers this error with.
    pub fn status(self) -> u16 {
        match self {
            ErrorType::InvalidRequest => 400,
            ErrorType::Authentication => 401,
            ErrorType::Billing => 402,
            ErrorType::Permission => 403,
            ErrorType::NotFound => 404,
            ErrorType::RequestTooLarge => 413,
            ErrorType::RateLimit => 429,
            ErrorType::Api => 500,
            ErrorType::Timeout => 504,
            ErrorType::Overloaded => 529,
        }
    }

    /// A message of the API's kind for an error without a more specific
    /// one.
    pub fn default_message(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "Invalid request.",
            ErrorType::Authentication => "invalid x-api-key",
            ErrorType::Billing => {
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."
            }
            ErrorType::Permission => {
                "Your API key does not have permission to use the specified resource."
            }
            ErrorType::NotFound => "The requested resource could not be found.",
            ErrorType::RequestTooLarge => "Request exceeds the maximum allowed number of bytes.",
            ErrorType::RateLimit => {
                "This request would exceed the rate limit for your organization. Please try again later."
            }
            ErrorType::Api => "Internal server error",
            ErrorType::Timeout => "Request timed out",
            ErrorType::Overloaded => "Overloaded",
        }
    }

    /// `{"type", "message"}`: the inner error object.
    pub fn object(self, message: &str) -> Value {
        json!({"type": self.as_str(), "message": message})
    }
}

/// An error answer. Its `request_id` is filled in by the layer that names
/// every response (see `routes`), which finds the error in the response's
/// extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorType,
    pub message: String,
    /// Extra response headers (`retry-after`, rate-limit headers).
    pub headers: Vec<(&'static str, String)>,
    /// `error.details.error_code`, when the error names one (a spend cap).
    pub error_code: Option<String>,
}

impl ApiError {
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            headers: Vec::new(),
            error_code: None,
        }
    }

    /// The error with its type's default message.
    pub fn of(kind: ErrorType) -> Self {
        Self::new(kind, kind.default_message())
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InvalidRequest, message)
    }

    /// 404 `not_found_error`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorType::NotFound, message)
    }

    pub fn with_error_code(mut self, code: impl Into<String>) -> Self {
        self.error_code = Some(code.into());
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The body, with the id of the request it answers.
    pub fn body(&self, request_id: Option<&str>) -> Value {
        let mut error = self.kind.object(&self.message);
        if let Some(code) = &self.error_code {
            error["details"] = json!({"error_code": code});
        }
        json!({
            "type": "error",
            "error": error,
            "request_id": request_id,
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body(None))).into_response();
        for (name, value) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static(name), v);
            }
        }
        response.extensions_mut().insert(self);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: every error type serializes to the name the SDK's
    // ErrorObject union discriminates on, and answers its documented status.
    #[test]
    fn error_types_have_the_documented_names_and_statuses() {
        for kind in [
            ErrorType::InvalidRequest,
            ErrorType::Authentication,
            ErrorType::Billing,
            ErrorType::Permission,
            ErrorType::NotFound,
            ErrorType::RequestTooLarge,
            ErrorType::RateLimit,
            ErrorType::Api,
            ErrorType::Timeout,
            ErrorType::Overloaded,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert_eq!(ErrorType::Overloaded.status(), 529);
        let body = ApiError::invalid("requests.3.custom_id: bad").body(Some("req_1"));
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "requests.3.custom_id: bad"}, "request_id": "req_1"})
        );
    }
}

//! One webhook delivery, whichever provider sent it: `POST
//! /webhooks/gemini` (`{"type": "batch.succeeded", "timestamp": …,
//! "data": {"id": …}}`) and `POST /webhooks/openai` (`{"type":
//! "batch.completed", "created_at": …, "data": {"id": "batch_…"}}`). Both
//! sign with Standard Webhooks; only the body's shape differs.

use super::WebhookState;
use crate::metrics::OutcomeLabels;
use crate::operations::service::record_ingest;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::json;
use std::sync::Arc;
use tally_core::operation::{
    PayloadError, WebhookEvent, parse_gemini_webhook, parse_openai_webhook,
};
use tally_core::webhook::{Headers, verify};
use tally_store::StoreError;
use tally_store::operations::{EventSource, IncomingEvent, MAX_EVENT_ID};

/// How one provider's body is read.
type Parser = fn(&[u8]) -> Result<WebhookEvent, PayloadError>;

pub(super) async fn gemini(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    receive(&state, &headers, body, parse_gemini_webhook).await
}

pub(super) async fn openai(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    receive(&state, &headers, body, parse_openai_webhook).await
}

async fn receive(state: &WebhookState, headers: &HeaderMap, body: Body, parse: Parser) -> Response {
    let (status, outcome, reply) = handle(state, headers, body, parse).await;
    state
        .metrics
        .webhook_requests
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
    (status, axum::Json(reply)).into_response()
}

type Answer = (StatusCode, &'static str, serde_json::Value);

fn refuse(status: StatusCode, outcome: &'static str, error: impl std::fmt::Display) -> Answer {
    (status, outcome, json!({ "error": error.to_string() }))
}

async fn handle(state: &WebhookState, headers: &HeaderMap, body: Body, parse: Parser) -> Answer {
    let id_for_logs = header_text(headers, "webhook-id")
        .map(|id| id.chars().take(64).collect::<String>())
        .unwrap_or_default();

    // 1. Size, before reading more than the limit.
    let limit = state.max_body_bytes;
    let declared = header_text(headers, header::CONTENT_LENGTH.as_str())
        .and_then(|len| len.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        tracing::warn!(webhook_id = %id_for_logs, limit, "webhook refused: body too large");
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("body is larger than {limit} bytes"),
        );
    }
    let bytes = match read_limited(body, limit).await {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => {
            tracing::warn!(webhook_id = %id_for_logs, limit, "webhook refused: body too large");
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("body is larger than {limit} bytes"),
            );
        }
        Err(ReadError::Broken(e)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "malformed",
                format!("cannot read body: {e}"),
            );
        }
    };

    // 2. Authenticity.
    let now = chrono::Utc::now().timestamp();
    let delivery = verify(
        &state.secrets,
        Headers {
            id: header_text(headers, "webhook-id"),
            timestamp: header_text(headers, "webhook-timestamp"),
            signature: header_text(headers, "webhook-signature"),
        },
        &bytes,
        now,
        state.tolerance_secs,
    );
    let event_id = match delivery {
        Ok((id, _timestamp)) => id.to_string(),
        Err(e) => {
            tracing::warn!(webhook_id = %id_for_logs, reason = %e, "webhook refused: not authentic");
            return refuse(StatusCode::UNAUTHORIZED, "unauthorized", e);
        }
    };

    // 3. Shape.
    if event_id.chars().count() > MAX_EVENT_ID {
        return refuse(
            StatusCode::BAD_REQUEST,
            "malformed",
            format!("webhook-id is longer than {MAX_EVENT_ID} characters"),
        );
    }
    let parsed = match parse(&bytes) {
        Ok(parsed) => parsed,
        Err(e) => {
            // Authentic, so the provider sent it: a 4xx would be retried for
            // a day and may get the webhook disabled, and the poller finds
            // the batch's state anyway. Acknowledged, counted and logged
            // with the reason and the start of the body.
            let excerpt: String = String::from_utf8_lossy(&bytes).chars().take(256).collect();
            tracing::warn!(webhook_id = %id_for_logs, reason = %e, body = %excerpt, "authentic webhook not understood; acknowledged and ignored");
            return (
                StatusCode::OK,
                "unparseable",
                json!({"verdict": "ignored", "reason": e.to_string()}),
            );
        }
    };

    // 4. The reducer.
    let event = IncomingEvent {
        operation: parsed.operation.clone(),
        source: EventSource::Webhook,
        event_id: Some(event_id),
        raw_state: parsed.raw_type.clone(),
        event: parsed.op_event(),
        output_file: parsed.output_file,
        error_code: parsed.error_code,
        error_message: parsed.error_message,
    };
    match state.store.ingest_event(&event).await {
        Ok(result) => {
            record_ingest(&state.metrics, &event, &result);
            (
                StatusCode::OK,
                "accepted",
                json!({
                    "operation": format!("operations/{}", event.operation),
                    "verdict": result.verdict().as_str(),
                    "reason": result.decision.reason().map_or("", |r| r.as_str()),
                    "state": result.operation.as_ref().map(|op| op.state.as_str()),
                    "sequence": result.sequence,
                }),
            )
        }
        Err(e @ (StoreError::Unavailable(_) | StoreError::Aborted(_))) => {
            tracing::warn!(webhook_id = %id_for_logs, error = %e, "webhook not stored; the sender will retry");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "temporarily unable to store the event; retry later",
            )
        }
        Err(e) => {
            let error_id = uuid::Uuid::new_v4();
            tracing::error!(webhook_id = %id_for_logs, error = %e, %error_id, "webhook not stored");
            refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                format!("internal error (logged as {error_id})"),
            )
        }
    }
}

/// A header as text; absent or not visible ASCII counts as missing.
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

enum ReadError {
    TooLarge,
    Broken(axum::Error),
}

/// Reads the body, stopping as soon as it passes `limit` bytes.
async fn read_limited(body: Body, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut stream = body.into_data_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(ReadError::Broken)?;
        if out.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

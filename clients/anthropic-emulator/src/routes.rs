//! The HTTP surface: the router; the layers that name every response
//! (`request-id`), check the key (`x-api-key` or a bearer token) and the
//! `anthropic-version` header; and thin handlers that decode a request,
//! call one service function and encode the answer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use crate::config::API_VERSIONS;
use crate::error::{ApiError, ErrorType};
use crate::page::Page;
use crate::requests::MAX_BODY_BYTES;
use crate::service::Shared;

type AppState = State<Arc<Shared>>;

pub fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/batches", post(create).get(list))
        .route("/v1/messages/batches/{id}", get(retrieve).delete(delete))
        .route("/v1/messages/batches/{id}/cancel", post(cancel))
        .route("/v1/messages/batches/{id}/results", get(results))
        // The key is checked first, then the version.
        .route_layer(middleware::from_fn(require_version))
        .route_layer(middleware::from_fn_with_state(shared.clone(), require_key))
        .route_layer(middleware::from_fn(emulator_kit::requests::name_route));
    Router::new()
        .merge(api)
        .merge(emulator_kit::control::routes::<Shared>(
            |reason| ApiError::invalid(reason).into_response(),
            serde_json::json!({"ok": true}),
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), name_request))
        .with_state(shared)
}

/// Gives every response a `request-id` header, and an error's body the
/// same `request_id`.
async fn name_request(State(shared): AppState, request: Request, next: Next) -> Response {
    let id = shared.next_request_id();
    let response = next.run(request).await;
    let mut response = match response.extensions().get::<ApiError>().cloned() {
        Some(error) => {
            let (parts, _) = response.into_parts();
            Response::from_parts(parts, Body::from(error.body(Some(&id)).to_string()))
        }
        None => response,
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("request-id", v);
    }
    response
}

/// `x-api-key: KEY` or `Authorization: Bearer KEY` (the SDK sends one or
/// the other).
fn key_of(headers: &HeaderMap) -> Option<&str> {
    let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    api_key.or(bearer).map(str::trim).filter(|k| !k.is_empty())
}

async fn require_key(State(shared): AppState, request: Request, next: Next) -> Response {
    match key_of(request.headers()) {
        None => {
            ApiError::new(ErrorType::Authentication, "x-api-key header is required").into_response()
        }
        Some(k) if !shared.api_keys.iter().any(|a| a == k) => {
            ApiError::of(ErrorType::Authentication).into_response()
        }
        Some(_) => next.run(request).await,
    }
}

async fn require_version(request: Request, next: Next) -> Response {
    let version = request
        .headers()
        .get("anthropic-version")
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    match version {
        None => ApiError::invalid("anthropic-version: header is required").into_response(),
        Some(v) if !API_VERSIONS.contains(&v.as_str()) => {
            ApiError::invalid(format!("anthropic-version: \"{v}\" is not a valid version"))
                .into_response()
        }
        Some(_) => next.run(request).await,
    }
}

/// `POST /v1/messages`: one synchronous request.
async fn messages(State(shared): AppState, body: Bytes) -> Result<Response, ApiError> {
    let params: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    Ok(emulator_kit::serve::even_if_abandoned(async move { shared.online(params).await }).await)
}

fn json(value: Value) -> Response {
    axum::Json(value).into_response()
}

async fn create(
    State(shared): AppState,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A declared length over the limit is refused before the body is read.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(shared.too_large());
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| shared.too_large())?;
    shared
        .create_batch(&bytes)?
        .respond(json, || ApiError::of(ErrorType::Api))
}

async fn retrieve(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    shared.get_batch(&id).map(json)
}

async fn list(
    State(shared): AppState,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let limit = match q.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::invalid("limit: Input should be a valid integer"))?,
        ),
        None => None,
    };
    let page = Page {
        after_id: q.get("after_id").cloned(),
        before_id: q.get("before_id").cloned(),
        limit,
    };
    shared.list_batches(&page).map(json)
}

async fn cancel(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    shared.cancel_batch(&id).map(json)
}

async fn delete(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    shared.delete_batch(&id).map(json)
}

async fn results(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    let text = shared.results(&id)?;
    Ok(([(header::CONTENT_TYPE, "application/binary")], text).into_response())
}

/// Unknown paths and methods.
async fn not_found() -> ApiError {
    ApiError::of(ErrorType::NotFound)
}

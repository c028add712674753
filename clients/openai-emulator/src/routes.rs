//! The HTTP surface: the router, the bearer-key layer, and thin handlers
//! that decode a request, call one service function and encode the answer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use crate::error::ApiError;
use crate::service::{Page, Shared};

/// Uploads may be up to 512 MB.
const MAX_BODY: usize = 512 * 1024 * 1024;

type AppState = State<Arc<Shared>>;
type Params = Query<HashMap<String, String>>;

pub fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/v1/files", post(upload).get(list_files))
        .route("/v1/files/{id}", get(get_file).delete(delete_file))
        .route("/v1/files/{id}/content", get(file_content))
        .route("/v1/batches", post(create_batch).get(list_batches))
        .route("/v1/batches/{id}", get(get_batch))
        .route("/v1/batches/{id}/cancel", post(cancel_batch))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
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
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

async fn require_key(State(shared): AppState, request: Request, next: Next) -> Response {
    let key = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|k| !k.is_empty());
    match key {
        None => ApiError::missing_key().into_response(),
        Some(k) if !shared.api_keys.iter().any(|a| a == k) => {
            ApiError::invalid_key(k).into_response()
        }
        Some(_) => next.run(request).await,
    }
}

fn page(query: &HashMap<String, String>) -> Result<Page, ApiError> {
    let limit = match query.get("limit") {
        Some(l) => Some(l.parse::<usize>().map_err(|_| {
            ApiError::invalid(format!(
                "Invalid 'limit': expected an integer, but got '{l}' instead."
            ))
            .param("limit")
        })?),
        None => None,
    };
    Ok(Page {
        after: query.get("after").cloned(),
        limit,
    })
}

fn json(value: Value) -> Response {
    axum::Json(value).into_response()
}

async fn upload(State(shared): AppState, mut form: Multipart) -> Result<Response, ApiError> {
    let (mut file, mut purpose, mut expires_after) = (None, None, None);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| ApiError::invalid(format!("Invalid multipart body: {e}")))?
    {
        match field.name() {
            Some("file") => {
                let name = field.file_name().unwrap_or("upload").to_owned();
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| ApiError::invalid(e.to_string()))?;
                file = Some((name, bytes.to_vec()));
            }
            Some("purpose") => {
                purpose = Some(
                    field
                        .text()
                        .await
                        .map_err(|e| ApiError::invalid(e.to_string()))?,
                )
            }
            // The SDK writes `expires_after` as bracketed form fields; the
            // anchor can only be `created_at`.
            Some("expires_after[seconds]") => {
                let text = field
                    .text()
                    .await
                    .map_err(|e| ApiError::invalid(e.to_string()))?;
                expires_after = Some(text.trim().parse::<i64>().map_err(|_| {
                    ApiError::invalid(format!(
                        "Invalid 'expires_after.seconds': expected an integer, but got '{text}' instead."
                    ))
                    .param("expires_after.seconds")
                })?);
            }
            _ => {}
        }
    }
    let missing =
        |p: &str| ApiError::invalid(format!("Missing required parameter: '{p}'.")).param(p);
    let (name, bytes) = file.ok_or_else(|| missing("file"))?;
    let purpose = purpose.ok_or_else(|| missing("purpose"))?;
    shared.upload(name, purpose, bytes, expires_after).map(json)
}

async fn list_files(State(shared): AppState, Query(q): Params) -> Result<Response, ApiError> {
    let ascending = q.get("order").is_some_and(|o| o == "asc");
    shared
        .list_files(&page(&q)?, q.get("purpose").map(String::as_str), ascending)
        .map(json)
}

async fn get_file(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    shared.get_file(&id).map(json)
}

async fn delete_file(
    State(shared): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    shared.delete_file(&id).map(json)
}

async fn file_content(
    State(shared): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let bytes = shared.file_content(&id)?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

async fn create_batch(State(shared): AppState, body: Bytes) -> Result<Response, ApiError> {
    let body = body_json(&body)?;
    shared
        .create_batch(&body)?
        .respond(json, ApiError::server_error)
}

/// A request body as JSON, or the API's 400.
fn body_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request. ({e})"
        ))
    })
}

async fn chat_completions(State(shared): AppState, body: Bytes) -> Result<Response, ApiError> {
    online(shared, "/v1/chat/completions", &body).await
}

async fn responses(State(shared): AppState, body: Bytes) -> Result<Response, ApiError> {
    online(shared, "/v1/responses", &body).await
}

/// A synchronous request to `endpoint`, answered even if the caller leaves.
async fn online(
    shared: Arc<Shared>,
    endpoint: &'static str,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let body = body_json(body)?;
    Ok(
        emulator_kit::serve::even_if_abandoned(async move { shared.online(endpoint, body).await })
            .await,
    )
}

async fn get_batch(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    shared.get_batch(&id).map(json)
}

async fn list_batches(State(shared): AppState, Query(q): Params) -> Result<Response, ApiError> {
    shared.list_batches(&page(&q)?).map(json)
}

async fn cancel_batch(
    State(shared): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    shared.cancel_batch(&id).map(json)
}

/// Unknown paths (and methods the API has not, like deleting a batch),
/// counted: a client at a wrong base URL shows in the stats.
async fn not_found(State(shared): AppState, request: Request) -> ApiError {
    shared.count_unknown_route();
    ApiError::not_found(format!(
        "Invalid URL ({} {})",
        request.method(),
        request.uri().path()
    ))
}

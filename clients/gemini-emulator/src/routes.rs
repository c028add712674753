//! The HTTP surface: the router, the API-key layer, and thin handlers that
//! decode a request, call one service function and encode the answer.
//!
//! Google's custom methods (`…/files/{id}:download`, `…/batches/{id}:cancel`,
//! `…/models/{model}:batchGenerateContent`) arrive as one path segment, so a
//! handler splits the segment at its last `:`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use crate::batches::BatchKind;
use crate::error::ApiError;
use crate::service::{Shared, UploadStep};

/// Uploads may be large JSONL files.
const MAX_BODY: usize = 1 << 30;

type AppState = State<Arc<Shared>>;
type Params = Query<HashMap<String, String>>;

/// The API versions served. The SDKs default to `v1` (python-genai's
/// `GOOGLE_AI_API_DEFAULT_VERSION`), older clients and the docs use `v1beta`;
/// both answer alike.
pub const API_VERSIONS: [&str; 2] = ["v1", "v1beta"];

/// The whole router: the Gemini surface behind the API key, the emulator's
/// own `/_emulator/*` endpoints open.
pub fn router(shared: Arc<Shared>) -> Router {
    let mut api = Router::new();
    for v in API_VERSIONS {
        api = api
            .route(&format!("/upload/{v}/files"), post(upload))
            .route(&format!("/{v}/files"), get(list_files))
            .route(
                &format!("/{v}/files/{{name}}"),
                get(get_file).delete(delete_file),
            )
            .route(&format!("/download/{v}/files/{{name}}"), get(download_only))
            .route(&format!("/{v}/models/{{model}}"), post(model_method))
            .route(&format!("/{v}/batches"), get(list_batches))
            .route(
                &format!("/{v}/batches/{{name}}"),
                get(get_batch).post(batch_method).delete(delete_batch),
            );
    }
    let api = api
        .route_layer(middleware::from_fn_with_state(shared.clone(), require_key))
        .route_layer(middleware::from_fn(emulator_kit::requests::name_route));
    Router::new()
        .merge(api)
        .merge(emulator_kit::control::routes::<Shared>(
            |reason| ApiError::invalid(reason).into_response(),
            serde_json::json!({}),
        ))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// Every API call needs the key, as the `x-goog-api-key` header or `?key=`,
/// except the calls of a resumable upload session: its URL (with the
/// `upload_id`) is what authorizes them, and the SDKs send no key there.
async fn require_key(State(shared): AppState, request: Request, next: Next) -> Response {
    let query = request.uri().query().unwrap_or("");
    let pairs = || query.split('&').filter_map(|pair| pair.split_once('='));
    if request.uri().path().starts_with("/upload/") && pairs().any(|(k, _)| k == "upload_id") {
        return next.run(request).await;
    }
    let from_header = request
        .headers()
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let from_query = pairs()
        .find(|(k, _)| *k == "key")
        .map(|(_, v)| v.to_owned());
    match from_header.or(from_query) {
        None => ApiError::new(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
        )
        .into_response(),
        Some(key) if key != shared.api_key => ApiError::api_key_invalid().into_response(),
        Some(_) => next.run(request).await,
    }
}

/// The base URL as the client reached us (so upload URLs work behind any
/// host name), falling back to the bound address.
fn base_url(shared: &Shared, headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|host| format!("http://{host}"))
        .unwrap_or_else(|| shared.served.base_url.clone())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("Invalid JSON payload received. {e}")))
}

fn json_response(value: Value) -> Response {
    axum::Json(value).into_response()
}

fn with_upload_headers(mut response: Response, pairs: &[(&'static str, String)]) -> Response {
    for (name, value) in pairs {
        if let Ok(v) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, v);
        }
    }
    response
}

/// `POST /upload/{version}/files`: starts a resumable upload, or (with
/// `?upload_id=`) uploads/finalizes/queries one.
async fn upload(
    State(shared): AppState,
    uri: Uri,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let commands: Vec<String> = header_str(&headers, "x-goog-upload-command")
        .unwrap_or("")
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    let has = |c: &str| commands.iter().any(|x| x == c);
    let Some(upload_id) = query.get("upload_id") else {
        if !header_str(&headers, "x-goog-upload-protocol")
            .is_some_and(|p| p.eq_ignore_ascii_case("resumable"))
            || !has("start")
        {
            return Err(ApiError::invalid(
                "the emulator supports resumable uploads only (X-Goog-Upload-Protocol: resumable, X-Goog-Upload-Command: start)",
            ));
        }
        let declared = header_str(&headers, "x-goog-upload-header-content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| ApiError::invalid("X-Goog-Upload-Header-Content-Length is required"))?;
        let mime = header_str(&headers, "x-goog-upload-header-content-type")
            .unwrap_or("application/octet-stream")
            .to_owned();
        let meta = parse_json(&body)?;
        let display_name = meta
            .get("file")
            .and_then(|f| f.get("display_name").or_else(|| f.get("displayName")))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = shared.start_upload(display_name, mime, declared)?;
        let url = format!(
            "{}{}?upload_id={id}&upload_protocol=resumable",
            base_url(&shared, &headers),
            uri.path()
        );
        return Ok(with_upload_headers(
            StatusCode::OK.into_response(),
            &[
                ("x-goog-upload-control-url", url.clone()),
                ("x-goog-upload-url", url),
                ("x-goog-upload-status", "active".to_owned()),
                ("x-goog-upload-chunk-granularity", "8388608".to_owned()),
            ],
        ));
    };
    if has("query") {
        let received = shared.upload_received(upload_id)?;
        return Ok(with_upload_headers(
            StatusCode::OK.into_response(),
            &[
                ("x-goog-upload-status", "active".to_owned()),
                ("x-goog-upload-size-received", received.to_string()),
            ],
        ));
    }
    if !has("upload") && !has("finalize") {
        return Err(ApiError::invalid(
            "X-Goog-Upload-Command must be `upload`, `finalize`, `upload, finalize` or `query`",
        ));
    }
    let offset = match header_str(&headers, "x-goog-upload-offset") {
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::invalid("X-Goog-Upload-Offset must be a number"))?,
        ),
        None => None,
    };
    let base = base_url(&shared, &headers);
    let step = shared.upload_step(
        upload_id,
        offset,
        &body,
        has("upload"),
        has("finalize"),
        &base,
    )?;
    Ok(match step {
        UploadStep::Active { received } => with_upload_headers(
            StatusCode::OK.into_response(),
            &[
                ("x-goog-upload-status", "active".to_owned()),
                ("x-goog-upload-size-received", received.to_string()),
            ],
        ),
        UploadStep::Final(file) | UploadStep::FinalErrorBody(file) => with_upload_headers(
            json_response(file),
            &[("x-goog-upload-status", "final".to_owned())],
        ),
    })
}

/// `GET /{version}/files/{id}` or `GET /{version}/files/{id}:download?alt=media`.
async fn get_file(
    State(shared): AppState,
    Path(name): Path<String>,
    Query(query): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    match name.rsplit_once(':') {
        Some((id, "download")) => download(&shared, id, &query),
        Some(_) => Err(ApiError::not_found(format!(
            "unknown method on files/{name}"
        ))),
        None => Ok(json_response(
            shared.get_file(&name, &base_url(&shared, &headers))?,
        )),
    }
}

/// `GET /download/{version}/files/{id}:download?alt=media`.
async fn download_only(
    State(shared): AppState,
    Path(name): Path<String>,
    Query(query): Params,
) -> Result<Response, ApiError> {
    match name.rsplit_once(':') {
        Some((id, "download")) => download(&shared, id, &query),
        _ => Err(ApiError::not_found(format!(
            "no download method on files/{name}"
        ))),
    }
}

fn download(
    shared: &Shared,
    id: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    if query.get("alt").map(String::as_str) != Some("media") {
        return Err(ApiError::invalid("downloads need `alt=media`"));
    }
    let (mime, bytes) = shared.download(id)?;
    let mut response = bytes.into_response();
    if let Ok(v) = HeaderValue::from_str(&mime) {
        response.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    Ok(response)
}

/// `POST /{version}/models/{model}:batchGenerateContent` and
/// `…:asyncBatchEmbedContent`.
async fn model_method(
    State(shared): AppState,
    Path(segment): Path<String>,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ApiError> {
    // `/{version}/models/…`: the version the refusal of a model names.
    let version = uri.path().split('/').nth(1).unwrap_or("v1beta").to_owned();
    match segment.rsplit_once(':') {
        Some((model, "batchGenerateContent")) if !model.is_empty() => {
            let body = parse_json(&body)?;
            shared
                .create_batch(&version, model, &body, BatchKind::Generate)?
                .respond(json_response, lost_answer)
        }
        Some((model, "generateContent")) if !model.is_empty() => {
            let body = parse_json(&body)?;
            let (shared, model) = (shared.clone(), model.to_owned());
            Ok(emulator_kit::serve::even_if_abandoned(async move {
                shared.online(&version, &model, body).await
            })
            .await)
        }
        Some((model, "asyncBatchEmbedContent")) if !model.is_empty() => {
            let body = parse_json(&body)?;
            shared
                .create_batch(&version, model, &body, BatchKind::Embed)?
                .respond(json_response, lost_answer)
        }
        _ => Err(ApiError::not_found(format!(
            "models/{segment} is not supported by the emulator"
        ))),
    }
}

/// A create whose answer the fault lost: the provider's 500.
fn lost_answer() -> ApiError {
    ApiError::new(500, "Internal error encountered.")
}

/// `GET /{version}/batches/{id}`.
async fn get_batch(State(shared): AppState, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(json_response(shared.get_batch(&id)?))
}

/// `DELETE /{version}/batches/{id}`: the operation is forgotten (GET then
/// answers 404) but, as the API documents for `operations.delete`, the
/// batch is not cancelled: it runs on and is billed.
async fn delete_batch(
    State(shared): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    shared.delete_batch(&id)?;
    Ok(json_response(serde_json::json!({})))
}

/// `DELETE /{version}/files/{id}`.
async fn delete_file(
    State(shared): AppState,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    shared.delete_file(&id)?;
    Ok(json_response(serde_json::json!({})))
}

/// `GET /{version}/files?pageSize=&pageToken=`.
async fn list_files(
    State(shared): AppState,
    Query(query): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (size, token) = page_params(&query)?;
    Ok(json_response(shared.list_files(
        size,
        token,
        &base_url(&shared, &headers),
    )?))
}

/// `POST /{version}/batches/{id}:cancel`.
async fn batch_method(
    State(shared): AppState,
    Path(segment): Path<String>,
) -> Result<Response, ApiError> {
    match segment.rsplit_once(':') {
        Some((id, "cancel")) => Ok(json_response(shared.cancel_batch(id)?)),
        _ => Err(ApiError::not_found(format!(
            "batches/{segment} is not supported by the emulator"
        ))),
    }
}

/// The `pageSize` and `pageToken` of a list call.
fn page_params(query: &HashMap<String, String>) -> Result<(Option<i64>, Option<&str>), ApiError> {
    let page_size = match query.get("pageSize").or_else(|| query.get("page_size")) {
        Some(v) => Some(
            v.parse::<i64>()
                .map_err(|_| ApiError::invalid("pageSize must be an integer"))?,
        ),
        None => None,
    };
    let token = query
        .get("pageToken")
        .or_else(|| query.get("page_token"))
        .map(String::as_str);
    Ok((page_size, token))
}

/// `GET /{version}/batches?pageSize=&pageToken=`.
async fn list_batches(State(shared): AppState, Query(query): Params) -> Result<Response, ApiError> {
    let (page_size, token) = page_params(&query)?;
    Ok(json_response(shared.list_batches(page_size, token)?))
}

async fn not_found() -> ApiError {
    ApiError::not_found("The requested URL was not found on this server.")
}

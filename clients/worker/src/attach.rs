//! A row's media, sent the way the provider takes it: each `{"media": …}`
//! part of a request becomes the provider's part for the file's bytes.
//!
//! Gemini takes a file two ways: inline (`inlineData`: base64 in the
//! request, counted against its size) or uploaded through the Files API and
//! referenced (`fileData`: the file's URI; 2 GB a file, 20 GiB a project,
//! deleted after 48 hours). A file up to `--media-inline-max` bytes goes
//! inline; a larger one is uploaded once and referenced by every attempt
//! and every row that sends the same bytes while it lives: tally's media
//! register (LookupMediaUploads / RecordMediaUpload, by provider account
//! and SHA-256) says which uploads exist, and one is reused only while it
//! has `--media-min-life` left (a batch may take a day). A new upload is
//! made only while the account's uploads stay under
//! `--provider-storage-bytes`; otherwise the row waits (released, no
//! attempt) for the janitor to free room.
//!
//! OpenAI takes media inline only: an image as an `image_url` part holding
//! a `data:` URL, a PDF as a `file` part with its `file_data` (its batch
//! file may hold 200 MB); other types are refused for the row.
//!
//! Within one job each file is read once ([`JobMedia`]).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{Value, json};
use tally_client::with_retry;
use tally_core::media::MediaRef;
use tally_core::provider::Api;
use tally_proto::v1 as pb;

use crate::ctx::Ctx;
use crate::media::MediaFail;

/// Why a row's media could not be attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachFail {
    /// The file cannot be used (the row is PERMANENT, `media_unreadable`).
    Unreadable(String),
    /// Not this time (RETRYABLE, `media_unavailable`).
    Unavailable(String),
    /// The provider's file storage is full: the row waits, no attempt.
    StorageFull(String),
}

/// What one job's media have become so far: the provider part of each
/// file (by SHA-256), and the uploads its batch references.
#[derive(Debug, Default)]
pub struct JobMedia {
    parts: HashMap<String, Value>,
    /// Uploads referenced (for MarkCreating, so none is deleted while the
    /// job is open).
    pub uploads: BTreeSet<String>,
}

/// Replaces every `{"media": …}` part of `request` (Gemini's
/// `contents[].parts`, OpenAI's `messages[].content`) with the provider's
/// part for its bytes.
pub async fn attach(
    ctx: &Ctx,
    request: &mut Value,
    media: &mut JobMedia,
) -> Result<(), AttachFail> {
    let (turns, field) = match ctx.provider.api() {
        Api::OpenAi | Api::Anthropic => ("messages", "content"),
        Api::Gemini => ("contents", "parts"),
    };
    let Some(contents) = request.get_mut(turns).and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for content in contents {
        let Some(parts) = content.get_mut(field).and_then(Value::as_array_mut) else {
            continue;
        };
        for part in parts.iter_mut() {
            let Some(m) = part.get("media") else {
                continue;
            };
            let r =
                tally_core::media::parse(m).map_err(|e| AttachFail::Unreadable(e.to_string()))?;
            *part = provider_part(ctx, &r, media).await?;
        }
    }
    Ok(())
}

/// The provider's part for `r`: Gemini's inline, or a reference to its
/// upload (an upload of the same bytes with life left, or a new one);
/// OpenAI's inline.
async fn provider_part(ctx: &Ctx, r: &MediaRef, media: &mut JobMedia) -> Result<Value, AttachFail> {
    if let Some(p) = media.parts.get(&r.sha256) {
        return Ok(p.clone());
    }
    let api = ctx.provider.api();
    if api != Api::Gemini {
        inline_accepts(api, r)?;
    }
    // Read (and checked against its hash) first: a small file goes inline
    // without asking the register.
    let bytes = ctx.media.read(r).await.map_err(|e| match e {
        MediaFail::Permanent(m) => AttachFail::Unreadable(m),
        MediaFail::Transient(m) => AttachFail::Unavailable(m),
    })?;
    let part = if api == Api::OpenAi {
        openai_part(r, &bytes)
    } else if api == Api::Anthropic {
        anthropic_part(r, &bytes)
    } else if bytes.len() as u64 <= ctx.args.media_inline_max {
        json!({"inlineData": {
            "mimeType": r.mime_type,
            "data": base64::engine::general_purpose::STANDARD.encode(&bytes),
        }})
    } else {
        let found = lookup(ctx, &r.sha256).await?;
        let uri = match reusable(ctx, r, &found) {
            Some(uri) => uri,
            None => upload(ctx, r, bytes, found.stored_bytes.max(0) as u64).await?,
        };
        media.uploads.insert(r.sha256.clone());
        file_part(&r.mime_type, &uri)
    };
    media.parts.insert(r.sha256.clone(), part.clone());
    Ok(part)
}

/// Whether `api` takes `r` inline in a request (images and PDFs).
fn inline_accepts(api: Api, r: &MediaRef) -> Result<(), AttachFail> {
    if r.mime_type.starts_with("image/") || r.mime_type == "application/pdf" {
        return Ok(());
    }
    let (who, request) = match api {
        Api::Anthropic => ("Anthropic", "a message"),
        Api::OpenAi | Api::Gemini => ("OpenAI", "a chat completion"),
    };
    Err(AttachFail::Unreadable(format!(
        "{}: {who} takes images and PDFs in {request}, not {}",
        r.uri, r.mime_type
    )))
}

/// Anthropic's content block for `r`'s bytes: an image, or a PDF
/// document, inline as base64.
fn anthropic_part(r: &MediaRef, bytes: &[u8]) -> Value {
    let kind = if r.mime_type == "application/pdf" {
        "document"
    } else {
        "image"
    };
    json!({"type": kind, "source": {
        "type": "base64",
        "media_type": r.mime_type,
        "data": base64::engine::general_purpose::STANDARD.encode(bytes),
    }})
}

/// OpenAI's inline part for `r`'s bytes.
fn openai_part(r: &MediaRef, bytes: &[u8]) -> Value {
    let data = format!(
        "data:{};base64,{}",
        r.mime_type,
        base64::engine::general_purpose::STANDARD.encode(bytes)
    );
    if r.mime_type == "application/pdf" {
        let name = r.uri.rsplit('/').next().unwrap_or("document.pdf");
        json!({"type": "file", "file": {"filename": name, "file_data": data}})
    } else {
        json!({"type": "image_url", "image_url": {"url": data}})
    }
}

fn file_part(mime: &str, uri: &str) -> Value {
    json!({"fileData": {"mimeType": mime, "fileUri": uri}})
}

/// The URI of a live upload of `r`'s bytes with enough life left, if the
/// register has one.
fn reusable(ctx: &Ctx, r: &MediaRef, found: &pb::LookupMediaUploadsResponse) -> Option<String> {
    let u = found.uploads.iter().find(|u| u.sha256 == r.sha256)?;
    let alive_until = u
        .expire_time
        .and_then(|t| SystemTime::try_from(t).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let lasts = alive_until
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    (lasts >= ctx.args.media_min_life && u.mime_type == r.mime_type).then(|| u.uri.clone())
}

async fn lookup(ctx: &Ctx, sha256: &str) -> Result<pb::LookupMediaUploadsResponse, AttachFail> {
    let req = pb::LookupMediaUploadsRequest {
        parent: ctx.ledger.clone(),
        provider_account: ctx.account.clone(),
        sha256: vec![sha256.to_owned()],
    };
    with_retry(ctx.retry, "LookupMediaUploads", || {
        let mut c = ctx.clients.jobs.clone();
        let req = req.clone();
        async move { c.lookup_media_uploads(req).await }
    })
    .await
    .map(tonic::Response::into_inner)
    .map_err(|s| AttachFail::Unavailable(format!("tally's media register: {}", s.message())))
}

/// Uploads `r`'s bytes (within the account's storage) and records the
/// upload; answers the URI requests reference.
async fn upload(
    ctx: &Ctx,
    r: &MediaRef,
    bytes: bytes::Bytes,
    stored: u64,
) -> Result<String, AttachFail> {
    let limit = ctx.args.provider_storage_bytes;
    if stored.saturating_add(bytes.len() as u64) > limit {
        return Err(AttachFail::StorageFull(format!(
            "{}: the provider account's uploads take {stored} bytes, and {} more would pass --provider-storage-bytes ({limit})",
            r.uri,
            bytes.len()
        )));
    }
    let display = format!("tally-media/{}", r.sha256);
    let Some(gemini) = ctx.provider.gemini() else {
        return Err(AttachFail::Unavailable(format!(
            "{}: this provider takes no media uploads",
            r.uri
        )));
    };
    let mut file = gemini
        .upload_media(&display, &r.mime_type, &bytes)
        .await
        .map_err(|e| gemini_fail(&r.uri, &e))?;
    // Large media (video) are PROCESSING a while before they can be used.
    for _ in 0..60 {
        if file["state"].as_str() != Some("PROCESSING") {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let name = file["name"].as_str().unwrap_or_default().to_owned();
        file = gemini
            .get_file(&name)
            .await
            .map_err(|e| gemini_fail(&r.uri, &e))?;
    }
    if file["state"].as_str() == Some("FAILED") {
        return Err(AttachFail::Unreadable(format!(
            "{}: the provider could not process the file: {}",
            r.uri, file["error"]
        )));
    }
    let (Some(name), Some(uri)) = (file["name"].as_str(), file["uri"].as_str()) else {
        return Err(AttachFail::Unavailable(format!(
            "{}: the upload answered no file name and URI: {file}",
            r.uri
        )));
    };
    let expire = file["expirationTime"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .unwrap_or_else(|| SystemTime::now() + DEFAULT_FILE_LIFE);
    let record = pb::RecordMediaUploadRequest {
        parent: ctx.ledger.clone(),
        upload: Some(pb::MediaUpload {
            provider_account: ctx.account.clone(),
            sha256: r.sha256.clone(),
            file: name.to_owned(),
            uri: uri.to_owned(),
            mime_type: r.mime_type.clone(),
            size_bytes: bytes.len() as i64,
            expire_time: Some(prost_types::Timestamp::from(expire)),
            ..Default::default()
        }),
    };
    if let Err(s) = with_retry(ctx.retry, "RecordMediaUpload", || {
        let mut c = ctx.clients.jobs.clone();
        let req = record.clone();
        async move { c.record_media_upload(req).await }
    })
    .await
    {
        // Used anyway; only its reuse is lost (the provider expires it).
        tracing::warn!(file = name, error = %s, "media upload not recorded");
    }
    tracing::debug!(file = name, sha256 = %r.sha256, bytes = bytes.len(), "media uploaded");
    Ok(uri.to_owned())
}

/// How long the provider keeps a file when its answer does not say
/// (Gemini: 48 hours).
const DEFAULT_FILE_LIFE: Duration = Duration::from_secs(48 * 3600);

fn gemini_fail(uri: &str, e: &crate::provider::ProviderError) -> AttachFail {
    use crate::provider::ProviderError::Http;
    let why = format!("{uri}: the upload failed: {e}");
    match e {
        // The project's file storage is full (quota FileStorageBytesPerProject).
        Http {
            code: 429,
            quota_ids,
            ..
        } if quota_ids.iter().any(|q| q.contains("FileStorage")) => AttachFail::StorageFull(why),
        Http { code, .. } if (400..500).contains(code) && *code != 408 && *code != 429 => {
            AttachFail::Unreadable(why)
        }
        _ => AttachFail::Unavailable(why),
    }
}

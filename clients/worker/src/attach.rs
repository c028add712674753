//! A row's media, sent the way the provider takes it: each `{"media": …}`
//! part of a request becomes the provider's part for the file's bytes
//! (its wire's [`inline_part`](crate::provider::Wire::inline_part), or
//! a reference to an upload).
//!
//! A provider that takes uploads ([`uploads_media`](crate::provider::Wire::uploads_media):
//! Gemini's Files API, 2 GB a file, 20 GiB a project, deleted after 48
//! hours) gets a file up to `--media-inline-max` bytes inline and a larger
//! one uploaded once and referenced by every attempt and every row that
//! sends the same bytes while it lives: tally's media register
//! (LookupMediaUploads / RecordMediaUpload, by provider account and
//! SHA-256) says which uploads exist, and one is reused only while it has
//! `--media-min-life` left (a batch may take a day). A new upload is made
//! only while the account's uploads stay under `--provider-storage-bytes`;
//! otherwise the row waits (released, no attempt) for the janitor to free
//! room. The others take media inline only, and refuse the types they do
//! not take for the row.
//!
//! Within one job each file is read once ([`JobMedia`]).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tally_client::with_retry;
use tally_core::media::MediaRef;
use tally_proto::v1 as pb;

use crate::ctx::Ctx;
use crate::media::MediaFail;
use crate::provider::types::Upload;

/// Why a row's media could not be attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachFail {
    /// The file cannot be used (the row is PERMANENT, `media_unreadable`).
    Unreadable(String),
    /// Not this time (RETRYABLE, `media_unavailable`).
    Unavailable(String),
    /// The provider's file storage is full: the row waits, no attempt.
    StorageFull(String),
    /// This worker cannot read the file (its flags): the row goes back with
    /// no attempt and the worker stops (see `Ctx::stop_for_settings`).
    NotHere(String),
    /// The provider refused the upload for the account's or the address's
    /// sake (a refused key, no permission, a base URL that is not the
    /// API): no fault of the file's, so the row goes back with no attempt
    /// and the worker claims nothing for `--refusal-cooldown`.
    Refused(String),
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

/// Replaces every `{"media": …}` part of `request` (in the turns and
/// parts its provider's wire names) with the provider's part for its
/// bytes.
pub async fn attach(
    ctx: &Ctx,
    request: &mut Value,
    media: &mut JobMedia,
) -> Result<(), AttachFail> {
    let slots = ctx.provider.wire().media_slots();
    let Some(contents) = request.get_mut(slots.turns).and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for content in contents {
        let Some(parts) = content.get_mut(slots.parts).and_then(Value::as_array_mut) else {
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

/// The provider's part for `r`: inline, or (where the provider takes
/// uploads and the file is larger than `--media-inline-max`) a reference
/// to its upload: an upload of the same bytes with life left, or a new one.
async fn provider_part(ctx: &Ctx, r: &MediaRef, media: &mut JobMedia) -> Result<Value, AttachFail> {
    if let Some(p) = media.parts.get(&r.sha256) {
        return Ok(p.clone());
    }
    let wire = ctx.provider.wire();
    if let Some(why) = wire.refuses_media(r) {
        return Err(AttachFail::Unreadable(why));
    }
    // Read (and checked against its hash) first: a small file goes inline
    // without asking the register.
    let bytes = ctx.media.read(r).await.map_err(|e| match e {
        MediaFail::Permanent(m) => AttachFail::Unreadable(m),
        MediaFail::Transient(m) => AttachFail::Unavailable(m),
        MediaFail::NotHere(m) => AttachFail::NotHere(m),
    })?;
    let part = if !wire.uploads_media() || bytes.len() as u64 <= ctx.args.media_inline_max {
        // Not kept for the job's other rows: the bytes are in the batch
        // once written, and a second copy of every inline file would
        // double what the job holds. The same file again is read again.
        return Ok(wire.inline_part(r, &bytes));
    } else {
        let found = lookup(ctx, &r.sha256).await?;
        let uri = match reusable(ctx, r, &found) {
            Some(uri) => uri,
            None => upload(ctx, r, bytes, found.stored_bytes.max(0) as u64).await?,
        };
        media.uploads.insert(r.sha256.clone());
        wire.file_part(r, &uri)
    };
    media.parts.insert(r.sha256.clone(), part.clone());
    Ok(part)
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
            "{}: this team's uploads at the provider account take {stored} bytes, and {} more would pass --provider-storage-bytes ({limit})",
            r.uri,
            bytes.len()
        )));
    }
    let display = format!("tally-media/{}", r.sha256);
    let file = match ctx
        .provider
        .upload_media(&display, &r.mime_type, &bytes)
        .await
        .map_err(|e| upload_fail(&r.uri, &e))?
    {
        Upload::Ready(file) => file,
        Upload::Unusable(why) => {
            return Err(AttachFail::Unreadable(format!(
                "{}: the provider could not process the file: {why}",
                r.uri
            )));
        }
    };
    let (name, uri) = (file.name.as_str(), file.uri.as_str());
    let expire = file
        .expire
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
/// (48 hours, as the Files API documents).
const DEFAULT_FILE_LIFE: Duration = Duration::from_secs(48 * 3600);

fn upload_fail(uri: &str, e: &crate::provider::ProviderError) -> AttachFail {
    use crate::provider::ProviderError::Http;
    let why = format!("{uri}: the upload failed: {e}");
    match e {
        // The project's file storage is full (quota FileStorageBytesPerProject).
        Http {
            code: 429,
            error_codes,
            ..
        } if error_codes.iter().any(|q| q.contains("FileStorage")) => AttachFail::StorageFull(why),
        // Refusals of the caller, not of the file: a key the provider does
        // not take, no permission, no such API at this address.
        Http {
            code: 401 | 403 | 404,
            ..
        } => AttachFail::Refused(why),
        Http {
            code: 400,
            error_codes,
            ..
        } if error_codes.iter().any(|c| c.contains("API_KEY")) => AttachFail::Refused(why),
        Http { code, .. } if (400..500).contains(code) && *code != 408 && *code != 429 => {
            AttachFail::Unreadable(why)
        }
        _ => AttachFail::Unavailable(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderError;

    fn http(code: u16, codes: &[&str]) -> ProviderError {
        ProviderError::Http {
            code,
            message: "m".into(),
            status: String::new(),
            error_codes: codes.iter().map(|c| c.to_string()).collect(),
            retry_after: None,
        }
    }

    // Invariant: an upload refused for the caller's sake (key, permission,
    // address) never makes the row PERMANENT; a refusal of the file does,
    // and what may pass is transient.
    #[test]
    fn uploads_refused_for_the_caller_burn_no_row() {
        let kind = |e: ProviderError| match upload_fail("p.png", &e) {
            AttachFail::Refused(_) => "refused",
            AttachFail::Unreadable(_) => "unreadable",
            AttachFail::Unavailable(_) => "unavailable",
            AttachFail::StorageFull(_) => "full",
            AttachFail::NotHere(_) => "not here",
        };
        for code in [401, 403, 404] {
            assert_eq!(kind(http(code, &[])), "refused", "{code}");
        }
        assert_eq!(kind(http(400, &["API_KEY_INVALID"])), "refused");
        assert_eq!(kind(http(400, &[])), "unreadable");
        assert_eq!(kind(http(413, &[])), "unreadable");
        assert_eq!(kind(http(429, &["FileStorageBytesPerProject"])), "full");
        assert_eq!(kind(http(429, &[])), "unavailable");
        assert_eq!(kind(http(503, &[])), "unavailable");
        assert_eq!(
            kind(ProviderError::Transport("reset".into())),
            "unavailable"
        );
    }
}

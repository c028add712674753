//! The media uploads register's requests: checks and conversions (the
//! register itself is `tally_store::media`).

use crate::edge::status::{invalid, invalid_field};
use crate::edge::wire_convert::timestamp;
use crate::ledger::validate as ledger_validate;
use tally_core::media::{MAX_MIME, valid_file_name, valid_mime, valid_sha256};
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::types::MediaUploadRecord;
use tonic::Status;

pub use tally_core::media::MAX_LOOKUP;
/// Longest provider file name and URI.
const MAX_FILE: usize = 512;
const MAX_URI: usize = 2048;
/// Largest file size taken (1 TiB: above any provider's limit).
const MAX_SIZE: i64 = 1 << 40;

fn account(field: &str, a: &str, v: &mut Violations) {
    if let Some(why) = tally_core::provider::account_problem(a) {
        v.add(field, why);
    }
}

fn sha256(field: &str, h: &str, v: &mut Violations) -> String {
    if !valid_sha256(h) {
        v.add(field, "must be a SHA-256: 64 hex digits");
    }
    h.to_ascii_lowercase()
}

/// LookupMediaUploads: the ledger, the account, the hashes (lowercased).
pub fn lookup(req: &pb::LookupMediaUploadsRequest) -> Result<(String, Vec<String>), Status> {
    let ledger = ledger_validate::ledger("parent", &req.parent)?;
    let mut v = Violations::new();
    account("provider_account", &req.provider_account, &mut v);
    if req.sha256.len() > MAX_LOOKUP {
        v.add("sha256", format!("at most {MAX_LOOKUP} hashes"));
    }
    let hashes = req
        .sha256
        .iter()
        .take(MAX_LOOKUP)
        .enumerate()
        .map(|(i, h)| sha256(&format!("sha256[{i}]"), h, &mut v))
        .collect();
    v.finish().map_err(invalid)?;
    Ok((ledger, hashes))
}

/// RecordMediaUpload: the ledger and the upload.
pub fn record(req: &pb::RecordMediaUploadRequest) -> Result<(String, MediaUploadRecord), Status> {
    let ledger = ledger_validate::ledger("parent", &req.parent)?;
    let mut v = Violations::new();
    let Some(u) = &req.upload else {
        return Err(invalid_field("upload", "is required"));
    };
    account("upload.provider_account", &u.provider_account, &mut v);
    let hash = sha256("upload.sha256", &u.sha256, &mut v);
    if !valid_file_name(&u.file) {
        v.add(
            "upload.file",
            "must be an uploaded file's provider name: files/{id}, file-{id} or file_{id}, the id of letters, digits, - and _",
        );
    }
    if u.uri.is_empty() || u.uri.len() > MAX_URI {
        v.add("upload.uri", format!("must be 1 to {MAX_URI} characters"));
    }
    if !valid_mime(&u.mime_type) {
        v.add(
            "upload.mime_type",
            format!("must be a type/subtype of at most {MAX_MIME} characters"),
        );
    }
    if !(0..=MAX_SIZE).contains(&u.size_bytes) {
        v.add("upload.size_bytes", format!("must be 0 to {MAX_SIZE}"));
    }
    let expire = u
        .expire_time
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos.max(0) as u32));
    if expire.is_none() {
        v.add(
            "upload.expire_time",
            "is required: when the provider deletes the file",
        );
    }
    v.finish().map_err(invalid)?;
    Ok((
        ledger,
        MediaUploadRecord {
            provider_account: u.provider_account.clone(),
            sha256: hash,
            file: u.file.clone(),
            uri: u.uri.clone(),
            mime_type: u.mime_type.to_ascii_lowercase(),
            size_bytes: u.size_bytes,
            expire_time: expire.expect("checked"),
            create_time: chrono::Utc::now(),
            in_use: false,
        },
    ))
}

/// ForgetMediaUpload: the ledger, the account, the hash and the file.
pub fn forget(req: &pb::ForgetMediaUploadRequest) -> Result<(String, String), Status> {
    let ledger = ledger_validate::ledger("parent", &req.parent)?;
    let mut v = Violations::new();
    account("provider_account", &req.provider_account, &mut v);
    let hash = sha256("sha256", &req.sha256, &mut v);
    if req.file.is_empty() || req.file.len() > MAX_FILE {
        v.add("file", format!("must be 1 to {MAX_FILE} characters"));
    }
    v.finish().map_err(invalid)?;
    Ok((ledger, hash))
}

/// MarkCreating's media hashes (lowercased); at most `max`.
pub fn creating_media(hashes: &[String], max: usize, v: &mut Violations) -> Vec<String> {
    if hashes.len() > max {
        v.add("media_sha256", format!("at most {max} hashes"));
    }
    hashes
        .iter()
        .take(max)
        .enumerate()
        .map(|(i, h)| sha256(&format!("media_sha256[{i}]"), h, v))
        .collect()
}

pub fn to_proto(u: &MediaUploadRecord) -> pb::MediaUpload {
    pb::MediaUpload {
        provider_account: u.provider_account.clone(),
        sha256: u.sha256.clone(),
        file: u.file.clone(),
        uri: u.uri.clone(),
        mime_type: u.mime_type.clone(),
        size_bytes: u.size_bytes,
        expire_time: Some(timestamp(u.expire_time)),
        create_time: Some(timestamp(u.create_time)),
        in_use: u.in_use,
    }
}

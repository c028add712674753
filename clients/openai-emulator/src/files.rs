//! Stored files and their `FileObject` JSON (as `types/file_object.py`).

use serde_json::{Value, json};

/// Purposes the Files API accepts on upload.
pub const UPLOAD_PURPOSES: &[&str] = &[
    "assistants",
    "batch",
    "fine-tune",
    "vision",
    "user_data",
    "evals",
];

#[derive(Debug, Clone)]
pub struct StoredFile {
    pub id: String,
    pub filename: String,
    pub purpose: String,
    pub bytes: Vec<u8>,
    pub created_at: i64,
    /// The upload's time in ms (how old it is, for `file_visibility_lag`).
    pub created_at_ms: i64,
    /// When it expires, in ms (`expires_at` is this in seconds); then
    /// every call naming it answers 404, as for a deleted file.
    pub expires_at_ms: Option<i64>,
    /// Creation order, for lists.
    pub seq: u64,
}

/// Input files of purpose `batch` expire this long after their upload
/// unless the upload names `expires_after` (the API reference).
pub const BATCH_FILE_EXPIRY_SECS: i64 = 30 * 24 * 3600;

/// The bounds of an `expires_after.seconds` (1 hour to 30 days).
pub const EXPIRY_SECS: std::ops::RangeInclusive<i64> = 3600..=2_592_000;

impl StoredFile {
    /// Whether it is still stored at `now_ms` (not yet expired).
    pub fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|at| now_ms < at)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.bytes.len(),
            "created_at": self.created_at,
            "expires_at": self.expires_at_ms.map(|ms| ms.div_euclid(1000)),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": null,
        })
    }
}

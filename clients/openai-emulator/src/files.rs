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
    pub expires_at: Option<i64>,
    /// Creation order, for lists.
    pub seq: u64,
}

impl StoredFile {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.bytes.len(),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": null,
        })
    }
}

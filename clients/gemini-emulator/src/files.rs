//! Files and resumable uploads, as plain data: the stored file and how it
//! renders as a Files API `File`, and the upload session protocol (start,
//! upload chunks at an offset, finalize against the declared length).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::batches::rfc3339;

/// Where a file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Uploaded,
    Generated,
}

/// A file held in memory.
#[derive(Debug, Clone)]
pub struct StoredFile {
    /// The id in `files/<id>`.
    pub id: String,
    pub display_name: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
    pub created: DateTime<Utc>,
    pub source: Source,
}

impl StoredFile {
    pub fn name(&self) -> String {
        format!("files/{}", self.id)
    }

    /// The Files API `File` resource.
    pub fn resource(&self, base_url: &str) -> Value {
        let digest = Sha256::digest(&self.bytes);
        let mut file = json!({
            "name": self.name(),
            "mimeType": self.mime_type,
            "sizeBytes": self.bytes.len().to_string(),
            "createTime": rfc3339(self.created),
            "updateTime": rfc3339(self.created),
            "expirationTime": rfc3339(self.created + Duration::hours(48)),
            "sha256Hash": STANDARD.encode(digest),
            "uri": format!("{base_url}/v1beta/files/{}", self.id),
            "state": "ACTIVE",
            "source": match self.source {
                Source::Uploaded => "UPLOADED",
                Source::Generated => "GENERATED",
            },
        });
        if !self.display_name.is_empty() {
            file["displayName"] = json!(self.display_name);
        }
        if self.source == Source::Generated {
            file["downloadUri"] = json!(format!(
                "{base_url}/download/v1beta/files/{}:download?alt=media",
                self.id
            ));
        }
        file
    }
}

/// An upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSession {
    pub display_name: String,
    pub mime_type: String,
    pub declared_len: u64,
    pub received: Vec<u8>,
}

/// A refused upload step; answered 400 INVALID_ARGUMENT.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UploadError {
    #[error("X-Goog-Upload-Offset {given} does not match the {received} bytes received")]
    BadOffset { given: u64, received: u64 },
    #[error("upload finalized with {received} bytes but {declared} were declared")]
    LengthMismatch { declared: u64, received: u64 },
    #[error("upload exceeds the {declared} bytes declared")]
    TooLong { declared: u64 },
}

impl UploadSession {
    pub fn new(display_name: String, mime_type: String, declared_len: u64) -> Self {
        Self {
            display_name,
            mime_type,
            declared_len,
            received: Vec::new(),
        }
    }

    /// Appends a chunk written at `offset` (which must be where the upload
    /// stands).
    pub fn append(&mut self, offset: u64, chunk: &[u8]) -> Result<(), UploadError> {
        let received = self.received.len() as u64;
        if offset != received {
            return Err(UploadError::BadOffset {
                given: offset,
                received,
            });
        }
        if received + chunk.len() as u64 > self.declared_len {
            return Err(UploadError::TooLong {
                declared: self.declared_len,
            });
        }
        self.received.extend_from_slice(chunk);
        Ok(())
    }

    /// Checks that exactly the declared length arrived.
    pub fn check_complete(&self) -> Result<(), UploadError> {
        let received = self.received.len() as u64;
        if received == self.declared_len {
            Ok(())
        } else {
            Err(UploadError::LengthMismatch {
                declared: self.declared_len,
                received,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_protocol_checks_offsets_and_length() {
        let mut s = UploadSession::new("d".into(), "application/jsonl".into(), 6);
        s.append(0, b"abc").unwrap();
        assert_eq!(
            s.append(0, b"def"),
            Err(UploadError::BadOffset {
                given: 0,
                received: 3
            })
        );
        assert_eq!(
            s.check_complete(),
            Err(UploadError::LengthMismatch {
                declared: 6,
                received: 3
            })
        );
        assert_eq!(
            s.append(3, b"defg"),
            Err(UploadError::TooLong { declared: 6 })
        );
        s.append(3, b"def").unwrap();
        s.check_complete().unwrap();
    }

    #[test]
    fn file_resource_has_string_sizes_and_a_hash() {
        let f = StoredFile {
            id: "abc".into(),
            display_name: "input".into(),
            mime_type: "application/jsonl".into(),
            bytes: b"hello".to_vec(),
            created: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            source: Source::Uploaded,
        };
        let r = f.resource("http://h");
        assert_eq!(r["name"], "files/abc");
        assert_eq!(r["sizeBytes"], "5");
        assert_eq!(r["uri"], "http://h/v1beta/files/abc");
        assert_eq!(r["state"], "ACTIVE");
        assert_eq!(r["displayName"], "input");
        assert_eq!(
            r["sha256Hash"],
            "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="
        );
        assert_eq!(r["createTime"], "2023-11-14T22:13:20.000000Z");
    }
}

//! A request's media, as the provider checks them when it runs the batch:
//! a `fileData` part must name a file of the project that is uploaded,
//! ACTIVE and unexpired, with the MIME type it was uploaded as (else the
//! line is an error: PERMISSION_DENIED "…or it may not exist", or
//! INVALID_ARGUMENT); `inlineData` must be base64, and it counts against
//! the request's size (20 MB). The answer mentions each file it saw (its
//! type, size and SHA-256), so a test can tell a row that carried its
//! image from one that did not. Pure.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::files::StoredFile;

/// The provider's limit on one request's size.
pub const MAX_REQUEST_BYTES: usize = 20 * 1024 * 1024;

/// A request with its media replaced by text the answer can mention, and
/// the SHA-256 (hex) of every file it carried.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub request: Value,
    pub media: Vec<String>,
}

/// Why a request's media are refused: the HTTP code of the line's error
/// and its message.
pub type Refusal = (u16, String);

/// A `bytes` field of the API's JSON: standard or URL-safe base64, with
/// or without padding (protobuf's JSON mapping takes all four; the
/// google-genai SDK sends URL-safe).
fn bytes_field(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let bare = text.trim_end_matches('=');
    if bare.contains(['-', '_']) {
        URL_SAFE_NO_PAD.decode(bare)
    } else {
        STANDARD_NO_PAD.decode(bare)
    }
}

/// Checks `request`'s media against `files` (the project's live files, by
/// id) and replaces each media part with a text part describing it.
pub fn resolve(request: &Value, files: &HashMap<String, StoredFile>) -> Result<Resolved, Refusal> {
    let size = request.to_string().len();
    if size > MAX_REQUEST_BYTES {
        return Err((
            400,
            format!("Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes."),
        ));
    }
    let mut out = request.clone();
    let mut media = Vec::new();
    let Some(contents) = out.get_mut("contents").and_then(Value::as_array_mut) else {
        return Ok(Resolved {
            request: out,
            media,
        });
    };
    for content in contents {
        let Some(parts) = content.get_mut("parts").and_then(Value::as_array_mut) else {
            continue;
        };
        for part in parts.iter_mut() {
            let seen = if let Some(inline) =
                part.get("inlineData").or_else(|| part.get("inline_data"))
            {
                let mime = str_of(inline, "mimeType", "mime_type");
                let data = bytes_field(str_of(inline, "data", "data"))
                    .map_err(|e| (400, format!("Invalid value at 'inline_data.data': {e}")))?;
                Some((mime.to_owned(), data))
            } else if let Some(file) = part.get("fileData").or_else(|| part.get("file_data")) {
                let uri = str_of(file, "fileUri", "file_uri");
                let mime = str_of(file, "mimeType", "mime_type");
                let id = uri.rsplit_once("files/").map_or("", |(_, id)| id);
                let stored = files.get(id).ok_or_else(|| {
                    (
                        403,
                        format!(
                            "You do not have permission to access the File {id} or it may not exist."
                        ),
                    )
                })?;
                if !mime.is_empty() && !mime.eq_ignore_ascii_case(&stored.mime_type) {
                    return Err((
                        400,
                        format!(
                            "The file {id} has MIME type {}, not {mime}.",
                            stored.mime_type
                        ),
                    ));
                }
                Some((stored.mime_type.clone(), stored.bytes.clone()))
            } else {
                None
            };
            if let Some((mime, bytes)) = seen {
                let hash = hex::encode(Sha256::digest(&bytes));
                *part = json!({"text": format!("[{mime} {} bytes sha256:{}]", bytes.len(), &hash[..16])});
                media.push(hash);
            }
        }
    }
    Ok(Resolved {
        request: out,
        media,
    })
}

fn str_of<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a str {
    v.get(camel)
        .or_else(|| v.get(snake))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;

    // Invariant: inline bytes decode in every base64 spelling the API's
    // JSON takes (the official SDK sends URL-safe).
    #[test]
    fn inline_bytes_take_standard_and_url_safe_base64() {
        use base64::engine::general_purpose::URL_SAFE;
        let bytes = [0xfb_u8, 0xff, 0xbf, 0x01];
        for text in [STANDARD.encode(bytes), URL_SAFE.encode(bytes)] {
            assert_eq!(bytes_field(&text).unwrap(), bytes, "{text}");
            assert_eq!(bytes_field(text.trim_end_matches('=')).unwrap(), bytes);
        }
        assert!(bytes_field("not base64!").is_err());
    }

    use super::*;
    use crate::files::Source;

    fn stored(id: &str, mime: &str, bytes: &[u8]) -> StoredFile {
        StoredFile {
            id: id.into(),
            display_name: String::new(),
            mime_type: mime.into(),
            bytes: bytes.to_vec(),
            created: chrono::Utc::now(),
            source: Source::Uploaded,
        }
    }

    fn request(part: Value) -> Value {
        json!({"contents": [{"role": "user", "parts": [{"text": "read this"}, part]}]})
    }

    // Invariants: inline data and a live file of the right type are read
    // (their hashes reported, each replaced by a text that names it); an
    // unknown file is PERMISSION_DENIED, another MIME type INVALID_ARGUMENT,
    // a request over 20 MB INVALID_ARGUMENT.
    #[test]
    fn media_are_checked_and_named_in_the_request() {
        let files = HashMap::from([("f1".to_string(), stored("f1", "image/png", b"png bytes"))]);
        let hash = hex::encode(Sha256::digest(b"png bytes"));

        let inline = request(
            json!({"inlineData": {"mimeType": "image/png", "data": STANDARD.encode(b"png bytes")}}),
        );
        let r = resolve(&inline, &files).unwrap();
        assert_eq!(r.media, std::slice::from_ref(&hash));
        let text = r.request["contents"][0]["parts"][1]["text"]
            .as_str()
            .unwrap();
        assert!(text.contains("image/png 9 bytes sha256:"), "{text}");

        let file = request(
            json!({"fileData": {"mimeType": "image/png", "fileUri": "http://e/v1beta/files/f1"}}),
        );
        assert_eq!(resolve(&file, &files).unwrap().media, [hash]);

        let unknown =
            request(json!({"fileData": {"mimeType": "image/png", "fileUri": "files/nope"}}));
        assert_eq!(resolve(&unknown, &files).unwrap_err().0, 403);
        let wrong = request(json!({"fileData": {"mimeType": "image/jpeg", "fileUri": "files/f1"}}));
        assert_eq!(resolve(&wrong, &files).unwrap_err().0, 400);
        let huge = request(
            json!({"inlineData": {"mimeType": "image/png", "data": "A".repeat(MAX_REQUEST_BYTES)}}),
        );
        let (code, message) = resolve(&huge, &files).unwrap_err();
        assert_eq!(code, 400);
        assert!(message.contains("payload size"), "{message}");
        assert!(
            resolve(&request(json!({"text": "x"})), &files)
                .unwrap()
                .media
                .is_empty()
        );
    }
}

//! Row content: payload validation and the content hash that decides
//! ALREADY_PRESENT versus CONFLICT when a key is enrolled again.

use sha2::{Digest, Sha256};

pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload must be a JSON object")]
    NotAnObject,
    #[error("payload is not valid JSON: {0}")]
    Invalid(String),
    #[error("payload must be at most {MAX_PAYLOAD_BYTES} bytes, got {0}")]
    TooLarge(usize),
}

/// Checks that `text` is one JSON object, without building it.
pub fn validate_object(text: &str) -> Result<(), PayloadError> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(text.len()));
    }
    if !text.trim_start().starts_with('{') {
        return Err(PayloadError::NotAnObject);
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| PayloadError::Invalid(e.to_string()))
}

/// Checks that `text` is one JSON value of any kind (results).
pub fn validate_value(text: &str) -> Result<(), PayloadError> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(text.len()));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| PayloadError::Invalid(e.to_string()))
}

/// What identifies a row's content. Two enrollments of one key are the same
/// row when all of this is equal (payload compared byte for byte: a client
/// that re-sends the same row sends the same bytes).
#[derive(Default)]
pub struct Content<'a> {
    pub payload: &'a str,
    /// Dependencies in any order; duplicates ignored.
    pub depends_on: &'a [&'a str],
    pub prompt_name: &'a str,
    pub prompt_version: &'a str,
    /// The model the row named (empty: the ledger's), not the resolved one,
    /// so changing the ledger's model does not make old rows conflict.
    pub model: &'a str,
    /// The names the row gives its dependencies (key, name), any order.
    /// Hashed only when there are some, so rows enrolled before names
    /// existed keep their hash.
    pub dependency_names: &'a [(&'a str, &'a str)],
}

/// SHA-256 over the length-prefixed parts of the content (16 bytes kept).
pub fn content_hash(c: &Content<'_>) -> [u8; 16] {
    let mut deps: Vec<&str> = c.depends_on.to_vec();
    deps.sort_unstable();
    deps.dedup();
    let mut h = Sha256::new();
    for part in [c.payload, c.prompt_name, c.prompt_version, c.model] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update((deps.len() as u64).to_le_bytes());
    for d in deps {
        h.update((d.len() as u64).to_le_bytes());
        h.update(d.as_bytes());
    }
    if !c.dependency_names.is_empty() {
        let mut names = c.dependency_names.to_vec();
        names.sort_unstable();
        h.update(b"names");
        h.update((names.len() as u64).to_le_bytes());
        for (key, name) in names {
            for part in [key, name] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
    }
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// Hex SHA-256 of a payload: the "vars hash" recorded with each attempt
/// (and of a result: the hash a dependant records as its input).
pub fn vars_hash(payload: &str) -> String {
    hex::encode(Sha256::digest(payload.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content<'a>(payload: &'a str, deps: &'a [&'a str]) -> Content<'a> {
        Content {
            payload,
            depends_on: deps,
            prompt_name: "",
            prompt_version: "",
            model: "",
            dependency_names: &[],
        }
    }

    #[test]
    fn objects_only() {
        assert_eq!(validate_object(r#" {"a": 1}"#), Ok(()));
        assert_eq!(validate_object("[1]"), Err(PayloadError::NotAnObject));
        assert_eq!(validate_object("\"x\""), Err(PayloadError::NotAnObject));
        assert!(matches!(
            validate_object("{\"a\":"),
            Err(PayloadError::Invalid(_))
        ));
        assert!(matches!(
            validate_object("{} {}"),
            Err(PayloadError::Invalid(_))
        ));
    }

    #[test]
    fn dependency_order_does_not_matter_but_everything_else_does() {
        let a = content("{}", &["x", "y"]);
        let b = content("{}", &["y", "x", "x"]);
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&content("{ }", &["x", "y"])));
        let mut c = content("{}", &["x", "y"]);
        c.model = "m";
        assert_ne!(content_hash(&a), content_hash(&c));
        // Moving bytes between fields changes the hash.
        let mut d = content("{}", &[]);
        d.prompt_name = "ab";
        let mut e = content("{}", &[]);
        e.prompt_name = "a";
        e.prompt_version = "b";
        assert_ne!(content_hash(&d), content_hash(&e));
    }

    /// Naming a dependency changes the content (a re-enrollment with other
    /// names is a conflict), in any order; no names keeps the old hash.
    #[test]
    fn dependency_names_are_content() {
        let plain = content("{}", &["x", "y"]);
        let mut named = content("{}", &["x", "y"]);
        named.dependency_names = &[("x", "prev"), ("y", "other")];
        let mut reordered = content("{}", &["x", "y"]);
        reordered.dependency_names = &[("y", "other"), ("x", "prev")];
        let mut renamed = content("{}", &["x", "y"]);
        renamed.dependency_names = &[("x", "before"), ("y", "other")];
        assert_ne!(content_hash(&plain), content_hash(&named));
        assert_eq!(content_hash(&named), content_hash(&reordered));
        assert_ne!(content_hash(&named), content_hash(&renamed));
        // The hash of a row without names is what it always was.
        assert_eq!(
            hex::encode(content_hash(&plain)),
            hex::encode(content_hash(&content("{}", &["y", "x"])))
        );
    }
}

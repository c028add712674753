//! Row keys: validation, and derivation of an idempotency key from the
//! natural-key parts of what a row processes (never from when, or which
//! attempt). Parts are length-prefixed before hashing, so no two different
//! part lists share an encoding: `("a:b", "c")` and `("a", "b:c")` differ.

use sha2::{Digest, Sha256};

pub const MAX_KEY_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key must not be empty")]
    Empty,
    #[error("key must be at most {MAX_KEY_LEN} characters, got {0}")]
    TooLong(usize),
    #[error("key may only contain [A-Za-z0-9._:@+=~-], found {0:?}")]
    BadChar(char),
}

/// A key: 1-256 characters of `[A-Za-z0-9._:@+=~-]`, so it fits in a
/// resource name without escaping.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    match key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._:@+=~-".contains(*c)))
    {
        Some(c) => Err(KeyError::BadChar(c)),
        None => Ok(()),
    }
}

/// The canonical encoding of natural-key parts: each part as
/// `<byte length>:<bytes>`, concatenated (netstring-like, unambiguous).
pub fn canonical_parts<S: AsRef<str>>(parts: &[S]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        let bytes = part.as_ref().as_bytes();
        out.extend_from_slice(bytes.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(bytes);
    }
    out
}

/// The idempotency key of natural-key parts: hex SHA-256 of their canonical
/// encoding (64 characters, always a valid key).
pub fn derive_key<S: AsRef<str>>(parts: &[S]) -> String {
    hex::encode(Sha256::digest(canonical_parts(parts)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shifting_a_separator_between_parts_changes_the_key() {
        assert_ne!(derive_key(&["a:b", "c"]), derive_key(&["a", "b:c"]));
        assert_ne!(derive_key(&["ab", ""]), derive_key(&["a", "b"]));
        assert_ne!(derive_key(&["a"]), derive_key(&["a", ""]));
    }

    #[test]
    fn keys_are_deterministic_and_valid() {
        let k = derive_key(&["reviews", "app-store", "123"]);
        assert_eq!(k, derive_key(&["reviews", "app-store", "123"]));
        assert_eq!(k.len(), 64);
        assert_eq!(validate_key(&k), Ok(()));
    }

    #[test]
    fn key_validation() {
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert_eq!(validate_key(&"a".repeat(257)), Err(KeyError::TooLong(257)));
        assert_eq!(validate_key("a/b"), Err(KeyError::BadChar('/')));
        assert_eq!(validate_key("a b"), Err(KeyError::BadChar(' ')));
        assert_eq!(validate_key("é"), Err(KeyError::BadChar('é')));
        assert_eq!(validate_key("California:LincolnHigh:2023:4"), Ok(()));
    }

    proptest! {
        #[test]
        fn different_part_lists_never_share_an_encoding(
            a in proptest::collection::vec(".{0,6}", 0..4),
            b in proptest::collection::vec(".{0,6}", 0..4),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(canonical_parts(&a), canonical_parts(&b));
        }
    }
}

//! Opaque page tokens (AIP-158): base64 of the list they belong to, a
//! fingerprint of its filter, and where the last page ended. A token from
//! another list or another filter is refused.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tonic::Status;

pub const DEFAULT_PAGE_SIZE: i64 = 100;
pub const MAX_PAGE_SIZE: i64 = 1000;

#[derive(Serialize, Deserialize)]
struct Token {
    /// Which list.
    l: String,
    /// Filter fingerprint.
    f: String,
    /// Resume after this position.
    a: String,
}

/// A fingerprint of whatever defines a list's contents besides paging.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

pub fn encode(list: &str, filter: &str, after: &str) -> String {
    let t = Token {
        l: list.into(),
        f: filter.into(),
        a: after.into(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).expect("token serializes"))
}

/// The position after which the page starts (`None` for the first page).
pub fn decode(token: &str, list: &str, filter: &str) -> Result<Option<String>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || {
        crate::edge::status::invalid_field(
            "page_token",
            "is not a token from this list with these filters; start again without one",
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if t.l != list || t.f != filter {
        return Err(bad());
    }
    Ok(Some(t.a))
}

/// `page_size` with its default and bounds.
pub fn page_size(size: i32) -> Result<i64, Status> {
    match i64::from(size) {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(n),
        _ => Err(crate::edge::status::invalid_field(
            "page_size",
            format!("must be between 0 (default {DEFAULT_PAGE_SIZE}) and {MAX_PAGE_SIZE}"),
        )),
    }
}

/// The next token when a full page came back, else empty.
pub fn next_token(list: &str, filter: &str, got: usize, size: i64, last: Option<&str>) -> String {
    match last {
        Some(last) if got as i64 == size => encode(list, filter, last),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_bound_to_their_list_and_filter() {
        let t = encode("rows:l", "abc", "key-9");
        assert_eq!(
            decode(&t, "rows:l", "abc").unwrap().as_deref(),
            Some("key-9")
        );
        assert!(decode(&t, "rows:other", "abc").is_err());
        assert!(decode(&t, "rows:l", "xyz").is_err());
        assert!(decode("garbage!", "rows:l", "abc").is_err());
        assert_eq!(decode("", "rows:l", "abc").unwrap(), None);
    }

    #[test]
    fn page_sizes() {
        assert_eq!(page_size(0).unwrap(), 100);
        assert_eq!(page_size(1000).unwrap(), 1000);
        assert!(page_size(1001).is_err());
        assert!(page_size(-1).is_err());
    }
}

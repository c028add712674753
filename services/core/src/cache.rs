//! The result cache's rules: what a ledger asks of it, and the request it
//! is keyed by. A cached answer is served only for the exact request that
//! earned it: the provider, the model as sent, the request as the worker
//! built it (each media part by its bytes' SHA-256, never by where the file
//! lies) and what the answer must be (JSON, its schema). The key is the
//! SHA-256 of that request written canonically; the store compares the
//! whole request too, so two requests never share an answer by their hash.

use crate::millis;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::time::Duration;

/// The oldest answer a ledger is served unless it says otherwise.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest `max_age` a policy may set.
pub const MAX_MAX_AGE: Duration = Duration::from_secs(366 * 24 * 3600);
/// The largest canonical request cached (a larger one is sent, never
/// looked up or kept).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// The most requests one lookup names.
pub const MAX_LOOKUPS: usize = 1000;

/// Whose answers a ledger is served, and who is served its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// Its own team's answers only; its answers stay its team's.
    #[default]
    Team,
    /// Also the answers of other teams that share theirs; its answers are
    /// shared with teams whose ledgers share too.
    Shared,
}

impl CacheScope {
    pub fn code(self) -> i16 {
        match self {
            CacheScope::Team => 1,
            CacheScope::Shared => 2,
        }
    }

    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 | 1 => Some(CacheScope::Team),
            2 => Some(CacheScope::Shared),
            _ => None,
        }
    }

    pub fn is_shared(self) -> bool {
        self == CacheScope::Shared
    }
}

/// A ledger's use of the result cache (the policy holds none: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultCache {
    /// The oldest answer served.
    #[serde(with = "millis")]
    pub max_age: Duration,
    #[serde(default)]
    pub scope: CacheScope,
}

impl Default for ResultCache {
    fn default() -> Self {
        ResultCache {
            max_age: DEFAULT_MAX_AGE,
            scope: CacheScope::Team,
        }
    }
}

impl ResultCache {
    /// Field problems, by name under the policy's `result_cache`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.max_age.is_zero() {
            out.push(("max_age", "must be positive".to_string()));
        }
        if self.max_age > MAX_MAX_AGE {
            out.push(("max_age", "must be at most 366 days".to_string()));
        }
        out
    }
}

/// What a row's answer must be, as the worker checks it: part of the key,
/// since one request judged by two schemas may pass one and fail the other.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expect<'a> {
    pub json: bool,
    pub schema: Option<&'a Value>,
}

/// A request as the cache knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRequest {
    /// The canonical text (compared whole on a lookup).
    pub text: String,
    /// Its SHA-256.
    pub hash: [u8; 32],
}

/// Why a request is not cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uncached {
    #[error("the request is {0} bytes written canonically; at most {MAX_REQUEST_BYTES} are cached")]
    TooLarge(usize),
}

/// The cache's request for `request` (as the provider's wire built it,
/// before its media are attached) sent to `provider` for `model`.
pub fn request_of(
    provider: &str,
    model: &str,
    request: &Value,
    expect: Expect<'_>,
) -> Result<CacheRequest, Uncached> {
    let mut text = String::new();
    text.push_str("{\"expect\":{\"json\":");
    text.push_str(if expect.json { "true" } else { "false" });
    text.push_str(",\"schema\":");
    match expect.schema {
        Some(s) => write_canonical(&mut text, s, false),
        None => text.push_str("null"),
    }
    text.push_str("},\"model\":");
    write_str(&mut text, model);
    text.push_str(",\"provider\":");
    write_str(&mut text, provider);
    text.push_str(",\"request\":");
    write_canonical(&mut text, request, true);
    text.push_str(",\"v\":1}");
    if text.len() > MAX_REQUEST_BYTES {
        return Err(Uncached::TooLarge(text.len()));
    }
    Ok(CacheRequest {
        hash: hash(&text),
        text,
    })
}

/// The SHA-256 of a canonical request.
pub fn hash(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// `v` with object keys in byte order and no spaces. With `media`, a
/// `{"media": {...}}` reference is written as its bytes' hash and type
/// (where the file lies is not the request).
fn write_canonical(out: &mut String, v: &Value, media: bool) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                let stripped = (media && k.as_str() == "media")
                    .then(|| crate::media::parse(&o[k]).ok())
                    .flatten();
                match stripped {
                    Some(r) => {
                        let _ = write!(
                            out,
                            "{{\"mime_type\":{},\"sha256\":\"{}\"}}",
                            Value::String(r.mime_type),
                            r.sha256
                        );
                    }
                    None => write_canonical(out, &o[k], media),
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, x, media);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push_str(&Value::String(s.to_owned()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(request: &Value) -> CacheRequest {
        request_of("gemini", "gemini-2.5-flash", request, Expect::default()).unwrap()
    }

    const HASH: &str = "0000000000000000000000000000000000000000000000000000000000000001";

    // Invariant: the key is the request, not how its JSON was written: key
    // order and spacing do not change it, any value does.
    #[test]
    fn the_key_is_the_request_not_its_spelling() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(key(&a), key(&b));
        assert_eq!(
            key(&a).text,
            r#"{"expect":{"json":false,"schema":null},"model":"gemini-2.5-flash","provider":"gemini","request":{"a":{"x":"s","y":[1,2]},"b":1},"v":1}"#
        );
        let c = json!({"a": {"x": "s", "y": [2, 1]}, "b": 1});
        assert_ne!(key(&a).hash, key(&c).hash);
    }

    // Invariant: everything that can change the answer or its verdict is in
    // the key: the model, the provider, JSON asked for, the schema.
    #[test]
    fn model_provider_and_expectation_are_part_of_the_key() {
        let r = json!({"contents": "hi"});
        let base = key(&r);
        let other_model = request_of("gemini", "gemini-2.5-pro", &r, Expect::default()).unwrap();
        let other_provider =
            request_of("openai", "gemini-2.5-flash", &r, Expect::default()).unwrap();
        let json_asked = request_of(
            "gemini",
            "gemini-2.5-flash",
            &r,
            Expect {
                json: true,
                schema: None,
            },
        )
        .unwrap();
        let schema = json!({"type": "object"});
        let with_schema = request_of(
            "gemini",
            "gemini-2.5-flash",
            &r,
            Expect {
                json: true,
                schema: Some(&schema),
            },
        )
        .unwrap();
        let all = [base, other_model, other_provider, json_asked, with_schema];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.hash, b.hash);
            }
        }
    }

    // Invariant: a media part is keyed by its bytes (hash and type), not by
    // where the file lies; other bytes are another request.
    #[test]
    fn media_are_keyed_by_their_bytes() {
        let at = |uri: &str, sha: &str| json!({"contents": [{"parts": [{"media": {"uri": uri, "sha256": sha}}, {"text": "read"}]}]});
        let here = key(&at("pages/1.png", HASH));
        let there = key(&at("/elsewhere/copy.png", HASH));
        assert_eq!(here, there);
        assert!(here.text.contains(HASH) && !here.text.contains("pages/1.png"));
        let other = HASH.replace('1', "2");
        assert_ne!(here.hash, key(&at("pages/1.png", &other)).hash);
        assert_ne!(
            here.hash,
            key(&at("pages/1.jpg", HASH)).hash,
            "another type"
        );
    }

    #[test]
    fn requests_too_large_are_not_cached() {
        let r = json!({"text": "x".repeat(MAX_REQUEST_BYTES)});
        assert!(matches!(
            request_of("gemini", "m", &r, Expect::default()),
            Err(Uncached::TooLarge(_))
        ));
    }

    #[test]
    fn scopes_and_ages_are_bounded() {
        assert_eq!(CacheScope::from_code(0), Some(CacheScope::Team));
        assert_eq!(CacheScope::from_code(2), Some(CacheScope::Shared));
        assert_eq!(CacheScope::from_code(3), None);
        assert!(ResultCache::default().problems().is_empty());
        let zero = ResultCache {
            max_age: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(zero.problems().len(), 1);
        let long = ResultCache {
            max_age: MAX_MAX_AGE + Duration::from_secs(1),
            ..Default::default()
        };
        assert_eq!(long.problems().len(), 1);
    }
}

//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>): the
//! scheme the Gemini API signs its webhooks with, the one the gemini-emulator
//! uses, and the one tally signs its own alerts with.
//!
//! A message is signed as `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`
//! where the key is the base64 part of a `whsec_…` secret. The
//! `webhook-signature` header may carry several space-separated signatures
//! (the sender rotating keys); the receiver may hold several secrets (the
//! receiver rotating keys). Any pair that matches verifies.
//!
//! Time is an argument: nothing here reads a clock.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// The default tolerance between the sender's timestamp and our clock.
pub const DEFAULT_TOLERANCE_SECS: i64 = 5 * 60;

/// A decoded signing secret.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("webhook secret must start with `whsec_`")]
    MissingPrefix,
    #[error("webhook secret is not valid base64 after `whsec_`")]
    NotBase64,
    #[error("webhook secret must decode to 24 to 64 bytes, got {0}")]
    BadLength(usize),
}

impl Secret {
    /// Parses a `whsec_<base64>` secret.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let b64 = text
            .trim()
            .strip_prefix("whsec_")
            .ok_or(SecretError::MissingPrefix)?;
        let key = STANDARD.decode(b64).map_err(|_| SecretError::NotBase64)?;
        if !(24..=64).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        Ok(Self { key })
    }

    /// Builds a secret from raw key bytes (e.g. freshly generated).
    pub fn from_bytes(key: Vec<u8>) -> Result<Self, SecretError> {
        if !(24..=64).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        Ok(Self { key })
    }

    /// The `whsec_…` text form.
    pub fn to_text(&self) -> String {
        format!("whsec_{}", STANDARD.encode(&self.key))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("hmac accepts any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }
}

/// The `webhook-signature` header value for one message.
pub fn sign(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(secret.mac(id, timestamp, body)))
}

/// Why a delivery was rejected. Every variant is answered 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing `{0}` header")]
    MissingHeader(&'static str),
    #[error("`webhook-timestamp` is not a unix timestamp")]
    BadTimestamp,
    #[error("timestamp is {0}s away from now, outside the tolerance")]
    OutsideTolerance(i64),
    #[error("no signature matches")]
    NoMatch,
}

/// The three Standard Webhooks headers of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Verifies a delivery against any of `secrets`, at time `now` (unix
/// seconds), with `tolerance` seconds of clock difference either way.
/// Comparison is constant-time. Returns the delivery id and timestamp.
pub fn verify<'a>(
    secrets: &[Secret],
    headers: Headers<'a>,
    body: &[u8],
    now: i64,
    tolerance: i64,
) -> Result<(&'a str, i64), VerifyError> {
    let id = non_empty(headers.id).ok_or(VerifyError::MissingHeader("webhook-id"))?;
    let ts_text =
        non_empty(headers.timestamp).ok_or(VerifyError::MissingHeader("webhook-timestamp"))?;
    let sigs =
        non_empty(headers.signature).ok_or(VerifyError::MissingHeader("webhook-signature"))?;
    let timestamp: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    let skew = now.saturating_sub(timestamp);
    if skew.abs() > tolerance {
        return Err(VerifyError::OutsideTolerance(skew));
    }
    let candidates: Vec<Vec<u8>> = sigs
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    let mut matched = subtle::Choice::from(0u8);
    for secret in secrets {
        let expected = secret.mac(id, timestamp, body);
        for candidate in &candidates {
            matched |= expected.as_slice().ct_eq(candidate.as_slice());
        }
    }
    if bool::from(matched) {
        Ok((id, timestamp))
    } else {
        Err(VerifyError::NoMatch)
    }
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The specification's published test vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn headers(sig: &str) -> Headers<'_> {
        Headers {
            id: Some(ID),
            timestamp: Some("1614265330"),
            signature: Some(sig),
        }
    }

    #[test]
    fn signs_the_published_test_vector() {
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(sign(&secret, ID, TS, BODY), SIGNATURE);
    }

    #[test]
    fn verifies_the_published_test_vector() {
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(
            verify(&[secret], headers(SIGNATURE), BODY, TS + 10, 300),
            Ok((ID, TS))
        );
    }

    #[test]
    fn a_tampered_body_does_not_verify() {
        let secret = Secret::parse(SECRET).unwrap();
        let body = br#"{"test": 2432232315}"#;
        assert_eq!(
            verify(&[secret], headers(SIGNATURE), body, TS, 300),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_is_rejected_either_way() {
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(
            verify(
                std::slice::from_ref(&secret),
                headers(SIGNATURE),
                BODY,
                TS + 360,
                300
            ),
            Err(VerifyError::OutsideTolerance(360))
        );
        assert_eq!(
            verify(&[secret], headers(SIGNATURE), BODY, TS - 301, 300),
            Err(VerifyError::OutsideTolerance(-301))
        );
    }

    #[test]
    fn any_configured_secret_and_any_listed_signature_verifies() {
        let old = Secret::parse(SECRET).unwrap();
        let new = Secret::from_bytes(vec![7; 32]).unwrap();
        let by_new = sign(&new, ID, TS, BODY);
        let both = format!("v1,bm90LWl0 {by_new}");
        assert!(verify(&[old.clone(), new.clone()], headers(&both), BODY, TS, 300).is_ok());
        assert!(verify(&[old.clone(), new], headers(SIGNATURE), BODY, TS, 300).is_ok());
        assert_eq!(
            verify(&[old], headers(&by_new), BODY, TS, 300),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn missing_headers_are_named() {
        let secret = Secret::parse(SECRET).unwrap();
        let mut h = headers(SIGNATURE);
        h.id = None;
        assert_eq!(
            verify(std::slice::from_ref(&secret), h, BODY, TS, 300),
            Err(VerifyError::MissingHeader("webhook-id"))
        );
        let mut h = headers(SIGNATURE);
        h.signature = Some("  ");
        assert_eq!(
            verify(&[secret], h, BODY, TS, 300),
            Err(VerifyError::MissingHeader("webhook-signature"))
        );
    }

    #[test]
    fn secrets_need_the_prefix_and_a_sane_length() {
        assert_eq!(
            Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err(),
            SecretError::MissingPrefix
        );
        assert_eq!(
            Secret::parse("whsec_!!!").unwrap_err(),
            SecretError::NotBase64
        );
        assert_eq!(
            Secret::parse("whsec_YWJj").unwrap_err(),
            SecretError::BadLength(3)
        );
        let s = Secret::parse(SECRET).unwrap();
        assert_eq!(s.to_text(), SECRET);
    }
}

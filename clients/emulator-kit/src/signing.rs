//! Standard Webhooks signing (<https://www.standardwebhooks.com/>), the
//! scheme both the Gemini API and OpenAI sign their webhooks with. The
//! emulators only sign; receivers (tally among them) verify with their own
//! code, so the emulators share nothing with them but the specification and
//! its test vector.
//!
//! A message is signed as `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`
//! where the key is the base64 part of a `whsec_…` secret.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

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

/// Why a `whsec_…` text is not a usable secret.
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
    /// Parses a `whsec_<base64>` secret of 24 to 64 bytes.
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
}

/// The `webhook-signature` header value for one message.
pub fn sign(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.key).expect("hmac accepts any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_published_test_vector() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_need_the_prefix_base64_and_a_sane_length() {
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
    }
}

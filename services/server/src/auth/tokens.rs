//! Bearer tokens: the tokens file, hashing, lookup and issuing.
//!
//! The server never holds a token, only its SHA-256 (hex). A presented token
//! is hashed and compared against every configured hash in constant time,
//! without stopping at a match, so timing tells nothing about how close a
//! guess came or which entry matched.
//!
//! The file (`--tokens-file`, or the same JSON in `TALLY_TOKENS`):
//!
//! ```json
//! {
//!   "tokens": [
//!     {"name": "alice", "roles": ["operator"], "sha256": "<64 hex digits>"}
//!   ],
//!   "certificates": [
//!     {"subject": "worker-7.batch.internal", "roles": ["worker"]}
//!   ]
//! }
//! ```
//! Unknown fields are refused (a misspelt `roles` must not become "no
//! roles"), as are empty role lists, bad hashes and duplicates.

use super::{Role, Roles};
use base64::Engine as _;
use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use subtle::ConstantTimeEq;

/// What tokens start with, so secret scanners and people recognise them.
pub const PREFIX: &str = "tally_";
const MAX_NAME: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read the tokens file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin} is not a valid tokens document: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// The tokens document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensFile {
    #[serde(default)]
    pub tokens: Vec<TokenLine>,
    #[serde(default)]
    pub certificates: Vec<CertificateLine>,
    #[serde(skip)]
    origin: String,
}

/// One token as written in the file: its hash, never the token.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenLine {
    pub name: String,
    pub roles: Vec<Role>,
    pub sha256: String,
}

/// Roles for a client certificate, by its subject CN.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateLine {
    pub subject: String,
    pub roles: Vec<Role>,
}

/// A token as the server holds it.
#[derive(Debug, Clone)]
pub struct TokenEntry {
    pub name: String,
    pub roles: Roles,
    hash: [u8; 32],
}

impl TokensFile {
    pub fn read(path: &Path) -> Result<TokensFile, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks one document; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<TokensFile, TokensError> {
        let mut file: TokensFile = serde_json::from_str(text).map_err(|e| TokensError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        file.origin = origin.to_string();
        let invalid = |message: String| TokensError::Invalid {
            origin: origin.to_string(),
            message,
        };
        for (i, t) in file.tokens.iter().enumerate() {
            check_name(&t.name).map_err(|m| invalid(format!("tokens[{i}].name {m}")))?;
            if t.roles.is_empty() {
                return Err(invalid(format!("tokens[{i}] ({}) has no roles", t.name)));
            }
            parse_hash(&t.sha256).map_err(|m| invalid(format!("tokens[{i}].sha256 {m}")))?;
        }
        for (i, c) in file.certificates.iter().enumerate() {
            check_name(&c.subject)
                .map_err(|m| invalid(format!("certificates[{i}].subject {m}")))?;
            if c.roles.is_empty() {
                return Err(invalid(format!(
                    "certificates[{i}] ({}) has no roles",
                    c.subject
                )));
            }
        }
        Ok(file)
    }

    /// Adds another document's entries (file and variable together).
    pub fn merge(&mut self, other: TokensFile) -> Result<(), TokensError> {
        if self.origin.is_empty() {
            self.origin = other.origin;
        } else {
            self.origin = format!("{} + {}", self.origin, other.origin);
        }
        self.tokens.extend(other.tokens);
        self.certificates.extend(other.certificates);
        let mut subjects = HashSet::new();
        for c in &self.certificates {
            if !subjects.insert(c.subject.as_str()) {
                return Err(TokensError::Invalid {
                    origin: self.origin.clone(),
                    message: format!("certificate subject {} is listed twice", c.subject),
                });
            }
        }
        Ok(())
    }

    /// The tokens as held in memory; a hash listed twice is refused (two
    /// names for one secret would make the actor ambiguous).
    pub fn entries(&self) -> Result<Vec<TokenEntry>, TokensError> {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(self.tokens.len());
        for t in &self.tokens {
            let hash = parse_hash(&t.sha256).map_err(|m| TokensError::Invalid {
                origin: self.origin.clone(),
                message: format!("sha256 of {} {m}", t.name),
            })?;
            if !seen.insert(hash) {
                return Err(TokensError::Invalid {
                    origin: self.origin.clone(),
                    message: format!("the hash of {}'s token is listed twice", t.name),
                });
            }
            out.push(TokenEntry {
                name: t.name.clone(),
                roles: Roles::of(&t.roles),
                hash,
            });
        }
        Ok(out)
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!("must be at most {MAX_NAME} bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let bytes = hex::decode(text.trim()).map_err(|_| "must be 64 hex digits".to_string())?;
    bytes
        .try_into()
        .map_err(|_| "must be 64 hex digits (a SHA-256)".to_string())
}

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The hex SHA-256 of a token, as the tokens file holds it.
pub fn hash_hex(token: &str) -> String {
    hex::encode(hash(token))
}

/// The token of an `authorization` header value: `Bearer <token>` (scheme
/// case-insensitive, per RFC 6750).
pub fn bearer(header: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, token) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty() && !token.contains(char::is_whitespace)).then_some(token)
}

/// The entry whose hash matches `token`. Every entry is compared, in
/// constant time, whatever matches.
pub fn find<'a>(entries: &'a [TokenEntry], token: &str) -> Option<&'a TokenEntry> {
    let presented = hash(token);
    let mut found = None;
    for entry in entries {
        if bool::from(entry.hash.ct_eq(&presented)) {
            found = Some(entry);
        }
    }
    found
}

/// A newly issued token and the line for the tokens file.
pub struct Issued {
    /// The secret: shown once, stored nowhere.
    pub token: String,
    /// The `tokens` entry (hash only), as one line of JSON.
    pub line: String,
}

/// A new random token (256 bits from the OS-seeded CSPRNG) for `name`.
pub fn issue(name: &str, roles: &[Role]) -> Result<Issued, String> {
    check_name(name).map_err(|m| format!("--name {m}"))?;
    if roles.is_empty() {
        return Err("--roles must name at least one role".into());
    }
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let mut unique: Vec<Role> = Vec::with_capacity(roles.len());
    for r in roles {
        if !unique.contains(r) {
            unique.push(*r);
        }
    }
    let line = serde_json::to_string(&TokenLine {
        name: name.to_string(),
        roles: unique,
        sha256: hash_hex(&token),
    })
    .map_err(|e| e.to_string())?;
    Ok(Issued { token, line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_round_trip_through_the_file() {
        let issued = issue("alice", &[Role::Operator]).unwrap();
        assert!(issued.token.starts_with(PREFIX));
        assert!(issued.token.len() > 40);
        assert!(
            !issued.line.contains(&issued.token),
            "the line holds no secret"
        );
        let doc = format!(r#"{{"tokens": [{}]}}"#, issued.line);
        let entries = TokensFile::parse(&doc, "test").unwrap().entries().unwrap();
        let found = find(&entries, &issued.token).expect("found");
        assert_eq!(found.name, "alice");
        assert!(found.roles.has(Role::Operator));
        assert!(find(&entries, "tally_other").is_none());
        let again = issue("alice", &[Role::Operator]).unwrap();
        assert_ne!(again.token, issued.token);
    }

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer   abc "), Some("abc"));
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Token abc"), None);
        assert_eq!(bearer(b"Bearer a b"), None);
        assert_eq!(bearer(&[0xff, 0xfe]), None);
    }

    #[test]
    fn bad_documents_are_refused_with_where() {
        let h = hash_hex("x");
        let cases = [
            ("{", "not a valid"),
            (r#"{"token": []}"#, "unknown field"),
            (
                &format!(r#"{{"tokens": [{{"name": "a", "roles": [], "sha256": "{h}"}}]}}"#),
                "no roles",
            ),
            (
                &format!(r#"{{"tokens": [{{"name": "a", "roles": ["admin"], "sha256": "{h}"}}]}}"#),
                "unknown variant",
            ),
            (
                r#"{"tokens": [{"name": "a", "roles": ["worker"], "sha256": "abcd"}]}"#,
                "64 hex",
            ),
            (
                &format!(r#"{{"tokens": [{{"name": "", "roles": ["worker"], "sha256": "{h}"}}]}}"#),
                "tokens[0].name",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "sha256": "{h}", "token": "x"}}]}}"#
                ),
                "unknown field",
            ),
        ];
        for (doc, expect) in cases {
            let e = TokensFile::parse(doc, "tokens.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(expect), "{doc}: {e}");
            assert!(e.contains("tokens.json"), "{e}");
        }
        let twice = format!(
            r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "sha256": "{h}"}},
                            {{"name": "b", "roles": ["worker"], "sha256": "{h}"}}]}}"#
        );
        let e = TokensFile::parse(&twice, "t")
            .unwrap()
            .entries()
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        let mut a = TokensFile::parse(
            r#"{"certificates": [{"subject": "w", "roles": ["worker"]}]}"#,
            "f",
        )
        .unwrap();
        let b = TokensFile::parse(
            r#"{"certificates": [{"subject": "w", "roles": ["worker"]}]}"#,
            "v",
        )
        .unwrap();
        assert!(a.merge(b).unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn missing_files_name_the_path() {
        let e = TokensFile::read(Path::new("/nonexistent/tokens.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/tokens.json"), "{e}");
    }
}

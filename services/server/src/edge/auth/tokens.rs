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
//!     {"name": "alice", "roles": ["operator"], "ledgers": ["*"], "sha256": "<64 hex digits>"},
//!     {"name": "acme-etl", "roles": ["enroller"], "ledgers": ["acme-*"],
//!      "shared_prompts": ["shared-*"], "expire_time": "2027-03-01T00:00:00Z",
//!      "sha256": "<64 hex digits>"}
//!   ],
//!   "certificates": [
//!     {"subject": "worker-7.batch.internal", "roles": ["worker"], "ledgers": ["acme-*"]}
//!   ]
//! }
//! ```
//! `ledgers` (see [`tally_core::scope`]) says which ledgers, locks and
//! prompts the caller may touch; a line without it reaches the whole server
//! (`["*"]`), as before scopes existed. `shared_prompts` adds prompts the
//! caller may read but not register. `expire_time` (RFC 3339) ends a
//! token's life. Unknown fields are refused (a misspelt `roles` must not
//! become "no roles"), as are empty role or ledger lists, bad patterns, bad
//! times, bad hashes and duplicates.

use super::{Role, Roles};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tally_core::scope::{Patterns, Scope};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledgers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prompts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_time: Option<String>,
    pub sha256: String,
}

/// Roles (and a scope) for a client certificate, by its subject CN.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateLine {
    pub subject: String,
    pub roles: Vec<Role>,
    #[serde(default)]
    pub ledgers: Option<Vec<String>>,
    #[serde(default)]
    pub shared_prompts: Option<Vec<String>>,
}

/// A token as the server holds it.
#[derive(Debug, Clone)]
pub struct TokenEntry {
    pub name: String,
    pub roles: Roles,
    pub scope: Arc<Scope>,
    /// After this instant the token is refused (TOKEN_EXPIRED).
    pub expires: Option<DateTime<Utc>>,
    hash: [u8; 32],
}

/// The scope of a line: `ledgers` (required: a line that forgot it must
/// not quietly reach the whole server; `*` says so) and `shared_prompts`
/// (absent: none).
pub fn scope_of(
    ledgers: Option<&[String]>,
    shared_prompts: Option<&[String]>,
) -> Result<Scope, String> {
    let ledgers = match ledgers {
        None => {
            return Err(
                "has no `ledgers`: list the ledger ids or prefixes it reaches (`acme-*`), \
                 or `*` for the whole server"
                    .into(),
            );
        }
        Some([]) => {
            return Err(
                "ledgers is empty: list the ledger ids or prefixes (`acme-*`), or `*`".into(),
            );
        }
        Some(list) => Patterns::parse(list).map_err(|m| format!("ledgers{m}"))?,
    };
    let shared_prompts = match shared_prompts {
        None => Patterns::none(),
        Some(list) => Patterns::parse(list).map_err(|m| format!("shared_prompts{m}"))?,
    };
    Ok(Scope {
        ledgers,
        shared_prompts,
    })
}

/// An RFC 3339 instant, such as `2027-03-01T00:00:00Z`.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2027-03-01T00:00:00Z ({e})"))
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
            scope_of(t.ledgers.as_deref(), t.shared_prompts.as_deref())
                .map_err(|m| invalid(format!("tokens[{i}] ({}): {m}", t.name)))?;
            if let Some(time) = &t.expire_time {
                parse_time(time)
                    .map_err(|m| invalid(format!("tokens[{i}].expire_time ({}): {m}", t.name)))?;
            }
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
            scope_of(c.ledgers.as_deref(), c.shared_prompts.as_deref())
                .map_err(|m| invalid(format!("certificates[{i}] ({}): {m}", c.subject)))?;
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
            let invalid = |message: String| TokensError::Invalid {
                origin: self.origin.clone(),
                message: format!("{}: {message}", t.name),
            };
            let scope =
                scope_of(t.ledgers.as_deref(), t.shared_prompts.as_deref()).map_err(invalid)?;
            let expires = t
                .expire_time
                .as_deref()
                .map(parse_time)
                .transpose()
                .map_err(invalid)?;
            out.push(TokenEntry {
                name: t.name.clone(),
                roles: Roles::of(&t.roles),
                scope: Arc::new(scope),
                expires,
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

/// What a new token grants.
pub struct Grant<'a> {
    pub name: &'a str,
    pub roles: &'a [Role],
    /// Ledger patterns (`acme-*`, `*`); at least one.
    pub ledgers: &'a [String],
    pub shared_prompts: &'a [String],
    pub expires: Option<DateTime<Utc>>,
}

/// A new random token (256 bits from the OS-seeded CSPRNG) for `name`.
pub fn issue(grant: &Grant<'_>) -> Result<Issued, String> {
    let Grant {
        name,
        roles,
        ledgers,
        shared_prompts,
        expires,
    } = *grant;
    check_name(name).map_err(|m| format!("--name {m}"))?;
    if roles.is_empty() {
        return Err("--roles must name at least one role".into());
    }
    let scope = scope_of(Some(ledgers), Some(shared_prompts))
        .map_err(|m| format!("--{}", m.replace('_', "-")))?;
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
        ledgers: Some(scope.ledgers.to_strings()),
        shared_prompts: (!scope.shared_prompts.is_empty())
            .then(|| scope.shared_prompts.to_strings()),
        expire_time: expires.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        sha256: hash_hex(&token),
    })
    .map_err(|e| e.to_string())?;
    Ok(Issued { token, line })
}

/// `tally-server token …`: the grant its flags describe, issued at `now`
/// (an expiry in the past is refused).
pub fn issue_from_args(
    args: &crate::config::TokenArgs,
    now: DateTime<Utc>,
) -> Result<Issued, String> {
    let expires = match (&args.expire_time, args.expires_in) {
        (Some(t), _) => Some(parse_time(t).map_err(|m| format!("--expire-time {m}"))?),
        (None, Some(d)) => Some(
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or("--expires-in is too far in the future")?,
        ),
        (None, None) => None,
    };
    if expires.is_some_and(|t| t <= now) {
        return Err("the expiry is not in the future".into());
    }
    issue(&Grant {
        name: &args.name,
        roles: &args.roles,
        ledgers: &args.ledgers,
        shared_prompts: &args.shared_prompts,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant<'a>(name: &'a str, roles: &'a [Role], ledgers: &'a [String]) -> Grant<'a> {
        Grant {
            name,
            roles,
            ledgers,
            shared_prompts: &[],
            expires: None,
        }
    }

    #[test]
    fn issued_tokens_round_trip_through_the_file() {
        let all = ["*".to_string()];
        let issued = issue(&grant("alice", &[Role::Operator], &all)).unwrap();
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
        assert!(found.scope.is_everything());
        let again = issue(&grant("alice", &[Role::Operator], &all)).unwrap();
        assert_ne!(again.token, issued.token);
    }

    #[test]
    fn issued_scopes_and_expiry_survive_the_file() {
        let ledgers = ["acme-*".to_string(), "acme".to_string()];
        let shared = ["shared-*".to_string()];
        let expires = parse_time("2027-03-01T00:00:00Z").unwrap();
        let issued = issue(&Grant {
            name: "acme-etl",
            roles: &[Role::Enroller],
            ledgers: &ledgers,
            shared_prompts: &shared,
            expires: Some(expires),
        })
        .unwrap();
        assert!(
            issued.line.contains(r#""ledgers":["acme-*","acme"]"#),
            "{}",
            issued.line
        );
        assert!(
            issued.line.contains("2027-03-01T00:00:00Z"),
            "{}",
            issued.line
        );
        let doc = format!(r#"{{"tokens": [{}]}}"#, issued.line);
        let entries = TokensFile::parse(&doc, "t").unwrap().entries().unwrap();
        let e = find(&entries, &issued.token).unwrap();
        assert!(e.scope.ledger("acme") && e.scope.ledger("acme-x") && !e.scope.ledger("beta"));
        assert!(e.scope.read_prompt("shared-x") && !e.scope.write_prompt("shared-x"));
        assert_eq!(e.expires, Some(expires));
        let none: [String; 0] = [];
        assert!(issue(&grant("a", &[Role::Worker], &none)).is_err());
        let bad = ["a b".to_string()];
        let e = issue(&grant("a", &[Role::Worker], &bad)).err().unwrap();
        assert!(e.starts_with("--ledgers"), "{e}");
    }

    /// Invariant: a line without `ledgers` is refused, naming the line;
    /// `["*"]` reaches the whole server only when written.
    #[test]
    fn a_line_without_ledgers_is_refused() {
        let h = hash_hex("tally_x");
        let doc =
            format!(r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "sha256": "{h}"}}]}}"#);
        let e = TokensFile::parse(&doc, "t").unwrap_err().to_string();
        assert!(e.contains("tokens[0] (a): has no `ledgers`"), "{e}");
        let e = TokensFile::parse(
            r#"{"certificates": [{"subject": "w", "roles": ["worker"]}]}"#,
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("certificates[0] (w): has no `ledgers`"), "{e}");
        let doc = format!(
            r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": ["*"], "sha256": "{h}"}}]}}"#
        );
        let entries = TokensFile::parse(&doc, "t").unwrap().entries().unwrap();
        assert!(entries[0].scope.is_everything());
        assert_eq!(entries[0].expires, None);
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
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": [], "ledgers": ["*"], "sha256": "{h}"}}]}}"#
                ),
                "no roles",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["admin"], "ledgers": ["*"], "sha256": "{h}"}}]}}"#
                ),
                "unknown variant",
            ),
            (
                r#"{"tokens": [{"name": "a", "roles": ["worker"], "ledgers": ["*"], "sha256": "abcd"}]}"#,
                "64 hex",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "", "roles": ["worker"], "ledgers": ["*"], "sha256": "{h}"}}]}}"#
                ),
                "tokens[0].name",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": ["*"], "sha256": "{h}", "token": "x"}}]}}"#
                ),
                "unknown field",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": [], "sha256": "{h}"}}]}}"#
                ),
                "tokens[0] (a): ledgers is empty",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": ["ac*me"], "sha256": "{h}"}}]}}"#
                ),
                "tokens[0] (a): ledgers[0] `ac*me`",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": ["*"], "expire_time": "tomorrow", "sha256": "{h}"}}]}}"#
                ),
                "tokens[0].expire_time (a): `tomorrow` is not an RFC 3339 time",
            ),
            (
                r#"{"certificates": [{"subject": "w", "roles": ["worker"], "ledgers": ["a/b"]}]}"#,
                "certificates[0] (w): ledgers[0]",
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
            r#"{{"tokens": [{{"name": "a", "roles": ["worker"], "ledgers": ["*"], "sha256": "{h}"}},
                            {{"name": "b", "roles": ["worker"], "ledgers": ["*"], "sha256": "{h}"}}]}}"#
        );
        let e = TokensFile::parse(&twice, "t")
            .unwrap()
            .entries()
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        let mut a = TokensFile::parse(
            r#"{"certificates": [{"subject": "w", "roles": ["worker"], "ledgers": ["*"]}]}"#,
            "f",
        )
        .unwrap();
        let b = TokensFile::parse(
            r#"{"certificates": [{"subject": "w", "roles": ["worker"], "ledgers": ["*"]}]}"#,
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

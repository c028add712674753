//! Who may call what. One tower layer ([`layer::Authenticate`]) authenticates
//! every request and checks it against the one permission table
//! ([`methods::METHODS`]); handlers only read the resulting
//! [`Caller`](crate::edge::caller::Caller).
//!
//! - [`methods`]: the role × method table and route recognition.
//! - [`tokens`]: the tokens file, SHA-256 hashes, issuing new tokens.
//! - [`subject`]: the subject CN of a client certificate.
//! - [`layer`]: the tower layer.
//!
//! This module decides ([`Authenticator::decide`]) without any I/O, so the
//! rules are unit-tested here and the layer only plumbs headers and
//! certificates into it. Limits live in [`crate::edge::limits`], TLS in
//! [`crate::startup::tls`].

pub mod layer;
pub mod methods;
pub mod subject;
pub mod tokens;

pub use crate::config::roles::{Role, Roles};
use crate::config::{AuthMode, ReflectionMode, Security};
use crate::edge::status;
use chrono::{DateTime, Utc};
use methods::Route;
use std::collections::HashMap;
use std::sync::Arc;
use tally_core::scope::Scope;
use tokens::{TokenEntry, TokensFile};
use tonic::{Code, Status};

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Token,
    Certificate,
    /// `--auth disabled`: nobody proved anything.
    Nothing,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub roles: Roles,
    /// The ledgers, locks and prompts it may touch.
    pub scope: Arc<Scope>,
    pub via: Via,
}

/// Why a call was refused. Each becomes a status with an ErrorInfo whose
/// reason is [`Denial::reason`] (domain `tally.v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No `authorization` header (and no usable client certificate).
    TokenMissing,
    /// An `authorization` header that is not `Bearer <token>`.
    TokenMalformed,
    /// A bearer token no configured hash matches.
    TokenUnknown,
    /// A known token past its `expire_time`.
    TokenExpired { caller: String, at: DateTime<Utc> },
    /// The caller's roles do not include one the method allows.
    RoleDenied {
        caller: String,
        roles: Roles,
        allowed: Roles,
    },
    /// The method is in no table: nobody may call it.
    NotListed { caller: String },
    /// Reflection is switched off.
    ReflectionOff,
}

impl Denial {
    pub fn reason(&self) -> &'static str {
        match self {
            Denial::TokenMissing => "TOKEN_MISSING",
            Denial::TokenMalformed => "TOKEN_MALFORMED",
            Denial::TokenUnknown => "TOKEN_UNKNOWN",
            Denial::TokenExpired { .. } => "TOKEN_EXPIRED",
            Denial::RoleDenied { .. } => "ROLE_DENIED",
            Denial::NotListed { .. } => "METHOD_NOT_LISTED",
            Denial::ReflectionOff => "REFLECTION_OFF",
        }
    }

    /// The status answered for `method` (a request path).
    pub fn status(&self, method: &str) -> Status {
        let mut meta = HashMap::from([("method".to_string(), method.to_string())]);
        let (code, message) = match self {
            Denial::TokenMissing => (
                Code::Unauthenticated,
                "missing credentials: send `authorization: Bearer <token>`".to_string(),
            ),
            Denial::TokenMalformed => (
                Code::Unauthenticated,
                "malformed authorization header: expected `Bearer <token>`".to_string(),
            ),
            Denial::TokenUnknown => (Code::Unauthenticated, "unknown bearer token".to_string()),
            Denial::TokenExpired { caller, at } => {
                meta.insert("caller".into(), caller.clone());
                let at = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                meta.insert("expire_time".into(), at.clone());
                (
                    Code::Unauthenticated,
                    format!(
                        "the token of {caller} expired at {at}; issue a new one with `tally-server token`"
                    ),
                )
            }
            Denial::RoleDenied {
                caller,
                roles,
                allowed,
            } => {
                meta.insert("caller".into(), caller.clone());
                meta.insert("caller_roles".into(), roles.to_string());
                meta.insert("allowed_roles".into(), allowed.to_string());
                (
                    Code::PermissionDenied,
                    format!(
                        "{caller} (roles: {roles}) may not call {method}; it needs one of: {allowed}"
                    ),
                )
            }
            Denial::NotListed { caller } => {
                meta.insert("caller".into(), caller.clone());
                (
                    Code::PermissionDenied,
                    format!("{method} is not in the permission table, so nobody may call it"),
                )
            }
            Denial::ReflectionOff => (
                Code::Unimplemented,
                "reflection is off on this server (the default); its operator can turn it on \
                 with --reflection authenticated or --reflection open, or call with the \
                 .proto files (grpcurl -import-path proto -proto tally/v1/ledger.proto)"
                    .to_string(),
            ),
        };
        status::refused(code, self.reason(), message, meta, None)
    }
}

/// The outcome of checking one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let it through; `None` for open methods (health, open reflection).
    Allow(Option<Principal>),
    Deny(Denial),
}

/// Everything the auth layer knows: mode, token hashes, certificate roles.
#[derive(Debug)]
pub struct Authenticator {
    mode: AuthMode,
    reflection: ReflectionMode,
    tokens: Vec<TokenEntry>,
    /// Roles and scope by client-certificate subject CN, from the tokens
    /// file.
    subjects: HashMap<String, (Roles, Arc<Scope>)>,
    /// Roles of a verified client certificate not in `subjects`
    /// (`--mtls-roles`), and its scope (`--mtls-ledgers`).
    default_cert_roles: Roles,
    default_cert_scope: Arc<Scope>,
}

/// Why the security settings were refused at start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "authentication is on (--auth tokens) but no credentials are configured: \
         give --tokens-file or TALLY_TOKENS (issue tokens with `tally-server token --name NAME --roles ROLES`), \
         or client-certificate roles (--tls-client-ca with --mtls-roles or `certificates` in the tokens file); \
         for local use only, run with --auth disabled"
    )]
    NoCredentials,
    #[error("{0}")]
    Tokens(#[from] tokens::TokensError),
    #[error("{0}")]
    Invalid(String),
}

impl Authenticator {
    /// Reads the tokens file and variable; refuses settings that would leave
    /// the server open by accident or locked for everyone.
    pub fn from_args(args: &Security) -> Result<Authenticator, ConfigError> {
        let mut file = TokensFile::default();
        if let Some(path) = &args.tokens_file {
            file.merge(TokensFile::read(path)?)?;
        }
        if let Some(text) = &args.tokens {
            file.merge(TokensFile::parse(text, "TALLY_TOKENS")?)?;
        }
        let mtls = args.tls_client_ca.is_some();
        if !args.mtls_roles.is_empty() && !mtls {
            return Err(ConfigError::Invalid(
                "--mtls-roles needs --tls-client-ca (there are no client certificates without it)"
                    .into(),
            ));
        }
        if !file.certificates.is_empty() && !mtls {
            return Err(ConfigError::Invalid(
                "the tokens file lists `certificates`, which need --tls-client-ca".into(),
            ));
        }
        let mut subjects = HashMap::new();
        for c in &file.certificates {
            let scope = tokens::scope_of(c.ledgers.as_deref(), c.shared_prompts.as_deref())
                .map_err(|m| ConfigError::Invalid(format!("certificate {}: {m}", c.subject)))?;
            subjects.insert(c.subject.clone(), (Roles::of(&c.roles), Arc::new(scope)));
        }
        // Unlisted certificates reach what --mtls-ledgers says, and only
        // when it is said: with roles for them, the scope is required.
        let default_cert_scope = match (args.mtls_roles.is_empty(), args.mtls_ledgers.is_empty()) {
            (true, true) => Scope::nothing(),
            (false, true) => {
                return Err(ConfigError::Invalid(
                    "--mtls-roles needs --mtls-ledgers: the ledger ids or prefixes (`acme-*`) \
                     unlisted certificates reach, or `*` for the whole server"
                        .into(),
                ));
            }
            (_, false) => tokens::scope_of(Some(&args.mtls_ledgers), None)
                .map_err(|m| ConfigError::Invalid(format!("--mtls-{}", m.replace('_', "-"))))?,
        };
        let auth = Authenticator {
            mode: args.auth,
            reflection: args.reflection,
            tokens: file.entries()?,
            subjects,
            default_cert_roles: Roles::of(&args.mtls_roles),
            default_cert_scope: Arc::new(default_cert_scope),
        };
        if auth.mode == AuthMode::Tokens
            && auth.tokens.is_empty()
            && auth.subjects.is_empty()
            && auth.default_cert_roles.is_empty()
        {
            return Err(ConfigError::NoCredentials);
        }
        Ok(auth)
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    pub fn reflection(&self) -> ReflectionMode {
        self.reflection
    }

    /// How many tokens and certificate subjects are configured (for the
    /// start-up log line).
    pub fn counts(&self) -> (usize, usize) {
        (self.tokens.len(), self.subjects.len())
    }

    /// Decides one request: `path` is the HTTP/2 path, `authorization` the
    /// header's value, `cert_subject` the CN of a verified client
    /// certificate, `now` the time expiries are judged at.
    pub fn decide(
        &self,
        path: &str,
        authorization: Option<&[u8]>,
        cert_subject: Option<&str>,
        now: DateTime<Utc>,
    ) -> Decision {
        let route = Route::of(path);
        let needed = match route {
            Route::Health(_) => return Decision::Allow(None),
            Route::Reflection => match self.reflection {
                ReflectionMode::Off => return Decision::Deny(Denial::ReflectionOff),
                ReflectionMode::Open => return Decision::Allow(None),
                ReflectionMode::Authenticated => None,
            },
            Route::Tally(method) => Some(method.roles),
            Route::Unlisted => Some(Roles::NONE),
        };
        if self.mode == AuthMode::Disabled {
            return Decision::Allow(Some(Principal {
                name: cert_subject.unwrap_or("anonymous").to_string(),
                roles: Roles::NONE,
                scope: Arc::new(Scope::everything()),
                via: Via::Nothing,
            }));
        }
        let principal = match self.authenticate(authorization, cert_subject, now) {
            Ok(p) => p,
            Err(d) => return Decision::Deny(d),
        };
        match needed {
            None => Decision::Allow(Some(principal)),
            Some(allowed) if allowed.is_empty() => Decision::Deny(Denial::NotListed {
                caller: principal.name,
            }),
            Some(allowed) if principal.roles.intersects(allowed) => {
                Decision::Allow(Some(principal))
            }
            Some(allowed) => Decision::Deny(Denial::RoleDenied {
                caller: principal.name,
                roles: principal.roles,
                allowed,
            }),
        }
    }

    /// A bearer token, when sent, decides (an unknown one is refused even
    /// with a good certificate: no silent fallback). Without one, a verified
    /// client certificate names the caller.
    fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        cert_subject: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Principal, Denial> {
        if let Some(header) = authorization {
            let token = tokens::bearer(header).ok_or(Denial::TokenMalformed)?;
            let entry = tokens::find(&self.tokens, token).ok_or(Denial::TokenUnknown)?;
            if let Some(at) = entry.expires.filter(|at| *at <= now) {
                return Err(Denial::TokenExpired {
                    caller: entry.name.clone(),
                    at,
                });
            }
            return Ok(Principal {
                name: entry.name.clone(),
                roles: entry.roles,
                scope: entry.scope.clone(),
                via: Via::Token,
            });
        }
        match cert_subject {
            Some(subject) => {
                let (roles, scope) = match self.subjects.get(subject) {
                    Some((roles, scope)) => (*roles, scope.clone()),
                    None => (self.default_cert_roles, self.default_cert_scope.clone()),
                };
                Ok(Principal {
                    name: subject.to_string(),
                    roles,
                    scope,
                    via: Via::Certificate,
                })
            }
            None => Err(Denial::TokenMissing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::auth::tokens::hash_hex;

    const ALICE: &str = "tally_alice-secret";
    const EVE: &str = "tally_enroller-secret";

    fn file() -> String {
        format!(
            r#"{{"tokens": [
                {{"name": "alice", "roles": ["operator"], "ledgers": ["*"], "sha256": "{}"}},
                {{"name": "eve", "roles": ["enroller"], "ledgers": ["*"], "sha256": "{}"}}
            ],
            "certificates": [{{"subject": "worker-7", "roles": ["worker"], "ledgers": ["*"]}}]}}"#,
            hash_hex(ALICE),
            hash_hex(EVE)
        )
    }

    fn args() -> Security {
        let mut s = Security::disabled();
        s.auth = AuthMode::Tokens;
        s.tokens = Some(file());
        s.tls_client_ca = Some("ca.pem".into());
        s
    }

    fn at_now(auth: &Authenticator, path: &str, a: Option<&[u8]>, c: Option<&str>) -> Decision {
        auth.decide(path, a, c, Utc::now())
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    const CLAIM: &str = "/tally.v1.LedgerService/ClaimRows";
    const ENROLL: &str = "/tally.v1.LedgerService/EnrollRows";

    fn denial(d: Decision) -> &'static str {
        match d {
            Decision::Deny(d) => d.reason(),
            Decision::Allow(p) => panic!("allowed {p:?}"),
        }
    }

    #[test]
    fn tokens_name_the_caller_and_roles_decide() {
        let auth = Authenticator::from_args(&args()).unwrap();
        match at_now(&auth, CLAIM, Some(&bearer(ALICE)), None) {
            Decision::Allow(Some(p)) => {
                assert_eq!(p.name, "alice");
                assert_eq!(p.via, Via::Token);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            at_now(&auth, ENROLL, Some(&bearer(EVE)), None),
            Decision::Allow(Some(_))
        ));
        assert_eq!(
            denial(at_now(&auth, CLAIM, Some(&bearer(EVE)), None)),
            "ROLE_DENIED"
        );
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
        let auth = Authenticator::from_args(&args()).unwrap();
        assert_eq!(denial(at_now(&auth, CLAIM, None, None)), "TOKEN_MISSING");
        assert_eq!(
            denial(at_now(&auth, CLAIM, Some(b"Basic YWxpY2U="), None)),
            "TOKEN_MALFORMED"
        );
        assert_eq!(
            denial(at_now(&auth, CLAIM, Some(b"Bearer "), None)),
            "TOKEN_MALFORMED"
        );
        assert_eq!(
            denial(at_now(&auth, CLAIM, Some(&bearer("tally_guess")), None)),
            "TOKEN_UNKNOWN"
        );
        // A good certificate does not rescue a bad token.
        assert_eq!(
            denial(at_now(
                &auth,
                CLAIM,
                Some(&bearer("tally_guess")),
                Some("worker-7")
            )),
            "TOKEN_UNKNOWN"
        );
        let s = Denial::TokenUnknown.status(CLAIM);
        assert_eq!(s.code(), Code::Unauthenticated);
        assert!(!s.message().contains("tally_guess"));
    }

    #[test]
    fn certificates_name_the_caller_with_mapped_or_default_roles() {
        let auth = Authenticator::from_args(&args()).unwrap();
        match at_now(&auth, CLAIM, None, Some("worker-7")) {
            Decision::Allow(Some(p)) => {
                assert_eq!(p.name, "worker-7");
                assert_eq!(p.via, Via::Certificate);
            }
            other => panic!("{other:?}"),
        }
        // Unmapped subject, no --mtls-roles: known, but allowed nothing.
        assert_eq!(
            denial(at_now(&auth, CLAIM, None, Some("stranger"))),
            "ROLE_DENIED"
        );
        let mut a = args();
        a.mtls_roles = vec![Role::Enroller];
        a.mtls_ledgers = vec!["*".into()];
        let auth = Authenticator::from_args(&a).unwrap();
        assert!(matches!(
            at_now(&auth, ENROLL, None, Some("stranger")),
            Decision::Allow(Some(_))
        ));
        assert_eq!(
            denial(at_now(&auth, CLAIM, None, Some("stranger"))),
            "ROLE_DENIED"
        );
    }

    #[test]
    fn unlisted_methods_are_denied_even_to_operators() {
        let auth = Authenticator::from_args(&args()).unwrap();
        let path = "/tally.v1.LedgerService/DropEverything";
        assert_eq!(
            denial(at_now(&auth, path, Some(&bearer(ALICE)), None)),
            "METHOD_NOT_LISTED"
        );
        assert_eq!(denial(at_now(&auth, path, None, None)), "TOKEN_MISSING");
        let s = Denial::NotListed {
            caller: "alice".into(),
        }
        .status(path);
        assert_eq!(s.code(), Code::PermissionDenied);
    }

    #[test]
    fn health_is_open_and_reflection_follows_its_setting() {
        let refl = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
        let mut a = args();
        a.reflection = ReflectionMode::Open;
        let auth = Authenticator::from_args(&a).unwrap();
        assert_eq!(
            at_now(&auth, "/grpc.health.v1.Health/Check", None, None),
            Decision::Allow(None)
        );
        assert_eq!(at_now(&auth, refl, None, None), Decision::Allow(None));
        a.reflection = ReflectionMode::Authenticated;
        let auth = Authenticator::from_args(&a).unwrap();
        assert_eq!(denial(at_now(&auth, refl, None, None)), "TOKEN_MISSING");
        assert!(matches!(
            at_now(&auth, refl, Some(&bearer(EVE)), None),
            Decision::Allow(Some(_))
        ));
        a.reflection = ReflectionMode::Off;
        let auth = Authenticator::from_args(&a).unwrap();
        assert_eq!(
            denial(at_now(&auth, refl, Some(&bearer(ALICE)), None)),
            "REFLECTION_OFF"
        );
    }

    /// A token past its expire_time is refused as UNAUTHENTICATED
    /// TOKEN_EXPIRED, naming the caller and the time; before it, it works.
    #[test]
    fn expired_tokens_are_refused_and_scopes_travel_with_the_caller() {
        let mut a = args();
        a.tokens = Some(format!(
            r#"{{"tokens": [{{"name": "acme-etl", "roles": ["enroller"], "ledgers": ["acme-*"],
                 "expire_time": "2027-03-01T00:00:00Z", "sha256": "{}"}}],
                "certificates": [{{"subject": "acme-w", "roles": ["worker"], "ledgers": ["acme-*"]}}]}}"#,
            hash_hex(EVE)
        ));
        a.mtls_roles = vec![Role::Worker];
        a.mtls_ledgers = vec!["beta-*".into()];
        let auth = Authenticator::from_args(&a).unwrap();
        let before = DateTime::parse_from_rfc3339("2027-02-28T23:59:59Z")
            .unwrap()
            .to_utc();
        let after = DateTime::parse_from_rfc3339("2027-03-01T00:00:00Z")
            .unwrap()
            .to_utc();
        match auth.decide(ENROLL, Some(&bearer(EVE)), None, before) {
            Decision::Allow(Some(p)) => {
                assert!(p.scope.ledger("acme-1") && !p.scope.ledger("beta-1"));
            }
            other => panic!("{other:?}"),
        }
        let Decision::Deny(d) = auth.decide(ENROLL, Some(&bearer(EVE)), None, after) else {
            panic!("an expired token was let through")
        };
        assert_eq!(d.reason(), "TOKEN_EXPIRED");
        let status = d.status(ENROLL);
        assert_eq!(status.code(), Code::Unauthenticated);
        assert!(
            status.message().contains("acme-etl")
                && status.message().contains("2027-03-01T00:00:00Z")
        );
        match auth.decide(CLAIM, None, Some("acme-w"), after) {
            Decision::Allow(Some(p)) => {
                assert!(p.scope.ledger("acme-1") && !p.scope.ledger("beta-1"))
            }
            other => panic!("{other:?}"),
        }
        match auth.decide(CLAIM, None, Some("stranger"), after) {
            Decision::Allow(Some(p)) => {
                assert!(p.scope.ledger("beta-1") && !p.scope.ledger("acme-1"))
            }
            other => panic!("{other:?}"),
        }
        a.mtls_ledgers = vec!["a b".into()];
        let e = Authenticator::from_args(&a).unwrap_err().to_string();
        assert!(e.starts_with("--mtls-ledgers"), "{e}");
    }

    #[test]
    fn disabled_lets_everything_through_as_anonymous() {
        let auth = Authenticator::from_args(&Security::disabled()).unwrap();
        match at_now(&auth, "/tally.v1.LedgerService/RedriveRows", None, None) {
            Decision::Allow(Some(p)) => assert_eq!(p.name, "anonymous"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dangerous_or_useless_settings_are_refused() {
        let mut a = Security::disabled();
        a.auth = AuthMode::Tokens;
        let e = Authenticator::from_args(&a).unwrap_err();
        assert!(matches!(e, ConfigError::NoCredentials));
        let text = e.to_string();
        assert!(text.contains("--tokens-file") && text.contains("--auth disabled"));

        let mut a = args();
        a.tls_client_ca = None;
        assert!(
            Authenticator::from_args(&a)
                .unwrap_err()
                .to_string()
                .contains("--tls-client-ca")
        );

        let mut a = Security::disabled();
        a.mtls_roles = vec![Role::Worker];
        assert!(Authenticator::from_args(&a).is_err());

        // mTLS with default roles is enough on its own, once their scope
        // is said: it is never implied.
        let mut a = Security::disabled();
        a.auth = AuthMode::Tokens;
        a.tls_client_ca = Some("ca.pem".into());
        a.mtls_roles = vec![Role::Worker];
        let e = Authenticator::from_args(&a).unwrap_err().to_string();
        assert!(e.contains("--mtls-ledgers"), "{e}");
        a.mtls_ledgers = vec!["*".into()];
        assert!(Authenticator::from_args(&a).is_ok());
    }

    #[test]
    fn roles_print_and_combine() {
        let r = Roles::of(&[Role::Operator, Role::Enroller]);
        assert_eq!(r.to_string(), "enroller,operator");
        assert!(r.has(Role::Enroller) && !r.has(Role::Worker));
        assert_eq!(Roles::NONE.to_string(), "none");
        assert!(r.intersects(Roles::OPERATOR) && !r.intersects(Roles::WORKER));
    }
}

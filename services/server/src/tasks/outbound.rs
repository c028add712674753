//! The server's own outbound POSTs (alerts, webhook consumers): signed the
//! Standard Webhooks way ([`tally_core::webhook::sign`]) and guarded
//! against request forgery ([`tally_core::outbound`]).
//!
//! A destination URL is chosen by a caller, so unless the server allows
//! private hosts, a literal address is checked before sending, and a name
//! is resolved once by [`PublicResolver`], which refuses it when any of its
//! addresses is not public and otherwise hands exactly those addresses to
//! the connector (no second lookup that could answer differently). No
//! proxy is used (it would resolve the name itself) and no redirect is
//! followed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tally_core::outbound::{self, Host, Reach};
use tally_core::text::redact_urls;
use tally_core::webhook::{Secret, sign};

/// One POST's time limit.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a POST got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Its target is not one this server may reach.
    Refused(String),
    /// No connection, a timeout, a broken answer.
    Failed(String),
}

impl Failure {
    pub fn why(&self) -> &str {
        match self {
            Failure::Refused(why) | Failure::Failed(why) => why,
        }
    }
}

/// A signing HTTP client that reaches only what `reach` allows.
pub struct Poster {
    reach: Reach,
    http: reqwest::Client,
}

impl Poster {
    pub fn new(reach: Reach) -> anyhow::Result<Self> {
        // reqwest is built without a bundled crypto provider (the default
        // one needs cmake); ring is installed once per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .user_agent(concat!("tally/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if reach == Reach::PublicOnly {
            http = http.dns_resolver(Arc::new(PublicResolver));
        }
        Ok(Self {
            reach,
            http: http.build()?,
        })
    }

    /// POSTs `body` (JSON) to `url` as message `id` at `timestamp` (unix
    /// seconds), signed with `secret`; answers the HTTP status, whatever it
    /// is, or why there was none.
    pub async fn post(
        &self,
        url: &str,
        secret: &Secret,
        id: &str,
        timestamp: i64,
        body: String,
    ) -> Result<reqwest::StatusCode, Failure> {
        // Literal addresses never reach the resolver: checked here.
        match outbound::parse_target(url) {
            Err(why) => return Err(Failure::Refused(redact_urls(&format!("url {why}")))),
            Ok(Host::Ip(ip)) => {
                if let Some(why) = self.reach.refuses(ip) {
                    return Err(Failure::Refused(why));
                }
            }
            Ok(Host::Name(_)) => {}
        }
        let signature = sign(secret, id, timestamp, body.as_bytes());
        let resp = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|e| match refusal_in(&e) {
                Some(why) => Failure::Refused(why),
                // The error quotes the URL, which may hold credentials: it
                // goes to logs and records without them.
                None => Failure::Failed(redact_urls(&format!(
                    "post failed: {}",
                    with_causes(&e.without_url())
                ))),
            })?;
        Ok(resp.status())
    }
}

/// The resolver's refusal inside a request error, if that is what it is.
fn refusal_in(e: &reqwest::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cause = c.source();
    }
    None
}

/// An error with its causes, `outer: inner: …` (reqwest's own message
/// leaves out why the request could not be sent).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A host name whose addresses are not all public.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Resolves a name once and refuses it when any address is not public; the
/// connector then uses exactly the addresses checked here.
struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for a in &addrs {
                if let Some(why) = Reach::PublicOnly.refuses(a.ip()) {
                    return Err(Box::new(Refused(format!("host {host}: {why}"))) as _);
                }
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

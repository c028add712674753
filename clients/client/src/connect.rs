//! Connecting to tally: one lazily connected channel (an unreachable server
//! is an UNAVAILABLE answer to the first call, which callers retry), TLS
//! for `https://` addresses, the bearer token on every call, and the four
//! service clients over it. tally-worker and tallyctl both connect here;
//! errors name their shared flags (`--server`, `--tls-ca`, …).
//!
//! TLS trusts the system's root certificates unless a CA file is given
//! (tonic's `tls-native-roots`: the operating system's store, so a CA an
//! operator installs system-wide is trusted too, and updates come with the
//! OS; the container image ships `ca-certificates`). A private CA (`--tls-ca`)
//! replaces the system roots: a server with a private certificate is
//! trusted only through that CA.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tally_proto::v1::delivery_service_client::DeliveryServiceClient;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The largest message these clients send or receive: large enough for a
/// 10,000-row report or a full ListRows page. ClaimRows tells the server
/// (`max_response_bytes`), so a claim never answers more than this.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Adds `authorization: Bearer <token>` to every request (nothing without
/// a token), and the caller's trace context when traces are exported. Its `Debug` never shows the token.
#[derive(Clone, Default)]
pub struct Bearer {
    header: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.header.is_some() {
            "Bearer(..)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Bearer {
    /// A token that cannot go in a header is refused here, not on every call.
    pub fn new(token: Option<&str>) -> Result<Self, ConnectError> {
        let header = match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| ConnectError::BadToken)?,
            ),
        };
        Ok(Self { header })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            req.metadata_mut().insert("authorization", h.clone());
        }
        inject_trace_context(req.metadata_mut());
        Ok(req)
    }
}

/// Writes trace context into gRPC metadata.
struct Metadata<'a>(&'a mut tonic::metadata::MetadataMap);

impl opentelemetry::propagation::Injector for Metadata<'_> {
    fn set(&mut self, key: &str, value: String) {
        let key = tonic::metadata::MetadataKey::from_bytes(key.as_bytes());
        if let (Ok(key), Ok(value)) = (key, MetadataValue::try_from(value)) {
            self.0.insert(key, value);
        }
    }
}

/// Adds the current span's W3C trace context (`traceparent`) to a call, so
/// the server's span of it joins the caller's trace. Nothing is added
/// unless the process exports traces (the global propagator is a no-op
/// until `tally_telemetry::traces` installs one).
fn inject_trace_context(metadata: &mut tonic::metadata::MetadataMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut Metadata(metadata));
    });
}

/// A channel that carries the bearer token.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// The four service clients over one channel (clones share it).
#[derive(Clone, Debug)]
pub struct Clients {
    pub ledgers: LedgerServiceClient<AuthChannel>,
    pub jobs: JobServiceClient<AuthChannel>,
    pub operations: OperationsServiceClient<AuthChannel>,
    pub deliveries: DeliveryServiceClient<AuthChannel>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("bad --server {0:?}: {1}")]
    BadAddress(String, String),
    #[error("--token holds characters a header cannot (non-ASCII or control characters)")]
    BadToken,
    #[error("TLS flags need an https:// --server address")]
    TlsWithoutHttps,
    #[error("--tls-cert and --tls-key go together (a client certificate and its key)")]
    HalfIdentity,
    #[error("cannot read {flag} {}: {error}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("bad TLS configuration: {0}")]
    Tls(String),
}

/// How to reach the server over TLS (used only for `https://` addresses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// PEM of the CA that signed the server's certificate; without one,
    /// the system's root certificates are trusted.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key, for mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The name to verify in the server's certificate (default: the
    /// address's host).
    pub domain: Option<String>,
}

impl Tls {
    fn is_set(&self) -> bool {
        *self != Tls::default()
    }

    fn config(&self) -> Result<ClientTlsConfig, ConnectError> {
        let mut tls = match &self.ca {
            Some(ca) => {
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca, "--tls-ca")?))
            }
            None => ClientTlsConfig::new().with_native_roots(),
        };
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(Identity::from_pem(
                    read(cert, "--tls-cert")?,
                    read(key, "--tls-key")?,
                ));
            }
            (None, None) => {}
            _ => return Err(ConnectError::HalfIdentity),
        }
        if let Some(domain) = &self.domain {
            tls = tls.domain_name(domain.clone());
        }
        Ok(tls)
    }
}

fn read(path: &Path, flag: &'static str) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|error| ConnectError::Read {
        flag,
        path: path.to_path_buf(),
        error,
    })
}

/// Where and how to connect.
#[derive(Clone, Default)]
pub struct Target {
    /// `http://host:port` or `https://host:port`.
    pub server: String,
    /// Sent as `authorization: Bearer <token>` when set.
    pub token: Option<String>,
    pub tls: Tls,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("tls", &self.tls)
            .finish()
    }
}

impl Target {
    /// Why sending the token this way is unsafe, when it is: a token to
    /// another machine without TLS can be read by anyone on the path.
    pub fn plaintext_token_warning(&self) -> Option<String> {
        let token = self
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if token.is_none() || self.server.starts_with("https://") {
            return None;
        }
        let uri: tonic::transport::Uri = self.server.parse().ok()?;
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (!loopback).then(|| {
            format!(
                "sending the bearer token to {} without TLS: anyone on the path can read it and act as you; use an https:// --server",
                self.server
            )
        })
    }

    /// The four clients over one lazily connected channel. TLS settings
    /// need an `https://` address; an `https://` address without a CA file
    /// trusts the system's roots.
    pub fn connect(&self) -> Result<Clients, ConnectError> {
        self.connect_with_timeout(None)
    }

    /// [`Target::connect`], with every call bounded by `timeout` (until the
    /// response headers arrive, so a server stream is bounded only while it
    /// opens). A call past it fails with CANCELLED "Timeout expired"
    /// ([`tonic::TimeoutExpired`]). tallyctl's `--timeout` is this.
    pub fn connect_with_timeout(&self, timeout: Option<Duration>) -> Result<Clients, ConnectError> {
        let server = &self.server;
        let mut endpoint = Endpoint::from_shared(server.clone())
            .map_err(|e| ConnectError::BadAddress(server.clone(), e.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true);
        if let Some(timeout) = timeout {
            endpoint = endpoint.timeout(timeout);
        }
        let https = server.starts_with("https://");
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(ConnectError::HalfIdentity);
        }
        if self.tls.is_set() && !https {
            return Err(ConnectError::TlsWithoutHttps);
        }
        if https {
            endpoint = endpoint
                .tls_config(self.tls.config()?)
                .map_err(|e| ConnectError::Tls(e.to_string()))?;
        }
        let channel =
            InterceptedService::new(endpoint.connect_lazy(), Bearer::new(self.token.as_deref())?);
        Ok(Clients {
            ledgers: LedgerServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            jobs: JobServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            operations: OperationsServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            deliveries: DeliveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        })
    }
}

/// Clients for `server` (`http://host:port`, or `https://…` trusting the
/// system's roots), connecting on first use, with `token` as the bearer
/// token when given. [`Target`] takes TLS settings too.
pub fn connect(server: &str, token: Option<&str>) -> Result<Clients, ConnectError> {
    Target {
        server: server.to_string(),
        token: token.map(str::to_string),
        tls: Tls::default(),
    }
    .connect()
}

#[cfg(test)]
mod tests {
    // Invariant: only a token to another machine without TLS is warned
    // about.
    #[test]
    fn a_plaintext_token_to_another_machine_is_warned_about() {
        let t = |server: &str, token: Option<&str>| {
            super::Target {
                server: server.into(),
                token: token.map(str::to_owned),
                ..Default::default()
            }
            .plaintext_token_warning()
        };
        assert!(t("http://10.1.2.3:50051", Some("s")).is_some());
        assert!(t("http://tally.internal:50051", Some("s")).is_some());
        for quiet in [
            "http://127.0.0.1:50051",
            "http://localhost:50051",
            "http://[::1]:50051",
            "https://tally.example.com:443",
        ] {
            assert!(t(quiet, Some("s")).is_none(), "{quiet}");
        }
        assert!(t("http://10.1.2.3:50051", None).is_none());
        assert!(t("http://10.1.2.3:50051", Some(" ")).is_none());
    }

    use super::*;

    #[test]
    fn the_token_goes_in_the_authorization_header_and_never_in_debug() {
        let mut b = Bearer::new(Some("s3cret")).unwrap();
        assert_eq!(format!("{b:?}"), "Bearer(..)");
        let req = b.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            req.metadata().get("authorization").unwrap(),
            "Bearer s3cret"
        );
        let mut none = Bearer::new(Some("  ")).unwrap();
        let req = none.call(tonic::Request::new(())).unwrap();
        assert!(req.metadata().get("authorization").is_none());
        assert!(matches!(
            Bearer::new(Some("bad\ntoken")),
            Err(ConnectError::BadToken)
        ));
    }

    #[test]
    fn a_bad_address_is_refused() {
        assert!(matches!(
            connect("not a url", None),
            Err(ConnectError::BadAddress(..))
        ));
    }

    #[tokio::test]
    async fn tls_settings_need_https_and_both_halves_of_an_identity() {
        // Invariant: TLS flags on a plaintext address, a certificate
        // without its key, or an unreadable CA file are refused before any
        // connection, each with a message naming the flag.
        let tls_on_http = Target {
            server: "http://example:80".into(),
            tls: Tls {
                ca: Some("/nonexistent/ca.pem".into()),
                ..Tls::default()
            },
            ..Target::default()
        };
        let err = tls_on_http.connect().unwrap_err().to_string();
        assert!(err.contains("https://"), "{err}");
        let half = Target {
            server: "https://example:443".into(),
            tls: Tls {
                cert: Some("/x.pem".into()),
                ..Tls::default()
            },
            ..Target::default()
        };
        assert!(matches!(half.connect(), Err(ConnectError::HalfIdentity)));
        let unreadable = Target {
            server: "https://example:443".into(),
            tls: Tls {
                ca: Some("/nonexistent/ca.pem".into()),
                ..Tls::default()
            },
            ..Target::default()
        };
        let err = unreadable.connect().unwrap_err().to_string();
        assert!(
            err.contains("--tls-ca") && err.contains("/nonexistent/ca.pem"),
            "{err}"
        );
    }
}

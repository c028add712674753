//! Connecting to tally: one lazily connected channel (an unreachable server
//! is an UNAVAILABLE answer to the first call, which callers retry), the
//! bearer token on every call, and the three service clients over it.

use std::time::Duration;

use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// Large enough for a 10,000-row report or a full ListRows page.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Adds `authorization: Bearer <token>` to every request (nothing without
/// a token). Its `Debug` never shows the token.
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
        Ok(req)
    }
}

/// A channel that carries the bearer token.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// The three service clients over one channel (clones share it).
#[derive(Clone, Debug)]
pub struct Clients {
    pub ledgers: LedgerServiceClient<AuthChannel>,
    pub jobs: JobServiceClient<AuthChannel>,
    pub operations: OperationsServiceClient<AuthChannel>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("bad server address {0:?}: {1}")]
    BadAddress(String, String),
    #[error("the token cannot be sent as a header (non-ASCII or control characters)")]
    BadToken,
    #[error("tls: {0}")]
    Tls(String),
}

/// Clients for `server` (`http://host:port` or `https://…`), connecting on
/// first use, with `token` as the bearer token when given.
pub fn connect(server: &str, token: Option<&str>) -> Result<Clients, ConnectError> {
    let mut endpoint = Endpoint::from_shared(server.to_string())
        .map_err(|e| ConnectError::BadAddress(server.to_string(), e.to_string()))?
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if server.starts_with("https://") {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new())
            .map_err(|e| ConnectError::Tls(e.to_string()))?;
    }
    let channel = InterceptedService::new(endpoint.connect_lazy(), Bearer::new(token)?);
    Ok(Clients {
        ledgers: LedgerServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        jobs: JobServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        operations: OperationsServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    })
}

#[cfg(test)]
mod tests {
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
}

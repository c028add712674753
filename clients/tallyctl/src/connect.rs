//! The connection: one lazily connected channel (so an unreachable server
//! is an UNAVAILABLE answer to the first call, exit code 2), optional TLS
//! with a private CA (and a client certificate for mTLS), and the bearer
//! token on every call.

use crate::error::CliError;
use std::path::PathBuf;
use std::time::Duration;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Where and how to connect (the global flags).
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub server: String,
    pub token: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_domain: Option<String>,
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct Auth {
    header: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    }
}

pub type Svc = InterceptedService<Channel, Auth>;

/// The three service clients over one channel.
#[derive(Clone)]
pub struct Clients {
    pub ledgers: LedgerServiceClient<Svc>,
    pub jobs: JobServiceClient<Svc>,
    pub operations: OperationsServiceClient<Svc>,
}

/// Large enough for a 10,000-row enroll or a full ListRows page.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

fn read(path: &PathBuf, what: &str) -> Result<Vec<u8>, CliError> {
    std::fs::read(path)
        .map_err(|e| CliError::usage(format!("cannot read {what} {}: {e}", path.display())))
}

impl Target {
    pub fn connect(&self) -> Result<Clients, CliError> {
        let mut endpoint = Endpoint::from_shared(self.server.clone())
            .map_err(|e| CliError::usage(format!("bad --server {:?}: {e}", self.server)))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true);
        let https = self.server.starts_with("https://");
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(CliError::usage(
                "--tls-cert and --tls-key go together (a client certificate and its key)",
            ));
        }
        if self.tls_ca.is_some() || self.tls_cert.is_some() || https {
            if !https {
                return Err(CliError::usage(
                    "TLS flags need an https:// --server address",
                ));
            }
            let Some(ca) = &self.tls_ca else {
                return Err(CliError::usage(
                    "an https:// server needs --tls-ca (the PEM of the CA that signed the server's certificate)",
                ));
            };
            let mut tls =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca, "--tls-ca")?));
            if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
                tls = tls.identity(Identity::from_pem(
                    read(cert, "--tls-cert")?,
                    read(key, "--tls-key")?,
                ));
            }
            if let Some(domain) = &self.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| CliError::usage(format!("bad TLS configuration: {e}")))?;
        }
        let header = match &self.token {
            Some(t) if !t.is_empty() => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| CliError::usage("--token holds characters a header cannot"))?,
            ),
            _ => None,
        };
        let channel = endpoint.connect_lazy();
        let auth = Auth { header };
        Ok(Clients {
            ledgers: LedgerServiceClient::with_interceptor(channel.clone(), auth.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            jobs: JobServiceClient::with_interceptor(channel.clone(), auth.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            operations: OperationsServiceClient::with_interceptor(channel, auth)
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_in_the_authorization_header() {
        let mut auth = Auth {
            header: Some("Bearer s3cret".parse().unwrap()),
        };
        let req = auth.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            req.metadata().get("authorization").unwrap(),
            "Bearer s3cret"
        );
        let mut none = Auth { header: None };
        assert!(
            none.call(tonic::Request::new(()))
                .unwrap()
                .metadata()
                .get("authorization")
                .is_none()
        );
    }

    #[test]
    fn tls_flags_need_https_and_a_ca() {
        let t = Target {
            server: "https://example:443".into(),
            ..Default::default()
        };
        assert!(t.connect().err().unwrap().to_string().contains("--tls-ca"));
        let t = Target {
            server: "http://example:80".into(),
            tls_ca: Some("/nonexistent".into()),
            ..Default::default()
        };
        assert!(t.connect().err().unwrap().to_string().contains("https://"));
    }
}

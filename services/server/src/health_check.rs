//! `tally-server health`: asks a running server's gRPC health service
//! whether it is SERVING, for a container's HEALTHCHECK (the image carries
//! no other gRPC client). SERVING means the server has migrated, listens
//! and reaches its database; anything else, or no answer in time, is
//! unhealthy. Plaintext only: point it at the `--health-addr` port when
//! the gRPC port speaks TLS.

use crate::config::parse_duration;
use clap::Args;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Address to ask; unset, --grpc-addr is asked. The image sets it to
    /// the plaintext health port.
    #[arg(long, env = "TALLY_HEALTH_ADDR")]
    pub addr: Option<SocketAddr>,

    /// The server's gRPC address, asked when --addr is unset (plaintext).
    #[arg(long, env = "TALLY_GRPC_ADDR", default_value = "127.0.0.1:50051")]
    pub grpc_addr: SocketAddr,

    /// Service to ask about; empty is the server as a whole.
    #[arg(long, default_value = "")]
    pub service: String,

    /// Longest the check waits, connecting included.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl HealthArgs {
    /// Where to connect: --addr, else --grpc-addr. A server listens on an
    /// unspecified address (0.0.0.0, [::]) but is reached on loopback.
    pub fn target(&self) -> SocketAddr {
        let mut addr = self.addr.unwrap_or(self.grpc_addr);
        match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => addr.set_ip(Ipv4Addr::LOCALHOST.into()),
            IpAddr::V6(ip) if ip.is_unspecified() => addr.set_ip(Ipv6Addr::LOCALHOST.into()),
            _ => {}
        }
        addr
    }
}

/// `Ok` when the server answers SERVING; otherwise why not, naming the
/// address.
pub async fn check(args: &HealthArgs) -> Result<(), String> {
    let target = args.target();
    let ask = async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
            .map_err(|e| format!("{target}: {e}"))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {target}: {e}"))?;
        let request = HealthCheckRequest {
            service: args.service.clone(),
        };
        let answer = HealthClient::new(channel)
            .check(request)
            .await
            .map_err(|s| format!("{target}: {:?}: {}", s.code(), s.message()))?;
        match answer.into_inner().status() {
            ServingStatus::Serving => Ok(()),
            other => Err(format!("{target}: {}", other.as_str_name())),
        }
    };
    tokio::time::timeout(args.timeout, ask)
        .await
        .map_err(|_| format!("{target}: no answer within {:?}", args.timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        health: HealthArgs,
    }

    fn parse(args: &[&str]) -> HealthArgs {
        Cli::try_parse_from(std::iter::once("health").chain(args.iter().copied()))
            .unwrap()
            .health
    }

    /// The health address wins over the gRPC address, and a listen-all
    /// address is asked on loopback of the same family and port.
    #[test]
    fn the_target_is_the_health_port_on_loopback() {
        assert_eq!(parse(&[]).target().to_string(), "127.0.0.1:50051");
        assert_eq!(
            parse(&["--grpc-addr", "0.0.0.0:7000"]).target().to_string(),
            "127.0.0.1:7000"
        );
        assert_eq!(
            parse(&["--grpc-addr", "0.0.0.0:7000", "--addr", "[::]:50052"])
                .target()
                .to_string(),
            "[::1]:50052"
        );
        assert_eq!(
            parse(&["--addr", "10.1.2.3:50052"]).target().to_string(),
            "10.1.2.3:50052"
        );
        assert!(Cli::try_parse_from(["health", "--timeout", "soon"]).is_err());
    }
}

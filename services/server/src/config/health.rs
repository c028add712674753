//! `tally-server health`'s flags (the check itself is
//! [`crate::startup::health_check`]).

use super::parse_duration;
use clap::Args;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

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

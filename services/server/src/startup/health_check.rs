//! `tally-server health`: asks a running server's gRPC health service
//! whether it is SERVING, for a container's HEALTHCHECK (the image carries
//! no other gRPC client). SERVING means the server has migrated, listens
//! and reaches its database; anything else, or no answer in time, is
//! unhealthy. Plaintext only: point it at the `--health-addr` port when
//! the gRPC port speaks TLS.

use crate::config::health::HealthArgs;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

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

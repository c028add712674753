//! TLS and mTLS handshakes with certificates made here (rcgen): accepted,
//! refused without a client certificate or with one from another CA, the
//! certificate's subject as the caller, and plaintext health for probes.

use crate::security::common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::PathBuf;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::roles::Role;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// A certificate authority that signs server and client certificates.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(&self, common_name: &str, sans: &[&str], purpose: ExtendedKeyUsagePurpose) -> Leaf {
        let names: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap().pem();
        Leaf {
            cert,
            key: key.serialize_pem(),
        }
    }

    fn server(&self) -> Leaf {
        self.leaf(
            "tally-server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    fn client(&self, name: &str) -> Leaf {
        self.leaf(name, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// PEM files in a fresh directory, removed on drop.
struct Files(PathBuf);

impl Files {
    fn new() -> Files {
        let dir = std::env::temp_dir().join(format!("tally-tls-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TLS channel trusting `ca`, presenting `identity` if given.
async fn tls_channel(
    server: &TestServer,
    ca: &Ca,
    identity: Option<&Leaf>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    Endpoint::from_shared(format!("https://{}", server.running.grpc_addr))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

async fn health(channel: Channel) -> Result<(), tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|_| ())
}

async fn list_ledgers(channel: Channel, token: Option<&str>) -> Result<(), tonic::Status> {
    LedgerServiceClient::new(channel)
        .list_ledgers(authed(pb::ListLedgersRequest::default(), token))
        .await
        .map(|_| ())
}

/// The call failed below gRPC: no handler, no auth layer answered it.
fn refused_by_tls(result: Result<(), tonic::Status>) {
    let status = result.expect_err("the handshake must fail");
    assert!(
        !matches!(
            status.code(),
            Code::Ok | Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument
        ),
        "expected a transport failure, got {status:?}"
    );
}

/// A connect that fails, or a call on it that fails, is a refusal.
async fn attempt(
    server: &TestServer,
    ca: &Ca,
    identity: Option<&Leaf>,
    token: Option<&str>,
) -> Result<(), tonic::Status> {
    match tls_channel(server, ca, identity).await {
        Ok(channel) => list_ledgers(channel, token).await,
        Err(e) => Err(tonic::Status::unavailable(format!("connect failed: {e}"))),
    }
}

#[tokio::test]
async fn tls_serves_trusting_clients_and_refuses_plaintext_and_strangers() {
    let ca = Ca::new("tally test CA");
    let files = Files::new();
    let leaf = ca.server();
    let server = start(|a| {
        a.security.tls_cert = Some(files.write("server.pem", &leaf.cert));
        a.security.tls_key = Some(files.write("server.key", &leaf.key));
        a.security.health_addr = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;

    attempt(&server, &ca, None, Some(OPERATOR))
        .await
        .expect("a client trusting the CA is served");
    // Plaintext gRPC to the TLS port.
    let plain = Endpoint::from_shared(server.url()).unwrap().connect().await;
    // (Refused at connect is just as good.)
    if let Ok(channel) = plain {
        refused_by_tls(list_ledgers(channel, Some(OPERATOR)).await);
    }
    // A client that does not trust the server's CA refuses it.
    let other = Ca::new("someone else");
    refused_by_tls(attempt(&server, &other, None, Some(OPERATOR)).await);

    // Kubernetes probes: plaintext health on its own port, nothing else.
    let health_addr = server.running.health_addr.expect("health listener");
    let probe = Endpoint::from_shared(format!("http://{health_addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    health(probe.clone()).await.expect("plaintext health");
    let other_rpc = list_ledgers(probe, Some(OPERATOR)).await.unwrap_err();
    assert_eq!(other_rpc.code(), Code::Unimplemented, "{other_rpc:?}");

    // Still serving after the failed handshakes.
    attempt(&server, &ca, None, Some(OPERATOR)).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn mtls_names_the_caller_from_the_certificate_and_refuses_others() {
    let ca = Ca::new("tally test CA");
    let files = Files::new();
    let leaf = ca.server();
    let server = start(|a| {
        a.security.tls_cert = Some(files.write("server.pem", &leaf.cert));
        a.security.tls_key = Some(files.write("server.key", &leaf.key));
        a.security.tls_client_ca = Some(files.write("clients.pem", &ca.pem));
        a.security.tokens = Some(tokens_json(
            r#"{"subject": "worker-7", "roles": ["worker"], "ledgers": ["*"]}"#,
        ));
        a.security.mtls_roles = vec![Role::Enroller];
        a.security.mtls_ledgers = vec!["*".into()];
    })
    .await;

    let worker_cert = ca.client("worker-7");
    let worker = LedgerServiceClient::new(
        tls_channel(&server, &ca, Some(&worker_cert))
            .await
            .expect("a certificate signed by the client CA is accepted"),
    );
    // An operator's console: its own certificate, but it sends a token,
    // and a token decides who the caller is.
    let console_cert = ca.client("ops-console");
    let console = LedgerServiceClient::new(
        tls_channel(&server, &ca, Some(&console_cert))
            .await
            .unwrap(),
    );
    let row = one_reported_row(
        (console.clone(), Some(OPERATOR)),
        (worker.clone(), None),
        "mtls",
    )
    .await;
    assert_eq!(row.history[0].actor, "worker-7", "the subject is the actor");

    // The mapped worker may not redrive; the refusal names it.
    let denied = worker
        .clone()
        .redrive_rows(authed(
            pb::RedriveRowsRequest {
                parent: "ledgers/mtls".into(),
                ..Default::default()
            },
            None,
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert_eq!(reason(&denied), "ROLE_DENIED");
    assert!(denied.message().contains("worker-7"), "{denied:?}");

    // An unmapped subject gets --mtls-roles (enroller here): it may read
    // ledgers but not claim.
    let stranger = tls_channel(&server, &ca, Some(&ca.client("batch-uploader")))
        .await
        .unwrap();
    list_ledgers(stranger.clone(), None).await.unwrap();
    let claim = LedgerServiceClient::new(stranger)
        .claim_rows(authed(
            pb::ClaimRowsRequest {
                parent: "ledgers/mtls".into(),
                max_rows: 1,
                ..Default::default()
            },
            None,
        ))
        .await;
    assert_refused(claim, Code::PermissionDenied, "ROLE_DENIED");

    // A bad token is refused even over a good certificate.
    let bad = list_ledgers(
        tls_channel(&server, &ca, Some(&worker_cert)).await.unwrap(),
        Some(WRONG),
    )
    .await;
    assert_refused(bad, Code::Unauthenticated, "TOKEN_UNKNOWN");

    // No client certificate: refused in the handshake, token or not.
    refused_by_tls(attempt(&server, &ca, None, Some(OPERATOR)).await);
    // A certificate from another CA (trusting the right server CA).
    let other = Ca::new("another CA");
    let foreign = other.client("worker-7");
    refused_by_tls(attempt(&server, &ca, Some(&foreign), Some(OPERATOR)).await);

    // The server still serves its own clients.
    list_ledgers(
        tls_channel(&server, &ca, Some(&worker_cert)).await.unwrap(),
        None,
    )
    .await
    .unwrap();
    server.stop().await;
}

#[tokio::test]
async fn bad_security_settings_stop_the_server_before_anything_starts() {
    // No database answers here: the refusals must come first.
    let nowhere = "postgres://nobody:x@127.0.0.1:1/none".to_string();
    let mut args = tally_server::config::ServeArgs::for_tests(nowhere.clone());
    args.security.auth = tally_server::config::AuthMode::Tokens;
    let e = tally_server::startup::server::start(args)
        .await
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("--tokens-file"), "{e:#}");

    let ca = Ca::new("tally test CA");
    let files = Files::new();
    let (one, two) = (ca.server(), ca.server());
    let mut args = tally_server::config::ServeArgs::for_tests(nowhere);
    args.security.tls_cert = Some(files.write("one.pem", &one.cert));
    args.security.tls_key = Some(files.write("two.key", &two.key));
    let e = tally_server::startup::server::start(args)
        .await
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("TLS"), "{e:#}");
}

/// The server name in test certificates, with --tls-domain where the
/// address is an IP.
fn client_target(server: &TestServer, ca: Option<std::path::PathBuf>) -> tally_client::Target {
    tally_client::Target {
        server: format!("https://localhost:{}", server.running.grpc_addr.port()),
        token: Some(WORKER.into()),
        tls: tally_client::Tls {
            ca,
            ..tally_client::Tls::default()
        },
    }
}

#[tokio::test]
async fn tally_client_reaches_a_tls_server_through_its_ca_file() {
    // Invariant: tally-client (the worker's and tallyctl's connection)
    // speaks TLS to an https:// server, trusting the --tls-ca file; a
    // server whose CA it was not given (and that no system root signed)
    // is refused at the handshake, UNAVAILABLE, and nothing is called.
    let ca = Ca::new("tally test CA");
    let files = Files::new();
    let leaf = ca.server();
    let server = start(|a| {
        a.security.tls_cert = Some(files.write("server.pem", &leaf.cert));
        a.security.tls_key = Some(files.write("server.key", &leaf.key));
    })
    .await;
    let ca_file = files.write("ca.pem", &ca.pem);

    let mut trusting = client_target(&server, Some(ca_file)).connect().unwrap();
    let claimed = trusting
        .ledgers
        .claim_rows(pb::ClaimRowsRequest {
            parent: "ledgers/none".into(),
            max_rows: 1,
            worker: "tls-worker".into(),
            ..Default::default()
        })
        .await;
    // Authenticated as the worker over TLS: the ledger does not exist.
    assert_eq!(claimed.unwrap_err().code(), Code::NotFound);

    let mut system_roots = client_target(&server, None).connect().unwrap();
    let refused = system_roots
        .ledgers
        .get_ledger(pb::GetLedgerRequest {
            name: "ledgers/none".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    // A plaintext address with TLS flags is a usage error, not a downgrade.
    let mut plaintext = client_target(&server, Some(files.write("ca2.pem", &ca.pem)));
    plaintext.server = format!("http://{}", server.running.grpc_addr);
    let err = plaintext.connect().unwrap_err().to_string();
    assert!(err.contains("https://"), "{err}");
    server.stop().await;
}

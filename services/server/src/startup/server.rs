//! Assembles and runs the server: database, migrations, gRPC services with
//! health and reflection, the metrics listener, background tasks, and an
//! orderly shutdown (health to NOT_SERVING, stop accepting, drain calls and
//! streams with a deadline, stop tasks, close the pool, stop the private
//! PostgreSQL).

use crate::config::{AuthMode, ServeArgs};
use crate::delivery::Deliveries;
use crate::edge::auth::Authenticator;
use crate::edge::auth::layer::Authenticate;
use crate::edge::limits::{self, Limiter};
use crate::edge::middleware::Wrap;
use crate::edge::rpc_metrics::RpcMetrics;
use crate::job::Jobs;
use crate::ledger::Ledgers;
use crate::metrics::Metrics;
use crate::operations::Operations;
use crate::startup::database::Database;
use crate::tasks::health;
use crate::tasks::tail::Tails;
use crate::tasks::wakeup;
use anyhow::Context as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tally_proto::v1::delivery_service_server::DeliveryServiceServer;
use tally_proto::v1::job_service_server::JobServiceServer;
use tally_proto::v1::ledger_service_server::LedgerServiceServer;
use tally_proto::v1::operations_service_server::OperationsServiceServer;
use tally_store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

/// A running server. Dropping it does not stop it; call [`Running::stop`].
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The webhook listener's address; `None` when no webhook secret is
    /// configured (and so no listener runs).
    pub http_addr: Option<SocketAddr>,
    /// The plaintext health-only listener (`--health-addr`), if any.
    pub health_addr: Option<SocketAddr>,
    pub store: Store,
    pub metrics: Metrics,
    stop: CancellationToken,
    done: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Starts the orderly shutdown and waits for it.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.done.await.context("server task panicked")?
    }

    /// A token that, when cancelled, shuts the server down.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Waits until the server has shut down (after the stop token fired).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.done.await.context("server task panicked")?
    }
}

/// The listeners, bound before anything serves (a taken port fails the
/// start, naming its flag).
struct Bound {
    grpc: TcpListener,
    metrics: TcpListener,
    http: Option<TcpListener>,
    health: Option<TcpListener>,
}

async fn listen(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({flag})"))
}

impl Bound {
    async fn bind(
        args: &ServeArgs,
        webhooks: Option<&crate::config::WebhookListener>,
    ) -> anyhow::Result<Bound> {
        Ok(Bound {
            grpc: listen(args.grpc_addr, "--grpc-addr").await?,
            metrics: listen(args.metrics_addr, "--metrics-addr").await?,
            http: match webhooks {
                Some(config) => Some(listen(config.addr, "--http-addr").await?),
                None => None,
            },
            health: match args.security.health_addr {
                Some(addr) => Some(listen(addr, "--health-addr").await?),
                None => None,
            },
        })
    }

    /// The gRPC, metrics, webhook and health addresses as bound.
    #[allow(clippy::type_complexity)]
    fn addrs(
        &self,
    ) -> anyhow::Result<(
        SocketAddr,
        SocketAddr,
        Option<SocketAddr>,
        Option<SocketAddr>,
    )> {
        Ok((
            self.grpc.local_addr()?,
            self.metrics.local_addr()?,
            self.http
                .as_ref()
                .map(TcpListener::local_addr)
                .transpose()?,
            self.health
                .as_ref()
                .map(TcpListener::local_addr)
                .transpose()?,
        ))
    }
}

/// Applies migrations and returns.
pub async fn migrate(args: &ServeArgs) -> anyhow::Result<()> {
    let args = args
        .clone()
        .with_secret_files()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    let db = Database::open(&args).await?;
    db.store.migrate().await.context("migration failed")?;
    tracing::info!(database = %db.url_for_logs, "migrations applied");
    db.close().await;
    Ok(())
}

/// Starts everything; returns once the listeners are bound.
pub async fn start(args: ServeArgs) -> anyhow::Result<Running> {
    // Configuration is refused before anything starts.
    let args = args
        .with_secret_files()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    let webhooks = args
        .webhook_listener()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    args.check_auth_reach()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    let auth = Arc::new(Authenticator::from_args(&args.security)?);
    limits::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::edge::intake::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::edge::responses::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::http_listener::check(&args.http).map_err(anyhow::Error::msg)?;
    args.provider.quotas().map_err(anyhow::Error::msg)?;
    args.provider.sync_limits().map_err(anyhow::Error::msg)?;
    args.check_intervals()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = crate::startup::tls::server_config(&args.security)? {
        builder = builder.tls_config(tls).context("invalid TLS settings")?;
    }
    announce_security(&auth, &args);

    let db = Database::open(&args).await?;
    db.store.migrate().await.context("migration failed")?;
    tracing::info!(database = %db.url_for_logs, "database ready");
    let store = db.store.clone();
    let metrics = Metrics::with_store(store.clone());

    let bound = Bound::bind(&args, webhooks.as_ref()).await?;
    let (grpc_addr, metrics_addr, http_addr, health_addr) = bound.addrs()?;

    let (reporter, health_service) = tonic_health::server::health_reporter();
    health::set_all(&reporter, ServingStatus::NotServing).await;
    let reflect = args.security.reflection != crate::config::ReflectionMode::Off;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let limits = args.limits.clone();
    let max = limits.max_message_bytes;
    let max_out = limits.max_response_bytes;
    let purge_wake = crate::tasks::purger::Wake::default();
    let ledgers = LedgerServiceServer::new(Ledgers::new(
        store.clone(),
        limits,
        metrics.clone(),
        purge_wake.clone(),
        args.alert_reach(),
    ))
    .max_decoding_message_size(max)
    .max_encoding_message_size(max_out);
    let stop = CancellationToken::new();
    let (wakeups, listener) = wakeup::spawn(store.clone(), stop.clone());
    let tails = Tails {
        store: store.clone(),
        wakeups,
        poll: args.watch_poll_interval,
        stop: stop.clone(),
    };
    let jobs = JobServiceServer::new(Jobs::new(store.clone(), tails.clone(), metrics.clone()))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max_out);
    let operations =
        OperationsServiceServer::new(Operations::new(store.clone(), metrics.clone(), tails))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max_out);
    let deliveries = DeliveryServiceServer::new(Deliveries::new(
        store.clone(),
        metrics.clone(),
        args.alert_reach(),
        max_out,
        args.consumer_poll_interval,
        // A waiting receive answers within the request timeout.
        args.limits.request_timeout / 2,
        stop.clone(),
    ))
    .max_decoding_message_size(max)
    .max_encoding_message_size(max_out);

    let mut tasks = vec![listener];
    tasks.extend(crate::startup::background::spawn(
        &args,
        &store,
        &metrics,
        &reporter,
        purge_wake,
        bound.metrics,
        bound.http.zip(webhooks.as_ref()),
        &stop,
    )?);

    // Metrics outermost (refusals are counted too); auth outside limits: a
    // caller without credentials takes no slot.
    let rpc_metrics = Wrap(RpcMetrics::new(metrics.clone()));
    let end_streams = CancellationToken::new();
    let principals = crate::edge::principal::Principals::new(&args.limits);
    let limiter = Limiter::new(
        &args.limits,
        principals.clone(),
        metrics.clone(),
        end_streams.clone(),
    );
    let stalls = limiter.stalls();
    let limits_layer = Wrap(limiter);
    tasks.push(tokio::spawn(crate::edge::connections::run(
        stalls.clone(),
        stop.clone(),
    )));
    // HTTP/2 itself stops a client at twice the per-connection limit; up to
    // there, calls over the limit are answered RESOURCE_EXHAUSTED.
    let h2_streams =
        u32::try_from(args.limits.max_calls_per_connection.saturating_mul(2)).unwrap_or(u32::MAX);
    let intake =
        crate::edge::intake::Intake::new(&args.limits, principals).map_err(anyhow::Error::msg)?;
    let router = connection_bounds(builder, &args.limits)
        .max_concurrent_streams(h2_streams)
        .layer(rpc_metrics.clone())
        .layer(Wrap(Authenticate::new(auth, metrics.clone())))
        .layer(limits_layer.clone())
        .layer(Wrap(intake))
        .add_service(health_service.clone())
        .add_optional_service(reflect.then_some(reflection_v1))
        .add_optional_service(reflect.then_some(reflection_v1alpha))
        .add_service(ledgers)
        .add_service(jobs)
        .add_service(operations)
        .add_service(deliveries);
    // The probe port answers (NOT_SERVING) until the main drain is over.
    let health_stop = CancellationToken::new();
    let health_only = bound.health.map(|listener| {
        let stop = health_stop.clone();
        let stalls = stalls.clone();
        let router = connection_bounds(tonic::transport::Server::builder(), &args.limits)
            .max_concurrent_streams(h2_streams)
            .layer(rpc_metrics)
            .layer(limits_layer)
            .add_service(health_service);
        tokio::spawn(async move {
            let served = router
                .serve_with_incoming_shutdown(incoming(listener, &stalls), async move {
                    stop.cancelled().await
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "health listener failed");
            }
        })
    });
    let serve = router.serve_with_incoming_shutdown(
        incoming(bound.grpc, &stalls),
        stop.clone().cancelled_owned(),
    );
    let teardown = Teardown {
        reporter,
        end_streams,
        grace: args.shutdown_grace,
        health_stop,
        tasks: tasks.into_iter().chain(health_only).collect(),
        db,
    };
    let done = tokio::spawn(teardown.serve(serve, stop.clone()));
    let or_off =
        |a: Option<std::net::SocketAddr>| a.map_or_else(|| "off".to_string(), |a| a.to_string());
    tracing::info!(grpc = %grpc_addr, metrics = %metrics_addr, http = %or_off(http_addr), health = %or_off(health_addr), "tally serving");
    Ok(Running {
        grpc_addr,
        metrics_addr,
        http_addr,
        health_addr,
        store,
        metrics,
        stop,
        done,
    })
}

/// What the orderly shutdown stops, in its order: health to NOT_SERVING,
/// streams ended, calls drained for at most `grace`, then the health port,
/// the background tasks and the pool.
struct Teardown {
    reporter: tonic_health::server::HealthReporter,
    end_streams: CancellationToken,
    grace: Duration,
    health_stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    db: Database,
}

impl Teardown {
    /// Runs `serve` (which stops accepting once `stop` fires) to its end,
    /// then tears everything down.
    async fn serve(
        self,
        serve: impl std::future::Future<Output = Result<(), tonic::transport::Error>>,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        tokio::pin!(serve);
        let grace = self.grace;
        let result = tokio::select! {
            r = &mut serve => r.map_err(anyhow::Error::from),
            _ = stop.cancelled() => {
                tracing::info!("shutting down: not serving, draining calls");
                health::set_all(&self.reporter, ServingStatus::NotServing).await;
                // Streams (watches, health watches) would hold the drain
                // open; they end now, after seeing NOT_SERVING.
                self.end_streams.cancel();
                match tokio::time::timeout(grace, &mut serve).await {
                    Ok(r) => r.map_err(anyhow::Error::from),
                    Err(_) => {
                        tracing::warn!(grace = ?grace, "calls still open after the grace period; closing them");
                        Ok(())
                    }
                }
            }
        };
        self.health_stop.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.db.close().await;
        tracing::info!("stopped");
        result
    }
}

/// One line on how callers are checked; a loud one when they are not.
fn announce_security(auth: &Authenticator, args: &ServeArgs) {
    let s = &args.security;
    let tls = if s.tls_client_ca.is_some() {
        "mtls"
    } else if s.tls_cert.is_some() {
        "tls"
    } else {
        "off"
    };
    match auth.mode() {
        AuthMode::Disabled => tracing::warn!(
            tls,
            "AUTHENTICATION IS DISABLED (--auth disabled): anyone who can reach this port \
             may enroll, claim, redrive and read every payload; use it only on your own machine"
        ),
        AuthMode::Tokens => {
            let (tokens, subjects) = auth.counts();
            tracing::info!(
                tls,
                tokens,
                certificate_subjects = subjects,
                reflection = ?auth.reflection(),
                "authentication on"
            );
            if tls == "off" {
                tracing::warn!(
                    "bearer tokens travel in plaintext: turn on --tls-cert/--tls-key, \
                     or terminate TLS in front of tally"
                );
            }
        }
    }
}

/// What tonic bounds of every gRPC connection itself: HTTP/2 keepalive
/// pings (a peer that stops answering is dropped) and the connection's age
/// (GOAWAY, then closed after the request timeout).
fn connection_bounds(
    builder: tonic::transport::Server,
    limits: &crate::config::Limits,
) -> tonic::transport::Server {
    builder
        .http2_keepalive_interval(Some(limits.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(limits.http2_keepalive_timeout))
        .max_connection_age(limits.max_connection_age)
        .max_connection_age_grace(limits.request_timeout)
}

/// Accepted connections with Nagle's algorithm off and TCP keepalive on
/// (`serve_with_incoming` ignores the builder's socket options; with Nagle on,
/// small responses wait for delayed ACKs, ~40 ms per call), each watched for
/// a client that stops reading or never calls, and closed at once over
/// `--max-connections` ([`crate::edge::connections`]).
fn incoming(
    listener: TcpListener,
    stalls: &Arc<crate::edge::connections::Tracker>,
) -> impl tokio_stream::Stream<
    Item = std::io::Result<crate::edge::connections::Watched<tokio::net::TcpStream>>,
> + use<> {
    use tokio_stream::StreamExt as _;
    let stalls = stalls.clone();
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)))
        .filter_map(move |accepted| match accepted {
            Ok(stream) => stalls.watch(stream).map(Ok),
            Err(e) => Some(Err(e)),
        })
}

//! Assembles and runs the server: database, migrations, gRPC services with
//! health and reflection, the metrics listener, background tasks, and an
//! orderly shutdown (health to NOT_SERVING, stop accepting, drain calls and
//! streams with a deadline, stop tasks, close the pool, stop the private
//! PostgreSQL).

use crate::auth::Authenticator;
use crate::auth::layer::Authenticate;
use crate::config::{AuthMode, ServeArgs};
use crate::database::Database;
use crate::health;
use crate::job_service::Jobs;
use crate::ledger_service::Ledgers;
use crate::limits::{self, Limiter};
use crate::metrics::Metrics;
use crate::middleware::Wrap;
use crate::operations_service::Operations;
use crate::rpc_metrics::RpcMetrics;
use crate::wakeup;
use crate::webhook::{self, WebhookState};
use crate::{alerts, watch};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
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

/// Applies migrations and returns.
pub async fn migrate(args: &ServeArgs) -> anyhow::Result<()> {
    let db = Database::open(args).await?;
    db.store.migrate().await.context("migration failed")?;
    tracing::info!(database = %db.url_for_logs, "migrations applied");
    db.close().await;
    Ok(())
}

/// Starts everything; returns once the listeners are bound.
pub async fn start(args: ServeArgs) -> anyhow::Result<Running> {
    // Configuration is refused before anything starts.
    let webhooks = args
        .webhook_listener()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    args.check_auth_reach()
        .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
    let auth = Arc::new(Authenticator::from_args(&args.security)?);
    limits::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::intake::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::responses::check(&args.limits).map_err(anyhow::Error::msg)?;
    crate::http_listener::check(&args.http).map_err(anyhow::Error::msg)?;
    args.provider.quotas().map_err(anyhow::Error::msg)?;
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = crate::tls::server_config(&args.security)? {
        builder = builder.tls_config(tls).context("invalid TLS settings")?;
    }
    announce_security(&auth, &args);

    let db = Database::open(&args).await?;
    db.store.migrate().await.context("migration failed")?;
    tracing::info!(database = %db.url_for_logs, "database ready");
    let store = db.store.clone();
    let metrics = Metrics::with_store(store.clone());

    let grpc = TcpListener::bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on {} (--grpc-addr)", args.grpc_addr))?;
    let grpc_addr = grpc.local_addr()?;
    let metrics_listener = TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {} (--metrics-addr)", args.metrics_addr))?;
    let metrics_addr = metrics_listener.local_addr()?;
    let http = match &webhooks {
        Some(config) => Some(
            TcpListener::bind(config.addr)
                .await
                .with_context(|| format!("cannot listen on {} (--http-addr)", config.addr))?,
        ),
        None => None,
    };
    let http_addr = http.as_ref().map(TcpListener::local_addr).transpose()?;
    let health_listener = match args.security.health_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--health-addr)"))?,
        ),
        None => None,
    };
    let health_addr = health_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;

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
    let purge_wake = crate::purger::Wake::default();
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
    let (hub, hub_task) = watch::Hub::start(
        store.clone(),
        args.watch_poll_interval,
        metrics.clone(),
        stop.clone(),
    );
    let jobs = JobServiceServer::new(Jobs::new(store.clone(), hub, metrics.clone(), stop.clone()))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max_out);
    let (operation_wakeups, operation_listener) = wakeup::spawn(
        store.clone(),
        tally_store::operations::NOTIFY_CHANNEL,
        stop.clone(),
    );
    let operations = OperationsServiceServer::new(Operations::new(
        store.clone(),
        metrics.clone(),
        operation_wakeups,
        stop.clone(),
        args.watch_poll_interval,
    ))
    .max_decoding_message_size(max)
    .max_encoding_message_size(max_out);

    let mut tasks = vec![
        hub_task,
        operation_listener,
        tokio::spawn(health::watch_database(
            store.clone(),
            reporter.clone(),
            metrics.clone(),
            args.health_interval,
            stop.clone(),
        )),
        tokio::spawn(sweep_expired_claims(
            store.clone(),
            args.sweep_interval,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::backlog::run(
            store.clone(),
            args.backlog_interval,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::purger::run(
            store.clone(),
            args.purge.clone(),
            purge_wake,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::maintenance::vacuum_queue(
            store.clone(),
            args.queue_vacuum_interval,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(serve_metrics(
            metrics_listener,
            metrics.clone(),
            args.http.clone(),
            stop.clone(),
        )),
    ];
    match (http, &webhooks) {
        (Some(listener), Some(config)) => {
            let state = Arc::new(WebhookState::new(store.clone(), metrics.clone(), config));
            tracing::info!(
                http = %config.addr,
                secrets = config.secrets.len(),
                tolerance = ?config.tolerance,
                "webhooks enabled at /webhooks/gemini"
            );
            tasks.push(tokio::spawn(webhook::serve(
                listener,
                state,
                args.http.clone(),
                stop.clone(),
            )));
        }
        _ => match args.http_addr {
            Some(addr) => tracing::warn!(
                http = %addr,
                "webhooks disabled: --http-addr is set but no --webhook-secret \
                 (TALLY_WEBHOOK_SECRETS); nothing listens there"
            ),
            None => tracing::info!("webhooks disabled: no --webhook-secret configured"),
        },
    }
    match args.alert_secret.clone() {
        Some(secret) => tasks.push(tokio::spawn(alerts::run(
            store.clone(),
            alerts::Sender::new(secret, args.alert_reach())?,
            args.alert_interval,
            metrics.clone(),
            stop.clone(),
        ))),
        None => tracing::warn!(
            "no --alert-secret (TALLY_ALERT_SECRET): review-threshold alerts are not sent"
        ),
    }

    // Metrics outermost (refusals are counted too); auth outside limits: a
    // caller without credentials takes no slot.
    let rpc_metrics = Wrap(RpcMetrics::new(metrics.clone()));
    let end_streams = CancellationToken::new();
    let limiter = Limiter::new(&args.limits, metrics.clone(), end_streams.clone());
    let stalls = limiter.stalls();
    let limits_layer = Wrap(limiter);
    tasks.push(tokio::spawn(crate::write_timeout::run(
        stalls.clone(),
        stop.clone(),
    )));
    // HTTP/2 itself stops a client at twice the per-connection limit; up to
    // there, calls over the limit are answered RESOURCE_EXHAUSTED.
    let h2_streams =
        u32::try_from(args.limits.max_calls_per_connection.saturating_mul(2)).unwrap_or(u32::MAX);
    let router = builder
        .max_concurrent_streams(h2_streams)
        .layer(rpc_metrics.clone())
        .layer(Wrap(Authenticate::new(auth, metrics.clone())))
        .layer(limits_layer.clone())
        .layer(Wrap(crate::intake::Intake::new(&args.limits)))
        .add_service(health_service.clone())
        .add_optional_service(reflect.then_some(reflection_v1))
        .add_optional_service(reflect.then_some(reflection_v1alpha))
        .add_service(ledgers)
        .add_service(jobs)
        .add_service(operations);
    // The probe port answers (NOT_SERVING) until the main drain is over.
    let health_stop = CancellationToken::new();
    let health_only = health_listener.map(|listener| {
        let stop = health_stop.clone();
        let stalls = stalls.clone();
        let router = tonic::transport::Server::builder()
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
    let grace = args.shutdown_grace;
    let shutdown = stop.clone();
    let done = tokio::spawn(async move {
        let drained = shutdown.clone();
        let serve = router.serve_with_incoming_shutdown(incoming(grpc, &stalls), async move {
            drained.cancelled().await
        });
        tokio::pin!(serve);
        let result = tokio::select! {
            r = &mut serve => r.map_err(anyhow::Error::from),
            _ = shutdown.cancelled() => {
                tracing::info!("shutting down: not serving, draining calls");
                health::set_all(&reporter, ServingStatus::NotServing).await;
                // Streams (watches, health watches) would hold the drain
                // open; they end now, after seeing NOT_SERVING.
                end_streams.cancel();
                match tokio::time::timeout(grace, &mut serve).await {
                    Ok(r) => r.map_err(anyhow::Error::from),
                    Err(_) => {
                        tracing::warn!(grace = ?grace, "calls still open after the grace period; closing them");
                        Ok(())
                    }
                }
            }
        };
        health_stop.cancel();
        for t in tasks.into_iter().chain(health_only) {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        db.close().await;
        tracing::info!("stopped");
        result
    });
    tracing::info!(grpc = %grpc_addr, metrics = %metrics_addr, http = ?http_addr, health = ?health_addr, "tally serving");
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

/// Rescues rows of expired claims even when nobody is claiming.
async fn sweep_expired_claims(
    store: Store,
    every: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let rescued = store.rescue_expired(None).await;
        if let Ok(r) = &rescued {
            metrics.rows_rescued.inc_by(r.rows as u64);
            metrics.jobs_abandoned.inc_by(r.abandoned_jobs as u64);
            metrics.rows_released.inc_by(r.released_rows as u64);
        }
        match rescued {
            Ok(r) if r.rows > 0 || r.abandoned_jobs > 0 => tracing::info!(
                rows = r.rows,
                abandoned_jobs = r.abandoned_jobs,
                released_rows = r.released_rows,
                "rescued rows of expired claims"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweeping expired claims failed"),
        }
    }
}

async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    limits: crate::config::HttpLimits,
    stop: CancellationToken,
) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(http::header::CONTENT_TYPE, tally_telemetry::CONTENT_TYPE)],
                    m.render(),
                )
            }
        }),
    );
    crate::http_listener::serve(listener, app, limits, "metrics", stop).await;
}

/// Accepted connections with Nagle's algorithm off and TCP keepalive on
/// (`serve_with_incoming` ignores the builder's socket options; with Nagle on,
/// small responses wait for delayed ACKs, ~40 ms per call), each watched for
/// a client that stops reading ([`crate::write_timeout`]).
fn incoming(
    listener: TcpListener,
    stalls: &Arc<crate::write_timeout::Tracker>,
) -> impl tokio_stream::Stream<
    Item = std::io::Result<crate::write_timeout::Watched<tokio::net::TcpStream>>,
> + use<> {
    use tokio_stream::StreamExt as _;
    let stalls = stalls.clone();
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)))
        .map(move |accepted| accepted.map(|stream| stalls.watch(stream)))
}

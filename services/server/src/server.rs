//! Assembles and runs the server: database, migrations, gRPC services with
//! health and reflection, the metrics listener, background tasks, and an
//! orderly shutdown (health to NOT_SERVING, stop accepting, drain calls and
//! streams with a deadline, stop tasks, close the pool, stop the private
//! PostgreSQL).

use crate::config::ServeArgs;
use crate::database::Database;
use crate::health;
use crate::ledger_service::Ledgers;
use crate::metrics::Metrics;
use crate::operations_service::Operations;
use crate::unimplemented::Jobs;
use crate::wakeup;
use crate::webhook::{self, WebhookState};
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
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

/// A running server. Dropping it does not stop it; call [`Running::stop`].
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The webhook listener's address; `None` when no webhook secret is
    /// configured (and so no listener runs).
    pub http_addr: Option<SocketAddr>,
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
    let db = Database::open(&args).await?;
    db.store.migrate().await.context("migration failed")?;
    tracing::info!(database = %db.url_for_logs, "database ready");
    let store = db.store.clone();
    let metrics = Metrics::new();
    metrics.describe("tally_database_up", "gauge", "1 while the database answers");

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

    let (reporter, health_service) = tonic_health::server::health_reporter();
    health::set_all(&reporter, ServingStatus::NotServing).await;
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
    let ledgers = LedgerServiceServer::new(Ledgers::new(store.clone(), limits))
        .max_decoding_message_size(max);
    let jobs = JobServiceServer::new(Jobs).max_decoding_message_size(max);

    let stop = CancellationToken::new();
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
    .max_decoding_message_size(max);

    let mut tasks = vec![
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
            stop.clone(),
        )),
        tokio::spawn(serve_metrics(
            metrics_listener,
            metrics.clone(),
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
            tasks.push(tokio::spawn(webhook::serve(listener, state, stop.clone())));
        }
        _ => tracing::info!("webhooks disabled: no --webhook-secret configured"),
    }

    let router = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ledgers)
        .add_service(jobs)
        .add_service(operations);
    let grace = args.shutdown_grace;
    let shutdown = stop.clone();
    let done = tokio::spawn(async move {
        let drained = shutdown.clone();
        let serve = router.serve_with_incoming_shutdown(TcpListenerStream::new(grpc), async move {
            drained.cancelled().await
        });
        tokio::pin!(serve);
        let result = tokio::select! {
            r = &mut serve => r.map_err(anyhow::Error::from),
            _ = shutdown.cancelled() => {
                tracing::info!("shutting down: not serving, draining calls");
                health::set_all(&reporter, ServingStatus::NotServing).await;
                match tokio::time::timeout(grace, &mut serve).await {
                    Ok(r) => r.map_err(anyhow::Error::from),
                    Err(_) => {
                        tracing::warn!(grace = ?grace, "calls still open after the grace period; closing them");
                        Ok(())
                    }
                }
            }
        };
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        db.close().await;
        tracing::info!("stopped");
        result
    });
    tracing::info!(grpc = %grpc_addr, metrics = %metrics_addr, http = ?http_addr, "tally serving");
    Ok(Running {
        grpc_addr,
        metrics_addr,
        http_addr,
        store,
        metrics,
        stop,
        done,
    })
}

/// Rescues rows of expired claims even when nobody is claiming.
async fn sweep_expired_claims(store: Store, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match store.rescue_expired(None).await {
            Ok(n) if n > 0 => tracing::info!(rows = n, "rescued rows of expired claims"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweeping expired claims failed"),
        }
    }
}

async fn serve_metrics(listener: TcpListener, metrics: Metrics, stop: CancellationToken) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move { m.render() }
        }),
    );
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "metrics listener failed");
    }
}

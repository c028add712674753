//! The server's background tasks, each running until the stop token
//! fires: the database health probe, the expired-claim sweeper, the backlog
//! refresher, the purger of deleted ledgers, the runnable-queue vacuum, the
//! `/metrics` listener, the webhook listener (with a secret), the alert
//! sender (with an alert secret) and the sender of webhook consumers. [`crate::startup::server::start`] spawns them once
//! the listeners are bound and joins them after the drain.

use crate::config::{ServeArgs, WebhookListener};
use crate::metrics::Metrics;
use crate::webhook::{self, WebhookState};
use crate::{tasks::alerts, tasks::health};
use std::sync::Arc;
use std::time::Duration;
use tally_store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Spawns every background task; the webhook listener only with `http`.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    args: &ServeArgs,
    store: &Store,
    metrics: &Metrics,
    reporter: &tonic_health::server::HealthReporter,
    purge_wake: crate::tasks::purger::Wake,
    metrics_listener: TcpListener,
    http: Option<(TcpListener, &WebhookListener)>,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut tasks = vec![
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
        tokio::spawn(crate::tasks::backlog::run(
            store.clone(),
            args.backlog_interval,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::tasks::purger::run(
            store.clone(),
            args.purge.clone(),
            purge_wake,
            metrics.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::tasks::maintenance::run(
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
    match http {
        Some((listener, config)) => {
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
        None => match args.http_addr {
            Some(addr) => tracing::warn!(
                http = %addr,
                "webhooks disabled: --http-addr is set but no --webhook-secret \
                 (TALLY_WEBHOOK_SECRETS); nothing listens there"
            ),
            None => tracing::info!("webhooks disabled: no --webhook-secret configured"),
        },
    }
    tasks.push(tokio::spawn(crate::tasks::webhooks::run(
        store.clone(),
        crate::tasks::outbound::Poster::new(args.alert_reach())?,
        args.webhook_send_interval,
        metrics.clone(),
        stop.clone(),
    )));
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
    Ok(tasks)
}

/// Rescues rows of expired claims even when nobody is claiming.
async fn sweep_expired_claims(
    store: Store,
    every: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    loop {
        if !crate::tasks::every::wait(every, &stop).await {
            return;
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

//! The webhook sender: drives consumers of kind WEBHOOK. Every
//! `--webhook-send-interval` it takes the webhook consumers that have
//! results to send and are not backing off (one sender at a time per
//! consumer, across replicas: `tally_store::consumers`), and gives each a
//! turn: receive a batch (leased for [`delivery::WEBHOOK_LEASE`]), POST it
//! signed with the consumer's secret ([`crate::tasks::outbound`]), and
//! acknowledge it on a 2xx. On anything else the batch is given back
//! (visible again at once) and the consumer as a whole waits
//! ([`delivery::webhook_retry`]: 1s doubling to 5 minutes), so a receiver
//! that is down gets a handful of tries, not one per result; each result is
//! dead-lettered after its `max_deliveries`. Every POST goes to the
//! consumer's bounded delivery log.
//!
//! The body is JSON: `{"type": "tally.results", "ledger", "consumer",
//! "results": [{"position", "row", "key", "version", "status", "result",
//! "rule", "error", "model", "finish_time", "delivery_count"}]}`, with the
//! Standard Webhooks headers; the `webhook-id` is the same for a retry of
//! the same results.

use crate::metrics::{Metrics, ResultLabels};
use crate::tasks::outbound::Poster;
use std::time::{Duration, Instant};
use tally_core::delivery::{self, NackFate, Position, PostOutcome};
use tally_core::webhook::Secret;
use tally_store::Store;
use tally_store::consumers::{Delivery, DueWebhook, PostRecord};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Consumers given a turn at once.
const CONCURRENT: i64 = 8;
/// Batches one turn sends at most before the consumer is turned over (it
/// is due again at once; others get their turns meanwhile).
const TURN_BATCHES: usize = 20;
/// Bytes of results in one POST.
const MAX_BODY: u64 = 4 << 20;

/// Runs until `stop` fires.
pub async fn run(
    store: Store,
    poster: Poster,
    every: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    for result in ["accepted", "failed"] {
        let _ = metrics
            .webhook_posts
            .get_or_create(&ResultLabels { result });
    }
    let poster = std::sync::Arc::new(poster);
    loop {
        if !crate::tasks::every::wait(every, &stop).await {
            return;
        }
        let due = match store.take_due_webhooks(CONCURRENT).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "finding webhook consumers to send to failed");
                continue;
            }
        };
        let mut turns = JoinSet::new();
        for d in due {
            let (store, poster, metrics, stop) =
                (store.clone(), poster.clone(), metrics.clone(), stop.clone());
            turns.spawn(async move {
                if let Err(e) = turn(&store, &poster, &metrics, &d, &stop).await {
                    tracing::warn!(ledger = %d.ledger, consumer = %d.name, error = %e, "webhook turn failed; the consumer is due again when its lease runs out");
                }
            });
        }
        while turns.join_next().await.is_some() {}
    }
}

/// One consumer's turn: batches until there is nothing more, a POST
/// fails, or the turn's share is used up; then the consumer is turned over.
async fn turn(
    store: &Store,
    poster: &Poster,
    metrics: &Metrics,
    due: &DueWebhook,
    stop: &CancellationToken,
) -> tally_store::Result<()> {
    let secret = match Secret::parse(&due.secret) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(ledger = %due.ledger, consumer = %due.name, error = %e, "webhook consumer's secret does not parse");
            return store
                .webhook_turn_over(due.id, due.failures, Some(delivery::WEBHOOK_BACKOFF.max))
                .await;
        }
    };
    let mut failures = due.failures.max(0);
    for _ in 0..TURN_BATCHES {
        if stop.is_cancelled() {
            // What was taken stays leased until its lease runs out; the
            // consumer is due again then, here or at another replica.
            return Ok(());
        }
        let got = store.receive_for_webhook(due, MAX_BODY).await?;
        metrics.consumer_received(&due.ledger, &due.name, &got);
        if got.deliveries.is_empty() {
            return store.webhook_turn_over(due.id, failures, None).await;
        }
        let positions: Vec<Position> = got.deliveries.iter().map(|d| d.position).collect();
        let ids: Vec<(Position, i32)> = got
            .deliveries
            .iter()
            .map(|d| (d.position, d.version))
            .collect();
        let message_id = delivery::message_id(&format!("{}/{}", due.ledger, due.name), &ids);
        let body = body(due, &got.deliveries);
        let started = Instant::now();
        let posted = poster
            .post(
                &due.url,
                &secret,
                &message_id,
                chrono::Utc::now().timestamp(),
                body,
            )
            .await;
        let (status, outcome) = match posted {
            Ok(status) => (
                Some(status.as_u16()),
                delivery::post_outcome(status.as_u16()),
            ),
            Err(f) => (None, PostOutcome::Failed(f.why().to_string())),
        };
        let error = match &outcome {
            PostOutcome::Accepted(_) => String::new(),
            PostOutcome::Failed(why) => why.clone(),
        };
        store
            .record_webhook_post(
                due.id,
                &PostRecord {
                    message_id: message_id.clone(),
                    rows: positions.len() as i32,
                    first: positions[0],
                    last: positions[positions.len() - 1],
                    http_status: status,
                    error: error.clone(),
                    duration: started.elapsed(),
                },
            )
            .await?;
        match outcome {
            PostOutcome::Accepted(_) => {
                failures = 0;
                let acked = store.ack_by_id(due.id, &positions, None).await?;
                metrics.consumer_count(&due.ledger, &due.name, "acked", acked.acked as u64);
                metrics
                    .webhook_posts
                    .get_or_create(&ResultLabels { result: "accepted" })
                    .inc();
            }
            PostOutcome::Failed(why) => {
                let n = store
                    .nack_by_id(due.id, &positions, &NackFate::Retry(Duration::ZERO), &why)
                    .await?;
                metrics.consumer_count(&due.ledger, &due.name, "requeued", n.requeued as u64);
                metrics
                    .webhook_posts
                    .get_or_create(&ResultLabels { result: "failed" })
                    .inc();
                failures = failures.saturating_add(1);
                let wait = delivery::webhook_retry(
                    failures as u32,
                    tally_core::backoff::sample(due.id, failures),
                );
                tracing::warn!(ledger = %due.ledger, consumer = %due.name, id = %message_id, results = positions.len(), failures, retry_in = ?wait, error = %why, "webhook POST failed");
                return store.webhook_turn_over(due.id, failures, Some(wait)).await;
            }
        }
    }
    store.webhook_turn_over(due.id, failures, None).await
}

/// The POST's JSON body.
fn body(due: &DueWebhook, results: &[Delivery]) -> String {
    let results: Vec<serde_json::Value> = results
        .iter()
        .map(|d| {
            serde_json::json!({
                "position": d.position.raw(),
                "row": tally_core::names::row_name(&due.ledger, &d.key),
                "key": d.key,
                "version": d.version,
                "status": d.status.as_str(),
                "result": d.result,
                "rule": d.rule,
                "error": d.last_error,
                "model": d.model,
                "finish_time": d.finish_time.to_rfc3339(),
                "delivery_count": d.deliveries,
            })
        })
        .collect();
    serde_json::json!({
        "type": "tally.results",
        "ledger": due.ledger,
        "consumer": due.name,
        "results": results,
    })
    .to_string()
}

//! DeliveryService: thin handlers over `tally-store`'s consumers. Each
//! checks its request ([`super::validate`]) and the caller's reach to the
//! ledger before the store is asked anything, makes one store call and
//! encodes the answer ([`super::convert`]).
//!
//! ReceiveResults waits (a long poll, at most `wait`) by asking again every
//! `--consumer-poll-interval`: the results log sends no notifications (see
//! `tally_store::event_log`), so a waiting receive reads the log itself. It
//! answers at once, empty, when the server begins to stop.

use super::convert::{consumer_to_proto, dead_letter_to_proto, delivery_to_proto, post_to_proto};
use super::validate;
use crate::edge::caller::{access, actor};
use crate::edge::paging;
use crate::edge::status::{from_store, invalid_field};
use crate::metrics::Metrics;
use std::time::{Duration, Instant};
use tally_core::delivery::{Kind, Position};
use tally_core::outbound::Reach;
use tally_core::webhook::Secret;
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_server::DeliveryService;
use tally_store::Store;
use tally_store::consumers::{NewConsumer, ReceiveRequest};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

pub struct Deliveries {
    store: Store,
    metrics: Metrics,
    /// Which webhook URLs a consumer may name.
    reach: Reach,
    /// The bytes of results one answer may hold.
    max_bytes: u64,
    /// How often a waiting receive looks again.
    poll: Duration,
    /// The longest a receive waits, whatever it asks (within the request
    /// timeout).
    max_wait: Duration,
    /// Fires when the server begins to stop: waiting receives answer.
    stop: CancellationToken,
}

impl Deliveries {
    pub fn new(
        store: Store,
        metrics: Metrics,
        reach: Reach,
        max_response_bytes: usize,
        poll: Duration,
        max_wait: Duration,
        stop: CancellationToken,
    ) -> Self {
        let budget = max_response_bytes
            .min(crate::edge::responses::DEFAULT_CLIENT_RECEIVE)
            .saturating_sub(crate::edge::responses::ENVELOPE);
        Self {
            store,
            metrics,
            reach,
            max_bytes: budget as u64,
            poll,
            max_wait,
            stop,
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// A new `whsec_` secret for a webhook consumer.
fn make_secret() -> Result<Secret, Status> {
    Secret::from_bytes(rand::random::<[u8; 32]>().to_vec())
        .map_err(|e| Status::internal(format!("making a secret: {e}")))
}

#[tonic::async_trait]
impl DeliveryService for Deliveries {
    async fn create_consumer(
        &self,
        req: Request<pb::CreateConsumerRequest>,
    ) -> Reply<pb::Consumer> {
        let access = access(&req);
        let new = validate::create(req.get_ref(), self.reach)?;
        access.ledger(&new.ledger)?;
        let made = match (&new.settings.kind, &new.secret) {
            (Kind::Webhook, None) => Some(make_secret()?),
            (Kind::Webhook | Kind::Pull, _) => None,
        };
        let secret = new.secret.as_ref().or(made.as_ref()).map(Secret::to_text);
        let record = self
            .store
            .create_consumer(&NewConsumer {
                ledger: &new.ledger,
                name: &new.id,
                settings: &new.settings,
                secret: secret.as_deref(),
                start: new.start,
                actor: &access.name,
            })
            .await
            .map_err(from_store)?;
        self.metrics.consumer_seen(&new.ledger, &new.id);
        Ok(Response::new(consumer_to_proto(
            &record,
            made.map(|s| s.to_text()),
        )))
    }

    async fn get_consumer(&self, req: Request<pb::GetConsumerRequest>) -> Reply<pb::Consumer> {
        let (ledger, name) = validate::consumer("name", &req.get_ref().name)?;
        access(&req).ledger(&ledger)?;
        let c = self
            .store
            .get_consumer(&ledger, &name)
            .await
            .map_err(from_store)?;
        Ok(Response::new(consumer_to_proto(&c, None)))
    }

    async fn list_consumers(
        &self,
        req: Request<pb::ListConsumersRequest>,
    ) -> Reply<pb::ListConsumersResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = crate::ledger::validate::ledger("parent", &req.parent)?;
        access.ledger(&ledger)?;
        let size = paging::page_size(req.page_size)?;
        let list = format!("consumers:{ledger}");
        let after = paging::decode(&req.page_token, &list, "")?;
        let found = self
            .store
            .list_consumers(&ledger, after.as_deref(), size)
            .await
            .map_err(from_store)?;
        let (page, got) =
            crate::edge::responses::page(&found, size, |c| consumer_to_proto(c, None));
        let last = page.len().checked_sub(1).map(|i| found[i].name.clone());
        Ok(Response::new(pb::ListConsumersResponse {
            consumers: page,
            next_page_token: paging::next_token(&list, "", got, size, last.as_deref()),
        }))
    }

    async fn delete_consumer(&self, req: Request<pb::DeleteConsumerRequest>) -> Reply<()> {
        let (ledger, name) = validate::consumer("name", &req.get_ref().name)?;
        access(&req).ledger(&ledger)?;
        self.store
            .delete_consumer(&ledger, &name)
            .await
            .map_err(from_store)?;
        self.metrics.forget_consumer(&ledger, &name);
        Ok(Response::new(()))
    }

    async fn receive_results(
        &self,
        req: Request<pb::ReceiveResultsRequest>,
    ) -> Reply<pb::ReceiveResultsResponse> {
        let r = validate::receive(req.get_ref())?;
        access(&req).ledger(&r.ledger)?;
        let ask = ReceiveRequest {
            max_rows: r.max_rows,
            max_bytes: self.max_bytes,
            visibility: r.visibility,
            include_payload: r.include_payload,
        };
        let deadline = Instant::now() + r.wait.min(self.max_wait);
        let got = loop {
            let got = self
                .store
                .receive(&r.ledger, &r.consumer, &ask)
                .await
                .map_err(from_store)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !got.deliveries.is_empty() || left.is_zero() {
                break got;
            }
            tokio::select! {
                _ = self.stop.cancelled() => break got,
                _ = tokio::time::sleep(self.poll.min(left)) => {}
            }
        };
        self.metrics.consumer_received(&r.ledger, &r.consumer, &got);
        Ok(Response::new(pb::ReceiveResultsResponse {
            results: got
                .deliveries
                .iter()
                .map(|d| delivery_to_proto(&r.ledger, d))
                .collect(),
            read_position: got.read_position.raw(),
        }))
    }

    async fn ack_results(
        &self,
        req: Request<pb::AckResultsRequest>,
    ) -> Reply<pb::AckResultsResponse> {
        let (ledger, name, positions, up_to) = validate::ack(req.get_ref())?;
        access(&req).ledger(&ledger)?;
        // On a task of its own: a caller that goes away mid-call (killed)
        // cancels this handler, and an ack the database committed must
        // still be counted.
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        let a = tokio::spawn(async move {
            let a = store.ack(&ledger, &name, &positions, up_to).await?;
            metrics.consumer_count(&ledger, &name, "acked", a.acked as u64);
            Ok::<_, tally_store::StoreError>(a)
        })
        .await
        .map_err(|e| Status::internal(format!("ack task: {e}")))?
        .map_err(from_store)?;
        Ok(Response::new(pb::AckResultsResponse {
            acked: a.acked as i64,
            not_leased: a.not_leased as i64,
        }))
    }

    async fn nack_results(
        &self,
        req: Request<pb::NackResultsRequest>,
    ) -> Reply<pb::NackResultsResponse> {
        let (ledger, name, positions, fate) = validate::nack(req.get_ref())?;
        let access = access(&req);
        access.ledger(&ledger)?;
        let n = self
            .store
            .nack(&ledger, &name, &positions, &fate)
            .await
            .map_err(from_store)?;
        self.metrics
            .consumer_count(&ledger, &name, "requeued", n.requeued as u64);
        self.metrics
            .consumer_count(&ledger, &name, "dead_lettered", n.dead_lettered as u64);
        if n.dead_lettered > 0 {
            tracing::info!(ledger = %ledger, consumer = %name, results = n.dead_lettered, actor = %access.name, "results dead-lettered");
        }
        Ok(Response::new(pb::NackResultsResponse {
            requeued: n.requeued as i64,
            dead_lettered: n.dead_lettered as i64,
            not_leased: n.not_leased as i64,
        }))
    }

    async fn list_dead_letters(
        &self,
        req: Request<pb::ListDeadLettersRequest>,
    ) -> Reply<pb::ListDeadLettersResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, name) = validate::consumer("parent", &req.parent)?;
        access.ledger(&ledger)?;
        let size = paging::page_size(req.page_size)?;
        let list = format!("dead_letters:{ledger}/{name}");
        let after = match paging::decode(&req.page_token, &list, "")? {
            None => Position::ORIGIN,
            Some(a) => a
                .parse::<i64>()
                .ok()
                .and_then(|p| Position::parse(p).ok())
                .ok_or_else(|| {
                    invalid_field("page_token", "is not a token from this list; start again")
                })?,
        };
        let found = self
            .store
            .list_dead_letters(&ledger, &name, after, size)
            .await
            .map_err(from_store)?;
        let (page, got) =
            crate::edge::responses::page(&found, size, |d| dead_letter_to_proto(&ledger, d));
        let last = page
            .len()
            .checked_sub(1)
            .map(|i| found[i].position.raw().to_string());
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page,
            next_page_token: paging::next_token(&list, "", got, size, last.as_deref()),
        }))
    }

    async fn reset_consumer(&self, req: Request<pb::ResetConsumerRequest>) -> Reply<pb::Consumer> {
        let (ledger, name, to) = validate::reset(req.get_ref())?;
        access(&req).ledger(&ledger)?;
        let c = self
            .store
            .reset_consumer(&ledger, &name, to, &actor(&req))
            .await
            .map_err(from_store)?;
        Ok(Response::new(consumer_to_proto(&c, None)))
    }

    async fn list_webhook_deliveries(
        &self,
        req: Request<pb::ListWebhookDeliveriesRequest>,
    ) -> Reply<pb::ListWebhookDeliveriesResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, name) = validate::consumer("parent", &req.parent)?;
        access.ledger(&ledger)?;
        let size = paging::page_size(req.page_size)?;
        let list = format!("webhook_deliveries:{ledger}/{name}");
        let before = match paging::decode(&req.page_token, &list, "")? {
            None => 0,
            Some(a) => a.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                invalid_field("page_token", "is not a token from this list; start again")
            })?,
        };
        let found = self
            .store
            .list_webhook_posts(&ledger, &name, before, size)
            .await
            .map_err(from_store)?;
        let (page, got) = crate::edge::responses::page(&found, size, post_to_proto);
        let last = page.len().checked_sub(1).map(|i| found[i].id.to_string());
        Ok(Response::new(pb::ListWebhookDeliveriesResponse {
            deliveries: page,
            next_page_token: paging::next_token(&list, "", got, size, last.as_deref()),
        }))
    }
}

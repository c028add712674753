//! The team boundary through a real server (issue 17, item 1): two teams,
//! `acme-*` and `beta-*`, on one server. Every RPC × {own ledger, the other
//! team's ledger, the other team's namespace where nothing exists,
//! `ledgers/-`} × each role of an acme-scoped token:
//! - a role the method does not allow: PERMISSION_DENIED ROLE_DENIED;
//! - the other team's resource, existing or not: PERMISSION_DENIED
//!   OUT_OF_SCOPE with the same message shape (nothing says whether it
//!   exists), and not one byte of the database changes;
//! - `ledgers/-` where a ledger is needed: INVALID_ARGUMENT (or
//!   OUT_OF_SCOPE for a lock or prompt literally named `-`), nothing
//!   written;
//! - the own resource: never a PERMISSION_DENIED or UNAUTHENTICATED;
//! - lists and streams over every ledger (ListLedgers, ListOperations,
//!   WatchJobs on `ledgers/-`, WatchOperations) show only the caller's
//!   ledgers, while a whole-server operator sees both.

use crate::security::common::*;
use bytes::{Buf as _, BufMut as _};
use prost::Message;
use std::collections::BTreeMap;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_client::DeliveryServiceClient;
use tally_proto::v1::job_service_client::JobServiceClient;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_proto::v1::operations_service_client::OperationsServiceClient;
use tally_server::edge::auth::tokens::hash_hex;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

const ACME_E: &str = "tally_acme-enroller";
const ACME_W: &str = "tally_acme-worker";
const ACME_O: &str = "tally_acme-operator";
const BETA_W: &str = "tally_beta-worker";

fn tokens() -> String {
    let line = |name: &str, role: &str, ledgers: &str, token: &str| {
        format!(
            r#"{{"name": "{name}", "roles": ["{role}"], "ledgers": [{ledgers}], "sha256": "{}"}}"#,
            hash_hex(token)
        )
    };
    format!(
        r#"{{"tokens": [{}, {}, {}, {}, {}]}}"#,
        // The whole server, for setting up both teams.
        line("root", "operator", r#""*""#, OPERATOR),
        line("acme-etl", "enroller", r#""acme-*""#, ACME_E),
        line("acme-worker", "worker", r#""acme-*""#, ACME_W),
        line("acme-ops", "operator", r#""acme-*""#, ACME_O),
        line("beta-worker", "worker", r#""beta-*""#, BETA_W),
    )
}

/// Everything one team has: a ledger with rows, a live claim, a submitted
/// job (with its own claim) whose batch the provider reported on, a lock
/// and a prompt.
#[derive(Clone, Debug)]
struct Team {
    ledger: String,
    claim: String,
    job_claim: String,
    job: String,
    batch: String,
    lock: String,
    lock_token: String,
    prompt: String,
}

impl Team {
    /// Names in `team`'s namespace where nothing exists.
    fn ghost(team: &str) -> Team {
        let ledger = format!("{team}-ghost");
        Team {
            claim: format!("ledgers/{ledger}/claims/7f9c1f0e-0000-4000-8000-000000000001"),
            job_claim: format!("ledgers/{ledger}/claims/7f9c1f0e-0000-4000-8000-000000000002"),
            job: format!("ledgers/{ledger}/jobs/ghost"),
            batch: format!("batches/{team}-ghost"),
            lock: format!("{team}-ghost-lock"),
            lock_token: "7f9c1f0e-0000-4000-8000-000000000003".into(),
            prompt: format!("{team}-ghost-p"),
            ledger,
        }
    }

    /// `ledgers/-` (and `-` wherever an id goes).
    fn dash() -> Team {
        Team {
            ledger: "-".into(),
            claim: "ledgers/-/claims/7f9c1f0e-0000-4000-8000-000000000001".into(),
            job_claim: "ledgers/-/claims/7f9c1f0e-0000-4000-8000-000000000002".into(),
            job: "ledgers/-/jobs/j".into(),
            batch: "batches/-".into(),
            lock: "-".into(),
            lock_token: "7f9c1f0e-0000-4000-8000-000000000003".into(),
            prompt: "-".into(),
        }
    }
}

fn dur(secs: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: secs,
        nanos: 0,
    })
}

fn event(batch: &str, state: &str, at: i64) -> pb::OperationEvent {
    pb::OperationEvent {
        operation: batch.into(),
        state: state.into(),
        update_time: Some(prost_types::Timestamp {
            seconds: at,
            nanos: 0,
        }),
        source: pb::EventSource::Poller as i32,
        ..Default::default()
    }
}

/// Sets up one team as the whole-server operator.
async fn setup(channel: &Channel, team: &str) -> Team {
    let root = Some(OPERATOR);
    let mut l = LedgerServiceClient::new(channel.clone());
    let mut j = JobServiceClient::new(channel.clone());
    let mut o = OperationsServiceClient::new(channel.clone());
    let ledger = format!("{team}-l");
    let parent = format!("ledgers/{ledger}");
    let prompt = format!("{team}-p");
    l.register_prompt(authed(
        pb::RegisterPromptRequest {
            prompt_id: prompt.clone(),
            version: "v1".into(),
            template: "Summarize: {{text}}".into(),
            ..Default::default()
        },
        root,
    ))
    .await
    .expect("register prompt");
    l.create_ledger(authed(
        pb::CreateLedgerRequest {
            ledger_id: ledger.clone(),
            policy: None,
        },
        root,
    ))
    .await
    .expect("create ledger");
    let rows = (0..4)
        .map(|i| pb::RowInput {
            key: format!("k{i}"),
            payload: r#"{"text": "hi"}"#.into(),
            ..Default::default()
        })
        .collect();
    l.enroll_rows(authed(
        pb::EnrollRowsRequest {
            parent: parent.clone(),
            rows,
        },
        root,
    ))
    .await
    .expect("enroll");
    let claim = |n: i32| {
        let mut l = l.clone();
        let parent = parent.clone();
        async move {
            l.claim_rows(authed(
                pb::ClaimRowsRequest {
                    parent,
                    max_rows: n,
                    lease: dur(600),
                    worker: "setup".into(),
                    ..Default::default()
                },
                root,
            ))
            .await
            .expect("claim")
            .into_inner()
            .claim
            .expect("rows to claim")
            .name
        }
    };
    let job_claim = claim(2).await;
    let live = claim(1).await;
    let job = j
        .create_job(authed(
            pb::CreateJobRequest {
                claim: job_claim.clone(),
                ..Default::default()
            },
            root,
        ))
        .await
        .expect("create job")
        .into_inner()
        .name;
    let batch = format!("batches/{team}-1");
    j.mark_submitted(authed(
        pb::MarkSubmittedRequest {
            name: job.clone(),
            claim: job_claim.clone(),
            batch: batch.clone(),
            input_file: format!("files/{team}-in"),
        },
        root,
    ))
    .await
    .expect("mark submitted");
    o.ingest_event(authed(
        pb::IngestEventRequest {
            event: Some(event(&batch, "BATCH_STATE_RUNNING", 1_700_000_000)),
        },
        root,
    ))
    .await
    .expect("ingest");
    DeliveryServiceClient::new(channel.clone())
        .create_consumer(authed(
            pb::CreateConsumerRequest {
                parent: parent.clone(),
                consumer_id: "sink".into(),
                consumer: None,
                start: None,
            },
            root,
        ))
        .await
        .expect("create consumer");
    let lock = format!("{team}-lock");
    let lock_token = j
        .acquire_lock(authed(
            pb::AcquireLockRequest {
                name: format!("locks/{lock}"),
                owner: "setup".into(),
                ttl: dur(600),
            },
            root,
        ))
        .await
        .expect("lock")
        .into_inner()
        .lock
        .expect("lock")
        .token;
    Team {
        ledger,
        claim: live,
        job_claim,
        job,
        batch,
        lock,
        lock_token,
        prompt,
    }
}

/// Every RPC but the four whose scope is a filter, aimed at `t`: the
/// method path, whether it streams, the encoded request. DeleteLedger comes
/// last so the own-ledger pass reaches everything else first.
fn requests(t: &Team) -> Vec<(&'static str, bool, Vec<u8>)> {
    let parent = format!("ledgers/{}", t.ledger);
    let consumer = format!("{parent}/consumers/sink");
    let e = |m: &dyn DynMessage| m.bytes();
    let lock = format!("locks/{}", t.lock);
    vec![
        (
            "/tally.v1.LedgerService/CreateLedger",
            false,
            e(&pb::CreateLedgerRequest {
                ledger_id: format!("{}-2", t.ledger),
                policy: None,
            }),
        ),
        (
            "/tally.v1.LedgerService/GetLedger",
            false,
            e(&pb::GetLedgerRequest {
                name: parent.clone(),
            }),
        ),
        (
            "/tally.v1.LedgerService/UpdateLedger",
            false,
            e(&pb::UpdateLedgerRequest {
                ledger: Some(pb::Ledger {
                    name: parent.clone(),
                    ..Default::default()
                }),
                update_mask: None,
            }),
        ),
        (
            "/tally.v1.LedgerService/EnrollRows",
            false,
            e(&pb::EnrollRowsRequest {
                parent: parent.clone(),
                rows: vec![pb::RowInput {
                    key: "new".into(),
                    payload: "{}".into(),
                    ..Default::default()
                }],
            }),
        ),
        (
            "/tally.v1.LedgerService/ClaimRows",
            false,
            e(&pb::ClaimRowsRequest {
                parent: parent.clone(),
                max_rows: 1,
                worker: "x".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.LedgerService/ExtendClaim",
            false,
            e(&pb::ExtendClaimRequest {
                name: t.claim.clone(),
                lease: dur(60),
            }),
        ),
        (
            "/tally.v1.LedgerService/ReportOutcomes",
            false,
            e(&pb::ReportOutcomesRequest {
                claim: t.claim.clone(),
                outcomes: vec![pb::RowOutcome {
                    key: "k2".into(),
                    outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
                    usage: None,
                    ..Default::default()
                }],
                claim_next: None,
            }),
        ),
        (
            "/tally.v1.LedgerService/ReleaseClaim",
            false,
            e(&pb::ReleaseClaimRequest {
                name: t.claim.clone(),
                keys: vec![],
            }),
        ),
        (
            "/tally.v1.LedgerService/GetRow",
            false,
            e(&pb::GetRowRequest {
                name: format!("{parent}/rows/k0"),
            }),
        ),
        (
            "/tally.v1.LedgerService/ListRows",
            false,
            // One job's rows: what every role may list (a worker lists
            // no whole ledger).
            e(&pb::ListRowsRequest {
                parent: parent.clone(),
                filter: Some(pb::RowFilter {
                    job: format!("{parent}/jobs/j1"),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.LedgerService/SummarizeLedger",
            false,
            e(&pb::SummarizeLedgerRequest {
                name: parent.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.LedgerService/RedriveRows",
            false,
            e(&pb::RedriveRowsRequest {
                parent: parent.clone(),
                target: Some(pb::redrive_rows_request::Target::Keys(pb::RowKeys {
                    keys: vec!["k3".into()],
                })),
                validate_only: false,
                reason: "test".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.LedgerService/PauseLedger",
            false,
            e(&pb::PauseLedgerRequest {
                name: parent.clone(),
                message: "stop".into(),
                etag: String::new(),
            }),
        ),
        (
            "/tally.v1.LedgerService/ResumeLedger",
            false,
            e(&pb::ResumeLedgerRequest {
                name: parent.clone(),
                etag: String::new(),
            }),
        ),
        (
            "/tally.v1.LedgerService/RegisterPrompt",
            false,
            e(&pb::RegisterPromptRequest {
                prompt_id: t.prompt.clone(),
                version: "v2".into(),
                template: "Again: {{text}}".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.LedgerService/GetPrompt",
            false,
            e(&pb::GetPromptRequest {
                name: format!("prompts/{}/versions/v1", t.prompt),
            }),
        ),
        (
            "/tally.v1.LedgerService/SetGoldenRows",
            false,
            e(&pb::SetGoldenRowsRequest {
                golden: Some(pb::GoldenSet {
                    name: format!("{parent}/golden"),
                    ..Default::default()
                }),
            }),
        ),
        (
            "/tally.v1.LedgerService/SettleFromCache",
            false,
            e(&pb::SettleFromCacheRequest {
                claim: t.claim.clone(),
                requests: vec![pb::CacheRequest {
                    key: "k2".into(),
                    request: "{}".into(),
                }],
            }),
        ),
        (
            "/tally.v1.LedgerService/EstimateFromCache",
            false,
            e(&pb::EstimateFromCacheRequest {
                parent: parent.clone(),
                requests: vec![pb::CacheRequest {
                    key: "k2".into(),
                    request: "{}".into(),
                }],
            }),
        ),
        (
            "/tally.v1.LedgerService/GetGoldenRows",
            false,
            e(&pb::GetGoldenRowsRequest {
                name: format!("{parent}/golden"),
            }),
        ),
        (
            "/tally.v1.JobService/ReportGoldenResults",
            false,
            e(&pb::ReportGoldenResultsRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                answers: Vec::new(),
            }),
        ),
        (
            "/tally.v1.JobService/GetJob",
            false,
            e(&pb::GetJobRequest {
                name: t.job.clone(),
            }),
        ),
        (
            "/tally.v1.JobService/ListJobs",
            false,
            e(&pb::ListJobsRequest {
                parent: parent.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/MarkCreating",
            false,
            e(&pb::MarkCreatingRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                input_file: "files/x".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/MarkSubmitted",
            false,
            e(&pb::MarkSubmittedRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                batch: t.batch.clone(),
                input_file: "files/x".into(),
            }),
        ),
        (
            "/tally.v1.JobService/MarkNotCreated",
            false,
            e(&pb::MarkNotCreatedRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                reason: "test".into(),
                provider_cooldown: None,
                provider_refusal: 0,
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/FlagCreateUnresolved",
            false,
            e(&pb::FlagCreateUnresolvedRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                reason: "test".into(),
            }),
        ),
        (
            "/tally.v1.JobService/AdoptJobs",
            false,
            e(&pb::AdoptJobsRequest {
                parent: parent.clone(),
                worker: "thief".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/HandOverJob",
            false,
            e(&pb::HandOverJobRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
            }),
        ),
        (
            "/tally.v1.JobService/FinishJob",
            false,
            e(&pb::FinishJobRequest {
                name: t.job.clone(),
                claim: t.job_claim.clone(),
                final_state: pb::JobState::Failed as i32,
                output_file: String::new(),
                error: "forged".into(),
                not_run: Vec::new(),
            }),
        ),
        (
            "/tally.v1.JobService/CreateJob",
            false,
            e(&pb::CreateJobRequest {
                claim: t.claim.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/WatchJobs",
            true,
            e(&pb::WatchJobsRequest {
                parent: parent.clone(),
                after_sequence: -1,
            }),
        ),
        (
            "/tally.v1.JobService/AcquireLock",
            false,
            e(&pb::AcquireLockRequest {
                name: lock.clone(),
                owner: String::new(),
                ttl: dur(60),
            }),
        ),
        (
            "/tally.v1.JobService/RenewLock",
            false,
            e(&pb::RenewLockRequest {
                name: lock.clone(),
                token: t.lock_token.clone(),
                ttl: dur(60),
            }),
        ),
        (
            "/tally.v1.JobService/ReleaseLock",
            false,
            e(&pb::ReleaseLockRequest {
                name: lock,
                token: t.lock_token.clone(),
            }),
        ),
        (
            "/tally.v1.JobService/LookupMediaUploads",
            false,
            e(&pb::LookupMediaUploadsRequest {
                parent: parent.clone(),
                provider_account: "acct".into(),
                sha256: vec!["a".repeat(64)],
            }),
        ),
        (
            "/tally.v1.JobService/RecordMediaUpload",
            false,
            e(&pb::RecordMediaUploadRequest {
                parent: parent.clone(),
                upload: Some(pb::MediaUpload {
                    provider_account: "acct".into(),
                    sha256: "b".repeat(64),
                    file: "files/m".into(),
                    uri: "https://provider/files/m".into(),
                    mime_type: "image/png".into(),
                    size_bytes: 10,
                    expire_time: Some(prost_types::Timestamp {
                        seconds: 4_000_000_000,
                        nanos: 0,
                    }),
                    ..Default::default()
                }),
            }),
        ),
        (
            "/tally.v1.JobService/ListMediaUploads",
            false,
            e(&pb::ListMediaUploadsRequest {
                parent: parent.clone(),
                provider_account: "acct".into(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.JobService/ForgetMediaUpload",
            false,
            e(&pb::ForgetMediaUploadRequest {
                parent: parent.clone(),
                provider_account: "acct".into(),
                sha256: "c".repeat(64),
                file: "files/none".into(),
            }),
        ),
        (
            "/tally.v1.JobService/AcquireCapacity",
            false,
            e(&pb::AcquireCapacityRequest {
                claim: t.claim.clone(),
                provider_account: "acct".into(),
                tokens: vec![1],
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.OperationsService/IngestEvent",
            false,
            e(&pb::IngestEventRequest {
                event: Some(event(&t.batch, "BATCH_STATE_FAILED", 1_700_000_100)),
            }),
        ),
        (
            "/tally.v1.OperationsService/GetOperation",
            false,
            e(&pb::GetOperationRequest {
                name: t.batch.clone(),
            }),
        ),
        (
            "/tally.v1.OperationsService/ListOperationEvents",
            false,
            e(&pb::ListOperationEventsRequest {
                parent: t.batch.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/CreateConsumer",
            false,
            e(&pb::CreateConsumerRequest {
                parent: parent.clone(),
                consumer_id: "intruder".into(),
                consumer: None,
                start: None,
            }),
        ),
        (
            "/tally.v1.DeliveryService/GetConsumer",
            false,
            e(&pb::GetConsumerRequest {
                name: consumer.clone(),
            }),
        ),
        (
            "/tally.v1.DeliveryService/ListConsumers",
            false,
            e(&pb::ListConsumersRequest {
                parent: parent.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/ReceiveResults",
            false,
            e(&pb::ReceiveResultsRequest {
                consumer: consumer.clone(),
                max_rows: 10,
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/AckResults",
            false,
            e(&pb::AckResultsRequest {
                consumer: consumer.clone(),
                positions: vec![1 << 20 | 1],
                up_to_position: 0,
            }),
        ),
        (
            "/tally.v1.DeliveryService/NackResults",
            false,
            e(&pb::NackResultsRequest {
                consumer: consumer.clone(),
                positions: vec![1 << 20 | 1],
                dead_letter: true,
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/ListDeadLetters",
            false,
            e(&pb::ListDeadLettersRequest {
                parent: consumer.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/ListWebhookDeliveries",
            false,
            e(&pb::ListWebhookDeliveriesRequest {
                parent: consumer.clone(),
                ..Default::default()
            }),
        ),
        (
            "/tally.v1.DeliveryService/ResetConsumer",
            false,
            e(&pb::ResetConsumerRequest {
                name: consumer.clone(),
                to: Some(pb::ConsumerStart {
                    at: Some(pb::consumer_start::At::Now(true)),
                }),
            }),
        ),
        (
            "/tally.v1.DeliveryService/DeleteConsumer",
            false,
            e(&pb::DeleteConsumerRequest { name: consumer }),
        ),
        (
            "/tally.v1.LedgerService/DeleteLedger",
            false,
            e(&pb::DeleteLedgerRequest {
                name: parent,
                force: true,
                etag: String::new(),
                content_etag: String::new(),
            }),
        ),
    ]
}

/// The four RPCs whose scope is a filter over every ledger.
const FILTERED: [&str; 4] = [
    "/tally.v1.LedgerService/ListLedgers",
    "/tally.v1.OperationsService/ListOperations",
    "/tally.v1.JobService/WatchJobs (ledgers/-)",
    "/tally.v1.OperationsService/WatchOperations",
];

/// Roles allowed per method (the role table, written out again).
fn allowed(path: &str) -> &'static str {
    match path.rsplit('/').next().unwrap() {
        "CreateLedger"
        | "UpdateLedger"
        | "SetGoldenRows"
        | "RedriveRows"
        | "DeleteLedger"
        | "PauseLedger"
        | "ResumeLedger"
        | "ListOperations"
        | "ListOperationEvents" => "O",
        "EnrollRows" | "RegisterPrompt" => "EO",
        "CreateConsumer"
        | "GetConsumer"
        | "ListConsumers"
        | "DeleteConsumer"
        | "ReceiveResults"
        | "AckResults"
        | "NackResults"
        | "ListDeadLetters"
        | "ResetConsumer"
        | "ListWebhookDeliveries" => "EO",
        "GetLedger" | "ListLedgers" | "GetRow" | "ListRows" | "SummarizeLedger" | "GetPrompt"
        | "GetGoldenRows" | "EstimateFromCache" => "EWO",
        _ => "WO",
    }
}

trait DynMessage {
    fn bytes(&self) -> Vec<u8>;
}

impl<M: Message> DynMessage for M {
    fn bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}

/// Sends already-encoded request bytes; ignores the response's content.
#[derive(Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = ();
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

async fn call(
    channel: &Channel,
    path: &str,
    streaming: bool,
    body: Vec<u8>,
    token: &str,
) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let path = http::uri::PathAndQuery::try_from(path).unwrap();
    if streaming {
        grpc.server_streaming(authed(body, Some(token)), path, Raw)
            .await
            .map(|_| ())
    } else {
        grpc.unary(authed(body, Some(token)), path, Raw)
            .await
            .map(|_| ())
    }
}

/// Every user table's rows as text: equal before and after means nothing
/// was written.
async fn snapshot(url: &str) -> BTreeMap<String, String> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'
           AND tablename <> '_sqlx_migrations' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut out = BTreeMap::new();
    for t in tables {
        let sql = format!(
            "SELECT coalesce(string_agg(x::text, E'\\n' ORDER BY x::text), '') FROM \"{t}\" x"
        );
        let text: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&pool)
            .await
            .unwrap();
        out.insert(t, text);
    }
    pool.close().await;
    out
}

fn code_name(r: &Result<(), Status>) -> String {
    match r {
        Ok(()) => "OK".into(),
        Err(s) => match reason(s).as_str() {
            "" => format!("{:?}", s.code()),
            why => format!("{:?}:{why}", s.code()),
        },
    }
}

#[tokio::test]
async fn every_rpc_keeps_each_team_inside_its_own_ledgers() {
    let server = start(|a| a.security.tokens = Some(tokens())).await;
    let channel = server.connect().await;
    let acme = setup(&channel, "acme").await;
    let beta = setup(&channel, "beta").await;
    let roles = [('E', ACME_E), ('W', ACME_W), ('O', ACME_O)];
    let mut table: Vec<String> = Vec::new();

    // The other team's ledger, the other team's namespace where nothing
    // exists, and `ledgers/-`: refused, and nothing written.
    let before = snapshot(server.db.url()).await;
    let columns = [
        ("beta", beta.clone()),
        ("beta-ghost", Team::ghost("beta")),
        ("-", Team::dash()),
    ];
    let mut refusals = BTreeMap::<(&str, char), Vec<String>>::new();
    for (column, target) in &columns {
        for (path, streaming, body) in requests(target) {
            for (letter, token) in roles {
                let r = call(&channel, path, streaming, body.clone(), token).await;
                let cell = code_name(&r);
                if !allowed(path).contains(letter) {
                    assert_refused(r, Code::PermissionDenied, "ROLE_DENIED");
                } else if *column == "-" && path.ends_with("/WatchJobs") {
                    // `ledgers/-` is every ledger the caller reaches: the
                    // filter is checked in filtered_views.
                    r.expect("WatchJobs on ledgers/- is a filtered stream");
                } else if *column == "-" {
                    let s = r.expect_err(&format!("{path} as {letter}: `-` names no ledger"));
                    assert!(
                        s.code() == Code::InvalidArgument
                            || (s.code() == Code::PermissionDenied && reason(&s) == "OUT_OF_SCOPE"),
                        "{path} as {letter} on `-`: {s:?}"
                    );
                } else {
                    let s = r.expect_err(&format!("{path} as {letter} reached {column}"));
                    assert_eq!(
                        s.code(),
                        Code::PermissionDenied,
                        "{path} {letter} {column}: {s:?}"
                    );
                    assert_eq!(reason(&s), "OUT_OF_SCOPE", "{path} {letter} {column}");
                    // Same words whether or not it exists, but for the name.
                    let shape = s
                        .message()
                        .replace(&target.batch, "B")
                        .replace(&target.ledger, "L");
                    refusals.entry((path, letter)).or_default().push(shape);
                }
                table.push(format!("{path} {letter} {column} {cell}"));
            }
        }
    }
    for ((path, letter), shapes) in &refusals {
        assert_eq!(shapes.len(), 2, "{path} {letter}");
        if !path.ends_with("Lock") && !path.ends_with("Prompt") {
            assert_eq!(shapes[0], shapes[1], "{path} {letter}: existence leaks");
        }
    }

    // A live claim of beta named under acme's ledger finds nothing.
    let smuggled = beta.claim.replace(&beta.ledger, &acme.ledger);
    for (path, body) in [
        (
            "/tally.v1.LedgerService/ReportOutcomes",
            pb::ReportOutcomesRequest {
                claim: smuggled.clone(),
                outcomes: vec![pb::RowOutcome {
                    key: "k2".into(),
                    outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
                    usage: None,
                    ..Default::default()
                }],
                claim_next: None,
            }
            .encode_to_vec(),
        ),
        (
            "/tally.v1.JobService/CreateJob",
            pb::CreateJobRequest {
                claim: smuggled.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/tally.v1.LedgerService/ReleaseClaim",
            pb::ReleaseClaimRequest {
                name: smuggled.clone(),
                keys: vec![],
            }
            .encode_to_vec(),
        ),
    ] {
        let r = call(&channel, path, false, body, ACME_W).await;
        assert_eq!(r.unwrap_err().code(), Code::NotFound, "{path}");
    }
    let after = snapshot(server.db.url()).await;
    for (t, rows) in &before {
        assert_eq!(rows, &after[t], "table {t} changed on a refusal");
    }

    // The filtered lists and streams.
    filtered_views(&channel, &acme, &beta).await;

    // The own ledger: every allowed role reaches it.
    for (path, streaming, body) in requests(&acme) {
        for (letter, token) in roles {
            let r = call(&channel, path, streaming, body.clone(), token).await;
            let cell = code_name(&r);
            if allowed(path).contains(letter) {
                if let Err(s) = &r {
                    assert!(
                        !matches!(s.code(), Code::PermissionDenied | Code::Unauthenticated),
                        "{path} as {letter} on its own ledger: {s:?}"
                    );
                }
            } else {
                assert_refused(r, Code::PermissionDenied, "ROLE_DENIED");
            }
            table.push(format!("{path} {letter} acme {cell}"));
        }
    }
    for f in FILTERED {
        for (letter, _) in roles {
            let cell = if allowed(f.split(' ').next().unwrap()).contains(letter) {
                "filtered"
            } else {
                "PermissionDenied:ROLE_DENIED"
            };
            table.push(format!("{f} {letter} all {cell}"));
        }
    }
    println!("cross-team matrix ({} cells):", table.len());
    for line in &table {
        println!("  {line}");
    }
    // 54 RPCs named by a resource (57 less ListLedgers, ListOperations and
    // WatchOperations) × 4 columns, and the 4 filtered views, × 3 roles.
    let mut paths: Vec<&str> = requests(&acme).iter().map(|r| r.0).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), 54, "every RPC once");
    assert_eq!(table.len(), (54 * 4 + 4) * 3);
    server.stop().await;
}

/// ListLedgers, ListOperations, WatchJobs on `ledgers/-` and
/// WatchOperations as acme show acme's only; the whole-server operator
/// sees both teams.
async fn filtered_views(channel: &Channel, acme: &Team, beta: &Team) {
    // Live claim names authorize reports: enrollers never see them.
    let mut l = LedgerServiceClient::new(channel.clone());
    let mut claims_seen = BTreeMap::new();
    for (letter, token) in [('E', ACME_E), ('W', ACME_W)] {
        let mut n = 0;
        for k in 0..4 {
            let row = l
                .get_row(authed(
                    pb::GetRowRequest {
                        name: format!("ledgers/{}/rows/k{k}", acme.ledger),
                    },
                    Some(token),
                ))
                .await
                .unwrap()
                .into_inner();
            n += usize::from(!row.claim.is_empty());
        }
        claims_seen.insert(letter, n);
    }
    assert_eq!(claims_seen[&'E'], 0, "an enroller saw a claim name");
    assert_eq!(
        claims_seen[&'W'], 3,
        "the worker sees the three claimed rows' claims"
    );

    for token in [ACME_E, ACME_W, ACME_O, OPERATOR] {
        let names: Vec<String> = LedgerServiceClient::new(channel.clone())
            .list_ledgers(authed(pb::ListLedgersRequest::default(), Some(token)))
            .await
            .unwrap()
            .into_inner()
            .ledgers
            .into_iter()
            .map(|l| l.name)
            .collect();
        let expected = if token == OPERATOR {
            vec![
                format!("ledgers/{}", acme.ledger),
                format!("ledgers/{}", beta.ledger),
            ]
        } else {
            vec![format!("ledgers/{}", acme.ledger)]
        };
        assert_eq!(names, expected);
    }
    for (token, both) in [(ACME_O, false), (OPERATOR, true)] {
        let mut ops: Vec<String> = OperationsServiceClient::new(channel.clone())
            .list_operations(authed(pb::ListOperationsRequest::default(), Some(token)))
            .await
            .unwrap()
            .into_inner()
            .operations
            .into_iter()
            .map(|o| o.name)
            .collect();
        ops.sort();
        let mut expected = vec![format!("operations/{}", acme.batch)];
        if both {
            expected.push(format!("operations/{}", beta.batch));
        }
        assert_eq!(ops, expected, "ListOperations");
    }

    // WatchJobs from the first event: acme's worker sees acme's events up
    // to a marker (acme paused by root), none of beta's, which are older.
    let mut jobs = JobServiceClient::new(channel.clone())
        .watch_jobs(authed(
            pb::WatchJobsRequest {
                parent: "ledgers/-".into(),
                after_sequence: -1,
            },
            Some(ACME_W),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut ops = OperationsServiceClient::new(channel.clone())
        .watch_operations(authed(
            pb::WatchOperationsRequest { after_sequence: -1 },
            Some(BETA_W),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut l = LedgerServiceClient::new(channel.clone());
    l.pause_ledger(authed(
        pb::PauseLedgerRequest {
            name: format!("ledgers/{}", acme.ledger),
            message: "marker".into(),
            etag: String::new(),
        },
        Some(OPERATOR),
    ))
    .await
    .unwrap();
    let mut seen = 0;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), jobs.message())
            .await
            .expect("the marker arrives")
            .unwrap()
            .expect("stream open");
        assert_eq!(e.ledger, format!("ledgers/{}", acme.ledger), "{e:?}");
        seen += 1;
        if e.r#type == pb::JobEventType::LedgerPaused as i32 {
            break;
        }
    }
    assert!(seen >= 3, "acme's job events came first ({seen})");
    // WatchOperations from the first stored transition, as beta's worker:
    // beta's RUNNING, then beta's marker, never acme's.
    OperationsServiceClient::new(channel.clone())
        .ingest_event(authed(
            pb::IngestEventRequest {
                event: Some(event(&acme.batch, "BATCH_STATE_SUCCEEDED", 1_700_000_200)),
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap();
    OperationsServiceClient::new(channel.clone())
        .ingest_event(authed(
            pb::IngestEventRequest {
                event: Some(event(&beta.batch, "BATCH_STATE_SUCCEEDED", 1_700_000_200)),
            },
            Some(OPERATOR),
        ))
        .await
        .unwrap();
    let mut states = Vec::new();
    while states.len() < 2 {
        let t = tokio::time::timeout(Duration::from_secs(20), ops.message())
            .await
            .expect("beta's transitions arrive")
            .unwrap()
            .expect("stream open");
        let op = t.operation.unwrap();
        assert_eq!(op.name, format!("operations/{}", beta.batch), "{op:?}");
        states.push(op.state);
    }
    assert_eq!(
        states,
        [
            pb::OperationState::Running as i32,
            pb::OperationState::Succeeded as i32
        ]
    );
    l.resume_ledger(authed(
        pb::ResumeLedgerRequest {
            name: format!("ledgers/{}", acme.ledger),
            etag: String::new(),
        },
        Some(OPERATOR),
    ))
    .await
    .unwrap();
}

/// Invariant (issue 51): the media uploads register is the calling team's,
/// whatever provider account a worker names. Two teams sharing a provider
/// key (one account name): beta's worker, naming acme's account from its
/// own ledger, neither lists, finds, overwrites nor forgets acme's upload,
/// and an upload it records of the same bytes is its own.
#[tokio::test]
async fn two_teams_sharing_an_account_keep_their_own_media_uploads() {
    let server = start(|a| a.security.tokens = Some(tokens())).await;
    let channel = server.connect().await;
    let acme = setup(&channel, "acme").await;
    let beta = setup(&channel, "beta").await;
    let mut j = JobServiceClient::new(channel.clone());
    let hash = "d".repeat(64);
    let upload = |file: &str| pb::MediaUpload {
        provider_account: "shared".into(),
        sha256: hash.clone(),
        file: file.into(),
        uri: format!("https://provider/{file}"),
        mime_type: "image/png".into(),
        size_bytes: 10,
        expire_time: Some(prost_types::Timestamp {
            seconds: 4_000_000_000,
            nanos: 0,
        }),
        ..Default::default()
    };
    let record = |team: &Team, token: &'static str, file: &str| {
        authed(
            pb::RecordMediaUploadRequest {
                parent: format!("ledgers/{}", team.ledger),
                upload: Some(upload(file)),
            },
            Some(token),
        )
    };
    let list = |team: &Team, token: &'static str| {
        authed(
            pb::ListMediaUploadsRequest {
                parent: format!("ledgers/{}", team.ledger),
                provider_account: "shared".into(),
                ..Default::default()
            },
            Some(token),
        )
    };
    j.record_media_upload(record(&acme, ACME_W, "files/acme"))
        .await
        .unwrap();
    let seen = j.list_media_uploads(list(&beta, BETA_W)).await.unwrap();
    assert!(
        seen.get_ref().uploads.is_empty(),
        "beta lists nothing of acme's"
    );
    let found = j
        .lookup_media_uploads(authed(
            pb::LookupMediaUploadsRequest {
                parent: format!("ledgers/{}", beta.ledger),
                provider_account: "shared".into(),
                sha256: vec![hash.clone()],
            },
            Some(BETA_W),
        ))
        .await
        .unwrap();
    // Not acme's upload, and not acme's bytes: another team's records
    // (true or forged) never hold beta's uploads back.
    assert!(found.get_ref().uploads.is_empty() && found.get_ref().stored_bytes == 0);
    j.record_media_upload(record(&beta, BETA_W, "files/beta"))
        .await
        .unwrap();
    j.forget_media_upload(authed(
        pb::ForgetMediaUploadRequest {
            parent: format!("ledgers/{}", beta.ledger),
            provider_account: "shared".into(),
            sha256: hash.clone(),
            file: "files/acme".into(),
        },
        Some(BETA_W),
    ))
    .await
    .unwrap();
    let acme_has = j.list_media_uploads(list(&acme, ACME_W)).await.unwrap();
    let files: Vec<&str> = acme_has
        .get_ref()
        .uploads
        .iter()
        .map(|u| u.file.as_str())
        .collect();
    assert_eq!(files, ["files/acme"], "acme's entry is untouched");
    // A register entry must name an uploaded file: never a batch or a path.
    let bad = j
        .record_media_upload(record(&beta, BETA_W, "files/../batches/x"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("upload.file"), "{}", bad.message());
    server.stop().await;
}

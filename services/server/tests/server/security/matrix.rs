//! The role × method matrix through a real server: every RPC of the four
//! services × {enroller, worker, operator, no token, wrong token}, health
//! open, reflection per setting, and the caller's name recorded as actor.

use crate::security::common::*;
use prost::Message as _;
use std::collections::BTreeMap;
use tally_proto::v1::ledger_service_client::LedgerServiceClient;
use tally_server::config::ReflectionMode;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Who may call what, written out independently of the server's table:
/// E enroller, W worker, O operator.
const EXPECTED: &[(&str, &str)] = &[
    ("/tally.v1.LedgerService/CreateLedger", "O"),
    ("/tally.v1.LedgerService/GetLedger", "EWO"),
    ("/tally.v1.LedgerService/ListLedgers", "EWO"),
    ("/tally.v1.LedgerService/UpdateLedger", "O"),
    ("/tally.v1.LedgerService/EnrollRows", "EO"),
    ("/tally.v1.LedgerService/ClaimRows", "WO"),
    ("/tally.v1.LedgerService/ExtendClaim", "WO"),
    ("/tally.v1.LedgerService/ReleaseClaim", "WO"),
    ("/tally.v1.LedgerService/ReportOutcomes", "WO"),
    ("/tally.v1.LedgerService/GetRow", "EWO"),
    ("/tally.v1.LedgerService/ListRows", "EWO"),
    ("/tally.v1.LedgerService/SummarizeLedger", "EWO"),
    ("/tally.v1.LedgerService/RedriveRows", "O"),
    ("/tally.v1.LedgerService/DeleteLedger", "O"),
    ("/tally.v1.LedgerService/PauseLedger", "O"),
    ("/tally.v1.LedgerService/ResumeLedger", "O"),
    ("/tally.v1.LedgerService/RegisterPrompt", "EO"),
    ("/tally.v1.LedgerService/GetPrompt", "EWO"),
    ("/tally.v1.LedgerService/SetGoldenRows", "O"),
    ("/tally.v1.LedgerService/GetGoldenRows", "EWO"),
    ("/tally.v1.LedgerService/SettleFromCache", "WO"),
    ("/tally.v1.LedgerService/EstimateFromCache", "EWO"),
    ("/tally.v1.JobService/CreateJob", "WO"),
    ("/tally.v1.JobService/GetJob", "WO"),
    ("/tally.v1.JobService/ListJobs", "WO"),
    ("/tally.v1.JobService/MarkCreating", "WO"),
    ("/tally.v1.JobService/MarkSubmitted", "WO"),
    ("/tally.v1.JobService/MarkNotCreated", "WO"),
    ("/tally.v1.JobService/FlagCreateUnresolved", "WO"),
    ("/tally.v1.JobService/AdoptJobs", "WO"),
    ("/tally.v1.JobService/HandOverJob", "WO"),
    ("/tally.v1.JobService/FinishJob", "WO"),
    ("/tally.v1.JobService/WatchJobs", "WO"),
    ("/tally.v1.JobService/AcquireLock", "WO"),
    ("/tally.v1.JobService/RenewLock", "WO"),
    ("/tally.v1.JobService/ReleaseLock", "WO"),
    ("/tally.v1.JobService/ReportGoldenResults", "WO"),
    ("/tally.v1.JobService/LookupMediaUploads", "WO"),
    ("/tally.v1.JobService/RecordMediaUpload", "WO"),
    ("/tally.v1.JobService/ListMediaUploads", "WO"),
    ("/tally.v1.JobService/ForgetMediaUpload", "WO"),
    ("/tally.v1.JobService/AcquireCapacity", "WO"),
    ("/tally.v1.OperationsService/IngestEvent", "WO"),
    ("/tally.v1.OperationsService/GetOperation", "WO"),
    ("/tally.v1.OperationsService/ListOperations", "O"),
    ("/tally.v1.OperationsService/ListOperationEvents", "O"),
    ("/tally.v1.OperationsService/WatchOperations", "WO"),
    ("/tally.v1.DeliveryService/CreateConsumer", "EO"),
    ("/tally.v1.DeliveryService/GetConsumer", "EO"),
    ("/tally.v1.DeliveryService/ListConsumers", "EO"),
    ("/tally.v1.DeliveryService/DeleteConsumer", "EO"),
    ("/tally.v1.DeliveryService/ReceiveResults", "EO"),
    ("/tally.v1.DeliveryService/AckResults", "EO"),
    ("/tally.v1.DeliveryService/NackResults", "EO"),
    ("/tally.v1.DeliveryService/ListDeadLetters", "EO"),
    ("/tally.v1.DeliveryService/ResetConsumer", "EO"),
    ("/tally.v1.DeliveryService/ListWebhookDeliveries", "EO"),
];

/// Every RPC the generated descriptors describe, with "streams from the
/// server".
fn described() -> BTreeMap<String, bool> {
    let set = prost_types::FileDescriptorSet::decode(tally_proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = BTreeMap::new();
    for file in &set.file {
        for service in &file.service {
            for method in &service.method {
                out.insert(
                    format!("/{}.{}/{}", file.package(), service.name(), method.name()),
                    method.server_streaming(),
                );
            }
        }
    }
    out
}

#[tokio::test]
async fn every_rpc_for_every_role_no_token_and_a_wrong_token() {
    let described = described();
    let expected: BTreeMap<&str, &str> = EXPECTED.iter().copied().collect();
    assert_eq!(
        described.keys().map(String::as_str).collect::<Vec<_>>(),
        expected.keys().copied().collect::<Vec<_>>(),
        "the expected matrix covers exactly the described RPCs"
    );

    let server = start(|_| {}).await;
    let channel = server.connect().await;
    let callers = [
        ('E', Some(ENROLLER)),
        ('W', Some(WORKER)),
        ('O', Some(OPERATOR)),
    ];
    let mut checked = 0;
    for (path, streaming) in &described {
        let allowed = expected[path.as_str()];
        for (letter, token) in callers {
            let result = call_empty(&channel, path, *streaming, token).await;
            if allowed.contains(letter) {
                if let Err(s) = &result {
                    assert!(
                        !matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied),
                        "{letter} should reach {path}: {s:?}"
                    );
                }
            } else {
                assert_refused(result, Code::PermissionDenied, "ROLE_DENIED");
            }
            checked += 1;
        }
        let none = call_empty(&channel, path, *streaming, None).await;
        assert_refused(none, Code::Unauthenticated, "TOKEN_MISSING");
        let wrong = call_empty(&channel, path, *streaming, Some(WRONG)).await;
        assert_refused(wrong, Code::Unauthenticated, "TOKEN_UNKNOWN");
        checked += 2;
    }
    assert_eq!(checked, 57 * 5);

    // A path in no table is denied to operators too.
    let unlisted = call_empty(
        &channel,
        "/tally.v1.LedgerService/DropEverything",
        false,
        Some(OPERATOR),
    )
    .await;
    assert_refused(unlisted, Code::PermissionDenied, "METHOD_NOT_LISTED");
    server.stop().await;
}

/// Invariant: health is open; reflection is off unless turned on
/// (`--reflection open` lets grpcurl list services without a token).
#[tokio::test]
async fn health_is_open_and_reflection_is_off_by_default() {
    let server = start(|_| {}).await;
    let channel = server.connect().await;
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    assert!(health.is_ok(), "{health:?}");
    let off = reflection::list_v1(&channel, Some(OPERATOR)).await;
    assert_refused(off, Code::Unimplemented, "REFLECTION_OFF");
    let off = reflection::list_v1alpha(&channel, None).await;
    assert_refused(off, Code::Unimplemented, "REFLECTION_OFF");
    server.stop().await;

    let server = start(|a| a.security.reflection = ReflectionMode::Open).await;
    let channel = server.connect().await;
    let services = reflection::list_v1(&channel, None).await.unwrap();
    assert!(services.contains(&"tally.v1.LedgerService".to_string()));
    let services = reflection::list_v1alpha(&channel, None).await.unwrap();
    assert!(services.contains(&"tally.v1.JobService".to_string()));
    server.stop().await;
}

#[tokio::test]
async fn reflection_can_require_a_caller_or_be_off() {
    let server = start(|a| a.security.reflection = ReflectionMode::Authenticated).await;
    let channel = server.connect().await;
    let anonymous = reflection::list_v1(&channel, None).await;
    assert_refused(anonymous, Code::Unauthenticated, "TOKEN_MISSING");
    let wrong = reflection::list_v1alpha(&channel, Some(WRONG)).await;
    assert_refused(wrong, Code::Unauthenticated, "TOKEN_UNKNOWN");
    // Any role will do.
    let listed = reflection::list_v1(&channel, Some(ENROLLER)).await.unwrap();
    assert!(listed.contains(&"tally.v1.OperationsService".to_string()));
    server.stop().await;

    let server = start(|a| a.security.reflection = ReflectionMode::Off).await;
    let channel = server.connect().await;
    let off = reflection::list_v1(&channel, Some(OPERATOR)).await;
    assert_refused(off, Code::Unimplemented, "REFLECTION_OFF");
    server.stop().await;
}

#[tokio::test]
async fn the_callers_name_is_recorded_as_the_actor() {
    let server = start(|_| {}).await;
    let ledgers = LedgerServiceClient::new(server.connect().await);
    let row = one_reported_row(
        (ledgers.clone(), Some(OPERATOR)),
        (ledgers, Some(WORKER)),
        "actors",
    )
    .await;
    assert_eq!(row.history.len(), 1);
    assert_eq!(row.history[0].actor, "worker-pool");
    server.stop().await;
}

/// A worker lists the rows of one job (what a job it adopts expects), never
/// a whole ledger; enrollers and operators list the ledger.
#[tokio::test]
async fn a_worker_lists_one_jobs_rows_not_a_ledger() {
    let server = start(|_| {}).await;
    claimed(&server, "listing", None, 3).await;
    let mut l = LedgerServiceClient::new(server.connect().await);
    let list = |job: &str| tally_proto::v1::ListRowsRequest {
        parent: "ledgers/listing".into(),
        filter: Some(tally_proto::v1::RowFilter {
            job: job.into(),
            ..Default::default()
        }),
        page_size: 10,
        ..Default::default()
    };
    let whole = l.list_rows(authed(list(""), Some(WORKER))).await;
    assert_refused(whole, Code::PermissionDenied, "ROLE_DENIED");
    let one_job = l
        .list_rows(authed(list("ledgers/listing/jobs/j1"), Some(WORKER)))
        .await
        .expect("a worker lists a job's rows");
    assert!(one_job.into_inner().rows.is_empty(), "no row is in job j1");
    for token in [ENROLLER, OPERATOR] {
        let rows = l
            .list_rows(authed(list(""), Some(token)))
            .await
            .expect("the whole ledger")
            .into_inner()
            .rows;
        assert_eq!(rows.len(), 3, "{token}");
    }
    server.stop().await;
}

/// grpcurl's first step, by hand: list services over reflection.
pub mod reflection {
    use crate::security::common::authed;
    use tonic::Status;
    use tonic::transport::Channel;

    pub async fn list_v1(channel: &Channel, token: Option<&str>) -> Result<Vec<String>, Status> {
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut client = ServerReflectionClient::new(channel.clone());
        let mut stream = client
            .server_reflection_info(authed(tokio_stream::iter([req]), token))
            .await?
            .into_inner();
        match stream.message().await?.and_then(|r| r.message_response) {
            Some(MessageResponse::ListServicesResponse(l)) => {
                Ok(l.service.into_iter().map(|s| s.name).collect())
            }
            other => panic!("unexpected reflection answer {other:?}"),
        }
    }

    pub async fn list_v1alpha(
        channel: &Channel,
        token: Option<&str>,
    ) -> Result<Vec<String>, Status> {
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut client = ServerReflectionClient::new(channel.clone());
        let mut stream = client
            .server_reflection_info(authed(tokio_stream::iter([req]), token))
            .await?
            .into_inner();
        match stream.message().await?.and_then(|r| r.message_response) {
            Some(MessageResponse::ListServicesResponse(l)) => {
                Ok(l.service.into_iter().map(|s| s.name).collect())
            }
            other => panic!("unexpected reflection answer {other:?}"),
        }
    }
}

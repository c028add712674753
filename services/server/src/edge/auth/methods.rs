//! THE table of who may call what: every RPC of the four tally services,
//! with the roles allowed to call it and whether it streams. It is the only
//! place permissions live. An RPC missing from it is denied to every role,
//! operators included (default-deny), and a test checks it against the
//! generated service descriptors so a new RPC cannot go unclassified.
//!
//! Health is always open; reflection follows `--reflection`. Both are
//! recognised here by their service paths.

use super::Roles;

/// Whether a method answers once or streams (server or bidirectional).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unary,
    Stream,
}

/// One RPC: its HTTP/2 path, who may call it, and its kind.
#[derive(Debug, Clone, Copy)]
pub struct Method {
    pub path: &'static str,
    pub roles: Roles,
    pub kind: Kind,
}

const E: u8 = Roles::ENROLLER.0;
const W: u8 = Roles::WORKER.0;
const O: u8 = Roles::OPERATOR.0;

const fn m(path: &'static str, roles: u8, kind: Kind) -> Method {
    Method {
        path,
        roles: Roles(roles),
        kind,
    }
}

use Kind::{Stream, Unary};

/// Every tally RPC. Reasons for the less obvious rows are in
/// docs-security.md ("Roles and methods").
pub const METHODS: &[Method] = &[
    // LedgerService
    m("/tally.v1.LedgerService/CreateLedger", O, Unary),
    m("/tally.v1.LedgerService/GetLedger", E | W | O, Unary),
    m("/tally.v1.LedgerService/ListLedgers", E | W | O, Unary),
    m("/tally.v1.LedgerService/UpdateLedger", O, Unary),
    m("/tally.v1.LedgerService/EnrollRows", E | O, Unary),
    m("/tally.v1.LedgerService/ClaimRows", W | O, Unary),
    m("/tally.v1.LedgerService/ExtendClaim", W | O, Unary),
    m("/tally.v1.LedgerService/ReleaseClaim", W | O, Unary),
    m("/tally.v1.LedgerService/ReportOutcomes", W | O, Unary),
    m("/tally.v1.LedgerService/GetRow", E | W | O, Unary),
    m("/tally.v1.LedgerService/ListRows", E | W | O, Unary),
    m("/tally.v1.LedgerService/SummarizeLedger", E | W | O, Unary),
    m("/tally.v1.LedgerService/RedriveRows", O, Unary),
    m("/tally.v1.LedgerService/DeleteLedger", O, Unary),
    m("/tally.v1.LedgerService/PauseLedger", O, Unary),
    m("/tally.v1.LedgerService/ResumeLedger", O, Unary),
    m("/tally.v1.LedgerService/RegisterPrompt", E | O, Unary),
    m("/tally.v1.LedgerService/GetPrompt", E | W | O, Unary),
    m("/tally.v1.LedgerService/SetGoldenRows", O, Unary),
    m("/tally.v1.LedgerService/GetGoldenRows", E | W | O, Unary),
    m("/tally.v1.LedgerService/SettleFromCache", W | O, Unary),
    m(
        "/tally.v1.LedgerService/EstimateFromCache",
        E | W | O,
        Unary,
    ),
    // JobService
    m("/tally.v1.JobService/CreateJob", W | O, Unary),
    m("/tally.v1.JobService/GetJob", W | O, Unary),
    m("/tally.v1.JobService/ListJobs", W | O, Unary),
    m("/tally.v1.JobService/MarkCreating", W | O, Unary),
    m("/tally.v1.JobService/MarkSubmitted", W | O, Unary),
    m("/tally.v1.JobService/MarkNotCreated", W | O, Unary),
    m("/tally.v1.JobService/FlagCreateUnresolved", W | O, Unary),
    m("/tally.v1.JobService/AdoptJobs", W | O, Unary),
    m("/tally.v1.JobService/HandOverJob", W | O, Unary),
    m("/tally.v1.JobService/FinishJob", W | O, Unary),
    m("/tally.v1.JobService/WatchJobs", W | O, Stream),
    m("/tally.v1.JobService/AcquireLock", W | O, Unary),
    m("/tally.v1.JobService/RenewLock", W | O, Unary),
    m("/tally.v1.JobService/ReleaseLock", W | O, Unary),
    m("/tally.v1.JobService/ReportGoldenResults", W | O, Unary),
    m("/tally.v1.JobService/LookupMediaUploads", W | O, Unary),
    m("/tally.v1.JobService/RecordMediaUpload", W | O, Unary),
    m("/tally.v1.JobService/ListMediaUploads", W | O, Unary),
    m("/tally.v1.JobService/ForgetMediaUpload", W | O, Unary),
    m("/tally.v1.JobService/AcquireCapacity", W | O, Unary),
    // OperationsService
    m("/tally.v1.OperationsService/IngestEvent", W | O, Unary),
    m("/tally.v1.OperationsService/GetOperation", W | O, Unary),
    m("/tally.v1.OperationsService/ListOperations", O, Unary),
    m("/tally.v1.OperationsService/ListOperationEvents", O, Unary),
    m("/tally.v1.OperationsService/WatchOperations", W | O, Stream),
    // DeliveryService: the services that enroll work read its results;
    // workers do not.
    m("/tally.v1.DeliveryService/CreateConsumer", E | O, Unary),
    m("/tally.v1.DeliveryService/GetConsumer", E | O, Unary),
    m("/tally.v1.DeliveryService/ListConsumers", E | O, Unary),
    m("/tally.v1.DeliveryService/DeleteConsumer", E | O, Unary),
    m("/tally.v1.DeliveryService/ReceiveResults", E | O, Unary),
    m("/tally.v1.DeliveryService/AckResults", E | O, Unary),
    m("/tally.v1.DeliveryService/NackResults", E | O, Unary),
    m("/tally.v1.DeliveryService/ListDeadLetters", E | O, Unary),
    m("/tally.v1.DeliveryService/ResetConsumer", E | O, Unary),
    m(
        "/tally.v1.DeliveryService/ListWebhookDeliveries",
        E | O,
        Unary,
    ),
];

const HEALTH: &str = "/grpc.health.v1.Health/";
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";
const REFLECTION: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// What a request path is, as far as the auth and limits layers care.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// gRPC health: open to everyone.
    Health(Kind),
    /// gRPC reflection (v1 or v1alpha; a bidirectional stream).
    Reflection,
    /// A tally RPC from [`METHODS`].
    Tally(&'static Method),
    /// Anything else: denied when authentication is on.
    Unlisted,
}

impl Route {
    pub fn of(path: &str) -> Route {
        if let Some(method) = METHODS.iter().find(|m| m.path == path) {
            return Route::Tally(method);
        }
        if path.starts_with(HEALTH) {
            let kind = if path == HEALTH_WATCH {
                Kind::Stream
            } else {
                Kind::Unary
            };
            return Route::Health(kind);
        }
        if REFLECTION.iter().any(|p| path.starts_with(p)) {
            return Route::Reflection;
        }
        Route::Unlisted
    }

    pub fn kind(&self) -> Kind {
        match self {
            Route::Health(kind) => *kind,
            Route::Reflection => Kind::Stream,
            Route::Tally(m) => m.kind,
            Route::Unlisted => Kind::Unary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::roles::Role;
    use prost::Message as _;
    use std::collections::BTreeMap;

    /// Every method of every service in the generated descriptors, with
    /// whether it streams from the server.
    fn described() -> BTreeMap<String, bool> {
        let set = prost_types::FileDescriptorSet::decode(tally_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptor set decodes");
        let mut out = BTreeMap::new();
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    out.insert(path, method.server_streaming());
                }
            }
        }
        out
    }

    #[test]
    fn every_described_rpc_is_in_the_table_with_its_kind() {
        let described = described();
        assert_eq!(described.len(), 57, "the four services have 57 RPCs");
        for (path, streams) in &described {
            let Route::Tally(method) = Route::of(path) else {
                panic!("{path} is missing from auth::methods::METHODS (so it is denied to all)");
            };
            let kind = if *streams { Kind::Stream } else { Kind::Unary };
            assert_eq!(method.kind, kind, "{path}");
        }
        for method in METHODS {
            assert!(
                described.contains_key(method.path),
                "{} is in the table but no service describes it",
                method.path
            );
        }
        assert_eq!(METHODS.len(), described.len(), "no duplicates");
    }

    #[test]
    fn operators_may_call_everything_and_every_rpc_has_a_role() {
        for method in METHODS {
            assert!(method.roles.has(Role::Operator), "{}", method.path);
        }
    }

    #[test]
    fn the_sharp_edges_are_operator_only() {
        for path in [
            "/tally.v1.LedgerService/CreateLedger",
            "/tally.v1.LedgerService/UpdateLedger",
            "/tally.v1.LedgerService/RedriveRows",
            "/tally.v1.LedgerService/DeleteLedger",
            "/tally.v1.OperationsService/ListOperationEvents",
        ] {
            let Route::Tally(m) = Route::of(path) else {
                panic!("{path}")
            };
            assert!(!m.roles.has(Role::Worker) && !m.roles.has(Role::Enroller));
        }
        let Route::Tally(claim) = Route::of("/tally.v1.LedgerService/ClaimRows") else {
            panic!()
        };
        assert!(
            !claim.roles.has(Role::Enroller),
            "an enroller must not claim work"
        );
    }

    #[test]
    fn health_and_reflection_are_recognised() {
        assert!(matches!(
            Route::of("/grpc.health.v1.Health/Check"),
            Route::Health(Kind::Unary)
        ));
        assert!(matches!(
            Route::of("/grpc.health.v1.Health/Watch"),
            Route::Health(Kind::Stream)
        ));
        for p in [
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        ] {
            assert!(matches!(Route::of(p), Route::Reflection));
        }
        for p in [
            "/tally.v1.LedgerService/DropEverything",
            "/tally.v1.LedgerService/createledger",
            "/tally.v1.LedgerService/CreateLedger/",
            "/grpc.health.v1.Healthz/Check",
            "",
        ] {
            assert!(matches!(Route::of(p), Route::Unlisted), "{p}");
        }
    }
}

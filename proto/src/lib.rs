//! The `tally.v1` API: generated message types, clients and servers for
//! LedgerService, JobService, OperationsService and DeliveryService, and
//! the encoded file descriptor set for gRPC reflection.
//!
//! Nothing but generated code and small naming helpers lives here; domain
//! logic is in `tally-core`, conversions to it in the crates that use them.

#![allow(clippy::all, clippy::pedantic)]

/// Generated code for package `tally.v1`.
pub mod v1 {
    tonic::include_proto!("tally.v1");
}

/// Encoded `FileDescriptorSet` of every `tally.v1` file (for reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tally_descriptor.bin"));

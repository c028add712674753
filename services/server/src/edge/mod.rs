//! The gRPC edge: the tower layers every call passes through before its
//! handler (in order: [`connections`], [`auth`], [`limits`] with
//! [`principal`], [`intake`] reading the wire with [`wire`],
//! [`rpc_metrics`] with [`rpc_trace`]; their shared plumbing is
//! [`middleware`]), who the caller is for handlers ([`caller`]), and what
//! every answer passes through: [`status`] (the one mapping from errors to
//! gRPC statuses), [`responses`] (no answer larger than its client can
//! receive), [`paging`] (AIP-158 page tokens) and [`wire_convert`]
//! (protobuf's `Timestamp` and `Duration`).

pub mod auth;
pub mod caller;
pub mod connections;
pub mod intake;
pub mod limits;
pub mod middleware;
pub mod paging;
pub mod principal;
pub mod responses;
pub mod rpc_metrics;
pub mod rpc_trace;
pub mod status;
pub mod wire;
pub mod wire_convert;

//! Security and abuse limits through a real server (issue 7): the role ×
//! method matrix, TLS and mTLS handshakes, and every limit hit while the
//! server keeps serving others. One test binary; each test starts its own
//! server on port 0 against a fresh database.

mod arithmetic;
mod common;
mod limits;
mod matrix;
mod secrets;
mod ssrf;
mod teams;
mod tls;

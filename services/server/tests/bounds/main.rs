//! Issue 17, items 3 and 4, through a real server: responses never larger
//! than their client can receive (claims stop at the client's limit, pages
//! at 4 MiB), and no client able to hold the HTTP listeners (header and
//! body timeouts, a connection cap).
//!
//! Tests that measure print what they measured (`--nocapture` shows it).

mod listeners;
mod responses;
mod support;

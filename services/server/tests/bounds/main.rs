//! Issue 17, item 3, through a real server: responses never larger than
//! their client can receive (claims stop at the client's limit, pages at
//! 4 MiB).
//!
//! Tests that measure print what they measured (`--nocapture` shows it).

mod responses;
mod support;

//! Issue 17, items 3 and 4, through a real server: responses never larger
//! than their client can receive (claims stop at the client's limit,
//! pages at 4 MiB), and no client able to hold a listener or a slot (HTTP
//! header and body timeouts, connection caps, slow gRPC readers cut off,
//! tokenless streams on their own quota).
//!
//! Timing tests print what they measured (`--nocapture` shows it).

mod connections;
mod listeners;
mod responses;
mod slots;
mod support;

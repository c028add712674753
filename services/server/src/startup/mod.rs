//! Start-up: [`server`] assembles the checks, listeners, services and
//! layers and shuts down in order; [`background`] starts the tasks and
//! the HTTP listeners beside serving; [`database`] is the configured
//! PostgreSQL or the private one; [`tls`] the listener's certificates;
//! [`health_check`] the `tally-server health` client.

pub mod background;
pub mod database;
pub mod health_check;
pub mod server;
pub mod tls;

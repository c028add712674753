//! tally-pg: the PostgreSQL that tally needs when nobody gave it one.
//!
//! Two things live here, both used by other crates:
//!
//! - [`embedded`]: a private PostgreSQL cluster that `tally-server` manages itself when it
//!   has no database URL. It is created with the local installation's `initdb` (found by
//!   [`PgBinaries::locate`], since Debian keeps it off `PATH`), started as a child that
//!   dies with its owner, reused on the next start, and runs as root too (see
//!   [`privileges`]).
//! - [`testdb`]: [`TestDb`], one fresh database per test, on `DATABASE_URL`'s server or on
//!   a private cluster shared by the test process.
//!
//! - [`url`]: the one redaction of database URLs for logs and errors.
//!
//! Layout: `binaries` finds the installation; `privileges` decides who the server runs as;
//! `process` owns the postmaster process; `datadir` checks a data directory before it is
//! reused; `role` makes the unprivileged role tally connects as; `embedded` ties them
//! into start and stop;
//! `testdb` builds on `embedded`; `conn` connects to a cluster; `error` holds
//! [`PgError`].
//!
//! Not here: tally's schema, migrations and SQL (`tally-store`), and choosing between a
//! configured URL and the private server (`tally-server`).

mod binaries;
mod conn;
mod datadir;
pub mod embedded;
mod error;
pub mod privileges;
mod process;
pub mod role;
pub mod testdb;
pub mod url;

pub use binaries::{BIN_ENV, PgBinaries, PgVersion};
pub use conn::SUPERUSER;
pub use embedded::{EmbeddedOptions, EmbeddedPostgres};
pub use error::PgError;
pub use privileges::RootMode;
pub use role::APP_ROLE;
pub use testdb::TestDb;

//! Connections to a private cluster: the superuser it is set up with, how
//! long a connection may take, and identifiers quoted for the statements
//! that set it up.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};

/// Name of the superuser the cluster is initialised with.
pub const SUPERUSER: &str = "postgres";

/// How long a connection to the cluster may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Double-quotes an SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Connects as `user` over TCP.
pub(crate) async fn connect(
    port: u16,
    user: &str,
    password: &str,
    database: &str,
    timeout: Duration,
) -> Result<PgConnection, sqlx::Error> {
    let opts = PgConnectOptions::new_without_pgpass()
        .host("127.0.0.1")
        .port(port)
        .username(user)
        .password(password)
        .database(database)
        .ssl_mode(PgSslMode::Disable);
    match tokio::time::timeout(timeout, PgConnection::connect_with(&opts)).await {
        Ok(result) => result,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_identifiers() {
        assert_eq!(quote_ident("tally"), "\"tally\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}

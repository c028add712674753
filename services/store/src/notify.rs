//! `LISTEN` for watch streams' wake-ups. A notification is a hint that
//! something was committed, never the data: readers read the tables.

use crate::{Result, Store};
use sqlx::postgres::PgListener;

/// A dedicated connection listening on some channels.
pub struct Notifications {
    listener: PgListener,
}

impl Store {
    /// Opens a connection (outside the pool) listening on `channels`.
    pub async fn listen(&self, channels: &[&str]) -> Result<Notifications> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Notifications { listener })
    }
}

impl Notifications {
    /// The next notification's payload. `Ok(None)` means the connection
    /// dropped and notifications may have been lost meanwhile; the next
    /// call reconnects.
    pub async fn next(&mut self) -> Result<Option<String>> {
        Ok(self
            .listener
            .try_recv()
            .await?
            .map(|n| n.payload().to_string()))
    }
}

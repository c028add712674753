//! Which PostgreSQL tally uses: the one `--database-url` names, or a private
//! one it starts under `--data-dir` and stops on shutdown.

use crate::config::ServeArgs;
use anyhow::Context as _;
use tally_pg::url::redact;
use tally_pg::{EmbeddedOptions, EmbeddedPostgres};
use tally_store::{ConnectOptions, Store};

pub struct Database {
    pub store: Store,
    pub url_for_logs: String,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects (starting the private server first when no URL is given).
    pub async fn open(args: &ServeArgs) -> anyhow::Result<Self> {
        let (url, embedded) = match &args.database_url {
            Some(url) => (url.clone(), None),
            None => {
                tracing::info!(data_dir = %args.data_dir.display(), "no database url: starting a private postgresql");
                let mut opts = EmbeddedOptions::new(&args.data_dir);
                opts.bin_dir = args.pg_bin.clone();
                let pg = EmbeddedPostgres::start(opts)
                    .await
                    .context("could not start the private postgresql")?;
                (pg.url(), Some(pg))
            }
        };
        let mut opts = ConnectOptions::new(&url);
        opts.max_connections = args.db_max_connections;
        let quotas = args.provider.quotas().map_err(anyhow::Error::msg)?;
        let sync_limits = args.provider.sync_limits().map_err(anyhow::Error::msg)?;
        let store = Store::connect(&opts)
            .await
            .with_context(|| format!("could not connect to {}", redact(&url)))?
            .with_provider_quotas(quotas)
            .with_sync_limits(sync_limits);
        Ok(Self {
            store,
            url_for_logs: redact(&url),
            embedded,
        })
    }

    /// Closes the pool and stops the private server, if any.
    pub async fn close(self) {
        self.store.close().await;
        if let Some(pg) = self.embedded {
            match pg.stop().await {
                Ok(()) => tracing::info!("private postgresql stopped"),
                Err(e) => tracing::warn!(error = %e, "private postgresql did not stop cleanly"),
            }
        }
    }
}

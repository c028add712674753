//! The database the bench runs on, and cleaning up after. The bench only
//! ever runs on a database holding nothing but its own data: an empty one
//! given with --database-url, a scratch database it creates on the server of
//! --admin-url (or DATABASE_URL), or a private PostgreSQL in a temp dir.

use anyhow::{Context as _, bail};
use sqlx::{Connection, PgConnection};
use std::path::PathBuf;
use tally_pg::{EmbeddedOptions, EmbeddedPostgres};

/// Marks a database as the bench's own (so a crashed run can be resumed).
const MARKER: &str = "tally_bench_marker";

pub enum Scratch {
    /// An empty database someone pointed us at: emptied again afterwards.
    Given { url: String },
    /// A database we created on a server: dropped afterwards.
    Created {
        url: String,
        admin: String,
        name: String,
    },
    /// A private server in a temp dir: stopped and removed afterwards.
    Private {
        url: String,
        pg: EmbeddedPostgres,
        dir: PathBuf,
    },
}

impl Scratch {
    pub fn url(&self) -> &str {
        match self {
            Scratch::Given { url }
            | Scratch::Created { url, .. }
            | Scratch::Private { url, .. } => url,
        }
    }

    pub async fn acquire(
        database_url: Option<String>,
        admin_url: Option<String>,
    ) -> anyhow::Result<Self> {
        if let Some(url) = database_url {
            let mut conn = PgConnection::connect(&url)
                .await
                .context("connect to --database-url")?;
            let foreign: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
                   AND NOT EXISTS (SELECT 1 FROM pg_class m JOIN pg_namespace mn ON mn.oid = m.relnamespace
                                   WHERE mn.nspname = 'public' AND m.relname = 'tally_bench_marker')",
            )
            .fetch_one(&mut conn)
            .await?;
            let other_schemas: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_namespace WHERE nspname NOT IN ('public', 'information_schema')
                 AND nspname NOT LIKE 'pg\\_%'",
            )
            .fetch_one(&mut conn)
            .await?;
            if foreign > 0 || other_schemas > 0 {
                bail!(
                    "refusing to run: the database of --database-url holds data that is not the bench's \
                     ({foreign} tables, {other_schemas} other schemas). Point it at an empty database."
                );
            }
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS tally_bench_marker (started timestamptz DEFAULT now())",
            )
            .execute(&mut conn)
            .await?;
            return Ok(Scratch::Given { url });
        }
        if let Some(admin) = admin_url {
            let name = format!(
                "tally_bench_{}",
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            );
            let mut conn = PgConnection::connect(&admin)
                .await
                .context("connect to the admin url")?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await?;
            let url = with_database(&admin, &name);
            return Ok(Scratch::Created { url, admin, name });
        }
        let dir = std::env::temp_dir().join(format!("tally-bench-{}", std::process::id()));
        let mut opts = EmbeddedOptions::new(&dir);
        opts.database = "bench".into();
        let pg = EmbeddedPostgres::start(opts)
            .await
            .context("start a private postgresql")?;
        Ok(Scratch::Private {
            url: pg.url(),
            pg,
            dir,
        })
    }

    pub async fn release(self) -> anyhow::Result<()> {
        match self {
            Scratch::Given { url } => {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::query("DROP SCHEMA public CASCADE")
                    .execute(&mut conn)
                    .await?;
                sqlx::query("CREATE SCHEMA public")
                    .execute(&mut conn)
                    .await?;
                let _ = MARKER;
            }
            Scratch::Created { admin, name, .. } => {
                let mut conn = PgConnection::connect(&admin).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
            }
            Scratch::Private { pg, dir, .. } => {
                pg.stop().await?;
                std::fs::remove_dir_all(&dir).ok();
            }
        }
        Ok(())
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    match base[scheme_end..].find('/') {
        Some(slash) => format!("{}/{name}{query}", &base[..scheme_end + slash]),
        None => format!("{base}/{name}{query}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(
            super::with_database("postgres://u@h:5432/postgres?sslmode=disable", "x"),
            "postgres://u@h:5432/x?sslmode=disable"
        );
        assert_eq!(
            super::with_database("postgres://u@h", "x"),
            "postgres://u@h/x"
        );
    }
}

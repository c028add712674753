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

/// Scratch databases are named `tally_bench_<8 hex>`. Only names of this
/// shape (safe to splice into SQL unquoted) are ever dropped as leftovers.
const SCRATCH_NAMES: &str = "^tally_bench_[a-z0-9_]+$";

/// A run's session lock on its scratch database's name: taken on the admin
/// connection before the database exists and held until it is dropped, so a
/// scratch database whose lock is free belongs to a run that died.
const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(hashtext($1))";

pub enum Scratch {
    /// An empty database someone pointed us at: emptied again afterwards.
    Given { url: String },
    /// A database we created on a server: dropped afterwards. `guard` is
    /// the admin session holding the database's lock (see [`TRY_LOCK`]).
    Created {
        url: String,
        guard: PgConnection,
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
            let mut guard = PgConnection::connect(&admin)
                .await
                .context("connect to the admin url")?;
            drop_leftovers(&mut guard).await?;
            let locked: bool = sqlx::query_scalar(TRY_LOCK)
                .bind(&name)
                .fetch_one(&mut guard)
                .await?;
            if !locked {
                bail!("the lock of a new scratch database {name} is taken; run again");
            }
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut guard)
                .await?;
            let url = with_database(&admin, &name);
            return Ok(Scratch::Created { url, guard, name });
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
            Scratch::Created {
                mut guard, name, ..
            } => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut guard)
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

/// Drops the scratch databases of runs that died before dropping their own
/// (killed, or their server crashed mid-run: a 10-minute sustained run leaves
/// tens of gigabytes). A database whose run is alive keeps its lock and is
/// left alone.
async fn drop_leftovers(conn: &mut PgConnection) -> anyhow::Result<()> {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname ~ $1 ORDER BY datname")
            .bind(SCRATCH_NAMES)
            .fetch_all(&mut *conn)
            .await?;
    for name in names {
        let free: bool = sqlx::query_scalar(TRY_LOCK)
            .bind(&name)
            .fetch_one(&mut *conn)
            .await?;
        if !free {
            continue;
        }
        let dropped = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut *conn)
        .await;
        sqlx::query("SELECT pg_advisory_unlock(hashtext($1))")
            .bind(&name)
            .execute(&mut *conn)
            .await?;
        match dropped {
            Ok(_) => eprintln!("dropped {name}, left behind by an earlier run that did not finish"),
            Err(e) => eprintln!("could not drop {name}, left behind by an earlier run: {e}"),
        }
    }
    Ok(())
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

    /// A scratch database whose run died (its lock is free) is dropped when
    /// the next run starts; one whose run is alive (lock held) is not; a
    /// run's own database is gone after it releases.
    #[tokio::test]
    async fn a_run_drops_the_leftovers_of_dead_runs_and_only_those() {
        use sqlx::{Connection, PgConnection};
        let db = tally_pg::TestDb::new().await;
        let admin = super::with_database(db.admin_url(), "postgres");
        let exists = async |name: &str| -> bool {
            let mut c = PgConnection::connect(&admin).await.unwrap();
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(name)
                .fetch_one(&mut c)
                .await
                .unwrap()
        };
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let (dead, alive) = (
            format!("tally_bench_dead_{suffix}"),
            format!("tally_bench_alive_{suffix}"),
        );
        let mut live_run = PgConnection::connect(&admin).await.unwrap();
        for name in [&dead, &alive] {
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut live_run)
                .await
                .unwrap();
        }
        let locked: bool = sqlx::query_scalar(super::TRY_LOCK)
            .bind(&alive)
            .fetch_one(&mut live_run)
            .await
            .unwrap();
        assert!(locked);

        let scratch = super::Scratch::acquire(None, Some(admin.clone()))
            .await
            .unwrap();
        let super::Scratch::Created { name: ours, .. } = &scratch else {
            panic!("an admin url gives a created database");
        };
        let ours = ours.clone();
        assert!(!exists(&dead).await, "the dead run's database is dropped");
        assert!(exists(&alive).await, "the live run's database is kept");
        assert!(exists(&ours).await);

        scratch.release().await.unwrap();
        assert!(!exists(&ours).await, "a run drops its own database");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {alive} WITH (FORCE)"
        )))
        .execute(&mut live_run)
        .await
        .unwrap();
    }
}

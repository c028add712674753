//! One fresh, empty database per test.
//!
//! With `DATABASE_URL` set, databases are created on that server (its user must be allowed
//! to create databases). Without it, on a private cluster shared by the whole test process:
//! started once, lazily, non-durable, in `$TMPDIR/tally-test-pg-<pid>-<random>`. There the
//! superuser creates each database for the `tally` role and the test connects as that
//! role, exactly as `tally-server` does on its own private cluster, so tests catch
//! anything that would need more privilege than the server has.
//!
//! The shared cluster must outlive every test's tokio runtime, so it is started from a
//! dedicated thread with its own runtime, and its postmaster is owned by a supervisor
//! thread (see `process`), never by a test's runtime. It goes away with the process: an
//! `atexit` hook shuts it down and removes its directory on a normal exit, and
//! `PR_SET_PDEATHSIG` stops it if the process is killed; the directories such a kill
//! leaves behind are removed by the next test process that starts a cluster.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

use crate::conn::quote_ident;
use crate::process::process_alive;
use crate::{APP_ROLE, EmbeddedOptions, EmbeddedPostgres};

/// Environment variable naming an existing server to create test databases on.
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";
const DIR_PREFIX: &str = "tally-test-pg-";

/// A new, empty database, dropped (with `WITH (FORCE)`) when this value is dropped.
#[derive(Debug)]
pub struct TestDb {
    name: String,
    url: String,
    admin_url: String,
}

impl TestDb {
    /// Creates a database named `tally_test_<random>`: on the server of `DATABASE_URL` if
    /// that is set, else on this process's private cluster (started on first use).
    ///
    /// # Panics
    /// If no server can be had or the database cannot be created; the message says why.
    pub async fn new() -> TestDb {
        let name = format!("tally_test_{}", uuid::Uuid::new_v4().simple());
        let (admin_url, owner, url) = match std::env::var(DATABASE_URL_ENV) {
            Ok(url) if !url.is_empty() => (url.clone(), None, with_database(&url, &name)),
            _ => match private_cluster().await {
                Ok(pg) => (
                    pg.superuser_url_for("postgres"),
                    Some(APP_ROLE),
                    pg.url_for(&name),
                ),
                Err(e) => panic!(
                    "TestDb: could not start a private postgresql for tests ({e}); install \
                     PostgreSQL or set {DATABASE_URL_ENV} to a server where this user can \
                     create databases"
                ),
            },
        };
        if let Err(e) = create(&admin_url, &name, owner).await {
            panic!(
                "TestDb: could not create database {name} on {}: {e}",
                crate::url::redact(&admin_url)
            );
        }
        TestDb {
            name,
            url,
            admin_url,
        }
    }

    /// URL of the new database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Name of the new database.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// URL of a role that may create databases on the same server (the
    /// `DATABASE_URL` user, or the private cluster's superuser), for tests of
    /// tools that make databases of their own. Never hand it to tally: the
    /// server connects with [`TestDb::url`]'s unprivileged role.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }
}

impl Drop for TestDb {
    /// Drops the database from a thread with its own runtime, so this works inside a
    /// runtime (of either flavour) and outside one; waits for it so a test can check.
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                match tokio::time::timeout(
                    Duration::from_secs(30),
                    drop_database(&admin_url, &name),
                )
                .await
                {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("timed out".to_owned()),
                }
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(database = %self.name, %error, "could not drop test database")
            }
            Err(_) => tracing::warn!(database = %self.name, "test database drop thread panicked"),
        }
    }
}

/// Creates `name`, owned by `owner` if given (else by the connecting user).
async fn create(admin_url: &str, name: &str, owner: Option<&str>) -> Result<(), sqlx::Error> {
    let mut conn = PgConnection::connect(admin_url).await?;
    // Safe: the names are quoted identifiers.
    let mut sql = format!("create database {}", quote_ident(name));
    if let Some(owner) = owner {
        sql.push_str(&format!(" owner {}", quote_ident(owner)));
    }
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await?;
    conn.close().await
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), sqlx::Error> {
    let mut conn = PgConnection::connect(admin_url).await?;
    let sql = format!("drop database if exists {} with (force)", quote_ident(name));
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await?;
    conn.close().await
}

/// The process-wide private cluster. A failure is remembered, so every later test fails
/// fast with the same message instead of trying again.
async fn private_cluster() -> Result<&'static EmbeddedPostgres, String> {
    static CLUSTER: OnceCell<Result<EmbeddedPostgres, String>> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("tally-testdb-start".to_owned())
                .spawn(move || {
                    let result = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())
                        .and_then(|rt| rt.block_on(start_private()));
                    let _ = tx.send(result);
                });
            match spawned {
                Ok(_) => rx
                    .await
                    .unwrap_or_else(|_| Err("the start thread panicked".to_owned())),
                Err(e) => Err(format!("could not spawn a thread: {e}")),
            }
        })
        .await
        .as_ref()
        .map_err(Clone::clone)
}

async fn start_private() -> Result<EmbeddedPostgres, String> {
    let tmp = std::env::temp_dir();
    remove_stale_dirs(&tmp);
    let dir = tmp.join(format!(
        "{DIR_PREFIX}{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let mut opts = EmbeddedOptions::new(&dir);
    opts.durable = false;
    let pg = EmbeddedPostgres::start(opts)
        .await
        .map_err(|e| e.to_string())?;
    register_cleanup(pg.pid(), dir);
    Ok(pg)
}

/// What the exit hook cleans up.
static CLEANUP: OnceLock<(i32, PathBuf)> = OnceLock::new();

fn register_cleanup(pid: i32, dir: PathBuf) {
    if CLEANUP.set((pid, dir)).is_ok() {
        // SAFETY: registering a plain `extern "C"` function.
        unsafe { libc::atexit(cleanup_at_exit) };
    }
}

/// On a normal exit: fast shutdown, then remove the directory. Bounded, so a stuck server
/// cannot hang the test process; whatever is left is removed by a later run.
extern "C" fn cleanup_at_exit() {
    let Some((pid, dir)) = CLEANUP.get() else {
        return;
    };
    let _ = kill(Pid::from_raw(*pid), Signal::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(*pid) {
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Removes `tally-test-pg-<pid>-*` directories whose test process and server are both gone.
fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let postmaster = std::fs::read_to_string(path.join("pgdata/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()));
        if owner == std::process::id() as i32
            || process_alive(owner)
            || postmaster.is_some_and(process_alive)
        {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::debug!(dir = %path.display(), "removed stale test cluster"),
            Err(error) => {
                tracing::debug!(dir = %path.display(), %error, "could not remove stale test cluster")
            }
        }
    }
}

/// `url` with its database (path) replaced by `database`; user, host and query are kept.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_at(url.find('?').unwrap_or(url.len()));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    format!("{}/{database}{query}", &base[..path])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_of_a_url() {
        let cases = [
            ("postgres://u@h:5432/postgres", "postgres://u@h:5432/t"),
            (
                "postgres://u:p@h/postgres?sslmode=disable",
                "postgres://u:p@h/t?sslmode=disable",
            ),
            ("postgres://h", "postgres://h/t"),
            ("postgres://h:1/", "postgres://h:1/t"),
            (
                "postgresql://[::1]:5/db?host=/run/pg",
                "postgresql://[::1]:5/t?host=/run/pg",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "t"), want, "{url}");
        }
    }
}

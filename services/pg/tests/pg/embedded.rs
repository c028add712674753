//! The private PostgreSQL against the machine's real installation: start, stop, reuse,
//! running as root both ways, and dying with its owner.

use crate::common;

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use common::{TempDir, alive, spawn_helper, wait_dead, wait_for_line};
use nix::unistd::{User, geteuid};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{Connection, PgConnection};
use tally_pg::{EmbeddedOptions, EmbeddedPostgres, PgBinaries, PgError, RootMode};

fn fast_options(data_dir: &Path) -> EmbeddedOptions {
    let mut opts = EmbeddedOptions::new(data_dir);
    opts.durable = false;
    opts
}

async fn scalar_i64(url: &str, sql: &'static str) -> i64 {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let v: i64 = sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    v
}

/// Uid of `pid` on the host, from /proc.
fn host_uid(pid: i32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn user_namespace_of(pid: &str) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/user")).unwrap()
}

/// A mode-700 root-owned directory, like /root: only its owner can traverse it.
fn locked_dir(parent: &Path) -> std::path::PathBuf {
    let dir = parent.join("locked");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    dir
}

fn skip_unless_root(test: &str) -> bool {
    if geteuid().is_root() {
        return false;
    }
    eprintln!("{test}: skipped, needs root");
    true
}

#[tokio::test]
async fn start_stop_and_restart_keep_data_and_port() {
    let tmp = TempDir::new("restart");
    let opts = fast_options(&tmp.path().join("data"));
    let pg = EmbeddedPostgres::start(opts.clone()).await.unwrap();
    let (port, pid) = (pg.port(), pg.pid());
    assert_ne!(port, 5432);
    assert!(pg.url().starts_with("postgres://tally:"));
    assert!(pg.url().contains(&format!("@127.0.0.1:{port}/tally")));

    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let db: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(db, "tally");
    sqlx::raw_sql("create table kept (v bigint); insert into kept values (42)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    pg.stop().await.unwrap();
    assert!(!alive(pid), "postmaster {pid} still running after stop");

    let data = tmp.path().join("data");
    for file in [
        "pgdata/PG_VERSION",
        "postgres.log",
        "port",
        "superuser-password",
        "app-password",
    ] {
        assert!(data.join(file).exists(), "{file} missing");
    }
    for file in ["superuser-password", "app-password"] {
        let mode = std::fs::metadata(data.join(file)).unwrap().mode();
        assert_eq!(mode & 0o077, 0, "{file} readable by others");
    }
    let mode = std::fs::metadata(&data).unwrap().mode();
    assert_eq!(mode & 0o777, 0o700, "a new data directory must be private");

    let pg = EmbeddedPostgres::start(opts).await.unwrap();
    assert_eq!(pg.port(), port, "remembered port not reused");
    assert_ne!(pg.pid(), pid);
    assert_eq!(scalar_i64(&pg.url(), "select v from kept").await, 42);
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn creates_the_database_and_serves_settings() {
    let tmp = TempDir::new("settings");
    let data = tmp.path().join("data");
    let mut opts = fast_options(&data);
    opts.database = "other db".to_owned();
    let pg = EmbeddedPostgres::start(opts).await.unwrap();
    // Socket settings are the superuser's to read.
    let mut conn = PgConnection::connect(&superuser_url(&data, pg.port(), "other%20db"))
        .await
        .unwrap();
    let row: (String, String, String, String, String, String) = sqlx::query_as(
        "select current_database(), current_setting('max_connections'), \
         current_setting('shared_buffers'), current_setting('fsync'), \
         current_setting('listen_addresses'), current_setting('unix_socket_directories')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        row,
        (
            "other db".into(),
            "200".into(),
            "128MB".into(),
            "off".into(),
            "127.0.0.1".into(),
            String::new()
        )
    );
    conn.close().await.unwrap();
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn durable_clusters_keep_stock_durability() {
    let tmp = TempDir::new("durable");
    let pg = EmbeddedPostgres::start(EmbeddedOptions::new(tmp.path().join("data")))
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let (fsync, commit): (String, String) =
        sqlx::query_as("select current_setting('fsync'), current_setting('synchronous_commit')")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!((fsync.as_str(), commit.as_str()), ("on", "on"));
    conn.close().await.unwrap();
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn reuses_a_postmaster_left_running_by_a_previous_owner() {
    let tmp = TempDir::new("adopt");
    let opts = fast_options(&tmp.path().join("data"));
    let first = EmbeddedPostgres::start(opts.clone()).await.unwrap();
    let (port, pid) = (first.port(), first.pid());
    // As if the owner vanished without stopping it.
    std::mem::forget(first);

    let second = EmbeddedPostgres::start(opts).await.unwrap();
    assert_eq!((second.port(), second.pid()), (port, pid));
    assert_eq!(scalar_i64(&second.url(), "select 7::bigint").await, 7);
    second.stop().await.unwrap();
    assert!(wait_dead(pid, Duration::from_secs(10)));
}

#[tokio::test]
async fn no_binaries_error_says_what_to_do() {
    let tmp = TempDir::new("nobin");
    let empty = tmp.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let expected = format!(
        "no PostgreSQL installation found (looked in {}). Install PostgreSQL (Debian/Ubuntu: \
         apt-get install postgresql; macOS: brew install postgresql@16), point --pg-bin / \
         TALLY_PG_BIN at its bin directory, or set --database-url / DATABASE_URL to an \
         existing server.",
        empty.display()
    );

    let err = PgBinaries::locate(Some(&empty)).unwrap_err();
    assert!(matches!(err, PgError::NotFound { .. }));
    assert_eq!(err.to_string(), expected);

    let mut opts = fast_options(&tmp.path().join("data"));
    opts.bin_dir = Some(empty);
    let err = EmbeddedPostgres::start(opts).await.unwrap_err();
    assert_eq!(err.to_string(), expected);
}

#[tokio::test]
async fn a_server_that_cannot_start_reports_its_log() {
    let tmp = TempDir::new("broken");
    let data = tmp.path().join("data");
    let opts = fast_options(&data);
    EmbeddedPostgres::start(opts.clone())
        .await
        .unwrap()
        .stop()
        .await
        .unwrap();
    let conf = data.join("pgdata/postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nno_such_setting = 1\n");
    std::fs::write(&conf, text).unwrap();

    let err = EmbeddedPostgres::start(opts).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PgError::Exited { .. }), "{msg}");
    assert!(
        msg.starts_with("postgresql exited while starting (exit status: 1); last lines of "),
        "{msg}"
    );
    assert!(msg.contains("no_such_setting"), "{msg}");
}

#[tokio::test]
async fn an_explicit_port_in_use_is_reported() {
    let tmp = TempDir::new("busyport");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let mut opts = fast_options(&tmp.path().join("data"));
    opts.port = Some(port);
    let err = EmbeddedPostgres::start(opts).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid option: port {port} is in use; choose another or let tally pick one")
    );
}

#[test]
fn locates_the_local_installation() {
    let bins = PgBinaries::locate(None).unwrap();
    assert!(bins.initdb().exists() && bins.postgres().exists());
    let version = bins.version().unwrap();
    assert!(version.major >= 13, "{version:?}");
}

#[tokio::test]
async fn as_root_runs_in_a_user_namespace_even_under_a_mode_700_dir() {
    if skip_unless_root("user namespace") {
        return;
    }
    let tmp = TempDir::new("userns");
    let data = locked_dir(tmp.path()).join("data");
    let mut opts = fast_options(&data);
    opts.root_mode = RootMode::UserNamespace;
    let pg = EmbeddedPostgres::start(opts).await.unwrap();

    // Root on the host, but in a user namespace of its own; its files stay root's.
    assert_eq!(host_uid(pg.pid()), 0);
    assert_ne!(
        user_namespace_of(&pg.pid().to_string()),
        user_namespace_of("self")
    );
    assert_eq!(std::fs::metadata(data.join("pgdata")).unwrap().uid(), 0);
    assert_eq!(scalar_i64(&pg.url(), "select 1::bigint").await, 1);
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn as_root_drops_privileges_and_switches_back() {
    if skip_unless_root("drop privileges") {
        return;
    }
    let postgres = User::from_name("postgres")
        .unwrap()
        .expect("a postgres user");
    let tmp = TempDir::new("dropprivs");
    let data = tmp.path().join("data");
    let mut opts = fast_options(&data);
    opts.root_mode = RootMode::DropPrivileges;
    let pg = EmbeddedPostgres::start(opts.clone()).await.unwrap();
    assert_eq!(host_uid(pg.pid()), postgres.uid.as_raw());
    assert_eq!(
        std::fs::metadata(data.join("pgdata")).unwrap().uid(),
        postgres.uid.as_raw()
    );
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    sqlx::raw_sql("create table t (v bigint); insert into t values (5)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    pg.stop().await.unwrap();

    // The same data directory in a user namespace: ownership is given back to root.
    opts.root_mode = RootMode::UserNamespace;
    let pg = EmbeddedPostgres::start(opts).await.unwrap();
    assert_eq!(std::fs::metadata(data.join("pgdata")).unwrap().uid(), 0);
    assert_eq!(scalar_i64(&pg.url(), "select v from t").await, 5);
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn dropping_privileges_refuses_a_dir_the_user_cannot_reach() {
    if skip_unless_root("unreachable dir") {
        return;
    }
    let tmp = TempDir::new("unreachable");
    let locked = locked_dir(tmp.path());
    let mut opts = fast_options(&locked.join("data"));
    opts.root_mode = RootMode::DropPrivileges;
    let err = EmbeddedPostgres::start(opts).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PgError::Privileges(_)), "{msg}");
    assert!(
        msg.contains(&format!("{} is not traversable", locked.display())),
        "{msg}"
    );
}

#[test]
fn postmaster_outlives_the_thread_and_runtime_that_started_it() {
    let tmp = TempDir::new("thread");
    let opts = fast_options(&tmp.path().join("data"));
    let pg = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(EmbeddedPostgres::start(opts)).unwrap()
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(pg.pid()), "postmaster died with the starting thread");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        assert_eq!(scalar_i64(&pg.url(), "select 3::bigint").await, 3);
        pg.stop().await.unwrap();
    });
}

const OWNER_DIR: &str = "TALLY_PG_TEST_OWNER_DIR";
const OWNER_MODE: &str = "TALLY_PG_TEST_OWNER_MODE";

/// Not a test by itself: the owner process of `postmaster_dies_with_its_owner*`, which
/// runs it in a child process. Without the environment variable it does nothing.
#[test]
fn helper_owner_process() {
    let Ok(dir) = std::env::var(OWNER_DIR) else {
        return;
    };
    let mut opts = fast_options(Path::new(&dir));
    opts.root_mode = match std::env::var(OWNER_MODE).as_deref() {
        Ok("drop") => RootMode::DropPrivileges,
        _ => RootMode::Auto,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pg = rt.block_on(EmbeddedPostgres::start(opts)).unwrap();
    println!("READY {}", pg.pid());
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// SIGKILLs a process that owns a private postgresql and checks the server goes away by
/// itself, through a fast shutdown (PR_SET_PDEATHSIG = SIGINT).
fn check_postmaster_dies_with_owner(mode: &str) {
    let tmp = TempDir::new("owner");
    let data = tmp.path().join("data");
    let (mut owner, lines) = spawn_helper(
        "embedded::helper_owner_process",
        &[(OWNER_DIR, data.to_str().unwrap()), (OWNER_MODE, mode)],
    );
    let pid: i32 = wait_for_line(&lines, "READY ").parse().unwrap();
    assert!(alive(pid));
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert!(
        wait_dead(pid, Duration::from_secs(30)),
        "postmaster {pid} outlived its owner"
    );
    let log = std::fs::read_to_string(data.join("postgres.log")).unwrap();
    assert!(
        log.contains("received fast shutdown request"),
        "no fast shutdown in the log:\n{log}"
    );
}

#[test]
fn postmaster_dies_with_its_owner() {
    // As root this is the user namespace path; otherwise the plain one.
    check_postmaster_dies_with_owner("auto");
}

#[test]
fn postmaster_dies_with_its_owner_after_dropping_privileges() {
    if skip_unless_root("owner death, dropped privileges") {
        return;
    }
    check_postmaster_dies_with_owner("drop");
}

/// tally's migrations, applied here as the server would apply them.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// The superuser's URL for a cluster, from its password file (what the manager itself
/// uses for setup, and what a tally without its own role handed to the server).
fn superuser_url(data: &Path, port: u16, database: &str) -> String {
    let password = std::fs::read_to_string(data.join("superuser-password")).unwrap();
    format!(
        "postgres://postgres:{}@127.0.0.1:{port}/{database}?sslmode=disable",
        password.trim()
    )
}

/// The SQLSTATE `sql` fails with, `None` if it succeeds.
async fn sqlstate(conn: &mut PgConnection, sql: &'static str) -> Option<String> {
    match sqlx::raw_sql(sql).execute(conn).await {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[tokio::test]
async fn the_server_connects_as_an_unprivileged_role_that_can_migrate() {
    // Invariant: the URL handed to the server names a role that is no superuser and
    // cannot make roles, change server settings, make databases, run programs or read
    // server files, yet owns its database well enough to apply every migration.
    let tmp = TempDir::new("approle");
    let pg = EmbeddedPostgres::start(fast_options(&tmp.path().join("data")))
        .await
        .unwrap();
    assert!(
        pg.url().starts_with("postgres://tally:"),
        "url names another user"
    );
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let role: (String, bool, bool, bool) = sqlx::query_as(
        "select rolname::text, rolsuper, rolcreatedb, rolcreaterole \
         from pg_roles where rolname = current_user",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(role, ("tally".to_owned(), false, false, false));
    for sql in [
        "create role intruder login superuser",
        "alter system set fsync = off",
        "create database other",
        "copy (select 1) to program 'true'",
        "select pg_read_file('postgresql.conf')",
    ] {
        assert_eq!(
            sqlstate(&mut conn, sql).await.as_deref(),
            Some("42501"),
            "{sql}: not refused as insufficient privilege"
        );
    }
    MIGRATOR.run(&mut conn).await.unwrap();
    let foreign: i64 = sqlx::query_scalar(
        "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace \
         where n.nspname = 'public' and c.relowner <> (select oid from pg_roles where rolname = current_user)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(foreign, 0, "migrations made objects the role does not own");
    conn.close().await.unwrap();
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn an_unsafe_existing_data_dir_is_refused_and_no_link_is_followed() {
    // Invariant: reusing a data directory in which a path of our layout is a symlink or
    // open to others fails before anything in it is read, written or started, with an
    // error naming the path and the fix; no link is followed (its target is unchanged).
    // With the damage undone, the same directory starts again.
    let tmp = TempDir::new("unsafe");
    let data = tmp.path().join("data");
    let opts = fast_options(&data);
    EmbeddedPostgres::start(opts.clone())
        .await
        .unwrap()
        .stop()
        .await
        .unwrap();
    let refused = |opts: EmbeddedOptions| {
        let pidfile = data.join("pgdata/postmaster.pid");
        async move {
            let err = EmbeddedPostgres::start(opts).await.unwrap_err();
            assert!(matches!(err, PgError::UnsafePath { .. }), "{err}");
            assert!(!pidfile.exists(), "a server was started: {err}");
            err.to_string()
        }
    };

    let decoy = tmp.path().join("decoy");
    let saved = tmp.path().join("saved");
    for name in [
        "superuser-password",
        "app-password",
        "port",
        "postgres.log",
        "pgdata",
    ] {
        let path = data.join(name);
        std::fs::rename(&path, &saved).unwrap();
        std::fs::write(&decoy, "decoy\n").unwrap();
        std::os::unix::fs::symlink(&decoy, &path).unwrap();
        let msg = refused(opts.clone()).await;
        assert!(
            msg.starts_with(&format!(
                "refusing to use {}: it is a symbolic link",
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.contains(&format!("rm {}", path.display())), "{msg}");
        assert_eq!(
            std::fs::read_to_string(&decoy).unwrap(),
            "decoy\n",
            "{name}: the link was followed"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&saved, &path).unwrap();
    }

    let chmod = |path: &Path, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    chmod(&data, 0o770);
    assert_eq!(
        refused(opts.clone()).await,
        format!(
            "refusing to use {0}: it is writable by group or others (mode 770); chmod 700 {0}",
            data.display()
        )
    );
    chmod(&data, 0o700);
    let password = data.join("app-password");
    chmod(&password, 0o644);
    assert_eq!(
        refused(opts.clone()).await,
        format!(
            "refusing to use {0}: it is readable or writable by group or others (mode 644); \
             chmod 600 {0}",
            password.display()
        )
    );
    chmod(&password, 0o600);

    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let msg = refused(fast_options(&link)).await;
    assert!(
        msg.starts_with(&format!(
            "refusing to use {}: it is a symbolic link",
            link.display()
        )),
        "{msg}"
    );

    let pg = EmbeddedPostgres::start(opts).await.unwrap();
    assert_eq!(scalar_i64(&pg.url(), "select 1::bigint").await, 1);
    pg.stop().await.unwrap();
}

/// A forward migration, for the upgrade test: it changes every table, sequence, function
/// and statistics object in the schema, which PostgreSQL allows their owner only (anyone
/// else gets 42501), the way a real migration alters what the ones before it made.
const TOUCH_EVERY_OBJECT: &str = r#"
DO $$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,
               c.oid::regclass::text AS name
        FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'S')
        UNION ALL
        SELECT 'FUNCTION', p.oid::regprocedure::text
        FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
        UNION ALL
        SELECT 'STATISTICS', 'public.' || quote_ident(s.stxname)
        FROM pg_statistic_ext s WHERE s.stxnamespace = 'public'::regnamespace
    LOOP
        EXECUTE format('COMMENT ON %s %s IS %L', o.kind, o.name, 'changed by its owner');
    END LOOP;
END
$$;
"#;

#[tokio::test]
async fn a_cluster_made_before_the_app_role_gets_it_on_reuse() {
    // Invariant: a cluster of a tally that had only the superuser (no `tally` role, no
    // app-password; the database and the whole schema made by the superuser) is upgraded
    // on reuse: the role is created unprivileged and given the database and every object
    // in it, the migrator's table included. So the role owns every table, sequence,
    // function and statistics object, and later migrations apply as the role even where
    // they change objects the superuser made (which only their owner may).
    let tmp = TempDir::new("upgrade");
    let data = tmp.path().join("data");
    let opts = fast_options(&data);
    let pg = EmbeddedPostgres::start(opts.clone()).await.unwrap();
    let port = pg.port();

    // The old layout, made with the superuser.
    let mut su = PgConnection::connect(&superuser_url(&data, port, "postgres"))
        .await
        .unwrap();
    sqlx::raw_sql("alter database tally owner to postgres; drop role tally")
        .execute(&mut su)
        .await
        .unwrap();
    su.close().await.unwrap();
    let mut su = PgConnection::connect(&superuser_url(&data, port, "tally"))
        .await
        .unwrap();
    MIGRATOR.run(&mut su).await.unwrap();
    su.close().await.unwrap();
    pg.stop().await.unwrap();
    std::fs::remove_file(data.join("app-password")).unwrap();

    let pg = EmbeddedPostgres::start(opts).await.unwrap();
    assert!(pg.url().starts_with("postgres://tally:"));
    let mode = std::fs::metadata(data.join("app-password")).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let (superuser, db_owner): (bool, String) = sqlx::query_as(
        "select rolsuper, (select pg_get_userbyid(datdba)::text from pg_database \
         where datname = current_database()) from pg_roles where rolname = current_user",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((superuser, db_owner.as_str()), (false, "tally"));
    let foreign: Vec<String> = sqlx::query_scalar(
        "select c.oid::regclass::text from pg_class c \
         join pg_namespace n on n.oid = c.relnamespace \
         where n.nspname = 'public' and pg_get_userbyid(c.relowner) <> 'tally' \
         union all select proname::text from pg_proc p join pg_namespace n \
         on n.oid = p.pronamespace where n.nspname = 'public' \
         and pg_get_userbyid(p.proowner) <> 'tally' \
         union all select stxname::text from pg_statistic_ext s join pg_namespace n \
         on n.oid = s.stxnamespace where n.nspname = 'public' \
         and pg_get_userbyid(s.stxowner) <> 'tally'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(foreign.is_empty(), "still the superuser's: {foreign:?}");

    // Nothing is pending, but the migrator reads (and locks) its table as the role.
    MIGRATOR.run(&mut conn).await.unwrap();
    // The next migration, whatever it will be, applies as the role: it changes every
    // object the superuser made, and records itself in the migrator's table.
    let next = MIGRATOR.iter().map(|m| m.version).max().unwrap() + 1;
    let forward = Migration::new(
        next,
        "touch every object".into(),
        MigrationType::Simple,
        sqlx::SqlStr::from_static(TOUCH_EVERY_OBJECT),
        false,
    );
    Migrator::with_migrations(MIGRATOR.iter().cloned().chain([forward]).collect())
        .run(&mut conn)
        .await
        .unwrap();
    // The schema had objects of each kind, and the migration changed every one.
    let (kinds, untouched): (Vec<String>, Vec<String>) = sqlx::query_as(
        "with o as ( \
             select case c.relkind when 'S' then 'sequence' else 'table' end as kind, \
                    c.oid::regclass::text as name, \
                    obj_description(c.oid, 'pg_class') as comment \
             from pg_class c where c.relnamespace = 'public'::regnamespace \
               and c.relkind in ('r', 'p', 'S') \
             union all select 'function', p.proname::text, obj_description(p.oid, 'pg_proc') \
             from pg_proc p where p.pronamespace = 'public'::regnamespace \
             union all select 'statistics', s.stxname::text, \
                    obj_description(s.oid, 'pg_statistic_ext') \
             from pg_statistic_ext s where s.stxnamespace = 'public'::regnamespace) \
         select array(select distinct kind from o order by 1), \
                array(select name from o \
                      where comment is distinct from 'changed by its owner' order by 1)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(kinds, ["function", "sequence", "statistics", "table"]);
    assert!(untouched.is_empty(), "not changed: {untouched:?}");
    conn.close().await.unwrap();
    pg.stop().await.unwrap();
}

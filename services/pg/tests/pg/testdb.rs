//! TestDb, the way every integration test of the workspace uses it. Passes with
//! DATABASE_URL set (the machine's server) and unset (a private cluster per process).

use crate::common;

use std::time::Duration;

use common::{alive, spawn_helper, wait_dead, wait_for_line};
use sqlx::{Connection, PgConnection};
use tally_pg::TestDb;

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url).await.unwrap()
}

async fn database_exists(conn: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
        .bind(name)
        .fetch_one(conn)
        .await
        .unwrap()
}

/// The port the server behind `url` listens on, as the server says.
async fn server_port(url: &str) -> i32 {
    let mut conn = connect(url).await;
    let port: i32 = sqlx::query_scalar("select current_setting('port')::int")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    port
}

#[tokio::test]
async fn two_test_dbs_are_different_empty_databases() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    assert_ne!(a.name(), b.name());
    assert_ne!(a.url(), b.url());
    assert!(a.name().starts_with("tally_test_"), "{}", a.name());

    let mut conn_a = connect(a.url()).await;
    let current: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&mut conn_a)
        .await
        .unwrap();
    assert_eq!(current, a.name());
    sqlx::query("create table only_in_a (v int)")
        .execute(&mut conn_a)
        .await
        .unwrap();

    let mut conn_b = connect(b.url()).await;
    let seen: Option<String> = sqlx::query_scalar("select to_regclass('only_in_a')::text")
        .fetch_one(&mut conn_b)
        .await
        .unwrap();
    assert_eq!(seen, None, "a table of one TestDb is visible in another");
    conn_a.close().await.unwrap();
    conn_b.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_test_db_is_gone_even_with_open_connections() {
    let keep = TestDb::new().await;
    let gone = TestDb::new().await;
    let name = gone.name().to_owned();
    let mut open = connect(gone.url()).await;
    sqlx::query("select 1").execute(&mut open).await.unwrap();

    drop(gone);

    let mut conn = connect(keep.url()).await;
    assert!(
        !database_exists(&mut conn, &name).await,
        "{name} still exists"
    );
    assert!(database_exists(&mut conn, keep.name()).await);
    conn.close().await.unwrap();
}

#[test]
fn works_across_runtimes_and_outside_any() {
    let db = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(TestDb::new());
    // That runtime is gone; the server is not.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut conn = connect(db.url()).await;
        sqlx::query("select 1").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    });
    drop(db); // outside any runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_be_dropped_inside_a_multi_thread_runtime() {
    let db = TestDb::new().await;
    let url = db.url().to_owned();
    drop(db);
    assert!(PgConnection::connect(&url).await.is_err());
}

#[tokio::test]
async fn uses_database_url_when_set_else_a_private_server() {
    let db = TestDb::new().await;
    let port = server_port(db.url()).await;
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            assert_eq!(
                port,
                server_port(&url).await,
                "not on DATABASE_URL's server"
            );
        }
        _ => {
            assert_ne!(port, 5432, "the private server must not use 5432");
            assert!(db.url().contains("@127.0.0.1:"), "{}", db.url());
            let prefix = format!("tally-test-pg-{}-", std::process::id());
            let dirs = std::fs::read_dir(std::env::temp_dir())
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count();
            assert_eq!(
                dirs, 1,
                "expected one private cluster directory for this process"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_test_dbs_share_one_server() {
    let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(TestDb::new())).collect();
    let mut dbs = Vec::new();
    for task in tasks {
        dbs.push(task.await.unwrap());
    }
    let mut ports = Vec::new();
    for db in &dbs {
        ports.push(server_port(db.url()).await);
    }
    ports.dedup();
    assert_eq!(ports.len(), 1, "{ports:?}");
}

const HELPER_MODE: &str = "TALLY_PG_TEST_HELPER_MODE";

/// Not a test by itself: a test process for the two tests below, which run it as a child.
/// It creates a TestDb on a private cluster, prints the postmaster's pid, then either
/// exits normally ("exit") or waits to be killed ("hang").
#[test]
fn helper_test_process() {
    let Ok(mode) = std::env::var(HELPER_MODE) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(TestDb::new());
    let prefix = format!("tally-test-pg-{}-", std::process::id());
    let dir = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .expect("private cluster directory")
        .path();
    let pidfile = std::fs::read_to_string(dir.join("pgdata/postmaster.pid")).unwrap();
    println!("POSTMASTER {}", pidfile.lines().next().unwrap());
    println!("DIR {}", dir.display());
    if mode == "hang" {
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    drop(db);
}

#[test]
fn the_private_cluster_goes_away_with_the_test_process() {
    // A normal exit: the server is shut down and its directory removed.
    let (mut child, lines) = spawn_helper("testdb::helper_test_process", &[(HELPER_MODE, "exit")]);
    let pid: i32 = wait_for_line(&lines, "POSTMASTER ").parse().unwrap();
    let dir = wait_for_line(&lines, "DIR ");
    assert!(child.wait().unwrap().success());
    assert!(!alive(pid), "postmaster {pid} outlived its test process");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} left behind after a normal exit"
    );

    // Killed: the server follows (PDEATHSIG); the directory is removed by the next run.
    let (mut child, lines) = spawn_helper("testdb::helper_test_process", &[(HELPER_MODE, "hang")]);
    let pid: i32 = wait_for_line(&lines, "POSTMASTER ").parse().unwrap();
    let dir = wait_for_line(&lines, "DIR ");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_dead(pid, Duration::from_secs(30)),
        "postmaster {pid} outlived its killed test process"
    );
    let (mut next, lines) = spawn_helper("testdb::helper_test_process", &[(HELPER_MODE, "exit")]);
    wait_for_line(&lines, "POSTMASTER ");
    assert!(next.wait().unwrap().success());
    assert!(
        !std::path::Path::new(&dir).exists(),
        "stale {dir} not removed by the next run"
    );
}

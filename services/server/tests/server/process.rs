//! Starting the real `tally-server` binary as a child process (for tests
//! that need a second replica or a process they can kill).

use std::net::SocketAddr;
use std::time::Duration;
use tally_pg::TestDb;
use tokio::io::AsyncBufReadExt;

/// How long a child may take to start serving.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Starts `tally-server` as a separate process on `db` and answers its gRPC
/// address (read from its JSON "tally serving" log line) and the child.
pub async fn spawn_server_process(
    db: &TestDb,
    extra: &[&str],
) -> (SocketAddr, tokio::process::Child) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tally-server"))
        .args([
            "--database-url",
            db.url(),
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--auth",
            "disabled",
        ])
        .args(extra)
        .env("TALLY_LOG", "info")
        .env_remove("TALLY_ALERT_SECRET")
        .env_remove("TALLY_WEBHOOK_SECRETS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tally-server");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = tokio::time::timeout(START_DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["fields"]["message"] == "tally serving" {
                return v["fields"]["grpc"]
                    .as_str()
                    .unwrap()
                    .parse::<SocketAddr>()
                    .unwrap();
            }
        }
        panic!("tally-server exited before serving");
    })
    .await
    .expect("tally-server serving before the deadline");
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (addr, child)
}

//! Helpers shared by this crate's integration tests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "tally-pg-it-{label}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `pid` is a live process (zombies count as dead).
pub fn alive(pid: i32) -> bool {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
                .unwrap_or(false)
        }
        Err(_) => false,
    }
}

/// Waits up to `timeout` for `pid` to exit; true if it did.
pub fn wait_dead(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Runs the test named `helper` of the current test binary in a child process, with
/// `envs` set and DATABASE_URL removed; its stdout lines arrive on the receiver.
/// `helper` is the test's full path in this executable (`module::name`).
pub fn spawn_helper(helper: &str, envs: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([helper, "--exact", "--nocapture", "--test-threads=1"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The rest of the first line holding `prefix`, after it (libtest may print
/// `test name ... ` before it on the same line).
pub fn wait_for_line(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(at) = line.find(prefix) {
                    return line[at + prefix.len()..].trim().to_owned();
                }
            }
            Err(e) => panic!("helper never printed {prefix:?}: {e}"),
        }
    }
}

//! Owning the postmaster process: spawning it, signalling it without pid-reuse races, and
//! learning when it exits.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//! So the postmaster is forked from a dedicated thread that lives exactly as long as the
//! postmaster: it blocks in `waitid` until the postmaster exits. Whoever calls
//! [`spawn_supervised`] (a short-lived blocking thread, a test's runtime) can go away
//! without taking the postmaster with it, while a SIGKILL of the whole process still does.

use std::io;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::{oneshot, watch};

/// A child process watched by its own thread.
#[derive(Debug)]
pub(crate) struct Supervised {
    pid: i32,
    /// True once the child has been reaped; checked under the lock before every signal, so
    /// a signal never reaches a recycled pid.
    reaped: Arc<Mutex<bool>>,
    exit: watch::Receiver<Option<ExitStatus>>,
}

/// Spawns `cmd` from a new thread that lives until the child exits.
pub(crate) async fn spawn_supervised(mut cmd: Command, name: &str) -> io::Result<Supervised> {
    let (exit_tx, exit_rx) = watch::channel(None);
    let reaped = Arc::new(Mutex::new(false));
    let (pid_tx, pid_rx) = oneshot::channel::<io::Result<i32>>();
    let thread_reaped = Arc::clone(&reaped);
    std::thread::Builder::new()
        .name(format!("{name}-supervisor"))
        .spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = pid_tx.send(Err(e));
                    return;
                }
            };
            let pid = child.id() as i32;
            let _ = pid_tx.send(Ok(pid));
            wait_without_reaping(pid);
            let status = {
                let mut reaped = thread_reaped.lock().unwrap_or_else(PoisonError::into_inner);
                let status = child.wait();
                *reaped = true;
                status
            };
            match status {
                Ok(status) => {
                    let _ = exit_tx.send(Some(status));
                }
                Err(e) => tracing::warn!(pid, error = %e, "could not reap postgresql"),
            }
        })?;
    let pid = pid_rx
        .await
        .map_err(|_| io::Error::other("supervisor thread ended before spawning"))??;
    Ok(Supervised {
        pid,
        reaped,
        exit: exit_rx,
    })
}

/// Blocks until `pid` has exited, leaving it a zombie so its pid stays reserved.
fn wait_without_reaping(pid: i32) {
    loop {
        // SAFETY: siginfo_t is plain data; waitid only writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall on our own child.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

impl Supervised {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` unless the child has already been reaped.
    pub(crate) fn signal(&self, signal: Signal) {
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            let _ = kill(Pid::from_raw(self.pid), signal);
        }
    }

    /// The exit status, if the child has exited.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// Waits up to `timeout` for the child to exit; true if it has.
    pub(crate) async fn wait(&self, timeout: Duration) -> bool {
        let mut rx = self.exit.clone();
        match tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await {
            Ok(Ok(_)) => true,
            // The supervisor thread ended without a status: it only ends once the child is
            // gone.
            Ok(Err(_)) => true,
            Err(_) => false,
        }
    }
}

/// Whether `pid` names a live process (not a zombie). EPERM counts as alive: the process
/// exists, it is just not ours to signal.
pub(crate) fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => !is_zombie(pid),
        Err(_) => false,
    }
}

fn is_zombie(pid: i32) -> bool {
    // /proc/<pid>/stat is "pid (comm) S ..."; comm may hold spaces and parentheses.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_exit_and_ignores_signals_after_reaping() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let child = spawn_supervised(cmd, "test").await.unwrap();
        assert!(child.wait(Duration::from_secs(10)).await);
        assert_eq!(child.exit_status().unwrap().code(), Some(3));
        child.signal(Signal::SIGTERM); // must not reach a recycled pid
        assert!(!process_alive(child.pid()));
    }

    #[tokio::test]
    async fn signals_a_running_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let child = spawn_supervised(cmd, "test").await.unwrap();
        assert!(process_alive(child.pid()));
        assert!(!child.wait(Duration::from_millis(50)).await);
        child.signal(Signal::SIGTERM);
        assert!(child.wait(Duration::from_secs(10)).await);
        assert!(!child.exit_status().unwrap().success());
    }

    #[tokio::test]
    async fn spawn_errors_are_returned() {
        let cmd = Command::new("/nonexistent/program");
        assert!(spawn_supervised(cmd, "test").await.is_err());
    }
}

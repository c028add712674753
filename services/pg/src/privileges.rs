//! Who PostgreSQL runs as. PostgreSQL refuses to run as root, and CI runs as root.
//!
//! As root we prefer a new **user namespace** in which our uid 0 appears as an ordinary
//! uid (that of `postgres` or `nobody`, so `initdb` finds a passwd entry). PostgreSQL is
//! then satisfied, while on the host its files stay root-owned and it can use any data
//! directory root can, even one under a mode-700 `/root`. The catch: on the host the
//! server still runs as uid 0 (without capabilities), so it can read root-owned files;
//! that is why the cluster gets a random superuser password rather than trust auth.
//!
//! Where user namespaces are unavailable (a kernel or container policy forbids them) we
//! **drop privileges** to the `postgres` system user (or `nobody`) with setgid/setuid,
//! after checking it can reach the data directory, and chown the directory to it.
//!
//! Either way `PR_SET_PDEATHSIG` is set last in the child, after every credential change
//! (a credential change clears it), so the server gets SIGINT when its owner dies.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use nix::sys::signal::Signal;
use nix::unistd::{Gid, User, getegid, geteuid};

use crate::{PgBinaries, PgError};

/// How to run PostgreSQL when tally itself runs as root. Ignored otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RootMode {
    /// A user namespace if this machine allows one, else [`RootMode::DropPrivileges`].
    #[default]
    Auto,
    /// Only a user namespace; fail if that does not work.
    UserNamespace,
    /// Only setuid to the `postgres` (or `nobody`) user.
    DropPrivileges,
}

/// The identity chosen for one start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Not root: run as ourselves.
    Current,
    /// Root, inside a new user namespace where our uid and gid appear as these.
    UserNamespace { inside_uid: u32, inside_gid: u32 },
    /// Root, switched to an unprivileged system user.
    Unprivileged { name: String, uid: u32, gid: u32 },
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Current => write!(f, "current user"),
            Identity::UserNamespace { inside_uid, .. } => {
                write!(f, "user namespace (root as uid {inside_uid})")
            }
            Identity::Unprivileged { name, uid, .. } => write!(f, "user {name} (uid {uid})"),
        }
    }
}

impl Identity {
    /// Decides how to run the programs in `bins`.
    pub(crate) fn resolve(mode: RootMode, bins: &PgBinaries) -> Result<Identity, PgError> {
        if !geteuid().is_root() {
            return Ok(Identity::Current);
        }
        match mode {
            RootMode::Auto => match user_namespace(bins) {
                Ok(identity) => Ok(identity),
                Err(reason) => {
                    tracing::info!(%reason, "user namespaces unavailable, dropping privileges");
                    unprivileged_user()
                }
            },
            RootMode::UserNamespace => user_namespace(bins).map_err(|reason| {
                PgError::Privileges(format!("user namespaces do not work here: {reason}"))
            }),
            RootMode::DropPrivileges => unprivileged_user(),
        }
    }

    /// A command for `program` that runs as this identity, with a clean environment, and
    /// that receives `death_signal` when the spawning thread dies.
    pub(crate) fn command(&self, program: &Path, death_signal: Signal) -> Command {
        let mut cmd = Command::new(program);
        // PG* variables (PGDATA, PGPORT, …) would change what initdb and postgres do.
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        match self {
            Identity::Current => {}
            Identity::UserNamespace {
                inside_uid,
                inside_gid,
            } => {
                let maps = IdMaps::new(*inside_uid, *inside_gid);
                // SAFETY: the closure only makes async-signal-safe syscalls on data
                // prepared before the fork; it allocates nothing.
                unsafe { cmd.pre_exec(move || maps.enter()) };
            }
            Identity::Unprivileged { uid, gid, .. } => {
                // std calls setgroups(0), setgid and setuid in this order, before the
                // pre_exec closures below.
                cmd.uid(*uid).gid(*gid);
            }
        }
        let parent = std::process::id() as libc::pid_t;
        let signal = death_signal as libc::c_ulong;
        // SAFETY: prctl and getppid are async-signal-safe. This closure is registered last,
        // so it runs after every credential change, which would clear the setting.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent died between fork and prctl: nobody would signal us.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            })
        };
        cmd
    }

    /// Makes `dir` (which exists) usable by this identity: for a dropped-privileges user,
    /// checks every ancestor is traversable and chowns the tree to it; for a user namespace,
    /// chowns back to us anything a dropped-privileges run left behind.
    pub(crate) fn prepare_dir(&self, dir: &Path) -> Result<(), PgError> {
        match self {
            Identity::Current => Ok(()),
            Identity::UserNamespace { .. } => {
                chown_tree(dir, geteuid().as_raw(), getegid().as_raw())
            }
            Identity::Unprivileged { name, uid, gid } => {
                check_reachable(dir, name, *uid, *gid)?;
                chown_tree(dir, *uid, *gid)
            }
        }
    }

    /// The host uid and gid that files written by PostgreSQL end up with.
    pub(crate) fn host_owner(&self) -> (u32, u32) {
        match self {
            Identity::Current | Identity::UserNamespace { .. } => {
                (geteuid().as_raw(), getegid().as_raw())
            }
            Identity::Unprivileged { uid, gid, .. } => (*uid, *gid),
        }
    }
}

/// `/proc/self/{setgroups,uid_map,gid_map}` contents, built before the fork.
struct IdMaps {
    setgroups: CString,
    uid_map: CString,
    gid_map: CString,
    uid_line: Vec<u8>,
    gid_line: Vec<u8>,
}

impl IdMaps {
    fn new(inside_uid: u32, inside_gid: u32) -> Self {
        IdMaps {
            setgroups: CString::from(c"/proc/self/setgroups"),
            uid_map: CString::from(c"/proc/self/uid_map"),
            gid_map: CString::from(c"/proc/self/gid_map"),
            // One line mapping our own ids needs no privilege in the parent namespace.
            uid_line: format!("{inside_uid} {} 1\n", geteuid().as_raw()).into_bytes(),
            gid_line: format!("{inside_gid} {} 1\n", getegid().as_raw()).into_bytes(),
        }
    }

    /// Runs in the forked child (single-threaded, so unshare(CLONE_NEWUSER) is allowed).
    fn enter(&self) -> io::Result<()> {
        // SAFETY: plain syscalls.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return Err(io::Error::last_os_error());
        }
        write_proc(&self.setgroups, b"deny\n")?;
        write_proc(&self.uid_map, &self.uid_line)?;
        write_proc(&self.gid_map, &self.gid_line)
    }
}

fn write_proc(path: &CString, data: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        match written {
            n if n == data.len() as isize => Ok(()),
            n if n < 0 => Err(err),
            _ => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }
}

/// The user namespace identity, if user namespaces work here (probed once per process by
/// running `postgres --version` inside one).
fn user_namespace(bins: &PgBinaries) -> Result<Identity, String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    // Inside the namespace we need a uid with a passwd entry: initdb looks up its user.
    let (inside_uid, inside_gid) = ["postgres", "nobody"]
        .iter()
        .find_map(|name| User::from_name(name).ok().flatten())
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        .ok_or("no `postgres` or `nobody` user to appear as inside the namespace")?;
    let identity = Identity::UserNamespace {
        inside_uid,
        inside_gid,
    };
    PROBE
        .get_or_init(|| {
            let out = identity
                .command(&bins.postgres(), Signal::SIGKILL)
                .arg("--version")
                .output()
                .map_err(|e| format!("could not start a process in a new user namespace: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "postgres --version in a new user namespace failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .clone()
        .map(|()| identity)
}

/// Who may own the files of a data directory we reuse: the user we run as and, when that
/// is root, also the user we drop privileges to (which [`Identity::prepare_dir`] gives
/// the directory to in that mode).
pub(crate) fn acceptable_owners() -> Vec<u32> {
    let me = geteuid();
    let mut owners = vec![me.as_raw()];
    if me.is_root()
        && let Ok(Identity::Unprivileged { uid, .. }) = unprivileged_user()
    {
        owners.push(uid);
    }
    owners
}

fn unprivileged_user() -> Result<Identity, PgError> {
    ["postgres", "nobody"]
        .iter()
        .find_map(|name| User::from_name(name).ok().flatten())
        .map(|u| Identity::Unprivileged {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        })
        .ok_or_else(|| {
            PgError::Privileges(
                "user namespaces are unavailable and there is no `postgres` or `nobody` user \
                 to run as; create one (useradd --system postgres) or run tally as an \
                 unprivileged user"
                    .to_owned(),
            )
        })
}

/// Fails unless `user` can traverse every ancestor of `dir`.
fn check_reachable(dir: &Path, user: &str, uid: u32, gid: u32) -> Result<(), PgError> {
    let dir = dir
        .canonicalize()
        .map_err(|e| PgError::io(format!("could not resolve {}", dir.display()), e))?;
    let groups: Vec<u32> = CString::new(user)
        .ok()
        .and_then(|name| nix::unistd::getgrouplist(&name, Gid::from_raw(gid)).ok())
        .map(|gs| gs.into_iter().map(Gid::as_raw).collect())
        .unwrap_or_else(|| vec![gid]);
    for ancestor in dir.ancestors().skip(1) {
        let meta = std::fs::metadata(ancestor)
            .map_err(|e| PgError::io(format!("could not inspect {}", ancestor.display()), e))?;
        let bit = if meta.uid() == uid {
            0o100
        } else if groups.contains(&meta.gid()) {
            0o010
        } else {
            0o001
        };
        if meta.mode() & bit == 0 {
            return Err(PgError::Privileges(format!(
                "user namespaces are unavailable, so postgresql would run as user {user} \
                 (uid {uid}), which cannot reach {}: {} is not traversable (mode {:o}, owner \
                 uid {}); choose a data directory {user} can reach (e.g. under /var/lib or \
                 /srv), or allow user namespaces",
                dir.display(),
                ancestor.display(),
                meta.mode() & 0o7777,
                meta.uid(),
            )));
        }
    }
    Ok(())
}

/// Gives `root` and everything under it to `uid:gid`, touching only what differs and never
/// following symlinks.
fn chown_tree(root: &Path, uid: u32, gid: u32) -> Result<(), PgError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| PgError::io(format!("could not inspect {}", path.display()), e))?;
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
                .map_err(|e| PgError::io(format!("could not chown {}", path.display()), e))?;
        }
        if meta.is_dir() {
            let entries = std::fs::read_dir(&path)
                .map_err(|e| PgError::io(format!("could not list {}", path.display()), e))?;
            for entry in entries {
                let entry = entry
                    .map_err(|e| PgError::io(format!("could not list {}", path.display()), e))?;
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

//! A private PostgreSQL cluster that tally creates, starts and stops itself.
//!
//! Layout of a data directory:
//!
//! ```text
//! <data_dir>/pgdata               the cluster (initdb'd on first start, reused afterwards)
//! <data_dir>/postgres.log         initdb and server output (rotated once past 10 MiB)
//! <data_dir>/port                 the port last used, reused when still free
//! <data_dir>/superuser-password   random password of the `postgres` superuser (mode 600)
//! <data_dir>/app-password         random password of the `tally` role (mode 600)
//! <data_dir>/start.lock           serialises concurrent starts on one directory
//! ```
//!
//! The server gets the URL of the `tally` role, which owns the application database and
//! nothing else (see [`crate::role`]); the superuser only sets the cluster up. A new data
//! directory is made mode 700; an existing one is checked before anything in it is read
//! or started (owner, mode, no symlinks: see [`crate::datadir`]).
//!
//! The server listens on 127.0.0.1 only, never on 5432 (the machine's own server), and
//! has no Unix socket, so it cannot collide with a system server's sockets. It is started
//! as a direct child with `PR_SET_PDEATHSIG` = SIGINT, so it shuts down when its owner
//! dies, even by SIGKILL. Should one be left running anyway (say an older build was
//! killed), the next start finds it through `postmaster.pid` and reuses it.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::conn::{CONNECT_TIMEOUT, SUPERUSER, connect};
use crate::datadir::{self, Kind, Layout};
use crate::privileges::{Identity, RootMode, acceptable_owners};
use crate::process::{Supervised, process_alive, spawn_supervised};
use crate::role::{self, APP_ROLE};
use crate::{PgBinaries, PgError};

/// The machine's own server's port, never used for a private cluster.
const RESERVED_PORT: u16 = 5432;
const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;
const START_ATTEMPTS: u32 = 3;
/// While waiting for a server to come up: short, since a port held by something that is
/// not our server may accept and never answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How to start a private cluster. Build with [`EmbeddedOptions::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Directory holding the cluster, its log and its small state files.
    pub data_dir: PathBuf,
    /// Database to create (if missing), give to the `tally` role and point
    /// [`EmbeddedPostgres::url`] at. Not `postgres` or a template.
    pub database: String,
    /// PostgreSQL bin directory; searched for when `None` (see [`PgBinaries::locate`]).
    pub bin_dir: Option<PathBuf>,
    /// Port to listen on; the remembered or a free one when `None`. Never 5432.
    pub port: Option<u16>,
    /// Stock durability when true (the server); fsync, synchronous commit and full page
    /// writes off when false (tests, where speed matters and crashes lose nothing).
    pub durable: bool,
    /// How to run PostgreSQL when we are root.
    pub root_mode: RootMode,
    /// How long to wait for the server to accept connections.
    pub start_timeout: Duration,
}

impl EmbeddedOptions {
    /// Defaults: database `tally`, binaries searched for, any free port, durable, user
    /// namespace (or dropped privileges) as root, two minutes to start.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EmbeddedOptions {
            data_dir: data_dir.into(),
            database: "tally".to_owned(),
            bin_dir: None,
            port: None,
            durable: true,
            root_mode: RootMode::Auto,
            start_timeout: Duration::from_secs(120),
        }
    }
}

/// A running private PostgreSQL. Stop it with [`EmbeddedPostgres::stop`]; dropping the
/// handle asks the server to shut down without waiting.
pub struct EmbeddedPostgres {
    data_dir: PathBuf,
    database: String,
    port: u16,
    /// The superuser's: for setting up only, never in a URL handed out.
    superuser_password: String,
    app_password: String,
    postmaster: Postmaster,
    stopped: bool,
}

/// The server process: our child, or one a previous owner left running.
enum Postmaster {
    Child(Supervised),
    Adopted(i32),
}

impl fmt::Debug for EmbeddedPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedPostgres")
            .field("data_dir", &self.data_dir)
            .field("database", &self.database)
            .field("port", &self.port)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// Why one launch attempt failed.
enum LaunchError {
    /// Someone took the port between our check and the server's bind.
    PortTaken,
    Failed(PgError),
}

impl EmbeddedPostgres {
    /// Starts (creating on first use) the cluster in `opts.data_dir`, waits until it
    /// accepts connections, makes sure the `tally` role exists and creates
    /// `opts.database` for it if missing. A server left running on the directory by a
    /// previous owner is reused instead. An existing directory is refused
    /// ([`PgError::UnsafePath`]) unless it and our files in it are ours, not symlinks
    /// and not open to others.
    pub async fn start(opts: EmbeddedOptions) -> Result<Self, PgError> {
        validate(&opts)?;
        let dir = std::path::absolute(&opts.data_dir).map_err(|e| {
            PgError::io(format!("could not resolve {}", opts.data_dir.display()), e)
        })?;
        let layout = Layout::new(dir);
        let owners = acceptable_owners();
        datadir::open_data_dir(&layout.dir, &owners)?;
        let _lock = lock_exclusive(&layout.lock, &owners, opts.start_timeout).await?;
        layout.check(&owners)?;

        if let Some(pg) = adopt(&layout, &owners, &opts).await? {
            return Ok(pg);
        }

        let cluster_version = read_pg_version(&layout.pgdata.join("PG_VERSION"));
        let bins = PgBinaries::locate_preferring(
            opts.bin_dir.as_deref(),
            cluster_version.as_deref().and_then(|v| v.parse().ok()),
        )?;
        let version = bins.version()?;
        if let Some(cluster) = &cluster_version
            && *cluster != version.major.to_string()
        {
            return Err(PgError::VersionMismatch {
                data_dir: layout.pgdata.clone(),
                cluster: cluster.clone(),
                bin_dir: bins.dir().to_path_buf(),
                binaries: version.major,
            });
        }
        let identity = Identity::resolve(opts.root_mode, &bins)?;
        identity.prepare_dir(&layout.dir)?;
        rotate_log(&layout.log);

        let password = if cluster_version.is_some() {
            datadir::read_trimmed(&layout.password, &owners, Kind::Secret)?.ok_or_else(|| {
                PgError::Invalid(format!(
                    "{} is missing, so the existing cluster cannot be reached; restore it or \
                     remove {}",
                    layout.password.display(),
                    layout.dir.display()
                ))
            })?
        } else {
            initdb(&bins, &identity, &layout, &owners, opts.durable).await?
        };

        let mut attempt = 0;
        let (child, port) = loop {
            attempt += 1;
            let port = choose_port(opts.port, &layout, attempt > 1)?;
            match launch(&bins, &identity, &layout, &owners, &opts, port, &password).await {
                Ok(child) => break (child, port),
                Err(LaunchError::PortTaken) if opts.port.is_none() && attempt < START_ATTEMPTS => {
                    tracing::debug!(port, "port taken while starting, trying another");
                }
                Err(LaunchError::PortTaken) => {
                    return Err(PgError::Invalid(format!(
                        "port {port} is in use; choose another or let tally pick one"
                    )));
                }
                Err(LaunchError::Failed(e)) => return Err(e),
            }
        };
        datadir::write_file(
            &layout.port,
            port.to_string().as_bytes(),
            &owners,
            Kind::Plain,
        )?;

        let pg = EmbeddedPostgres {
            data_dir: layout.dir.clone(),
            database: opts.database.clone(),
            port,
            superuser_password: password,
            app_password: String::new(),
            postmaster: Postmaster::Child(child),
            stopped: false,
        };
        // On failure `pg` is dropped, which stops the server we just started.
        let pg = pg.provision(&layout, &owners).await?;
        tracing::info!(
            data_dir = %pg.data_dir.display(),
            port,
            pid = pg.pid(),
            version = version.major,
            run_as = %identity,
            durable = opts.durable,
            "private postgresql started"
        );
        Ok(pg)
    }

    /// `postgres://` URL of the database named in the options (TCP on 127.0.0.1), as the
    /// `tally` role. It holds that role's password: log it only through
    /// [`crate::url::redact`].
    pub fn url(&self) -> String {
        self.url_for(&self.database)
    }

    /// `postgres://` URL of another database on this server, as the `tally` role (which
    /// can connect to any database but owns only its own).
    pub fn url_for(&self, database: &str) -> String {
        format!(
            "postgres://{APP_ROLE}:{}@127.0.0.1:{}/{}?sslmode=disable",
            self.app_password,
            self.port,
            percent_encode(database)
        )
    }

    /// The superuser's URL, for this crate's own setup (test databases) only.
    pub(crate) fn superuser_url_for(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@127.0.0.1:{}/{}?sslmode=disable",
            self.superuser_password,
            self.port,
            percent_encode(database)
        )
    }

    /// Gives the server its role: reads (or makes, on first use or for a cluster made
    /// before the role existed) the role's password, creates or restores the role, and
    /// gives it the database.
    async fn provision(mut self, layout: &Layout, owners: &[u32]) -> Result<Self, PgError> {
        let app_password = match datadir::read_trimmed(&layout.app_password, owners, Kind::Secret)?
        {
            Some(password) => password,
            None => {
                let password = uuid::Uuid::new_v4().simple().to_string();
                datadir::write_file(
                    &layout.app_password,
                    password.as_bytes(),
                    owners,
                    Kind::Secret,
                )?;
                password
            }
        };
        let mut conn = self.superuser().await?;
        role::ensure_role(&mut conn, &app_password).await?;
        let _ = conn.close().await;
        self.app_password = app_password;
        self.create_database(&self.database).await?;
        Ok(self)
    }

    async fn superuser(&self) -> Result<PgConnection, PgError> {
        connect(
            self.port,
            SUPERUSER,
            &self.superuser_password,
            "postgres",
            CONNECT_TIMEOUT,
        )
        .await
        .map_err(|e| PgError::db("could not connect to the private postgresql", e))
    }

    /// The port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory given in the options, made absolute.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> i32 {
        match &self.postmaster {
            Postmaster::Child(child) => child.pid(),
            Postmaster::Adopted(pid) => *pid,
        }
    }

    /// Creates `database` unless it exists, and gives it (with anything the superuser
    /// made in it) to the `tally` role.
    pub async fn create_database(&self, database: &str) -> Result<(), PgError> {
        validate_database(database)?;
        let mut conn = self.superuser().await?;
        role::ensure_database(&mut conn, self.port, &self.superuser_password, database).await?;
        let _ = conn.close().await;
        Ok(())
    }

    /// Fast shutdown: SIGINT to the postmaster (clients are disconnected, a checkpoint is
    /// written), escalating to SIGQUIT and SIGKILL if it does not exit; waits for the exit.
    pub async fn stop(mut self) -> Result<(), PgError> {
        self.stopped = true;
        let pid = self.pid();
        let steps = [
            (Signal::SIGINT, Duration::from_secs(60)),
            (Signal::SIGQUIT, Duration::from_secs(10)),
            (Signal::SIGKILL, Duration::from_secs(10)),
        ];
        for (signal, wait) in steps {
            self.signal(signal);
            if self.wait_exit(wait).await {
                tracing::info!(data_dir = %self.data_dir.display(), pid, "private postgresql stopped");
                return Ok(());
            }
            tracing::warn!(pid, %signal, "postgresql did not stop, escalating");
        }
        Err(PgError::StopTimeout {
            pid,
            waited: steps.iter().map(|(_, d)| *d).sum(),
        })
    }

    fn signal(&self, signal: Signal) {
        match &self.postmaster {
            Postmaster::Child(child) => child.signal(signal),
            Postmaster::Adopted(pid) => {
                let _ = kill(Pid::from_raw(*pid), signal);
            }
        }
    }

    async fn wait_exit(&self, timeout: Duration) -> bool {
        match &self.postmaster {
            Postmaster::Child(child) => child.wait(timeout).await,
            Postmaster::Adopted(pid) => {
                let deadline = Instant::now() + timeout;
                while process_alive(*pid) {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                true
            }
        }
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if !self.stopped {
            tracing::debug!(
                pid = self.pid(),
                "handle dropped, asking postgresql to shut down"
            );
            self.signal(Signal::SIGINT);
        }
    }
}

fn validate(opts: &EmbeddedOptions) -> Result<(), PgError> {
    validate_database(&opts.database)?;
    if opts.port == Some(RESERVED_PORT) || opts.port == Some(0) {
        return Err(PgError::Invalid(format!(
            "port {} cannot be used for the private postgresql (5432 belongs to the \
             machine's own server)",
            opts.port.unwrap_or_default()
        )));
    }
    Ok(())
}

/// The databases the superuser keeps: the maintenance database and the templates are
/// never given to the application role.
fn validate_database(database: &str) -> Result<(), PgError> {
    if database.is_empty() {
        return Err(PgError::Invalid("the database name is empty".to_owned()));
    }
    if ["postgres", "template0", "template1"].contains(&database) {
        return Err(PgError::Invalid(format!(
            "database {database} belongs to the superuser; choose another name"
        )));
    }
    Ok(())
}

/// Reuses a postmaster that a previous owner left running on this data directory.
async fn adopt(
    layout: &Layout,
    owners: &[u32],
    opts: &EmbeddedOptions,
) -> Result<Option<EmbeddedPostgres>, PgError> {
    let Ok(pidfile) = fs::read_to_string(layout.pgdata.join("postmaster.pid")) else {
        return Ok(None);
    };
    let lines: Vec<&str> = pidfile.lines().map(str::trim).collect();
    let (Some(pid), Some(port)) = (
        lines.first().and_then(|l| l.parse::<i32>().ok()),
        lines.get(3).and_then(|l| l.parse::<u16>().ok()),
    ) else {
        return Ok(None);
    };
    // A stale file of a dead server is PostgreSQL's own business: it removes it.
    if !process_alive(pid) {
        return Ok(None);
    }
    let Some(password) = datadir::read_trimmed(&layout.password, owners, Kind::Secret)? else {
        return Ok(None);
    };
    let ready = lines.get(7).is_some_and(|s| *s == "ready");
    let patience = if ready {
        Duration::from_secs(5)
    } else {
        opts.start_timeout
    };
    let deadline = Instant::now() + patience;
    loop {
        match connect(port, SUPERUSER, &password, "postgres", PROBE_TIMEOUT).await {
            Ok(conn) => {
                let _ = conn.close().await;
                break;
            }
            Err(e) if Instant::now() >= deadline || !process_alive(pid) => {
                tracing::warn!(pid, port, error = %e, "a postmaster runs on the data directory but does not answer, starting anew");
                return Ok(None);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let pg = EmbeddedPostgres {
        data_dir: layout.dir.clone(),
        database: opts.database.clone(),
        port,
        superuser_password: password,
        app_password: String::new(),
        postmaster: Postmaster::Adopted(pid),
        stopped: false,
    };
    let pg = pg.provision(layout, owners).await?;
    tracing::info!(data_dir = %layout.dir.display(), port, pid, "reusing running private postgresql");
    Ok(Some(pg))
}

/// Creates the cluster with a random superuser password, which it returns. initdb writes
/// into a scratch directory renamed into place at the end, so an interrupted initdb never
/// leaves a half-made cluster behind.
async fn initdb(
    bins: &PgBinaries,
    identity: &Identity,
    layout: &Layout,
    owners: &[u32],
    durable: bool,
) -> Result<String, PgError> {
    let password = uuid::Uuid::new_v4().simple().to_string();
    datadir::write_file(&layout.password, password.as_bytes(), owners, Kind::Secret)?;
    // Leftovers of an interrupted initdb; removing a symlink removes the link only.
    let scratch = layout.dir.join("pgdata.initdb");
    if fs::symlink_metadata(&scratch).is_ok() {
        fs::remove_dir_all(&scratch)
            .or_else(|_| fs::remove_file(&scratch))
            .map_err(|e| PgError::io(format!("could not remove {}", scratch.display()), e))?;
    }
    let pwfile = layout.dir.join("initdb-pwfile");
    if fs::symlink_metadata(&pwfile).is_ok() {
        fs::remove_file(&pwfile)
            .map_err(|e| PgError::io(format!("could not remove {}", pwfile.display()), e))?;
    }
    datadir::write_file(&pwfile, password.as_bytes(), owners, Kind::Secret)?;
    let (uid, gid) = identity.host_owner();
    std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid))
        .map_err(|e| PgError::io(format!("could not chown {}", pwfile.display()), e))?;

    let (log, offset) = open_log(&layout.log, owners)?;
    let mut cmd = identity.command(&bins.initdb(), Signal::SIGTERM);
    cmd.arg("-D")
        .arg(&scratch)
        .args(["--username", SUPERUSER, "--auth", "scram-sha-256"])
        .args(["--encoding", "UTF8", "--locale", "C"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .current_dir(&layout.dir)
        .stdout(clone_file(&log, &layout.log)?)
        .stderr(log);
    if !durable {
        cmd.arg("--no-sync");
    }
    let command = format!("{cmd:?}");
    tracing::info!(data_dir = %layout.dir.display(), "initialising private postgresql cluster");
    let status = tokio::task::spawn_blocking(move || cmd.status())
        .await
        .map_err(|e| PgError::io("initdb task failed", std::io::Error::other(e)))?
        .map_err(|e| PgError::io(format!("could not run {}", bins.initdb().display()), e));
    let _ = fs::remove_file(&pwfile);
    let status = status?;
    if !status.success() {
        return Err(PgError::Command {
            command,
            status: status.to_string(),
            log: Some(layout.log.clone()),
            output: log_tail(&layout.log, offset),
        });
    }
    fs::rename(&scratch, &layout.pgdata).map_err(|e| {
        PgError::io(
            format!(
                "could not move {} to {}",
                scratch.display(),
                layout.pgdata.display()
            ),
            e,
        )
    })?;
    Ok(password)
}

/// Spawns the postmaster on `port` and waits until it accepts connections.
async fn launch(
    bins: &PgBinaries,
    identity: &Identity,
    layout: &Layout,
    owners: &[u32],
    opts: &EmbeddedOptions,
    port: u16,
    password: &str,
) -> Result<Supervised, LaunchError> {
    let failed = LaunchError::Failed;
    let (log, offset) = open_log(&layout.log, owners).map_err(failed)?;
    // SIGINT when we die: a fast shutdown, which disconnects clients and checkpoints.
    let mut cmd = identity.command(&bins.postgres(), Signal::SIGINT);
    cmd.arg("-D")
        .arg(&layout.pgdata)
        .current_dir(&layout.dir)
        .stdout(clone_file(&log, &layout.log).map_err(failed)?)
        .stderr(log)
        // Keeps a terminal's Ctrl-C away from the server: tally stops it after draining.
        .process_group(0);
    for setting in settings(port, opts.durable) {
        cmd.arg("-c").arg(setting);
    }
    let child = spawn_supervised(cmd, "tally-pg").await.map_err(|e| {
        failed(PgError::io(
            format!("could not start {}", bins.postgres().display()),
            e,
        ))
    })?;

    let started = Instant::now();
    loop {
        // Whichever comes first: an answer, or the server exiting (then report why).
        let attempt = tokio::select! {
            result = connect(port, SUPERUSER, password, "postgres", PROBE_TIMEOUT) => Some(result),
            true = child.wait(PROBE_TIMEOUT) => None,
        };
        let Some(attempt) = attempt else {
            let tail = log_tail(&layout.log, offset);
            if tail.contains("Address already in use") {
                return Err(LaunchError::PortTaken);
            }
            return Err(failed(PgError::Exited {
                status: child
                    .exit_status()
                    .map_or_else(|| "unknown status".to_owned(), |s| s.to_string()),
                log: layout.log.clone(),
                tail,
            }));
        };
        let last_error = match attempt {
            Ok(conn) => {
                let _ = conn.close().await;
                return Ok(child);
            }
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= opts.start_timeout {
            child.signal(Signal::SIGQUIT);
            if !child.wait(Duration::from_secs(10)).await {
                child.signal(Signal::SIGKILL);
                child.wait(Duration::from_secs(10)).await;
            }
            return Err(failed(PgError::StartTimeout {
                waited: opts.start_timeout,
                last_error,
                log: layout.log.clone(),
                tail: log_tail(&layout.log, offset),
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Server settings, passed as `-c` flags so they always match this code.
fn settings(port: u16, durable: bool) -> Vec<String> {
    let mut s = vec![
        "listen_addresses=127.0.0.1".to_owned(),
        format!("port={port}"),
        // No Unix socket: nothing to collide with in /var/run/postgresql.
        "unix_socket_directories=".to_owned(),
        "max_connections=200".to_owned(),
        "shared_buffers=128MB".to_owned(),
    ];
    if !durable {
        s.extend(
            [
                "fsync=off",
                "synchronous_commit=off",
                "full_page_writes=off",
            ]
            .map(str::to_owned),
        );
    }
    s
}

/// `port` if given; else the remembered port if still free (unless `fresh`); else a free one.
fn choose_port(explicit: Option<u16>, layout: &Layout, fresh: bool) -> Result<u16, PgError> {
    if let Some(port) = explicit {
        return Ok(port);
    }
    if !fresh
        && let Some(port) = read_port(layout)
        && port != RESERVED_PORT
        && port != 0
        && port_free(port)
    {
        return Ok(port);
    }
    for _ in 0..20 {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| PgError::io("could not find a free port on 127.0.0.1", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| PgError::io("could not find a free port on 127.0.0.1", e))?
            .port();
        if port != RESERVED_PORT {
            return Ok(port);
        }
    }
    Err(PgError::Invalid("no free port on 127.0.0.1".to_owned()))
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Holds an exclusive `flock` on `path` until the returned file is dropped.
async fn lock_exclusive(path: &Path, owners: &[u32], timeout: Duration) -> Result<File, PgError> {
    let file = datadir::open_file(
        path,
        OpenOptions::new().create(true).truncate(false).write(true),
        owners,
        Kind::Plain,
    )?;
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(PgError::io(
                format!("could not lock {}", path.display()),
                err,
            ));
        }
        if Instant::now() >= deadline {
            return Err(PgError::Invalid(format!(
                "another process is starting postgresql in {} (it holds {})",
                path.parent().unwrap_or(path).display(),
                path.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The remembered port; a file that is unsafe or unreadable counts as none (the layout
/// was checked before, so that means it changed since: better a new port than its word).
fn read_port(layout: &Layout) -> Option<u16> {
    datadir::read_trimmed(&layout.port, &acceptable_owners(), Kind::Plain)
        .ok()
        .flatten()
        .and_then(|p| p.parse::<u16>().ok())
}

/// `PG_VERSION` of a cluster (inside pgdata, PostgreSQL's own file), never through a link.
fn read_pg_version(path: &Path) -> Option<String> {
    let mut text = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    Some(text.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Opens the log for appending; returns it and its current length (where this run begins).
fn open_log(path: &Path, owners: &[u32]) -> Result<(File, u64), PgError> {
    let file = datadir::open_file(
        path,
        OpenOptions::new().create(true).append(true),
        owners,
        Kind::Plain,
    )?;
    let len = file
        .metadata()
        .map_err(|e| PgError::io(format!("could not inspect {}", path.display()), e))?
        .len();
    Ok((file, len))
}

fn clone_file(file: &File, path: &Path) -> Result<File, PgError> {
    file.try_clone()
        .map_err(|e| PgError::io(format!("could not duplicate {}", path.display()), e))
}

fn rotate_log(path: &Path) {
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() > LOG_ROTATE_BYTES) {
        let _ = fs::rename(path, path.with_extension("log.1"));
    }
}

/// The last 20 lines written to `path` since `offset`.
fn log_tail(path: &Path, offset: u64) -> String {
    const MAX: u64 = 16 * 1024;
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    let Ok(mut file) = opened else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = offset.max(len.saturating_sub(MAX));
    let mut buf = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut buf).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn encodes_paths() {
        assert_eq!(percent_encode("tally_test-1"), "tally_test-1");
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn durability_settings_only_when_not_durable() {
        assert!(!settings(1, true).iter().any(|s| s.starts_with("fsync")));
        let fast = settings(1, false);
        for s in [
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
        ] {
            assert!(fast.iter().any(|x| x == s));
        }
    }

    #[test]
    fn refuses_the_system_port() {
        let mut opts = EmbeddedOptions::new("/tmp/x");
        opts.port = Some(5432);
        assert!(matches!(validate(&opts), Err(PgError::Invalid(_))));
    }

    #[test]
    fn log_tail_reads_only_this_run() {
        let dir = std::env::temp_dir().join(format!("tally-pg-unit-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        fs::write(&path, "old\n").unwrap();
        let (mut f, offset) = open_log(&path, &acceptable_owners()).unwrap();
        writeln!(f, "new 1\nnew 2").unwrap();
        assert_eq!(log_tail(&path, offset), "new 1\nnew 2");
        fs::remove_dir_all(dir).unwrap();
    }
}

//! The one error type of this crate.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything that can go wrong while finding, starting or stopping PostgreSQL.
///
/// Messages carry what an operator needs to act: the command that failed, its exit
/// status and the last lines of its log.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// No directory holding `initdb` and `postgres` was found.
    #[error(
        "no PostgreSQL installation found (looked in {}). Install PostgreSQL (Debian/Ubuntu: \
         apt-get install postgresql; macOS: brew install postgresql@16), point --pg-bin / \
         TALLY_PG_BIN at its bin directory, or set --database-url / DATABASE_URL to an \
         existing server.",
        list_paths(searched)
    )]
    NotFound {
        /// Every directory that was examined, in order.
        searched: Vec<PathBuf>,
    },

    /// A file system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path involved.
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// A helper program (initdb, `postgres --version`) exited unsuccessfully.
    #[error("`{command}` failed ({status}){}", tail_block(log.as_deref(), output))]
    Command {
        /// The command line.
        command: String,
        /// Its exit status as the OS reports it.
        status: String,
        /// Where its output went, if to a file.
        log: Option<PathBuf>,
        /// The last lines of its output.
        output: String,
    },

    /// The postmaster exited before it accepted connections.
    #[error(
        "postgresql exited while starting ({status}){}",
        tail_block(Some(log), tail)
    )]
    Exited {
        /// Its exit status.
        status: String,
        /// The server log.
        log: PathBuf,
        /// The last lines of that log written by this start.
        tail: String,
    },

    /// The postmaster kept running but never accepted a connection.
    #[error(
        "postgresql did not accept connections within {waited:?} (last error: {last_error}){}",
        tail_block(Some(log), tail)
    )]
    StartTimeout {
        /// How long we waited.
        waited: Duration,
        /// The last connection error.
        last_error: String,
        /// The server log.
        log: PathBuf,
        /// The last lines of that log written by this start.
        tail: String,
    },

    /// We run as root and found no safe way to run PostgreSQL.
    #[error("cannot run postgresql as root: {0}")]
    Privileges(String),

    /// The data directory holds a cluster of another major version.
    #[error(
        "the cluster in {data_dir} was created by PostgreSQL {cluster}, but {bin_dir} holds \
         PostgreSQL {binaries}; point --pg-bin / TALLY_PG_BIN at PostgreSQL {cluster}'s bin \
         directory, or use another data directory"
    )]
    VersionMismatch {
        /// The cluster directory.
        data_dir: PathBuf,
        /// Major version recorded in its `PG_VERSION`.
        cluster: String,
        /// The binaries' directory.
        bin_dir: PathBuf,
        /// The binaries' major version.
        binaries: u32,
    },

    /// A SQL statement against the private server failed.
    #[error("{context}: {source}")]
    Database {
        /// What was being done.
        context: String,
        #[source]
        source: sqlx::Error,
    },

    /// The postmaster did not exit after fast, immediate and kill signals.
    #[error("postgresql (pid {pid}) did not stop within {waited:?}")]
    StopTimeout {
        /// The postmaster's pid.
        pid: i32,
        /// How long we waited in all.
        waited: Duration,
    },

    /// A path of an existing data directory is not safe to reuse (a symlink, someone
    /// else's, or open to others).
    #[error("refusing to use {path}: it {problem}; {fix}")]
    UnsafePath {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// What to do about it.
        fix: String,
    },

    /// The options asked for something we refuse to do.
    #[error("invalid option: {0}")]
    Invalid(String),
}

impl PgError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        PgError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn db(context: impl Into<String>, source: sqlx::Error) -> Self {
        PgError::Database {
            context: context.into(),
            source,
        }
    }
}

fn list_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nowhere".to_owned();
    }
    let mut out = String::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}", p.display());
    }
    out
}

fn tail_block(log: Option<&Path>, tail: &str) -> String {
    let tail = tail.trim_end();
    match (log, tail.is_empty()) {
        (_, true) => String::new(),
        (Some(log), false) => format!("; last lines of {}:\n{tail}", log.display()),
        (None, false) => format!("; output:\n{tail}"),
    }
}

//! Finding the local PostgreSQL installation.
//!
//! Debian and Ubuntu keep `initdb` and `postgres` under `/usr/lib/postgresql/<version>/bin`,
//! which is usually not on `PATH`, so PATH alone is not enough; the usual install locations
//! of other platforms are searched too.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::PgError;

/// Environment variable naming the bin directory, after an explicit `--pg-bin`.
pub const BIN_ENV: &str = "TALLY_PG_BIN";

/// Programs a directory must hold to count as a PostgreSQL installation. `pg_ctl` is not
/// needed: we signal the postmaster ourselves.
const REQUIRED: [&str; 2] = ["initdb", "postgres"];

/// A directory holding PostgreSQL's server programs (`initdb`, `postgres`, usually `pg_ctl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgBinaries {
    dir: PathBuf,
}

/// What `postgres --version` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgVersion {
    /// Major version (15 for 15.20; 9 for 9.6.24).
    pub major: u32,
    /// The full line, e.g. `postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)`.
    pub text: String,
}

impl PgBinaries {
    /// Finds the bin directory: `explicit` (a `--pg-bin` flag) first, then the environment
    /// variable `TALLY_PG_BIN`; either, when given, is the only place looked at, so a wrong
    /// setting is reported rather than silently replaced. Otherwise `PATH`, then
    /// `/usr/lib/postgresql/*/bin` (highest version first), `/usr/local/pgsql/bin`,
    /// `/opt/homebrew/opt/postgresql*/bin`, `/usr/local/opt/postgresql*/bin` and
    /// `/usr/pgsql-*/bin`.
    pub fn locate(explicit: Option<&Path>) -> Result<Self, PgError> {
        Self::locate_preferring(explicit, None)
    }

    /// Like [`PgBinaries::locate`], but among the automatically found installations prefers
    /// one of major version `major` (the version of an existing cluster).
    pub fn locate_preferring(explicit: Option<&Path>, major: Option<u32>) -> Result<Self, PgError> {
        let env = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty());
        let path = std::env::var_os("PATH");
        let fixed = explicit.map(Path::to_path_buf).or(env.map(PathBuf::from));
        if let Some(dir) = fixed {
            return Self::from_dir(&dir);
        }
        let candidates = candidates(path.as_deref());
        let found: Vec<PgBinaries> = candidates
            .iter()
            .filter(|d| is_installation(d))
            .map(|d| PgBinaries { dir: d.clone() })
            .collect();
        if let Some(major) = major
            && let Some(b) = found
                .iter()
                .find(|b| b.version().is_ok_and(|v| v.major == major))
        {
            return Ok(b.clone());
        }
        found.into_iter().next().ok_or(PgError::NotFound {
            searched: candidates,
        })
    }

    /// Uses `dir` if it holds `initdb` and `postgres`.
    pub fn from_dir(dir: &Path) -> Result<Self, PgError> {
        if is_installation(dir) {
            Ok(PgBinaries {
                dir: dir.to_path_buf(),
            })
        } else {
            Err(PgError::NotFound {
                searched: vec![dir.to_path_buf()],
            })
        }
    }

    /// The bin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of `initdb`.
    pub fn initdb(&self) -> PathBuf {
        self.dir.join("initdb")
    }

    /// Path of `postgres`.
    pub fn postgres(&self) -> PathBuf {
        self.dir.join("postgres")
    }

    /// Path of `pg_ctl` (not used by this crate; there for operators' messages and tools).
    pub fn pg_ctl(&self) -> PathBuf {
        self.dir.join("pg_ctl")
    }

    /// Runs `postgres --version`.
    pub fn version(&self) -> Result<PgVersion, PgError> {
        let program = self.postgres();
        let out = Command::new(&program)
            .arg("--version")
            .output()
            .map_err(|e| {
                PgError::io(format!("could not run {} --version", program.display()), e)
            })?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() {
            return Err(PgError::Command {
                command: format!("{} --version", program.display()),
                status: out.status.to_string(),
                log: None,
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        parse_version(&text).ok_or_else(|| PgError::Command {
            command: format!("{} --version", program.display()),
            status: "unrecognised output".to_owned(),
            log: None,
            output: text,
        })
    }
}

/// Parses `postgres (PostgreSQL) 15.20 (Debian …)` or `postgres (PostgreSQL) 17devel`.
pub(crate) fn parse_version(text: &str) -> Option<PgVersion> {
    let number = text
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let major: String = number.chars().take_while(char::is_ascii_digit).collect();
    Some(PgVersion {
        major: major.parse().ok()?,
        text: text.to_owned(),
    })
}

/// Every directory to try, in order, whether or not it exists.
fn candidates(path_var: Option<&OsStr>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = path_var
        .map(|p| {
            std::env::split_paths(p)
                .filter(|d| d.is_absolute())
                .collect()
        })
        .unwrap_or_default();
    out.extend(versioned(Path::new("/usr/lib/postgresql"), "", "bin"));
    out.push(PathBuf::from("/usr/local/pgsql/bin"));
    out.extend(versioned(
        Path::new("/opt/homebrew/opt"),
        "postgresql",
        "bin",
    ));
    out.extend(versioned(Path::new("/usr/local/opt"), "postgresql", "bin"));
    out.extend(versioned(Path::new("/usr"), "pgsql-", "bin"));
    let mut seen = std::collections::HashSet::new();
    out.retain(|d| seen.insert(d.clone()));
    out
}

/// `parent/<prefix><version>/sub` for every such entry, highest version first.
fn versioned(parent: &Path, prefix: &str, sub: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(prefix)?;
            Some((version_key(rest), e.path().join(sub)))
        })
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Numeric parts of `16`, `@16`, `-16`, `15.4`; empty (sorts last) when there are none.
fn version_key(s: &str) -> Vec<u32> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn is_installation(dir: &Path) -> bool {
    REQUIRED.iter().all(|name| is_executable(&dir.join(name)))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        let v = parse_version("postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)").unwrap();
        assert_eq!(v.major, 15);
        assert_eq!(
            parse_version("postgres (PostgreSQL) 9.6.24").unwrap().major,
            9
        );
        assert_eq!(
            parse_version("postgres (PostgreSQL) 18devel")
                .unwrap()
                .major,
            18
        );
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn orders_versions_highest_first() {
        let mut keys = [
            version_key("9.6"),
            version_key("16"),
            version_key(""),
            version_key("@15"),
        ];
        keys.sort_by(|a, b| b.cmp(a));
        assert_eq!(keys, [vec![16], vec![15], vec![9, 6], vec![]]);
    }

    #[test]
    fn candidates_start_with_path_and_skip_relative_entries() {
        let c = candidates(Some(OsStr::new("/a/bin:relative:/b/bin:/a/bin")));
        assert_eq!(&c[..2], &[PathBuf::from("/a/bin"), PathBuf::from("/b/bin")]);
        assert!(c.contains(&PathBuf::from("/usr/local/pgsql/bin")));
    }

    #[test]
    fn not_found_says_what_to_do() {
        let err = PgBinaries::from_dir(Path::new("/nonexistent/pg")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("no PostgreSQL installation found (looked in /nonexistent/pg)"));
        assert!(msg.contains("apt-get install postgresql"));
        assert!(msg.contains("--pg-bin / TALLY_PG_BIN"));
        assert!(msg.contains("--database-url / DATABASE_URL"));
    }
}

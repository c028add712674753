//! The data directory's layout, and the checks that make reusing one safe.
//!
//! A data directory holds the passwords of both roles. Before tally reuses one it checks
//! that nobody else could have prepared or changed it: every path of the layout must be
//! owned by the user tally runs as (or, as root, by the user it drops privileges to), must
//! not be writable by group or others (the password files not even readable), and must not
//! be a symbolic link, since a link would let whoever planted it choose which file tally
//! reads its password from, or overwrites with one. Every file is also opened with
//! `O_NOFOLLOW` and checked again through its descriptor, so a link swapped in after the
//! check is refused too rather than followed.
//!
//! What is inside `pgdata` is PostgreSQL's business: it checks the directory's own mode
//! and owner itself.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::PgError;

/// Paths inside a data directory.
pub(crate) struct Layout {
    pub(crate) dir: PathBuf,
    pub(crate) pgdata: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) old_log: PathBuf,
    pub(crate) port: PathBuf,
    pub(crate) password: PathBuf,
    pub(crate) app_password: PathBuf,
    pub(crate) lock: PathBuf,
}

impl Layout {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Layout {
            pgdata: dir.join("pgdata"),
            log: dir.join("postgres.log"),
            old_log: dir.join("postgres.log.1"),
            port: dir.join("port"),
            password: dir.join("superuser-password"),
            app_password: dir.join("app-password"),
            lock: dir.join("start.lock"),
            dir,
        }
    }

    /// Checks everything of the layout that exists (the directory itself and the lock are
    /// checked before, see [`open_data_dir`] and [`open_file`]).
    pub(crate) fn check(&self, owners: &[u32]) -> Result<(), PgError> {
        if let Some(meta) = lstat(&self.pgdata)? {
            check_dir(&self.pgdata, &meta, owners, 0o027)?;
        }
        for (path, kind) in [
            (&self.password, Kind::Secret),
            (&self.app_password, Kind::Secret),
            (&self.port, Kind::Plain),
            (&self.log, Kind::Plain),
            (&self.old_log, Kind::Plain),
        ] {
            if let Some(meta) = lstat(path)? {
                check_file(path, &meta, owners, kind)?;
            }
        }
        Ok(())
    }
}

/// What a file holds, which decides who else may read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A password: only its owner may read or write it.
    Secret,
    /// Only its owner may write it.
    Plain,
}

/// Creates `dir` (mode 700; missing parents with default permissions) or, if it exists,
/// checks it is safe to reuse.
pub(crate) fn open_data_dir(dir: &Path, owners: &[u32]) -> Result<(), PgError> {
    if let Some(meta) = lstat(dir)? {
        return check_dir(dir, &meta, owners, 0o022);
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| PgError::io(format!("could not create {}", parent.display()), e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        // Made concurrently by someone: check theirs like any existing directory.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match lstat(dir)? {
            Some(meta) => check_dir(dir, &meta, owners, 0o022),
            None => Err(PgError::io(
                format!("could not create {}", dir.display()),
                e,
            )),
        },
        Err(e) => Err(PgError::io(
            format!("could not create {}", dir.display()),
            e,
        )),
    }
}

/// Opens `path` with `opts` plus `O_NOFOLLOW`, then checks what was opened (through the
/// descriptor, so there is no window between check and use). New files get mode 600.
pub(crate) fn open_file(
    path: &Path,
    opts: &mut OpenOptions,
    owners: &[u32],
    kind: Kind,
) -> Result<File, PgError> {
    let file = opts
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                symlink_error(path)
            } else {
                PgError::io(format!("could not open {}", path.display()), e)
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| PgError::io(format!("could not inspect {}", path.display()), e))?;
    check_file(path, &meta, owners, kind)?;
    Ok(file)
}

/// The trimmed contents of `path`, `None` if it is missing or empty; checked like
/// [`open_file`].
pub(crate) fn read_trimmed(
    path: &Path,
    owners: &[u32],
    kind: Kind,
) -> Result<Option<String>, PgError> {
    let mut file = match open_file(path, OpenOptions::new().read(true), owners, kind) {
        Ok(file) => file,
        Err(PgError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    // Our files are a few bytes; a bound keeps a planted huge file from costing memory.
    file.by_ref()
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| PgError::io(format!("could not read {}", path.display()), e))?;
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// Writes `contents` to `path` (mode 600 if new), refusing a symlink or an unsafe file.
/// The file is truncated only after it passed the checks.
pub(crate) fn write_file(
    path: &Path,
    contents: &[u8],
    owners: &[u32],
    kind: Kind,
) -> Result<(), PgError> {
    use std::io::Write as _;
    let mut file = open_file(
        path,
        OpenOptions::new().create(true).truncate(false).write(true),
        owners,
        kind,
    )?;
    file.set_len(0)
        .and_then(|()| file.write_all(contents))
        .map_err(|e| PgError::io(format!("could not write {}", path.display()), e))
}

fn lstat(path: &Path) -> Result<Option<Metadata>, PgError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PgError::io(
            format!("could not inspect {}", path.display()),
            e,
        )),
    }
}

/// `forbidden`: the mode bits that must be clear.
fn check_dir(path: &Path, meta: &Metadata, owners: &[u32], forbidden: u32) -> Result<(), PgError> {
    if meta.file_type().is_symlink() {
        return Err(symlink_error(path));
    }
    if !meta.is_dir() {
        return Err(unsafe_path(
            path,
            "is not a directory",
            "move it away or choose another data directory",
        ));
    }
    check_owner(path, meta, owners)?;
    let mode = meta.mode() & 0o7777;
    if mode & forbidden != 0 {
        return Err(unsafe_path(
            path,
            &format!("is writable by group or others (mode {mode:o})"),
            &format!("chmod 700 {}", path.display()),
        ));
    }
    Ok(())
}

fn check_file(path: &Path, meta: &Metadata, owners: &[u32], kind: Kind) -> Result<(), PgError> {
    if meta.file_type().is_symlink() {
        return Err(symlink_error(path));
    }
    if !meta.is_file() {
        return Err(unsafe_path(
            path,
            "is not a regular file",
            &format!("remove it (rm -r {})", path.display()),
        ));
    }
    check_owner(path, meta, owners)?;
    let mode = meta.mode() & 0o7777;
    let (forbidden, what) = match kind {
        Kind::Secret => (0o077, "readable or writable by group or others"),
        Kind::Plain => (0o022, "writable by group or others"),
    };
    if mode & forbidden != 0 {
        return Err(unsafe_path(
            path,
            &format!("is {what} (mode {mode:o})"),
            &format!("chmod 600 {}", path.display()),
        ));
    }
    Ok(())
}

fn check_owner(path: &Path, meta: &Metadata, owners: &[u32]) -> Result<(), PgError> {
    if owners.contains(&meta.uid()) {
        return Ok(());
    }
    let expected = owners
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" or ");
    Err(unsafe_path(
        path,
        &format!(
            "is owned by uid {}, not by the user tally runs as (uid {expected})",
            meta.uid()
        ),
        "check who made it; choose another data directory, or chown it if it is yours",
    ))
}

fn symlink_error(path: &Path) -> PgError {
    unsafe_path(
        path,
        "is a symbolic link, which tally does not follow here",
        &format!(
            "remove the symlink (rm {}) and put the real file or directory in its place",
            path.display()
        ),
    )
}

fn unsafe_path(path: &Path, problem: &str, fix: &str) -> PgError {
    PgError::UnsafePath {
        path: path.to_path_buf(),
        problem: problem.to_owned(),
        fix: fix.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tally-pg-datadir-{label}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn me() -> Vec<u32> {
        vec![nix::unistd::geteuid().as_raw()]
    }

    #[test]
    fn a_symlinked_file_is_neither_read_nor_written() {
        // Invariant: reading or writing a file of the layout through a symlink fails,
        // naming the path, and the link's target keeps its contents.
        let dir = scratch("link");
        let target = dir.join("target");
        std::fs::write(&target, "theirs").unwrap();
        let link = dir.join("port");
        std::os::unix::fs::symlink(&target, &link).unwrap();

        let err = write_file(&link, b"1234", &me(), Kind::Plain).unwrap_err();
        assert!(matches!(err, PgError::UnsafePath { .. }), "{err}");
        assert!(
            err.to_string().contains(&link.display().to_string()),
            "{err}"
        );
        let err = read_trimmed(&link, &me(), Kind::Plain).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn secrets_must_be_private_and_other_files_not_writable_by_others() {
        // Invariant: a password file readable by others is refused; a plain file only
        // when others can write it. New files are created mode 600.
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("mode");
        let path = dir.join("f");
        write_file(&path, b"x", &me(), Kind::Secret).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_trimmed(&path, &me(), Kind::Secret).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
        assert_eq!(
            read_trimmed(&path, &me(), Kind::Plain).unwrap().as_deref(),
            Some("x")
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert!(read_trimmed(&path, &me(), Kind::Plain).is_err());
        assert_eq!(
            read_trimmed(&dir.join("missing"), &me(), Kind::Plain).unwrap(),
            None
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_directory_owned_by_someone_else_is_refused() {
        // Invariant: a data directory whose owner is not one we run as is refused, naming
        // both uids.
        let dir = scratch("owner");
        let someone_else = nix::unistd::geteuid().as_raw() + 1;
        let err = open_data_dir(&dir, &[someone_else]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&format!("uid {someone_else}")), "{msg}");
        assert!(msg.contains(&dir.display().to_string()), "{msg}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_new_data_directory_is_private() {
        // Invariant: a data directory tally creates is mode 700 (whatever the parents).
        let parent = scratch("new");
        let dir = parent.join("a/b/data");
        open_data_dir(&dir, &me()).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        open_data_dir(&dir, &me()).unwrap();
        std::fs::remove_dir_all(parent).unwrap();
    }
}

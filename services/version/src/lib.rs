//! The version every tally binary reports: `--version` prints
//! `NAME 0.1.0 (commit 1a2b3c…)`, and `tally_build_info` carries the same
//! commit. The commit is `TALLY_GIT_SHA` at build time, else (release
//! builds of a git checkout) `git rev-parse HEAD`, else `unknown` (see
//! `build.rs`). Nothing else lives here.

/// The git commit the binary was built from, or `unknown`.
pub const COMMIT: &str = env!("TALLY_COMMIT");

/// The crate version of the workspace.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `--version` prints after the binary's name.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TALLY_COMMIT"),
    ")"
);

#[cfg(test)]
mod tests {
    #[test]
    fn the_long_version_names_the_version_and_the_commit() {
        assert!(super::LONG.starts_with(super::VERSION));
        assert!(super::LONG.ends_with(&format!("(commit {})", super::COMMIT)));
        assert!(!super::COMMIT.is_empty());
    }
}

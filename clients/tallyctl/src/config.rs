//! The config file and its named profiles, and how they meet the flags.
//!
//! The file is `$TALLYCTL_CONFIG`, else `$XDG_CONFIG_HOME/tally/config.toml`,
//! else `~/.config/tally/config.toml`:
//!
//! ```toml
//! default_profile = "prod"          # used when no --profile / TALLYCTL_PROFILE
//!
//! [profiles.prod]
//! server = "https://tally.example.com:443"
//! token_file = "~/.config/tally/prod.token"   # relative paths: to this file
//! tls_ca = "/etc/tally/ca.pem"
//! timeout = "30s"
//!
//! [profiles.local]
//! server = "http://127.0.0.1:50051"
//! ```
//!
//! Keys: `server` (or `address`), `token_file`, `tls_ca`, `tls_cert`,
//! `tls_key`, `tls_domain`, `timeout`. Unknown keys are errors (a typo must
//! not silently fall back to a default). Each value is taken in this order:
//! the flag, its `TALLY_*` variable, the profile, the built-in default.
//! A missing file is fine unless a profile is asked for (or
//! `$TALLYCTL_CONFIG` names it); an unreadable or invalid one is an error
//! naming the file, and for a syntax or key error the line and column.

use crate::error::CliError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The server when neither a flag, a variable nor a profile names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";
/// `--timeout` when nothing sets it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `--timeout` accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Config and token files larger than this are refused.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default_profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One `[profiles.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(alias = "address")]
    pub server: Option<String>,
    pub token_file: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_domain: Option<String>,
    pub timeout: Option<String>,
}

/// Where the config file is looked for, and whether it was named
/// explicitly (then it must exist).
pub fn path() -> Option<(PathBuf, bool)> {
    if let Some(p) = std::env::var_os("TALLYCTL_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), true));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".config")))?;
    Some((base.join("tally").join("config.toml"), false))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The profile in use: its name, the file it came from, its values (paths
/// made absolute).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    pub name: Option<String>,
    pub file: Option<PathBuf>,
    pub profile: Profile,
}

/// Reads the file (if any) and picks the profile: `wanted` (from
/// `--profile` or `TALLYCTL_PROFILE`), else the file's `default_profile`,
/// else none.
pub fn select(file: Option<(PathBuf, bool)>, wanted: Option<&str>) -> Result<Selected, CliError> {
    let Some((path, explicit)) = file else {
        return match wanted {
            Some(name) => Err(CliError::usage(format!(
                "profile {name:?}: no config file (set TALLYCTL_CONFIG or HOME)"
            ))),
            None => Ok(Selected::default()),
        };
    };
    let text = match read_bounded(&path, MAX_FILE_BYTES) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit && wanted.is_none() => {
            return Ok(Selected::default());
        }
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                match wanted {
                    Some(name) => format!("it does not exist (profile {name:?} was asked for)"),
                    None => "it does not exist (TALLYCTL_CONFIG names it)".to_string(),
                }
            } else {
                e.to_string()
            };
            return Err(CliError::usage(format!(
                "config file {}: {why}",
                path.display()
            )));
        }
    };
    let parsed: File = toml::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "config file {}: {}",
            path.display(),
            e.to_string().trim_end()
        ))
    })?;
    let name = wanted
        .map(str::to_string)
        .or_else(|| parsed.default_profile.clone());
    let Some(name) = name else {
        return Ok(Selected {
            name: None,
            file: Some(path),
            profile: Profile::default(),
        });
    };
    let Some(profile) = parsed.profiles.get(&name) else {
        let known: Vec<&str> = parsed.profiles.keys().map(String::as_str).collect();
        let how = if wanted.is_some() {
            ""
        } else {
            " (its default_profile)"
        };
        return Err(CliError::usage(format!(
            "config file {}{how}: no profile {name:?}; it has {}",
            path.display(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let fix = |p: &Option<PathBuf>| p.as_ref().map(|p| absolute(dir, p));
    let profile = Profile {
        server: profile.server.clone(),
        token_file: fix(&profile.token_file),
        tls_ca: fix(&profile.tls_ca),
        tls_cert: fix(&profile.tls_cert),
        tls_key: fix(&profile.tls_key),
        tls_domain: profile.tls_domain.clone(),
        timeout: profile.timeout.clone(),
    };
    Ok(Selected {
        name: Some(name),
        file: Some(path),
        profile,
    })
}

/// `~/x` from HOME; a relative path from the config file's directory.
fn absolute(dir: &Path, p: &Path) -> PathBuf {
    if let Ok(rest) = p.strip_prefix("~")
        && let Some(h) = home()
    {
        return h.join(rest);
    }
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

fn read_bounded(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "larger than {max} bytes; refused"
        )));
    }
    Ok(text)
}

/// A token file's token (surrounding whitespace removed).
pub fn read_token(path: &Path, origin: &str) -> Result<String, CliError> {
    let text = read_bounded(path, MAX_TOKEN_BYTES)
        .map_err(|e| CliError::usage(format!("token file {} ({origin}): {e}", path.display())))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(CliError::usage(format!(
            "token file {} ({origin}) is empty",
            path.display()
        )));
    }
    Ok(token.to_string())
}

/// `--timeout`: a human duration, more than zero, at most a day.
pub fn parse_timeout(text: &str, origin: &str) -> Result<Duration, CliError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        CliError::usage(format!(
            "{origin}: {text:?}: {e} (use forms like 30s, 5m, 1h)"
        ))
    })?;
    if d.is_zero() || d > MAX_TIMEOUT {
        return Err(CliError::usage(format!(
            "{origin}: {text:?} must be more than 0 and at most 24h"
        )));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("config.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_profile_is_picked_by_name_or_default_and_paths_are_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            r#"
default_profile = "local"
[profiles.local]
server = "http://127.0.0.1:1"
[profiles.prod]
address = "https://tally.example:443"
token_file = "prod.token"
tls_ca = "/etc/ca.pem"
timeout = "5s"
"#,
        );
        let s = select(Some((p.clone(), true)), None).unwrap();
        assert_eq!(s.name.as_deref(), Some("local"));
        assert_eq!(s.profile.server.as_deref(), Some("http://127.0.0.1:1"));
        let s = select(Some((p, true)), Some("prod")).unwrap();
        assert_eq!(
            s.profile.server.as_deref(),
            Some("https://tally.example:443")
        );
        assert_eq!(s.profile.token_file, Some(dir.path().join("prod.token")));
        assert_eq!(s.profile.tls_ca, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(s.profile.timeout.as_deref(), Some("5s"));
    }

    #[test]
    fn errors_name_the_file_and_the_line() {
        // Invariant: every way a config file can be wrong is an error that
        // names the file; syntax and key errors also name the line.
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "[profiles.a]\nserver = \"x\"\nadress = \"y\"\n");
        let e = select(Some((p.clone(), false)), Some("a"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("adress"), "{e}");
        let p = write(dir.path(), "[profiles.a\n");
        let e = select(Some((p.clone(), false)), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("line 1"),
            "{e}"
        );
        let p = write(dir.path(), "[profiles.a]\n[profiles.b]\n");
        let e = select(Some((p, false)), Some("c")).unwrap_err().to_string();
        assert!(e.contains("no profile \"c\"") && e.contains("a, b"), "{e}");
        let missing = dir.path().join("nope.toml");
        let e = select(Some((missing.clone(), false)), Some("a"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let e = select(Some((missing.clone(), true)), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("TALLYCTL_CONFIG"), "{e}");
        // The default location missing, no profile asked: no config.
        assert_eq!(
            select(Some((missing, false)), None).unwrap(),
            Selected::default()
        );
    }

    #[test]
    fn tokens_and_timeouts_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::write(&t, "  s3cret\n").unwrap();
        assert_eq!(read_token(&t, "--token-file").unwrap(), "s3cret");
        std::fs::write(&t, "\n").unwrap();
        assert!(
            read_token(&t, "--token-file")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert_eq!(
            parse_timeout("1m", "--timeout").unwrap(),
            Duration::from_secs(60)
        );
        for bad in ["0s", "soon", "2d"] {
            assert!(parse_timeout(bad, "--timeout").is_err(), "{bad}");
        }
    }
}

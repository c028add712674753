//! The values flags take that must not print as given: a secret, and a
//! URL whose credentials are redacted; and a secret read from a file.

/// A secret given as a flag or variable: `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretArg(pub(crate) String);

impl SecretArg {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for SecretArg {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_string()))
    }
}

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretArg(..)")
    }
}

/// A URL given as a flag or variable: `Debug` and `Display` show it
/// without its user, password or secret query values
/// ([`tally_core::text::redact_urls`]); the text itself is the URL.
#[derive(Clone, PartialEq, Eq)]
pub struct UrlArg(String);

impl std::str::FromStr for UrlArg {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_string()))
    }
}

impl UrlArg {
    /// The URL as given, credentials and all (to connect with).
    pub fn to_string_unredacted(&self) -> String {
        self.0.clone()
    }
}

impl std::ops::Deref for UrlArg {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for UrlArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", tally_core::text::redact_urls(&self.0))
    }
}

impl std::fmt::Display for UrlArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&tally_core::text::redact_urls(&self.0))
    }
}

/// The secret in the file `path`, given to `flag`: its text without the
/// trailing newline. The error names the flag and the path, never the
/// contents.
pub fn read_secret_file(flag: &str, path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.trim().is_empty() {
        return Err(format!("{flag} {}: the file is empty", path.display()));
    }
    Ok(secret)
}

//! Which ledgers (and locks and prompts) a caller may touch: the team
//! boundary of a shared server.
//!
//! A token or a client certificate carries a [`Scope`]: a list of
//! [`Patterns`] over ids, each an exact id (`acme-nightly`), a prefix
//! (`acme-*`) or everything (`*`). The same patterns govern:
//! - ledgers, by ledger id;
//! - locks, by lock id (`locks/acme-nightly:adopt` is inside `acme-*`);
//! - prompts, by prompt id, to register and to read;
//!
//! and a second, read-only list shares prompts across teams (`shared-*`):
//! a caller may read (and enroll rows naming) those prompts, but not
//! register versions of them.
//!
//! Matching is by bytes: a prefix pattern `acme-*` covers `acme-` and every
//! id starting with it, nothing else (`acme` alone is not inside it; list it
//! as well if it is meant). `*` may appear only at the end.

/// Most patterns in one list: a scope is a short statement of a team's
/// namespace, not an access-control list of every ledger.
pub const MAX_PATTERNS: usize = 64;
/// Longest pattern, in bytes (the longest id is a lock id of 128).
pub const MAX_PATTERN: usize = 129;

/// A set of ids given by exact ids and prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Patterns {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl Patterns {
    /// Every id (`*`).
    pub fn all() -> Patterns {
        Patterns {
            exact: Vec::new(),
            prefixes: vec![String::new()],
        }
    }

    /// No id at all.
    pub fn none() -> Patterns {
        Patterns::default()
    }

    /// Parses a list such as `["acme-*", "shared-report"]`. An empty list is
    /// allowed here (no ids); callers that need at least one say so.
    pub fn parse<S: AsRef<str>>(list: &[S]) -> Result<Patterns, String> {
        if list.len() > MAX_PATTERNS {
            return Err(format!(
                "has {} patterns; at most {MAX_PATTERNS}",
                list.len()
            ));
        }
        let mut out = Patterns::none();
        for (i, p) in list.iter().enumerate() {
            let p = p.as_ref();
            let body = p.strip_suffix('*');
            let checked = body.unwrap_or(p);
            if p.is_empty() {
                return Err(format!("[{i}] is empty; use `*` for every id"));
            }
            if p.len() > MAX_PATTERN {
                return Err(format!("[{i}] is longer than {MAX_PATTERN} bytes"));
            }
            if let Some(b) = checked.bytes().find(|b| !id_byte(*b)) {
                let shown = if b == b'*' {
                    "`*` (allowed only at the end)".to_string()
                } else {
                    format!("{:?}", char::from(b))
                };
                return Err(format!(
                    "[{i}] `{p}` contains {shown}; patterns are ids of [A-Za-z0-9._:-], \
                     optionally ending in `*`"
                ));
            }
            match body {
                Some(prefix) => out.prefixes.push(prefix.to_string()),
                None => out.exact.push(p.to_string()),
            }
        }
        out.exact.sort();
        out.exact.dedup();
        out.prefixes.sort();
        out.prefixes.dedup();
        if out.prefixes.iter().any(String::is_empty) {
            // `*` covers the rest.
            return Ok(Patterns::all());
        }
        Ok(out)
    }

    /// Whether `id` is in the set.
    pub fn allows(&self, id: &str) -> bool {
        self.exact.iter().any(|e| e == id) || self.prefixes.iter().any(|p| id.starts_with(p))
    }

    /// Whether the set holds every id (`*`).
    pub fn is_all(&self) -> bool {
        self.prefixes.iter().any(String::is_empty)
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    /// The exact ids (for a query's bind parameter).
    pub fn exact(&self) -> &[String] {
        &self.exact
    }

    /// The prefixes (for a query's bind parameter); `*` is the empty
    /// prefix, which every id starts with.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The patterns as written (`acme-*`, `shared-report`, `*`).
    pub fn to_strings(&self) -> Vec<String> {
        self.prefixes
            .iter()
            .map(|p| format!("{p}*"))
            .chain(self.exact.iter().cloned())
            .collect()
    }
}

fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

/// What one caller may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Ledgers, locks and prompts (read and write), by id.
    pub ledgers: Patterns,
    /// Prompts the caller may read but not register.
    pub shared_prompts: Patterns,
}

impl Scope {
    /// The whole server: `--auth disabled`, and tokens granted `*`.
    pub fn everything() -> Scope {
        Scope {
            ledgers: Patterns::all(),
            shared_prompts: Patterns::none(),
        }
    }

    /// No ledger at all: a client certificate without roles.
    pub fn nothing() -> Scope {
        Scope {
            ledgers: Patterns::none(),
            shared_prompts: Patterns::none(),
        }
    }

    /// Whether the caller reaches every ledger (no filtering needed).
    pub fn is_everything(&self) -> bool {
        self.ledgers.is_all()
    }

    pub fn ledger(&self, ledger_id: &str) -> bool {
        self.ledgers.allows(ledger_id)
    }

    pub fn lock(&self, lock_id: &str) -> bool {
        self.ledgers.allows(lock_id)
    }

    pub fn write_prompt(&self, prompt_id: &str) -> bool {
        self.ledgers.allows(prompt_id)
    }

    pub fn read_prompt(&self, prompt_id: &str) -> bool {
        self.ledgers.allows(prompt_id) || self.shared_prompts.allows(prompt_id)
    }

    /// One line for logs and errors: `acme-*, acme (prompts also: shared-*)`.
    pub fn describe(&self) -> String {
        let mut s = self.ledgers.to_strings().join(", ");
        if s.is_empty() {
            s = "nothing".into();
        }
        if !self.shared_prompts.is_empty() {
            s.push_str(&format!(
                " (shared prompts: {})",
                self.shared_prompts.to_strings().join(", ")
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(list: &[&str]) -> Patterns {
        Patterns::parse(list).unwrap()
    }

    #[test]
    fn prefixes_cover_what_starts_with_them_and_nothing_else() {
        let s = p(&["acme-*", "beta-report"]);
        for id in ["acme-", "acme-nightly", "acme-nightly:adopt"] {
            assert!(s.allows(id), "{id}");
        }
        for id in ["acme", "acm", "beta-report-2", "beta", "", "xacme-1"] {
            assert!(!s.allows(id), "{id}");
        }
        assert!(s.allows("beta-report"));
        assert!(!s.is_all());
    }

    #[test]
    fn star_is_everything_and_absorbs_the_rest() {
        let s = p(&["acme-*", "*"]);
        assert!(s.is_all());
        assert_eq!(s, Patterns::all());
        assert!(s.allows("anything") && s.allows(""));
        assert_eq!(s.to_strings(), vec!["*"]);
    }

    #[test]
    fn the_empty_list_allows_nothing() {
        let s = p(&[]);
        assert!(s.is_empty() && !s.allows("a"));
    }

    #[test]
    fn bad_patterns_say_which_and_why() {
        let cases: &[(&[&str], &str)] = &[
            (&[""], "[0] is empty"),
            (&["ok", "a*b"], "[1] `a*b` contains `*`"),
            (&["a b"], "contains ' '"),
            (&["acme/*"], "contains '/'"),
            (&["**"], "allowed only at the end"),
        ];
        for (list, expect) in cases {
            let e = Patterns::parse(list).unwrap_err();
            assert!(e.contains(expect), "{list:?}: {e}");
        }
        let long = "a".repeat(MAX_PATTERN + 1);
        assert!(Patterns::parse(&[long]).unwrap_err().contains("longer"));
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("t{i}")).collect();
        assert!(Patterns::parse(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn shared_prompts_are_read_only() {
        let scope = Scope {
            ledgers: p(&["acme-*"]),
            shared_prompts: p(&["shared-*"]),
        };
        assert!(scope.read_prompt("shared-summary"));
        assert!(!scope.write_prompt("shared-summary"));
        assert!(scope.write_prompt("acme-summary") && scope.read_prompt("acme-summary"));
        assert!(!scope.read_prompt("beta-summary"));
        assert!(
            !scope.ledger("shared-summary"),
            "sharing prompts shares no ledger"
        );
        assert!(scope.lock("acme-nightly:adopt") && !scope.lock("beta:adopt"));
        assert_eq!(scope.describe(), "acme-* (shared prompts: shared-*)");
        assert!(!scope.is_everything() && Scope::everything().is_everything());
    }
}

//! The coded values SQL compares with, taken from `tally-core` (and the
//! store's own claim states) so that no statement holds a bare number.
//!
//! They are written into the statement text as plain integers, not bound
//! as parameters: the planner must see the same constants the partial
//! indexes' predicates were written with to use them, and they never come
//! from a caller. In a `format!` they
//! read `{PENDING}`, `{CLAIMABLE}`; in a statement file (`queries/…`,
//! `purge/…`) the same names read `{{PENDING}}` and [`render`] fills them.
//!
//! Parameters, unlike codes, are bound. A long statement's parameters are
//! the fields of one typed struct whose `bind` method (over [`PgQuery`] or
//! [`PgQueryAs`]) binds them in the order the statement's file documents.

use crate::types::ClaimState;
use std::fmt;
use std::sync::LazyLock;
use tally_core::job::JobState;
use tally_core::status::RowStatus;

/// A statement being bound.
pub(crate) type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;
/// A statement being bound whose rows decode as `O`.
pub(crate) type PgQueryAs<'q, O> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>;

/// One code, as SQL reads it.
#[derive(Clone, Copy)]
pub(crate) struct Code(i16);

impl Code {
    /// A code of one of the store's own enums (core's are below).
    pub(crate) const fn new(code: i16) -> Code {
        Code(code)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A set of row statuses, as the inside of an SQL `IN (…)`.
#[derive(Clone, Copy)]
pub(crate) struct Statuses(&'static [RowStatus]);

impl fmt::Display for Statuses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", s.code())?;
        }
        Ok(())
    }
}

const fn row(s: RowStatus) -> Code {
    Code(s.code())
}

pub(crate) const PENDING: Code = row(RowStatus::Pending);
pub(crate) const RETRYABLE: Code = row(RowStatus::Retryable);
pub(crate) const SUCCEEDED: Code = row(RowStatus::Succeeded);
pub(crate) const PERMANENT: Code = row(RowStatus::Permanent);
pub(crate) const BLOCKED: Code = row(RowStatus::Blocked);
/// What a row held by a live claim is shown as.
pub(crate) const HELD: Code = row(RowStatus::HELD);
pub(crate) const CLAIMABLE: Statuses = Statuses(&RowStatus::CLAIMABLE);
pub(crate) const BLOCKABLE: Statuses = Statuses(&RowStatus::BLOCKABLE);
pub(crate) const FAILS_DEPENDANTS: Statuses = Statuses(&RowStatus::FAILS_DEPENDANTS);
/// Statuses whose results consumers are delivered.
pub(crate) const FINISHED: Statuses = Statuses(&tally_core::delivery::FINISHED);

pub(crate) const CLAIM_ACTIVE: Code = Code(ClaimState::Active.code());
pub(crate) const CLAIM_DONE: Code = Code(ClaimState::Done.code());
pub(crate) const CLAIM_EXPIRED: Code = Code(ClaimState::Expired.code());

pub(crate) const JOB_PREPARING: Code = Code(JobState::Preparing.code());

/// What a cool-down holds back (`model_cooldowns.lane`): batch creates, or
/// every synchronous lane (a lane's own code holds back that lane).
pub(crate) const COOL_BATCH: Code = Code(tally_core::lane::Lane::Batch.code());
pub(crate) const COOL_ALL_SYNC: Code = Code(tally_core::capacity::ALL_SYNC_LANES);

/// A BLOCKED row's rule and error, as SQL string literals.
pub(crate) const BLOCKED_RULE: Literal = Literal(tally_core::transition::BLOCKED_RULE);
pub(crate) const BLOCKED_MESSAGE: Literal = Literal(tally_core::transition::BLOCKED_MESSAGE);

/// A constant text as an SQL string literal (it holds no quote).
#[derive(Clone, Copy)]
pub(crate) struct Literal(&'static str);

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(!self.0.contains('\''));
        write!(f, "'{}'", self.0)
    }
}

/// A piece of SQL built once from codes, for `format!`ing into statements
/// (`{HELD}`) like a `const &str` would be.
pub(crate) struct Fragment(LazyLock<String>);

impl Fragment {
    pub(crate) const fn new(build: fn() -> String) -> Fragment {
        Fragment(LazyLock::new(build))
    }
}

impl fmt::Display for Fragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every name a statement file may use, with its value.
fn named() -> [(&'static str, String); 16] {
    [
        ("PENDING", PENDING.to_string()),
        ("RETRYABLE", RETRYABLE.to_string()),
        ("SUCCEEDED", SUCCEEDED.to_string()),
        ("PERMANENT", PERMANENT.to_string()),
        ("BLOCKED", BLOCKED.to_string()),
        ("HELD", HELD.to_string()),
        ("CLAIMABLE", CLAIMABLE.to_string()),
        ("BLOCKABLE", BLOCKABLE.to_string()),
        ("FAILS_DEPENDANTS", FAILS_DEPENDANTS.to_string()),
        ("FINISHED", FINISHED.to_string()),
        ("CLAIM_ACTIVE", CLAIM_ACTIVE.to_string()),
        ("CLAIM_DONE", CLAIM_DONE.to_string()),
        ("CLAIM_EXPIRED", CLAIM_EXPIRED.to_string()),
        ("JOB_PREPARING", JOB_PREPARING.to_string()),
        ("BLOCKED_RULE", BLOCKED_RULE.to_string()),
        ("BLOCKED_MESSAGE", BLOCKED_MESSAGE.to_string()),
    ]
}

/// A statement file with its `{{NAME}}`s filled in. Panics on a name it
/// does not know: statement files are compiled in, so the store's tests
/// (which run every statement) find a typo before anyone else does.
pub(crate) fn render(sql: &str) -> String {
    render_with(sql, &[])
}

/// [`render`], with more names: shared conditions (e.g. `RESCUE_DUE`).
pub(crate) fn render_with(sql: &str, more: &[(&str, &dyn fmt::Display)]) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .unwrap_or_else(|| panic!("an unclosed {{{{ in a statement: {sql}"));
        let name = &after[..end];
        let value = more
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
            .or_else(|| {
                named()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v)
            })
            .unwrap_or_else(|| panic!("no code named {name} (statement: {sql})"));
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_cast_constants_and_sets_are_in_lists() {
        // Invariant: what SQL compares with is core's code, written as the
        // partial indexes' predicates write it.
        assert_eq!(PENDING.to_string(), "1");
        assert_eq!(CLAIMABLE.to_string(), "1, 3");
        assert_eq!(BLOCKED_RULE.to_string(), "'dependency_failed'");
    }

    #[test]
    fn render_fills_every_name_and_refuses_unknown_ones() {
        // Invariant: a statement file's names become the same text format!
        // gives, and an unknown name never reaches the database.
        assert_eq!(
            render("WHERE status IN ({{CLAIMABLE}}) AND state = {{CLAIM_ACTIVE}}"),
            format!("WHERE status IN ({CLAIMABLE}) AND state = {CLAIM_ACTIVE}")
        );
        assert!(std::panic::catch_unwind(|| render("x = {{NOPE}}")).is_err());
    }
}

/// Where the store's statements live: every `.rs` and `.sql` file under
/// `src/`, read at test time.
#[cfg(test)]
fn statement_sources() -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "sql") {
                out.push((
                    path.display().to_string(),
                    std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out
}

/// The places in `text` where a coded column is compared with, or set to, a
/// bare number: `status = 5`, `state <> 1`, `verdict IN (1`, `THEN 6 ELSE
/// r.status`.
#[cfg(test)]
fn bare_codes(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    for column in ["status", "state", "verdict"] {
        for (at, _) in lower.match_indices(column) {
            let before = lower[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let rest = lower[at + column.len()..].trim_start();
            let rest = ["<>", "=", "in ("]
                .iter()
                .find_map(|op| rest.strip_prefix(op))
                .map(str::trim_start);
            if rest.is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit())) {
                let line = lower[..at].matches('\n').count() + 1;
                found.push(format!(
                    "line {line}: {}",
                    &text[at..(at + 24).min(text.len())]
                ));
            }
        }
    }
    for (at, _) in lower.match_indices("then ") {
        let rest = &lower[at + 5..];
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        let tail = rest[digits..].trim_start_matches("::int2").trim_start();
        // The ELSE branch only (to its END or its line's end), not the rest
        // of the file.
        let otherwise = tail.strip_prefix("else").map(str::trim_start).map(|t| {
            let end = t.find(" end").into_iter().chain(t.find('\n')).min();
            &t[..end.unwrap_or(t.len())]
        });
        if digits > 0 && otherwise.is_some_and(|e| e.contains("status")) {
            let line = lower[..at].matches('\n').count() + 1;
            found.push(format!(
                "line {line}: {}",
                &text[at..(at + 24).min(text.len())]
            ));
        }
    }
    found
}

#[cfg(test)]
mod no_bare_codes {
    use super::*;

    #[test]
    fn the_finder_sees_what_it_must() {
        // Invariant: the check below can fail: each shape of a bare code is
        // found, and the rendered form is not.
        assert_eq!(bare_codes("WHERE r.status IN (1, 3)").len(), 1);
        assert_eq!(bare_codes("AND c.state = 1 AND").len(), 1);
        assert_eq!(bare_codes("verdict <> 1").len(), 1);
        assert_eq!(bare_codes("THEN 6 ELSE r.status END").len(), 1);
        assert_eq!(bare_codes("THEN 6\n ELSE r.status END").len(), 1);
        assert!(bare_codes("THEN 9 ELSE r.tokens END,\n status = w.status").is_empty());
        assert!(
            bare_codes("WHERE r.status IN ({{CLAIMABLE}}) AND state = {CLAIM_ACTIVE}").is_empty()
        );
        assert!(bare_codes("state = $2, status = w.status").is_empty());
    }

    #[test]
    fn no_statement_holds_a_bare_status_or_state_number() {
        // Invariant: row statuses, claim and job states and event verdicts
        // reach SQL only through the names above (core's codes), so a
        // statement cannot disagree with the state machines.
        let mut problems = Vec::new();
        for (path, text) in statement_sources() {
            if path.ends_with("codes.rs") {
                continue;
            }
            for p in bare_codes(&text) {
                problems.push(format!("{path} {p}"));
            }
        }
        assert!(
            problems.is_empty(),
            "bare codes in SQL:\n{}",
            problems.join("\n")
        );
    }
}

//! Resource names (AIP-122) and the ids inside them: parsing, validation and
//! formatting in one place, so every handler agrees on what a name is.
//!
//! - `ledgers/{ledger}`: ledger ids are 1-63 characters of `[a-z0-9-]`,
//!   starting with a letter.
//! - `ledgers/{ledger}/rows/{key}`: see [`crate::keys::validate_key`].
//! - `ledgers/{ledger}/claims/{claim}` and `ledgers/{ledger}/jobs/{job}`:
//!   server-made ids of `[a-z0-9-]`.
//! - `prompts/{prompt}/versions/{version}`.
//! - `ledgers/{ledger}/consumers/{consumer}`: consumer ids as ledger ids.
//! - `locks/{lock}`.

use crate::keys::validate_key;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("must not be empty")]
    Empty,
    #[error("must look like `{0}`")]
    Shape(&'static str),
    #[error("{0}")]
    Id(String),
}

/// `[a-z0-9_-]{1,max}`: override names, prompt ids.
pub fn is_simple_id(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A ledger id: 1-63 characters of `[a-z0-9-]`, starting with a letter, not
/// ending with a hyphen.
pub fn validate_ledger_id(id: &str) -> Result<(), NameError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id.as_bytes()[0].is_ascii_lowercase()
        && !id.ends_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else if id.is_empty() {
        Err(NameError::Empty)
    } else {
        Err(NameError::Id(
            "ledger id must be 1 to 63 characters of [a-z0-9-], starting with a letter and not ending with '-'"
                .into(),
        ))
    }
}

/// A consumer id: as a ledger id, 1-63 characters of `[a-z0-9-]`, starting
/// with a letter and not ending with `-`.
pub fn validate_consumer_id(id: &str) -> Result<(), NameError> {
    validate_ledger_id(id).map_err(|e| match e {
        NameError::Id(_) => NameError::Id(
            "consumer id must be 1 to 63 characters of [a-z0-9-], starting with a letter and not ending with '-'"
                .into(),
        ),
        other => other,
    })
}

/// A server-made id (claims, jobs): `[a-z0-9-]{1,64}`.
fn validate_generated_id(id: &str, what: &str) -> Result<(), NameError> {
    if id.is_empty() {
        return Err(NameError::Empty);
    }
    if id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Ok(())
    } else {
        Err(NameError::Id(format!("{what} id is malformed")))
    }
}

/// A prompt version: 1-63 characters of `[A-Za-z0-9._-]`.
pub fn validate_prompt_version(v: &str) -> Result<(), NameError> {
    if v.is_empty() {
        return Err(NameError::Empty);
    }
    if v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Ok(())
    } else {
        Err(NameError::Id(
            "prompt version must be 1 to 63 characters of [A-Za-z0-9._-]".into(),
        ))
    }
}

/// A prompt id: 1-63 characters of `[a-z0-9_-]`.
pub fn validate_prompt_id(id: &str) -> Result<(), NameError> {
    if id.is_empty() {
        Err(NameError::Empty)
    } else if is_simple_id(id, 63) {
        Ok(())
    } else {
        Err(NameError::Id(
            "prompt id must be 1 to 63 characters of [a-z0-9_-]".into(),
        ))
    }
}

/// A lock id: 1-128 characters of `[A-Za-z0-9._:-]`.
pub fn validate_lock_id(id: &str) -> Result<(), NameError> {
    if id.is_empty() {
        return Err(NameError::Empty);
    }
    if id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        Ok(())
    } else {
        Err(NameError::Id(
            "lock id must be 1 to 128 characters of [A-Za-z0-9._:-]".into(),
        ))
    }
}

fn split<'a>(
    name: &'a str,
    parts: &[&str],
    shape: &'static str,
) -> Result<Vec<&'a str>, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    let segments: Vec<&str> = name.split('/').collect();
    if segments.len() != parts.len() * 2 {
        return Err(NameError::Shape(shape));
    }
    let mut ids = Vec::with_capacity(parts.len());
    for (pair, collection) in segments.chunks(2).zip(parts) {
        if pair[0] != *collection || pair[1].is_empty() {
            return Err(NameError::Shape(shape));
        }
        ids.push(pair[1]);
    }
    Ok(ids)
}

/// `ledgers/{ledger}` → the ledger id.
pub fn parse_ledger(name: &str) -> Result<&str, NameError> {
    let ids = split(name, &["ledgers"], "ledgers/{ledger}")?;
    validate_ledger_id(ids[0])?;
    Ok(ids[0])
}

/// `ledgers/{ledger}` or `ledgers/-` (every ledger) → `None` for `-`.
pub fn parse_ledger_or_all(name: &str) -> Result<Option<&str>, NameError> {
    if name == "ledgers/-" {
        return Ok(None);
    }
    parse_ledger(name).map(Some)
}

/// `ledgers/{ledger}/rows/{key}` → (ledger, key).
pub fn parse_row(name: &str) -> Result<(&str, &str), NameError> {
    let ids = split(name, &["ledgers", "rows"], "ledgers/{ledger}/rows/{key}")?;
    validate_ledger_id(ids[0])?;
    validate_key(ids[1]).map_err(|e| NameError::Id(e.to_string()))?;
    Ok((ids[0], ids[1]))
}

/// `ledgers/{ledger}/claims/{claim}` → (ledger, claim).
pub fn parse_claim(name: &str) -> Result<(&str, &str), NameError> {
    let ids = split(
        name,
        &["ledgers", "claims"],
        "ledgers/{ledger}/claims/{claim}",
    )?;
    validate_ledger_id(ids[0])?;
    validate_generated_id(ids[1], "claim")?;
    Ok((ids[0], ids[1]))
}

/// `ledgers/{ledger}/jobs/{job}` → (ledger, job).
pub fn parse_job(name: &str) -> Result<(&str, &str), NameError> {
    let ids = split(name, &["ledgers", "jobs"], "ledgers/{ledger}/jobs/{job}")?;
    validate_ledger_id(ids[0])?;
    validate_generated_id(ids[1], "job")?;
    Ok((ids[0], ids[1]))
}

/// `prompts/{prompt}/versions/{version}` → (prompt, version).
pub fn parse_prompt(name: &str) -> Result<(&str, &str), NameError> {
    let ids = split(
        name,
        &["prompts", "versions"],
        "prompts/{prompt}/versions/{version}",
    )?;
    validate_prompt_id(ids[0])?;
    validate_prompt_version(ids[1])?;
    Ok((ids[0], ids[1]))
}

/// `ledgers/{ledger}/consumers/{consumer}` → (ledger, consumer).
pub fn parse_consumer(name: &str) -> Result<(&str, &str), NameError> {
    let ids = split(
        name,
        &["ledgers", "consumers"],
        "ledgers/{ledger}/consumers/{consumer}",
    )?;
    validate_ledger_id(ids[0])?;
    validate_consumer_id(ids[1])?;
    Ok((ids[0], ids[1]))
}

/// `locks/{lock}` → the lock id.
pub fn parse_lock(name: &str) -> Result<&str, NameError> {
    let ids = split(name, &["locks"], "locks/{lock}")?;
    validate_lock_id(ids[0])?;
    Ok(ids[0])
}

pub fn ledger_name(ledger: &str) -> String {
    format!("ledgers/{ledger}")
}

pub fn row_name(ledger: &str, key: &str) -> String {
    format!("ledgers/{ledger}/rows/{key}")
}

pub fn claim_name(ledger: &str, claim: &str) -> String {
    format!("ledgers/{ledger}/claims/{claim}")
}

/// How many characters of a claim's id a log line shows.
pub const LOGGED_CLAIM_CHARS: usize = 8;

/// A claim name (`ledgers/{l}/claims/{id}`) or bare id as logs show it:
/// only the id's first [`LOGGED_CLAIM_CHARS`] characters, then `…`. The
/// whole id authorizes reports and FinishJob for the claim, so it is never
/// logged; the prefix is enough to tell claims apart in a log.
pub fn claim_for_logs(claim: &str) -> String {
    let (head, id) = match claim.rfind("/claims/") {
        Some(i) => claim.split_at(i + "/claims/".len()),
        None => ("", claim),
    };
    match id.char_indices().nth(LOGGED_CLAIM_CHARS) {
        Some((cut, _)) => format!("{head}{}…", &id[..cut]),
        None => claim.to_string(),
    }
}

pub fn job_name(ledger: &str, job: &str) -> String {
    format!("ledgers/{ledger}/jobs/{job}")
}

pub fn prompt_name(prompt: &str, version: &str) -> String {
    format!("prompts/{prompt}/versions/{version}")
}

pub fn consumer_name(ledger: &str, consumer: &str) -> String {
    format!("ledgers/{ledger}/consumers/{consumer}")
}

pub fn lock_name(lock: &str) -> String {
    format!("locks/{lock}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_parse_and_reject() {
        // Invariant: a consumer name is a ledger name and a consumer id of
        // the same shape; anything else names nothing.
        assert_eq!(
            parse_consumer("ledgers/reviews/consumers/morning-sink"),
            Ok(("reviews", "morning-sink"))
        );
        for bad in [
            "ledgers/reviews/consumers/",
            "ledgers/reviews/consumers/Sink",
            "ledgers/-/consumers/sink",
            "ledgers/reviews/rows/sink",
            "ledgers/reviews/consumers/sink/x",
        ] {
            assert!(parse_consumer(bad).is_err(), "{bad}");
        }
        assert_eq!(consumer_name("l", "c"), "ledgers/l/consumers/c");
    }

    #[test]
    fn ledger_names_parse_and_reject() {
        assert_eq!(
            parse_ledger("ledgers/reviews-nightly"),
            Ok("reviews-nightly")
        );
        assert_eq!(parse_ledger(""), Err(NameError::Empty));
        for bad in [
            "ledger/x",
            "ledgers/",
            "ledgers/X",
            "ledgers/1abc",
            "ledgers/a-",
            "ledgers/a/b",
            "ledgers/a_b",
        ] {
            assert!(parse_ledger(bad).is_err(), "{bad}");
        }
        assert!(parse_ledger(&format!("ledgers/{}", "a".repeat(64))).is_err());
        assert_eq!(parse_ledger_or_all("ledgers/-"), Ok(None));
    }

    #[test]
    fn row_names_carry_keys_with_colons() {
        assert_eq!(
            parse_row("ledgers/ocr/rows/California:LincolnHigh:2023:4"),
            Ok(("ocr", "California:LincolnHigh:2023:4"))
        );
        assert!(parse_row("ledgers/ocr/rows/a b").is_err());
        assert!(parse_row("ledgers/ocr/rows/a/b").is_err());
    }

    #[test]
    fn other_names() {
        assert_eq!(parse_claim("ledgers/a/claims/c-1"), Ok(("a", "c-1")));
        assert_eq!(parse_job("ledgers/a/jobs/j-1"), Ok(("a", "j-1")));
        assert!(parse_job("ledgers/a/claims/j-1").is_err());
        assert_eq!(
            parse_prompt("prompts/page_ocr/versions/v2"),
            Ok(("page_ocr", "v2"))
        );
        assert_eq!(parse_lock("locks/nightly:reviews"), Ok("nightly:reviews"));
        assert!(parse_lock("locks/a b").is_err());
        assert_eq!(job_name("a", "j"), "ledgers/a/jobs/j");
    }

    #[test]
    fn claims_are_logged_by_a_short_prefix_only() {
        // Invariant: a logged claim never carries its whole id, and keeps
        // the ledger path so the line still says where the claim is.
        let id = "6f9d2c1e-8b3a-4d5e-9f60-7a1b2c3d4e5f";
        let name = claim_name("reviews", id);
        assert_eq!(claim_for_logs(&name), "ledgers/reviews/claims/6f9d2c1e…");
        assert_eq!(claim_for_logs(id), "6f9d2c1e…");
        assert!(!claim_for_logs(&name).contains("8b3a"));
        assert_eq!(claim_for_logs("short"), "short");
    }
}

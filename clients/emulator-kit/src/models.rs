//! The models an emulator's batches may name: any, or a list of names whose
//! dated snapshots count as the name (`gpt-4o-2024-08-06` is `gpt-4o`'s,
//! `claude-haiku-4-5-20251001` is `claude-haiku-4-5`'s). What a request
//! naming another model gets is the emulator's own business. Pure.

/// The models batches may name. No `Default`: each emulator says what it
/// starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Models {
    /// Every model name is accepted.
    Any,
    /// Only these, and their dated snapshots.
    Only(Vec<String>),
}

impl Models {
    /// Only `names` (and their dated snapshots).
    pub fn only(names: &[&str]) -> Models {
        Models::Only(names.iter().map(|m| (*m).to_owned()).collect())
    }

    /// `--models`: `*` for any, else a comma-separated list.
    pub fn parse(spec: &str) -> Result<Models, String> {
        if spec.trim() == "*" {
            return Ok(Models::Any);
        }
        let names: Vec<String> = spec
            .split(',')
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        if names.is_empty() {
            return Err("--models needs `*` or at least one model name".into());
        }
        Ok(Models::Only(names))
    }

    pub fn allows(&self, model: &str) -> bool {
        match self {
            Models::Any => true,
            Models::Only(names) => names.iter().any(|m| {
                model == m
                    || model
                        .strip_prefix(m.as_str())
                        .and_then(|rest| rest.strip_prefix('-'))
                        .is_some_and(|date| date.starts_with("20"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a listed name admits itself and its dated snapshots, not
    // longer names that merely start with it.
    #[test]
    fn names_admit_their_dated_snapshots() {
        let m = Models::only(&["gpt-4o-mini", "claude-haiku-4-5"]);
        assert!(m.allows("gpt-4o-mini"));
        assert!(m.allows("gpt-4o-mini-2024-07-18"));
        assert!(m.allows("claude-haiku-4-5-20251001"));
        assert!(!m.allows("gpt-4o-mini-turbo"));
        assert!(!m.allows("claude-haiku-4"));
        assert!(Models::Any.allows("anything"));
        assert_eq!(Models::parse("*"), Ok(Models::Any));
        assert_eq!(Models::parse(" a, b ,"), Ok(Models::only(&["a", "b"])));
        assert!(Models::parse(" , ").is_err());
    }
}

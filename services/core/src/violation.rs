//! Field violations: how every validation in tally reports bad input. The
//! server turns a list of them into INVALID_ARGUMENT with a `BadRequest`
//! detail; nothing is written when there is at least one.

/// One thing wrong with one field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// The field's path in the request, e.g. `rows[3].key`.
    pub field: String,
    /// What is wrong, lowercase, e.g. `must be 1 to 256 characters`.
    pub description: String,
}

impl FieldViolation {
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

impl std::fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.description)
    }
}

/// Most violations kept; more are only counted. A request with two million
/// bad entries then costs a hundred strings, not two million: the cap holds
/// while the list is built, not only when it is sent.
pub const MAX_KEPT: usize = 100;

/// What a rejected request is told: the first [`MAX_KEPT`] violations and
/// how many more there were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invalid {
    pub violations: Vec<FieldViolation>,
    /// Violations found but not kept.
    pub omitted: usize,
}

impl Invalid {
    /// Every violation found, kept or not.
    pub fn total(&self) -> usize {
        self.violations.len() + self.omitted
    }
}

impl From<Vec<FieldViolation>> for Invalid {
    fn from(violations: Vec<FieldViolation>) -> Self {
        Self {
            violations,
            omitted: 0,
        }
    }
}

impl IntoIterator for Invalid {
    type Item = FieldViolation;
    type IntoIter = std::vec::IntoIter<FieldViolation>;

    /// The kept violations.
    fn into_iter(self) -> Self::IntoIter {
        self.violations.into_iter()
    }
}

impl std::ops::Deref for Invalid {
    type Target = [FieldViolation];

    fn deref(&self) -> &[FieldViolation] {
        &self.violations
    }
}

/// Collects violations, keeping at most [`MAX_KEPT`]; `finish` turns them
/// into a result.
#[derive(Debug, Default)]
pub struct Violations {
    kept: Vec<FieldViolation>,
    omitted: usize,
}

impl Violations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a violation (only counted once [`MAX_KEPT`] are kept).
    pub fn add(&mut self, field: impl Into<String>, description: impl Into<String>) {
        if self.is_full() {
            self.omitted += 1;
        } else {
            self.kept.push(FieldViolation::new(field, description));
        }
    }

    /// Adds the error of a check, if any, under `field`.
    pub fn check<E: std::fmt::Display>(&mut self, field: impl Into<String>, result: Result<(), E>) {
        if let Err(e) = result {
            self.add(field, e.to_string());
        }
    }

    /// Adds every violation of `other`.
    pub fn extend(&mut self, other: impl Into<Invalid>) {
        let other = other.into();
        for v in other.violations {
            self.add(v.field, v.description);
        }
        self.omitted += other.omitted;
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Violations found so far, kept or not.
    pub fn len(&self) -> usize {
        self.kept.len() + self.omitted
    }

    /// Whether [`MAX_KEPT`] are kept: a loop over a request's entries may
    /// stop here (the answer names enough to fix).
    pub fn is_full(&self) -> bool {
        self.kept.len() >= MAX_KEPT
    }

    pub fn finish(self) -> Result<(), Invalid> {
        if self.kept.is_empty() {
            Ok(())
        } else {
            Err(Invalid {
                violations: self.kept,
                omitted: self.omitted,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: however many violations are added, at most MAX_KEPT are
    /// kept (as they are added), and the rest are counted.
    #[test]
    fn violations_stop_at_the_cap_while_they_are_built() {
        let mut v = Violations::new();
        for i in 0..1_000_000 {
            v.add(format!("answers[{i}].key"), "empty");
        }
        assert!(v.is_full());
        assert_eq!(v.len(), 1_000_000);
        assert_eq!(v.kept.capacity(), MAX_KEPT.next_power_of_two());
        let e = v.finish().unwrap_err();
        assert_eq!(e.violations.len(), MAX_KEPT);
        assert_eq!(e.omitted, 1_000_000 - MAX_KEPT);
        assert_eq!(e.total(), 1_000_000);
        assert_eq!(e[0].field, "answers[0].key");
    }

    #[test]
    fn extend_keeps_the_cap_and_the_count() {
        let mut a = Violations::new();
        a.add("a", "x");
        let mut b = Violations::new();
        for _ in 0..150 {
            b.add("b", "y");
        }
        a.extend(b.finish().unwrap_err());
        assert_eq!(a.len(), 151);
        assert!(a.is_full());
        assert_eq!(Violations::new().finish(), Ok(()));
    }
}

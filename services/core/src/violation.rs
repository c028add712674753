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

/// Collects violations; `finish` turns them into a result.
#[derive(Debug, Default)]
pub struct Violations(Vec<FieldViolation>);

impl Violations {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.0.push(FieldViolation::new(field, description));
    }

    /// Adds the error of a check, if any, under `field`.
    pub fn check<E: std::fmt::Display>(&mut self, field: impl Into<String>, result: Result<(), E>) {
        if let Err(e) = result {
            self.add(field, e.to_string());
        }
    }

    pub fn extend(&mut self, other: Vec<FieldViolation>) {
        self.0.extend(other);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn finish(self) -> Result<(), Vec<FieldViolation>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

//! The names tally gives what it makes at the provider, so a search can
//! find them again and the janitor can tell its own from anyone else's:
//! a job's input file and its batch are both `tally/{ledger}/{job id}`;
//! a probe batch (a witness, see [`crate::lookup`]) is
//! `tally-probe/{ledger}/{id}`.

/// The display name of a job's input file and batch.
pub fn display_name(ledger: &str, job_id: &str) -> String {
    format!("{}{job_id}", job_prefix(ledger))
}

/// What every display name of this ledger's jobs starts with.
pub fn job_prefix(ledger: &str) -> String {
    format!("tally/{}/", ledger.trim_start_matches("ledgers/"))
}

/// The names a job's batch may carry: [`display_name`], or the bare job id
/// (what batches made before the ledger was in the name carry).
pub fn batch_names(ledger: &str, job_id: &str) -> Vec<String> {
    vec![display_name(ledger, job_id), job_id.to_owned()]
}

/// The display name of a probe batch made by a worker of `ledger`.
pub fn probe_name(ledger: &str, id: &str) -> String {
    format!("{}{id}", probe_prefix(ledger))
}

/// What the display names of this ledger's probes start with.
pub fn probe_prefix(ledger: &str) -> String {
    format!("tally-probe/{}/", ledger.trim_start_matches("ledgers/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_ledger_and_the_job() {
        assert_eq!(display_name("ledgers/x", "j1"), "tally/x/j1");
        assert_eq!(display_name("x", "j1"), "tally/x/j1");
        assert!(display_name("x", "j1").starts_with(&job_prefix("ledgers/x")));
        assert_eq!(batch_names("x", "j1"), ["tally/x/j1", "j1"]);
        assert_eq!(probe_name("ledgers/x", "p"), "tally-probe/x/p");
        assert!(!probe_name("x", "p").starts_with(&job_prefix("x")));
    }
}

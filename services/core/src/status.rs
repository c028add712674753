//! Row statuses and attempt budgets: the vocabulary every other module
//! speaks. The numeric codes are the ones stored in PostgreSQL and match the
//! `tally.v1` enum numbers, so no translation table can drift.

/// Where a row is in its life. See DESIGN.md section 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowStatus {
    /// Enrolled, never tried.
    Pending,
    /// Leased to a claim.
    Running,
    /// Transient failure; claimable again after backoff.
    Retryable,
    /// A valid result is stored. Only an explicit re-answer (an operator's,
    /// or a dependency answering differently where the ledger asks) takes
    /// it back to PENDING, keeping the old result beside the new.
    Succeeded,
    /// Input, safety or schema failure, or a budget exhausted.
    Permanent,
    /// A dependency is PERMANENT or BLOCKED.
    Blocked,
}

impl RowStatus {
    pub const ALL: [RowStatus; 6] = [
        RowStatus::Pending,
        RowStatus::Running,
        RowStatus::Retryable,
        RowStatus::Succeeded,
        RowStatus::Permanent,
        RowStatus::Blocked,
    ];

    /// What a claim may take (given its dependencies are met and its backoff
    /// has passed): the statuses `Event::Claim` moves.
    pub const CLAIMABLE: [RowStatus; 2] = [RowStatus::Pending, RowStatus::Retryable];

    /// What a failed dependency turns BLOCKED: the statuses
    /// `Event::DependencyFailed` moves (BLOCKED itself stays as it is).
    pub const BLOCKABLE: [RowStatus; 2] = [RowStatus::Pending, RowStatus::Retryable];

    /// What an operator may redrive: the statuses `Event::Redrive` moves.
    pub const REDRIVABLE: [RowStatus; 2] = [RowStatus::Permanent, RowStatus::Blocked];

    /// What may be asked again: the statuses `Event::Reanswer` moves.
    pub const REANSWERABLE: [RowStatus; 1] = [RowStatus::Succeeded];

    /// A dependency in one of these blocks its dependants.
    pub const FAILS_DEPENDANTS: [RowStatus; 2] = [RowStatus::Permanent, RowStatus::Blocked];

    /// What a row held by a live claim is shown as. Its stored status stays
    /// the one it was claimed with until the claim settles it.
    pub const HELD: RowStatus = RowStatus::Running;

    /// The status a row is enrolled with: BLOCKED when one of its
    /// dependencies is (or, in the same call, will be) PERMANENT or
    /// BLOCKED, PENDING otherwise.
    pub const fn enrolled(dependency_failed: bool) -> RowStatus {
        if dependency_failed {
            RowStatus::Blocked
        } else {
            RowStatus::Pending
        }
    }

    /// The status a redriven row (or a row its redrive unblocked) comes
    /// back with, given its dependencies' statuses once the redrive has
    /// reset what it reset: BLOCKED again while one of them still fails
    /// dependants, PENDING otherwise (as [`RowStatus::enrolled`]).
    pub fn redriven(dependencies: impl IntoIterator<Item = RowStatus>) -> RowStatus {
        RowStatus::enrolled(dependencies.into_iter().any(RowStatus::fails_dependants))
    }

    /// Whether a dependency with this status blocks its dependants.
    pub const fn fails_dependants(self) -> bool {
        matches!(self, RowStatus::Permanent | RowStatus::Blocked)
    }

    /// The stored code (equal to the `tally.v1.RowStatus` number).
    pub const fn code(self) -> i16 {
        match self {
            RowStatus::Pending => 1,
            RowStatus::Running => 2,
            RowStatus::Retryable => 3,
            RowStatus::Succeeded => 4,
            RowStatus::Permanent => 5,
            RowStatus::Blocked => 6,
        }
    }

    pub const fn from_code(code: i16) -> Option<RowStatus> {
        match code {
            1 => Some(RowStatus::Pending),
            2 => Some(RowStatus::Running),
            3 => Some(RowStatus::Retryable),
            4 => Some(RowStatus::Succeeded),
            5 => Some(RowStatus::Permanent),
            6 => Some(RowStatus::Blocked),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "pending",
            RowStatus::Running => "running",
            RowStatus::Retryable => "retryable",
            RowStatus::Succeeded => "succeeded",
            RowStatus::Permanent => "permanent",
            RowStatus::Blocked => "blocked",
        }
    }

    /// Whether a claim may take the row (given its dependencies are met and
    /// its backoff has passed).
    pub const fn is_claimable(self) -> bool {
        matches!(self, RowStatus::Pending | RowStatus::Retryable)
    }

    /// PERMANENT and BLOCKED: what an operator may redrive.
    pub const fn is_redrivable(self) -> bool {
        matches!(self, RowStatus::Permanent | RowStatus::Blocked)
    }

    /// SUCCEEDED: what may be re-answered.
    pub const fn is_reanswerable(self) -> bool {
        matches!(self, RowStatus::Succeeded)
    }
}

impl std::fmt::Display for RowStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three attempt budgets. They fail for different reasons and deserve
/// different patience, so each has its own cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Budget {
    /// Transient provider errors: 429, 5xx, timeouts, rows missing from output.
    Provider,
    /// The answer came back but is unusable: empty, or fails the schema.
    Content,
    /// Our side failed: a lease expired, a whole job failed or expired.
    Infra,
}

impl Budget {
    pub const ALL: [Budget; 3] = [Budget::Provider, Budget::Content, Budget::Infra];

    /// The stored code (equal to the `tally.v1.Budget` number).
    pub const fn code(self) -> i16 {
        match self {
            Budget::Provider => 1,
            Budget::Content => 2,
            Budget::Infra => 3,
        }
    }

    pub const fn from_code(code: i16) -> Option<Budget> {
        match code {
            1 => Some(Budget::Provider),
            2 => Some(Budget::Content),
            3 => Some(Budget::Infra),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Budget::Provider => "provider",
            Budget::Content => "content",
            Budget::Infra => "infra",
        }
    }
}

/// A count per budget: failed attempts so far, or the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct PerBudget {
    pub provider: u32,
    pub content: u32,
    pub infra: u32,
}

impl PerBudget {
    pub const fn new(provider: u32, content: u32, infra: u32) -> Self {
        Self {
            provider,
            content,
            infra,
        }
    }

    pub const fn get(&self, budget: Budget) -> u32 {
        match budget {
            Budget::Provider => self.provider,
            Budget::Content => self.content,
            Budget::Infra => self.infra,
        }
    }

    /// A copy with one budget incremented.
    pub const fn bumped(mut self, budget: Budget) -> Self {
        match budget {
            Budget::Provider => self.provider += 1,
            Budget::Content => self.content += 1,
            Budget::Infra => self.infra += 1,
        }
        self
    }

    pub const fn total(&self) -> u32 {
        self.provider + self.content + self.infra
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for s in RowStatus::ALL {
            assert_eq!(RowStatus::from_code(s.code()), Some(s));
        }
        for b in Budget::ALL {
            assert_eq!(Budget::from_code(b.code()), Some(b));
        }
        assert_eq!(RowStatus::from_code(0), None);
        assert_eq!(Budget::from_code(4), None);
    }

    #[test]
    fn only_pending_and_retryable_are_claimable() {
        let claimable: Vec<_> = RowStatus::ALL
            .into_iter()
            .filter(|s| s.is_claimable())
            .collect();
        assert_eq!(claimable, [RowStatus::Pending, RowStatus::Retryable]);
    }

    /// A redriven row stays BLOCKED exactly while one of its dependencies
    /// is PERMANENT or BLOCKED; without dependencies it is PENDING.
    #[test]
    fn a_redriven_row_is_blocked_only_by_a_failing_dependency() {
        use RowStatus::*;
        assert_eq!(RowStatus::redriven([]), Pending);
        for s in RowStatus::ALL {
            let expected = if [Permanent, Blocked].contains(&s) {
                Blocked
            } else {
                Pending
            };
            assert_eq!(RowStatus::redriven([Succeeded, s]), expected, "{s}");
        }
    }

    #[test]
    fn bumping_touches_one_budget() {
        let c = PerBudget::new(1, 2, 3).bumped(Budget::Content);
        assert_eq!(c, PerBudget::new(1, 3, 3));
        assert_eq!(c.total(), 7);
    }
}

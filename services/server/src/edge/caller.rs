//! Who is calling, and what they may touch. The auth layer puts a
//! [`Caller`] in each request's extensions; handlers read its name to
//! record as the actor of attempts, redrives and jobs, and ask [`Access`]
//! whether the ledger (lock, prompt, operation) a call names is inside the
//! caller's scope before the store is asked anything. Without auth every
//! caller is `anonymous` and reaches the whole server.
//!
//! A refusal is PERMISSION_DENIED with reason `OUT_OF_SCOPE`, decided from
//! the name in the request alone, so it is the same whether or not the
//! resource exists: a team learns nothing about another team's ledgers.

use crate::edge::status;
use std::collections::HashMap;
use std::sync::Arc;
use tally_core::scope::Scope;
use tonic::{Code, Status};

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub scope: Arc<Scope>,
    /// Whether its roles use claims (worker, operator): live claim names
    /// authorize reports, so rows show them only to such callers.
    pub uses_claims: bool,
    /// Whether it may list a whole ledger's rows (enroller, operator); a
    /// worker lists only one job's rows (what an adopted job expects).
    pub lists_ledgers: bool,
}

/// The caller's name, or `anonymous`.
pub fn actor<T>(req: &tonic::Request<T>) -> String {
    req.extensions()
        .get::<Caller>()
        .map_or_else(|| "anonymous".to_string(), |c| c.name.clone())
}

/// The caller's name and scope, for the checks of one call.
#[derive(Debug, Clone)]
pub struct Access {
    pub name: String,
    pub scope: Arc<Scope>,
    pub uses_claims: bool,
    pub lists_ledgers: bool,
}

/// What the caller of `req` may touch.
pub fn access<T>(req: &tonic::Request<T>) -> Access {
    match req.extensions().get::<Caller>() {
        Some(c) => Access {
            name: c.name.clone(),
            scope: c.scope.clone(),
            uses_claims: c.uses_claims,
            lists_ledgers: c.lists_ledgers,
        },
        None => Access {
            name: "anonymous".into(),
            scope: Arc::new(Scope::everything()),
            uses_claims: true,
            lists_ledgers: true,
        },
    }
}

impl Access {
    /// The ledger `ledger_id` (of a ledger, row, claim or job name).
    pub fn ledger(&self, ledger_id: &str) -> Result<(), Status> {
        self.check(self.scope.ledger(ledger_id), || {
            tally_core::names::ledger_name(ledger_id)
        })
    }

    /// The lock `locks/{lock_id}`.
    pub fn lock(&self, lock_id: &str) -> Result<(), Status> {
        self.check(self.scope.lock(lock_id), || {
            tally_core::names::lock_name(lock_id)
        })
    }

    /// Registering a version of prompt `prompt_id`.
    pub fn write_prompt(&self, prompt_id: &str) -> Result<(), Status> {
        self.check(self.scope.write_prompt(prompt_id), || {
            format!("prompts/{prompt_id}")
        })
    }

    /// Reading prompt `prompt_id` (or enrolling rows that name it).
    pub fn read_prompt(&self, prompt_id: &str) -> Result<(), Status> {
        self.check(self.scope.read_prompt(prompt_id), || {
            format!("prompts/{prompt_id}")
        })
    }

    /// Every prompt that rows about to be enrolled name (`""`: none); a row
    /// may name only prompts its enroller may read.
    pub fn read_prompts<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Result<(), Status> {
        if self.scope.is_everything() {
            return Ok(());
        }
        let mut last = "";
        for id in ids.filter(|id| !id.is_empty()) {
            if id != last {
                self.read_prompt(id)?;
                last = id;
            }
        }
        Ok(())
    }

    /// An operation, by the job name it is linked to (`None`: linked to no
    /// job yet, which only callers of the whole server may see).
    pub fn operation(&self, operation: &str, job: Option<&str>) -> Result<(), Status> {
        let allowed = self.scope.is_everything() || linked_in_scope(&self.scope, job);
        self.check(allowed, || format!("operations/{operation}"))
    }

    /// Whether the caller reaches every ledger (lists need no filter).
    pub fn everything(&self) -> bool {
        self.scope.is_everything()
    }

    fn check(&self, allowed: bool, resource: impl FnOnce() -> String) -> Result<(), Status> {
        if allowed {
            return Ok(());
        }
        Err(self.out_of_scope(&resource()))
    }

    /// PERMISSION_DENIED `OUT_OF_SCOPE` for `resource`.
    pub fn out_of_scope(&self, resource: &str) -> Status {
        tracing::warn!(caller = %self.name, resource, "out of scope");
        let meta = HashMap::from([
            ("caller".to_string(), self.name.clone()),
            ("resource".to_string(), resource.to_string()),
        ]);
        status::refused(
            Code::PermissionDenied,
            "OUT_OF_SCOPE",
            format!(
                "{} may not use {resource}: its credentials reach only {}",
                self.name,
                self.scope.describe()
            ),
            meta,
            None,
        )
    }
}

/// Whether `job` (an operation's linked job name, if any) is of a ledger
/// inside `scope`; an operation linked to no job is in no team's scope.
pub fn linked_in_scope(scope: &Scope, job: Option<&str>) -> bool {
    job.and_then(|j| tally_core::names::parse_job(j).ok())
        .is_some_and(|(ledger, _)| scope.ledger(ledger))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::scope::Patterns;

    fn acme() -> Access {
        Access {
            name: "acme-etl".into(),
            scope: Arc::new(Scope {
                ledgers: Patterns::parse(&["acme-*"]).unwrap(),
                shared_prompts: Patterns::parse(&["shared-*"]).unwrap(),
            }),
            uses_claims: false,
            lists_ledgers: true,
        }
    }

    #[test]
    fn refusals_are_permission_denied_and_name_only_what_was_asked() {
        let a = acme();
        assert!(a.ledger("acme-nightly").is_ok());
        let s = a.ledger("beta-nightly").unwrap_err();
        assert_eq!(s.code(), Code::PermissionDenied);
        assert!(
            s.message().contains("ledgers/beta-nightly"),
            "{}",
            s.message()
        );
        assert!(s.message().contains("acme-*"), "{}", s.message());
        assert!(a.lock("acme-nightly:adopt").is_ok() && a.lock("beta:adopt").is_err());
        assert!(a.read_prompt("shared-sum").is_ok() && a.write_prompt("shared-sum").is_err());
    }

    #[test]
    fn operations_follow_their_job_and_unlinked_ones_need_the_whole_server() {
        let a = acme();
        assert!(
            a.operation("batches/1", Some("ledgers/acme-x/jobs/j1"))
                .is_ok()
        );
        assert!(
            a.operation("batches/1", Some("ledgers/beta-x/jobs/j1"))
                .is_err()
        );
        assert!(a.operation("batches/1", None).is_err());
        let all = Access {
            name: "op".into(),
            scope: Arc::new(Scope::everything()),
            uses_claims: true,
            lists_ledgers: true,
        };
        assert!(all.operation("batches/1", None).is_ok());
    }
}

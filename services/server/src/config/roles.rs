//! Who a token or certificate is: the roles the tokens file and
//! `--mtls-roles` name, and sets of them (the permission table in
//! [`crate::edge::auth::methods`] is written in these).

use std::fmt;

/// A role a token or certificate can hold.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Other teams' services: read ledgers, enroll rows, read rows and
    /// summaries, register prompts.
    Enroller,
    /// tally-worker: claims, reports, jobs, locks, operations.
    Worker,
    /// People and tallyctl: everything.
    Operator,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Enroller, Role::Worker, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Enroller => "enroller",
            Role::Worker => "worker",
            Role::Operator => "operator",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Role::Enroller => Roles::ENROLLER.0,
            Role::Worker => Roles::WORKER.0,
            Role::Operator => Roles::OPERATOR.0,
        }
    }
}

/// A set of roles (a bit set, so the table can be a `const`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Roles(pub(crate) u8);

impl Roles {
    pub const NONE: Roles = Roles(0);
    pub const ENROLLER: Roles = Roles(1);
    pub const WORKER: Roles = Roles(2);
    pub const OPERATOR: Roles = Roles(4);

    pub fn of(roles: &[Role]) -> Roles {
        Roles(roles.iter().fold(0, |acc, r| acc | r.bit()))
    }

    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    pub fn intersects(self, other: Roles) -> bool {
        self.0 & other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Role::ALL
            .iter()
            .filter(|r| self.has(**r))
            .map(|r| r.as_str())
            .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

impl fmt::Debug for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Roles({self})")
    }
}

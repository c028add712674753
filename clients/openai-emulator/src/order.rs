//! The order batch lists page in.

use serde::{Deserialize, Serialize};

/// The order of `GET /v1/batches`. The API documents none for batches
/// (observed: newest first), so every order is offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    #[default]
    NewestFirst,
    OldestFirst,
    /// A fixed order (seeded), stable across pages.
    Shuffled,
}

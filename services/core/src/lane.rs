//! Lanes: the ways a row can be sent. One is the provider's batch API; the
//! others are its synchronous tiers — flex (sheddable, at or near the batch
//! price: OpenAI `service_tier: "flex"`, Gemini's Flex), standard (the
//! online price) and priority (more). A ledger says which lanes its rows
//! may take; each attempt runs in one and records it.
//!
//! Which provider offers which lane, and what a lane costs against batch
//! when the ledger's price table has no price for it, are written here
//! once. The provider's own name for a tier is the worker's (its provider
//! folders).

use serde::{Deserialize, Serialize};

use crate::provider::Api;

/// One way of sending a row.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// The provider's batch API (a turnaround of minutes to a day).
    #[default]
    Batch,
    /// A synchronous tier that may be shed when the provider is busy, at or
    /// near the batch price.
    Flex,
    /// The synchronous tier at the online price.
    Standard,
    /// A synchronous tier above the online price.
    Priority,
}

impl Lane {
    pub const ALL: [Lane; 4] = [Lane::Batch, Lane::Flex, Lane::Standard, Lane::Priority];

    /// The stored code (equal to the `tally.v1.Lane` number).
    pub const fn code(self) -> i16 {
        match self {
            Lane::Batch => 1,
            Lane::Flex => 2,
            Lane::Standard => 3,
            Lane::Priority => 4,
        }
    }

    pub fn from_code(code: i16) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.code() == code)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Lane::Batch => "batch",
            Lane::Flex => "flex",
            Lane::Standard => "standard",
            Lane::Priority => "priority",
        }
    }

    /// The lane named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<Lane> {
        Lane::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether a row in this lane is sent as one synchronous call.
    pub const fn is_sync(self) -> bool {
        !matches!(self, Lane::Batch)
    }

    /// Whether `api`'s provider offers this lane: Gemini batch, Flex,
    /// standard and priority; OpenAI batch and `service_tier` flex, default
    /// and priority; Anthropic batch and standard Messages (it has no flex).
    pub const fn offered_by(self, api: Api) -> bool {
        match (api, self) {
            (_, Lane::Batch | Lane::Standard) => true,
            (Api::Gemini | Api::OpenAi, Lane::Flex | Lane::Priority) => true,
            (Api::Anthropic, Lane::Flex | Lane::Priority) => false,
        }
    }

    /// What a token costs in this lane against the batch price, as the
    /// providers price them, for a lane the ledger's price table leaves
    /// out: flex at the batch price (OpenAI: "priced at Batch API rates";
    /// Gemini: half the standard price, as batch is); standard twice it
    /// (batch is half price at all three); priority 3.5 times (Gemini and
    /// OpenAI: about 75% over standard).
    pub const fn batch_factor(self) -> f64 {
        match self {
            Lane::Batch | Lane::Flex => 1.0,
            Lane::Standard => 2.0,
            Lane::Priority => 3.5,
        }
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The lanes a ledger's rows may take (batch alone by default), each once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Lanes(Vec<Lane>);

impl Default for Lanes {
    fn default() -> Self {
        Lanes(vec![Lane::Batch])
    }
}

impl Lanes {
    /// The set of `lanes` (duplicates dropped, kept in order); `None` when
    /// empty.
    pub fn of(lanes: impl IntoIterator<Item = Lane>) -> Option<Lanes> {
        let mut out: Vec<Lane> = Vec::new();
        for l in lanes {
            if !out.contains(&l) {
                out.push(l);
            }
        }
        (!out.is_empty()).then_some(Lanes(out))
    }

    pub fn allows(&self, lane: Lane) -> bool {
        self.0.contains(&lane)
    }

    pub fn iter(&self) -> impl Iterator<Item = Lane> + '_ {
        self.0.iter().copied()
    }

    /// The codes, to bind into SQL.
    pub fn codes(&self) -> Vec<i16> {
        self.0.iter().map(|l| l.code()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: codes and names round-trip, and every code is the proto
    // enum's number (UNSPECIFIED is 0).
    #[test]
    fn codes_and_names_round_trip() {
        for l in Lane::ALL {
            assert_eq!(Lane::from_code(l.code()), Some(l));
            assert_eq!(Lane::parse(l.name()), Some(l));
            assert!(l.code() > 0);
        }
        assert_eq!(Lane::from_code(0), None);
        assert_eq!(Lane::parse("FLEX"), Some(Lane::Flex));
        assert_eq!(Lane::parse("fast"), None);
    }

    // Invariant: Anthropic offers no flex and no priority; every provider
    // offers batch and standard; only batch is not synchronous.
    #[test]
    fn lanes_offered_follow_the_providers() {
        assert!(!Lane::Flex.offered_by(Api::Anthropic));
        assert!(!Lane::Priority.offered_by(Api::Anthropic));
        for api in Api::ALL {
            assert!(Lane::Batch.offered_by(api) && Lane::Standard.offered_by(api));
        }
        assert!(Lane::Flex.offered_by(Api::OpenAi) && Lane::Flex.offered_by(Api::Gemini));
        assert_eq!(Lane::ALL.map(Lane::is_sync), [false, true, true, true]);
    }

    // Invariant: a lane set holds each lane once, in the order given, and
    // is never empty.
    #[test]
    fn lane_sets_drop_repeats_and_are_never_empty() {
        let set = Lanes::of([Lane::Flex, Lane::Batch, Lane::Flex]).unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), [Lane::Flex, Lane::Batch]);
        assert!(Lanes::of([]).is_none());
        assert!(Lanes::default().allows(Lane::Batch));
        assert!(!Lanes::default().allows(Lane::Flex));
    }
}

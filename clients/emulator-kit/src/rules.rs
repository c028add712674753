//! The fault-plan vocabulary the emulators share and its engine: which
//! rows a row rule matches ([`RowMatch`]) and how often it applies
//! (`times`, counted per processed row), which batches a batch rule takes
//! (`nth`, uses left), and the sections every plan may name. The fault
//! kinds are each emulator's own. Pure; the README documents the JSON.

use std::collections::HashMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Which rows a rule is for. Every field given must match; none matches
/// every row. `custom_id…` are the names the OpenAI and Anthropic plans
/// used first; they mean the same as `key…`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RowMatch {
    /// The row key (Gemini's `key`, the others' `custom_id`), exactly.
    #[serde(alias = "custom_id")]
    pub key: Option<String>,
    /// A prefix of the row key.
    #[serde(alias = "custom_id_prefix")]
    pub key_prefix: Option<String>,
    /// A substring of the row key.
    #[serde(alias = "custom_id_contains")]
    pub key_contains: Option<String>,
    /// A regex searched in the row key (anchor it with `^…$`). With a
    /// capture group, `times` counts the text of the first group instead of
    /// the key (a client that derives keys per batch sends one row under
    /// several).
    #[serde(alias = "custom_id_regex")]
    pub key_regex: Option<String>,
    /// A substring of the row's prompt text.
    pub prompt_contains: Option<String>,
}

/// A row rule as the engine reads it.
pub trait RowRule {
    fn matcher(&self) -> &RowMatch;
    /// How many processings of each matching row it applies to; `None`:
    /// every one.
    fn times(&self) -> Option<u32>;
}

/// A row rule: `{"match": …, "fault": …, "times": n}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row<F> {
    #[serde(rename = "match")]
    pub matcher: RowMatch,
    pub fault: F,
    #[serde(default)]
    pub times: Option<u32>,
}

impl<F> RowRule for Row<F> {
    fn matcher(&self) -> &RowMatch {
        &self.matcher
    }
    fn times(&self) -> Option<u32> {
        self.times
    }
}

/// A batch rule's `match`: `nth` and what else the provider's batches carry.
pub trait BatchMatch {
    /// What the provider's match fields are checked against.
    type Batch<'a>;
    /// The n-th batch created (1-based); `None`: any.
    fn nth(&self) -> Option<u64>;
    /// Whether the provider's own match fields hold for `batch`.
    fn holds(&self, batch: &Self::Batch<'_>) -> bool;
}

/// A batch rule: `{"match": …, "fault": …, "times": n}` (default 1, so a
/// retried batch goes through).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRule<M, F> {
    #[serde(rename = "match")]
    pub matcher: M,
    pub fault: F,
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// A match on `nth` alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NthMatch {
    /// The n-th batch created (1-based); absent, any batch.
    pub nth: Option<u64>,
}

impl BatchMatch for NthMatch {
    type Batch<'a> = ();
    fn nth(&self) -> Option<u64> {
        self.nth
    }
    fn holds(&self, (): &()) -> bool {
        true
    }
}

/// The `create_answer_lost` section: the next `times` creates make the
/// batch, then lose the answer this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostAnswer {
    #[serde(default = "one")]
    pub times: u32,
    #[serde(default)]
    pub mode: LostMode,
}

/// How a create's answer is lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostMode {
    /// A 500 in the provider's error shape.
    #[default]
    Status500,
    /// The connection is cut before the body (headers of a 200 may arrive).
    Drop,
}

/// The `list_order` section: the order batch lists page in. Anthropic
/// documents newest first, OpenAI none; every order is offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    #[default]
    NewestFirst,
    OldestFirst,
    /// A fixed order (seeded), stable across pages.
    Shuffled,
}

impl ListOrder {
    /// Puts `items`, given in creation order, in this order; `id` names
    /// each (a shuffle is seeded by it and `seed`, so the same items keep
    /// their places page after page).
    pub fn arrange<T>(self, items: &mut [T], id: impl Fn(&T) -> &str, seed: u64) {
        match self {
            ListOrder::NewestFirst => items.reverse(),
            ListOrder::OldestFirst => {}
            ListOrder::Shuffled => {
                items.sort_by_cached_key(|item| crate::mix::hash_str(id(item)) ^ seed);
            }
        }
    }
}

/// Why the shared part of a plan does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("row rule {index}: invalid key_regex: {message}")]
    BadRegex { index: usize, message: String },
    #[error("batch rule {index}: nth is 1-based, 0 never matches")]
    ZeroNth { index: usize },
    #[error("{field} must be a share from 0 to 1")]
    BadShare { field: &'static str },
}

/// Row rules compiled, with how often each row has met its rule.
#[derive(Debug)]
pub struct RowRules<R> {
    rules: Vec<R>,
    regexes: Vec<Option<Regex>>,
    processed: HashMap<String, u32>,
}

impl<R: RowRule> RowRules<R> {
    pub fn compile(rules: Vec<R>) -> Result<Self, RuleError> {
        let regexes = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                rule.matcher()
                    .key_regex
                    .as_deref()
                    .map(Regex::new)
                    .transpose()
                    .map_err(|e| RuleError::BadRegex {
                        index,
                        message: e.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rules,
            regexes,
            processed: HashMap::new(),
        })
    }

    /// The rule deciding one row being processed now: the first that
    /// matches, if it still applies to this row (its `times` count the
    /// processings of the row, across batches).
    pub fn decide(&mut self, key: &str, prompt: &str) -> Option<&R> {
        let (rule, regex) = self
            .rules
            .iter()
            .zip(&self.regexes)
            .find(|(rule, regex)| row_matches(rule.matcher(), regex.as_ref(), key, prompt))?;
        let counted = regex
            .as_ref()
            .and_then(|r| r.captures(key)?.get(1))
            .map_or(key, |g| g.as_str());
        let seen = self.processed.entry(counted.to_owned()).or_insert(0);
        let before = *seen;
        *seen += 1;
        rule.times().is_none_or(|t| before < t).then_some(rule)
    }
}

fn row_matches(m: &RowMatch, regex: Option<&Regex>, key: &str, prompt: &str) -> bool {
    m.key.as_deref().is_none_or(|k| k == key)
        && m.key_prefix.as_deref().is_none_or(|p| key.starts_with(p))
        && m.key_contains.as_deref().is_none_or(|s| key.contains(s))
        && regex.is_none_or(|r| r.is_match(key))
        && m.prompt_contains
            .as_deref()
            .is_none_or(|s| prompt.contains(s))
}

/// Batch rules with the uses each has had.
#[derive(Debug)]
pub struct BatchRules<M, F> {
    rules: Vec<BatchRule<M, F>>,
    uses: Vec<u32>,
}

impl<M: BatchMatch, F> BatchRules<M, F> {
    pub fn compile(rules: Vec<BatchRule<M, F>>) -> Result<Self, RuleError> {
        if let Some(index) = rules.iter().position(|r| r.matcher.nth() == Some(0)) {
            return Err(RuleError::ZeroNth { index });
        }
        Ok(Self {
            uses: vec![0; rules.len()],
            rules,
        })
    }

    /// The fault of the `nth` batch created: the first rule that matches
    /// and has uses left, which uses one up.
    pub fn decide(&mut self, nth: u64, batch: &M::Batch<'_>) -> Option<&F> {
        let index = self
            .rules
            .iter()
            .zip(&self.uses)
            .position(|(rule, &used)| {
                used < rule.times
                    && rule.matcher.nth().is_none_or(|n| n == nth)
                    && rule.matcher.holds(batch)
            })?;
        self.uses[index] += 1;
        Some(&self.rules[index].fault)
    }
}

/// Checks a plan's share (`finished_on_cancel`, …) is within 0..=1.
pub fn check_share(field: &'static str, share: f64) -> Result<(), RuleError> {
    if (0.0..=1.0).contains(&share) {
        Ok(())
    } else {
        Err(RuleError::BadShare { field })
    }
}

/// How many of `n` rows a share covers (rounded down).
pub fn share_of(share: f64, n: usize) -> usize {
    ((share * n as f64).floor() as usize).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(v: serde_json::Value) -> RowRules<Row<String>> {
        RowRules::compile(serde_json::from_value(v).unwrap()).unwrap()
    }

    fn fault(r: Option<&Row<String>>) -> Option<&str> {
        r.map(|r| r.fault.as_str())
    }

    // Invariant: the first matching rule decides, even when it no longer
    // applies; `times` counts the processings of each row.
    #[test]
    fn the_first_matching_rule_decides_and_wears_out_per_row() {
        let mut r = rows(json!([
            {"match": {"key_prefix": "t"}, "fault": "transient", "times": 2},
            {"match": {"key": "t1"}, "fault": "never reached"},
            {"match": {"key_contains": "mid"}, "fault": "contains"},
            {"match": {"key_regex": "^b\\d+$"}, "fault": "regex"},
            {"match": {"key": "z", "prompt_contains": "x"}, "fault": "both"}
        ]));
        assert_eq!(fault(r.decide("t1", "")), Some("transient"));
        assert_eq!(fault(r.decide("t2", "")), Some("transient"));
        assert_eq!(fault(r.decide("t1", "")), Some("transient"));
        assert_eq!(fault(r.decide("t1", "")), None);
        assert_eq!(fault(r.decide("a-mid-b", "")), Some("contains"));
        assert_eq!(fault(r.decide("b12", "")), Some("regex"));
        assert_eq!(fault(r.decide("b12c", "")), None);
        assert_eq!(fault(r.decide("z", "y")), None);
        assert_eq!(fault(r.decide("z", "x")), Some("both"));
    }

    // Invariant: the OpenAI and Anthropic names mean the same as `key…`.
    #[test]
    fn custom_id_names_are_aliases_of_key_names() {
        let a: RowMatch = serde_json::from_value(json!({
            "custom_id": "a", "custom_id_prefix": "b", "custom_id_contains": "c", "custom_id_regex": "d"
        }))
        .unwrap();
        let b: RowMatch = serde_json::from_value(json!({
            "key": "a", "key_prefix": "b", "key_contains": "c", "key_regex": "d"
        }))
        .unwrap();
        assert_eq!(a, b);
        assert!(serde_json::from_value::<RowMatch>(json!({"keys": "a"})).is_err());
    }

    // Invariant: with a capture group, `times` counts the captured text,
    // whichever key carries it.
    #[test]
    fn times_count_the_captured_text_across_keys() {
        let mut r = rows(json!([
            {"match": {"custom_id_regex": "^[0-9a-f]{4}-(flaky-.*)$"}, "fault": "err", "times": 1}
        ]));
        assert!(r.decide("aaaa-flaky-1", "").is_some());
        assert!(r.decide("bbbb-flaky-1", "").is_none(), "the same row again");
        assert!(r.decide("bbbb-flaky-2", "").is_some());
        assert!(r.decide("bbbb-steady-1", "").is_none());
    }

    #[test]
    fn batch_rules_match_nth_and_their_own_fields_and_are_used_up() {
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(default)]
        struct Named {
            nth: Option<u64>,
            name_contains: Option<String>,
        }
        impl BatchMatch for Named {
            type Batch<'a> = &'a str;
            fn nth(&self) -> Option<u64> {
                self.nth
            }
            fn holds(&self, name: &&str) -> bool {
                self.name_contains
                    .as_deref()
                    .is_none_or(|s| name.contains(s))
            }
        }
        let rules: Vec<BatchRule<Named, String>> = serde_json::from_value(json!([
            {"match": {"nth": 2}, "fault": "second"},
            {"match": {"name_contains": "night"}, "fault": "nightly", "times": 2}
        ]))
        .unwrap();
        let mut b = BatchRules::compile(rules).unwrap();
        assert_eq!(b.decide(1, &"day"), None);
        assert_eq!(b.decide(2, &"nightly").map(String::as_str), Some("second"));
        assert_eq!(b.decide(3, &"nightly").map(String::as_str), Some("nightly"));
        assert_eq!(b.decide(4, &"nightly").map(String::as_str), Some("nightly"));
        assert_eq!(b.decide(5, &"nightly"), None);
    }

    #[test]
    fn bad_rules_are_refused() {
        let bad: Vec<Row<String>> =
            serde_json::from_value(json!([{"match": {"key_regex": "("}, "fault": "x"}])).unwrap();
        assert!(matches!(
            RowRules::compile(bad),
            Err(RuleError::BadRegex { index: 0, .. })
        ));
        let zero: Vec<BatchRule<NthMatch, String>> = serde_json::from_value(
            json!([{"match": {}, "fault": "a"}, {"match": {"nth": 0}, "fault": "b"}]),
        )
        .unwrap();
        assert!(matches!(
            BatchRules::compile(zero),
            Err(RuleError::ZeroNth { index: 1 })
        ));
        assert!(check_share("s", 1.5).is_err());
        assert!(check_share("s", 0.5).is_ok());
    }

    // Invariant: a share never covers more rows than it says.
    #[test]
    fn shares_round_down() {
        assert_eq!(share_of(0.5, 5), 2);
        assert_eq!(share_of(1.0, 5), 5);
        assert_eq!(share_of(0.0, 5), 0);
    }

    // Invariant: newest first reverses creation order, oldest first keeps
    // it, a shuffle is neither and is the same on every call.
    #[test]
    fn list_orders_arrange_items_in_creation_order() {
        let made: Vec<String> = (0..12).map(|i| format!("batch-{i:02}")).collect();
        let arranged = |order: ListOrder| {
            let mut items = made.clone();
            order.arrange(&mut items, String::as_str, 7);
            items
        };
        let newest = arranged(ListOrder::NewestFirst);
        assert_eq!(newest.first(), made.last());
        assert_eq!(arranged(ListOrder::OldestFirst), made);
        let shuffled = arranged(ListOrder::Shuffled);
        assert_ne!(shuffled, made);
        assert_ne!(shuffled, newest);
        assert_eq!(shuffled, arranged(ListOrder::Shuffled));
    }

    #[test]
    fn a_lost_answer_defaults_to_once_with_a_500() {
        let lost: LostAnswer = serde_json::from_value(json!({})).unwrap();
        assert_eq!(
            lost,
            LostAnswer {
                times: 1,
                mode: LostMode::Status500
            }
        );
    }
}

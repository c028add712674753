//! Proving that a batch exists, or that it was never made, without relying
//! on anything the provider did not promise.
//!
//! Batch creation is not idempotent and its answer can be lost (at every
//! provider). The only way to learn whether a create made a batch is the
//! account's batch list, looked through for the job's tag (Gemini's
//! display name, OpenAI's metadata). No provider documents the list's
//! order (and none takes a filter by tag), and lists are eventually
//! consistent: a new batch shows up after a lag nobody bounds. So:
//!
//! - every search reads **every page**, whatever their order; presence is
//!   proven by the name;
//! - absence is proven only by a **witness**: a complete search that lists
//!   some batch created after the attempt (later than the attempt plus the
//!   request timeout and the clock skew allowed between tally and the
//!   provider). It assumes one thing, stated here: the list shows batches
//!   in the order they were made (a batch listed implies every batch made
//!   before it is listed), whatever order it pages them in and however
//!   long it lags. A witness is any batch of the project: another job's,
//!   or, when none comes, a one-request *probe* batch the worker makes
//!   itself (a few tokens, never a row; the janitor deletes it);
//! - a search that cannot read the whole list (more than
//!   [`MAX_LIST_PAGES`] pages) proves nothing: the rows wait, and the
//!   janitor keeps the list short by deleting reconciled batches.
//! - where batches carry no tag (Anthropic), presence and absence are
//!   proven by results: every batch listed as made in the attempt's window
//!   is read once it ended (its results' custom_ids carry the job's mark,
//!   [`crate::tags::custom_id`]); while any of them has not ended, nothing
//!   is proven and the rows wait, however long that takes.
//!
//! Pure: the caller lists the pages and passes the clock.

use std::time::{Duration, SystemTime};

use crate::provider::Listed;

/// Most pages (of up to 100 batches) one search reads.
pub const MAX_LIST_PAGES: usize = 1000;

/// What a search of the whole list found so far.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The batch tagged with one of the names searched for.
    pub found: Option<Listed>,
    /// The latest `createTime` of any batch listed.
    pub newest: Option<SystemTime>,
    /// Batches listed.
    pub listed: usize,
    /// Pages read.
    pub pages: usize,
    /// Untagged batches made in [`Listing::window`] (or at a time not
    /// given): whose they are shows only in their results.
    pub untagged: Vec<Listed>,
    /// Of those, batches not ended yet: nothing says whose they are.
    pub undecided: usize,
    /// When a batch made by the attempt may say it was made.
    window: Option<(SystemTime, SystemTime)>,
}

impl Listing {
    /// A listing that also keeps the untagged batches made between `from`
    /// and `to` (see [`Bounds::made_between`]).
    pub fn within((from, to): (SystemTime, SystemTime)) -> Self {
        Self {
            window: Some((from, to)),
            ..Self::default()
        }
    }

    /// Takes in one page of the batch list, looking for any of `names`
    /// among the batches' tags.
    pub fn add_page(&mut self, page: &[Listed], names: &[String]) {
        self.pages += 1;
        for batch in page {
            self.listed += 1;
            let tag = batch.tag.as_deref();
            if self.found.is_none() && names.iter().any(|n| Some(n.as_str()) == tag) {
                self.found = Some(batch.clone());
            }
            if let Some(created) = batch.create_time {
                self.newest = Some(self.newest.map_or(created, |n| n.max(created)));
            }
            if batch.tag.is_none()
                && self.window.is_some_and(|(from, to)| {
                    batch.create_time.is_none_or(|t| from <= t && t <= to)
                })
            {
                self.untagged.push(batch.clone());
            }
        }
    }
}

/// What a complete search proves about a create attempted at `attempted`.
#[derive(Debug, Clone, PartialEq)]
pub enum Proof {
    /// The batch exists.
    Made(Listed),
    /// No batch of that name, and the list already shows a batch made
    /// after the attempt: none was made.
    NeverMade,
    /// Nothing proven yet: wait (and maybe make a probe).
    Unproven,
}

/// The bounds of a proof.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The longest a create request may take (the HTTP timeout).
    pub request: Duration,
    /// How far the provider's clock may be from tally's.
    pub skew: Duration,
    /// The least time after the attempt before absence is concluded.
    pub window: Duration,
}

impl Bounds {
    /// The latest time a batch made by the attempt can carry as its
    /// `createTime`: a batch listed with a later one is a witness.
    pub fn witness_after(&self, attempted: SystemTime) -> SystemTime {
        attempted + self.request + self.skew
    }

    /// When a probe made by this worker is sure to be a witness (its
    /// `createTime` later than [`Bounds::witness_after`] even if the
    /// provider's clock is behind by the skew).
    pub fn probe_from(&self, attempted: SystemTime) -> SystemTime {
        self.witness_after(attempted) + self.skew
    }

    /// The times a batch made by the attempt can carry as its
    /// `createTime`, first and last.
    pub fn made_between(&self, attempted: SystemTime) -> (SystemTime, SystemTime) {
        (attempted - self.skew, self.witness_after(attempted))
    }
}

/// Judges a complete listing, searched at `now`, of a create attempted at
/// `attempted`.
pub fn judge(listing: Listing, attempted: SystemTime, now: SystemTime, bounds: &Bounds) -> Proof {
    if let Some(batch) = listing.found {
        return Proof::Made(batch);
    }
    if listing.undecided > 0 {
        return Proof::Unproven;
    }
    let witnessed = listing
        .newest
        .is_some_and(|t| t > bounds.witness_after(attempted));
    if witnessed && now >= attempted + bounds.window {
        Proof::NeverMade
    } else {
        Proof::Unproven
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn op(name: &str, created: &str) -> Value {
        json!({"name": format!("batches/{name}"),
               "metadata": {"displayName": name, "createTime": created}})
    }

    /// A Gemini list page, as the provider layer lists it.
    fn page(page: Value) -> Vec<Listed> {
        crate::provider::gemini::listed(&page).items
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn stamp(secs: u64) -> String {
        humantime::format_rfc3339(at(secs)).to_string()
    }

    const BOUNDS: Bounds = Bounds {
        request: Duration::from_secs(60),
        skew: Duration::from_secs(30),
        window: Duration::from_secs(120),
    };

    // Invariant: presence is proven by the name on any page, in any order;
    // the newest createTime covers every page.
    #[test]
    fn every_page_counts_whatever_the_order() {
        let names = vec!["tally/l/j2".to_string()];
        let mut l = Listing::default();
        l.add_page(
            &page(json!({"operations": [op("a", &stamp(5)), op("b", &stamp(500))]})),
            &names,
        );
        l.add_page(
            &page(json!({"operations": [op("tally/l/j2", &stamp(1))]})),
            &names,
        );
        l.add_page(&page(json!({})), &names);
        assert_eq!(l.listed, 3);
        assert_eq!(l.pages, 3);
        assert_eq!(l.newest, Some(at(500)));
        assert_eq!(l.found.as_ref().unwrap().tag.as_deref(), Some("tally/l/j2"));
        assert!(matches!(judge(l, at(0), at(0), &BOUNDS), Proof::Made(_)));
    }

    // Invariant: absence needs a witness made after the attempt plus the
    // request time and the skew, and the window past; without a witness
    // nothing is proven, however long ago the attempt was.
    #[test]
    fn absence_needs_a_witness_and_the_window() {
        let names = vec!["tally/l/j9".to_string()];
        let listing = |newest: u64| {
            let mut l = Listing::default();
            l.add_page(
                &page(json!({"operations": [op("x", &stamp(newest))]})),
                &names,
            );
            l
        };
        let attempted = at(1000);
        // The latest createTime the attempt's own batch could carry: 1090.
        assert_eq!(BOUNDS.witness_after(attempted), at(1090));
        assert_eq!(BOUNDS.probe_from(attempted), at(1120));
        assert_eq!(
            judge(listing(1090), attempted, at(100_000), &BOUNDS),
            Proof::Unproven,
            "a batch of the attempt's own time proves nothing"
        );
        assert_eq!(
            judge(listing(1091), attempted, at(1119), &BOUNDS),
            Proof::Unproven,
            "the window has not passed"
        );
        assert_eq!(
            judge(listing(1091), attempted, at(1120), &BOUNDS),
            Proof::NeverMade
        );
        assert_eq!(
            judge(Listing::default(), attempted, at(1_000_000), &BOUNDS),
            Proof::Unproven,
            "an empty list proves nothing"
        );
    }

    // Invariant: untagged batches made in the attempt's window are kept
    // for their results to be read, those made outside it are not, and
    // while one of them has not ended nothing is proven, witness or not.
    #[test]
    fn untagged_batches_in_the_window_hold_the_proof() {
        let attempted = at(1000);
        let untagged = |name: &str, secs: u64, done: bool| Listed {
            name: format!("batches/{name}"),
            tag: None,
            create_time: Some(at(secs)),
            done,
        };
        let mut l = Listing::within(BOUNDS.made_between(attempted));
        l.add_page(
            &[
                untagged("late", 2000, true),
                untagged("ours?", 1050, false),
                untagged("early", 900, true),
                untagged("edge", 970, true),
            ],
            &[],
        );
        let kept: Vec<&str> = l.untagged.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(kept, ["batches/ours?", "batches/edge"]);
        l.undecided = 1;
        assert_eq!(
            judge(l.clone(), attempted, at(100_000), &BOUNDS),
            Proof::Unproven
        );
        l.undecided = 0;
        assert_eq!(
            judge(l, attempted, at(100_000), &BOUNDS),
            Proof::NeverMade,
            "the window's batches ended and none was the job's: a witness decides"
        );
    }
}

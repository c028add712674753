//! Proving that a batch exists, or that it was never made, without relying
//! on anything the provider did not promise, at a bounded cost.
//!
//! Batch creation is not idempotent and its answer can be lost (at every
//! provider). The only way to learn whether a create made a batch is the
//! account's batch list, looked through for the job's tag (Gemini's
//! display name, OpenAI's metadata). No provider takes a filter by tag,
//! and lists are eventually consistent: a new batch shows up after a lag,
//! and not always in the order the batches were made. So:
//!
//! - presence is proven by the name, on any page, in any order;
//! - a search reads pages until the list ends, or until the list itself
//!   bounds it: while every batch read so far was made no later than the
//!   one before it (the list pages **newest first**, as OpenAI and
//!   Anthropic list), a read that has gone [`PAST_WINDOW_PAGES`] pages
//!   beyond the first batch made before the attempt's window has read
//!   every batch the attempt could have made. One batch out of that order
//!   and the search no longer trusts it: it reads on, to the end or to
//!   `--max-list-pages` pages ([`Listing::cut`]). A list that is both
//!   longer than that and not newest first (OpenAI batches are never
//!   deleted) proves nothing: [`Proof::Unbounded`], reported to the
//!   operator while the rows wait;
//! - absence is proven only by a **witness** and the **window**: a search
//!   that lists some batch made after the attempt (later than the attempt
//!   plus the request timeout and the clock skew allowed between tally and
//!   the provider), and that began at least `--create-lookup-window` after
//!   the latest time the attempt's batch could say it was made. The window
//!   is the longest a new batch may take to show in the list, in whatever
//!   order the list fills; the witness covers a list that fills in
//!   creation order but lags longer than that. A witness is any batch of
//!   the project: another job's, or, when none comes, a one-request
//!   *probe* batch the worker makes itself (a few tokens, never a row; at
//!   most [`MAX_PROBES`] per search, and none while one this worker made
//!   for the attempt may still be on its way to the list: [`probe_due`]);
//! - where batches carry no tag (Anthropic), presence and absence are
//!   proven by results: every batch listed as made in the attempt's window
//!   is read once it ended (its results' custom_ids carry the job's mark,
//!   [`crate::tags::custom_id`]); while any of them has not ended, nothing
//!   is proven and the rows wait, however long that takes.
//!
//! When in doubt the rows wait; what is bounded is what the wait costs
//! (pages read, probes made), and a wait past its bound is reported
//! ([`unresolved`]).
//!
//! Pure: the caller lists the pages and passes the clock.

use std::time::{Duration, SystemTime};

use crate::provider::Listed;

/// Most pages (of up to 100 batches) one search reads, unless
/// `--max-list-pages` says otherwise.
pub const MAX_LIST_PAGES: usize = 1000;

/// Pages a search reads, in a newest-first list, beyond the page where it
/// first met a batch made before the attempt's window.
pub const PAST_WINDOW_PAGES: usize = 1;

/// Most probe batches one search makes.
pub const MAX_PROBES: usize = 3;

/// What a search of the whole list found so far.
#[derive(Debug, Clone)]
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
    /// The search stopped at its page bound, before the list's end and
    /// before the list's order bounded it.
    pub cut: bool,
    /// Every batch read so far was made no later than the one before it.
    ordered: bool,
    /// The `createTime` of the last batch read.
    last: Option<SystemTime>,
    /// Pages read, all in order, since the first batch made before the
    /// window.
    below: usize,
    /// When a batch made by the attempt may say it was made.
    window: Option<(SystemTime, SystemTime)>,
    /// Whether untagged batches of the window are kept.
    keeps_untagged: bool,
}

impl Default for Listing {
    fn default() -> Self {
        Self {
            found: None,
            newest: None,
            listed: 0,
            pages: 0,
            untagged: Vec::new(),
            undecided: 0,
            cut: false,
            ordered: true,
            last: None,
            below: 0,
            window: None,
            keeps_untagged: false,
        }
    }
}

impl Listing {
    /// A listing for a create whose batch may say it was made between
    /// `from` and `to` (see [`Bounds::made_between`]): a newest-first list
    /// is read only down to a little past `from`.
    pub fn tagged(window: (SystemTime, SystemTime)) -> Self {
        Self {
            window: Some(window),
            ..Self::default()
        }
    }

    /// [`Listing::tagged`], also keeping the untagged batches made in the
    /// window (or at a time not given).
    pub fn within(window: (SystemTime, SystemTime)) -> Self {
        Self {
            keeps_untagged: true,
            ..Self::tagged(window)
        }
    }

    /// Whether the list's order already bounds the search: every batch
    /// read so far came newest first, and the read went
    /// [`PAST_WINDOW_PAGES`] pages past the first batch made before the
    /// window. No later page can hold a batch made in it.
    pub fn bounded(&self) -> bool {
        self.ordered && self.below > PAST_WINDOW_PAGES
    }

    /// Whether every batch read so far came newest first.
    pub fn newest_first(&self) -> bool {
        self.ordered
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
            match batch.create_time {
                Some(created) => {
                    self.newest = Some(self.newest.map_or(created, |n| n.max(created)));
                    if self.last.is_some_and(|last| created > last) {
                        self.ordered = false;
                    }
                    self.last = Some(created);
                }
                // A batch of no time cannot be placed: order bounds nothing.
                None => self.ordered = false,
            }
            if self.keeps_untagged
                && batch.tag.is_none()
                && self.window.is_some_and(|(from, to)| {
                    batch.create_time.is_none_or(|t| from <= t && t <= to)
                })
            {
                self.untagged.push(batch.clone());
            }
        }
        let past = self
            .window
            .is_some_and(|(from, _)| self.last.is_some_and(|last| last < from));
        if self.ordered && (past || self.below > 0) {
            self.below += 1;
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
    /// The list is longer than a search may read and not in an order that
    /// bounds it: nothing can be proven; the rows wait and the operator
    /// is told.
    Unbounded,
}

/// The bounds of a proof.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The longest a create request may take (the HTTP timeout).
    pub request: Duration,
    /// How far the provider's clock may be from tally's.
    pub skew: Duration,
    /// The longest a new batch may take to show in the list (in whatever
    /// order the list fills): absence is concluded only by a search begun
    /// this long after [`Bounds::witness_after`].
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
    if listing.cut {
        return Proof::Unbounded;
    }
    if listing.undecided > 0 {
        return Proof::Unproven;
    }
    let witnessed = listing
        .newest
        .is_some_and(|t| t > bounds.witness_after(attempted));
    if witnessed && now >= bounds.witness_after(attempted) + bounds.window {
        Proof::NeverMade
    } else {
        Proof::Unproven
    }
}

/// Whether a search of a create attempted at `attempted`, searching at
/// `now`, makes a probe: it has made fewer than [`MAX_PROBES`], a probe
/// made now is sure to be a witness, and no probe this worker made
/// (`last_probe`, by any search) already is one that may still be on its
/// way to the list (made less than the window ago).
pub fn probe_due(
    attempted: SystemTime,
    now: SystemTime,
    bounds: &Bounds,
    made: usize,
    last_probe: Option<SystemTime>,
) -> bool {
    let from = bounds.probe_from(attempted);
    let pending = last_probe.is_some_and(|p| {
        p >= from
            && now.duration_since(p).unwrap_or_default() < bounds.window.max(Duration::from_secs(1))
    });
    made < MAX_PROBES && now >= from && !pending
}

/// Why a search of a create attempted at `attempted` is past its bound at
/// `now` and must be reported to the operator (`None`: not yet): the list
/// cannot be read within the page bound; or the search made its last probe
/// and no witness came within the window after it; or it has run longer
/// than `alarm`.
pub fn unresolved(
    proof: &Proof,
    attempted: SystemTime,
    now: SystemTime,
    bounds: &Bounds,
    probes: (usize, Option<SystemTime>),
    alarm: Duration,
) -> Option<&'static str> {
    let (made, last) = probes;
    let waited = |since: SystemTime, d: Duration| now.duration_since(since).is_ok_and(|e| e >= d);
    match proof {
        Proof::Made(_) | Proof::NeverMade => None,
        Proof::Unbounded => Some(
            "the batch list is longer than --max-list-pages pages and not listed newest first: absence cannot be proven within the bound",
        ),
        Proof::Unproven if made >= MAX_PROBES && last.is_some_and(|p| waited(p, bounds.window)) => {
            Some(
                "no batch made after the attempt is listed, and the search has made its last probe",
            )
        }
        Proof::Unproven if waited(attempted, alarm) => {
            Some("the search has run longer than --create-search-alarm")
        }
        Proof::Unproven => None,
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
            judge(listing(1091), attempted, at(1209), &BOUNDS),
            Proof::Unproven,
            "the window (the longest list lag) has not passed since the attempt's batch could have been made"
        );
        assert_eq!(
            judge(listing(1091), attempted, at(1210), &BOUNDS),
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
        assert!(!l.bounded(), "not newest first: order bounds nothing");
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

    fn batch(name: &str, secs: u64) -> Listed {
        Listed {
            name: format!("batches/{name}"),
            tag: Some(name.to_string()),
            create_time: Some(at(secs)),
            done: true,
        }
    }

    // Invariant: a newest-first list bounds the search: once the read went
    // a page past the first batch made before the window (all in order),
    // no later page can hold the attempt's batch, so reading stops.
    #[test]
    fn a_newest_first_list_is_read_only_past_the_window() {
        let attempted = at(1000);
        let mut l = Listing::tagged(BOUNDS.made_between(attempted));
        l.add_page(&[batch("w", 1200), batch("a", 1100)], &[]);
        assert!(!l.bounded());
        l.add_page(&[batch("b", 1000), batch("c", 960)], &[]);
        assert!(!l.bounded(), "the page that crosses the window's start");
        l.add_page(&[batch("d", 900), batch("e", 800)], &[]);
        assert!(l.bounded(), "one page past it");
        assert!(l.newest_first());
    }

    // Invariant: one batch out of newest-first order and the order is no
    // longer trusted: the search reads on whatever it met.
    #[test]
    fn a_list_out_of_order_is_never_bounded_by_its_order() {
        let mut l = Listing::tagged(BOUNDS.made_between(at(1000)));
        l.add_page(&[batch("a", 500), batch("b", 400)], &[]);
        l.add_page(&[batch("c", 1500), batch("d", 300)], &[]);
        l.add_page(&[batch("e", 200), batch("f", 100)], &[]);
        assert!(!l.newest_first());
        assert!(!l.bounded());
        let mut l = Listing::tagged(BOUNDS.made_between(at(1000)));
        let mut untimed = batch("u", 0);
        untimed.create_time = None;
        l.add_page(&[untimed, batch("a", 10)], &[]);
        l.add_page(&[batch("b", 5)], &[]);
        l.add_page(&[batch("c", 1)], &[]);
        assert!(!l.bounded(), "a batch without a time cannot be placed");
    }

    // Invariant: a search cut at its page bound proves nothing, even with
    // a witness and the window past; the batch found on a page read still
    // counts.
    #[test]
    fn a_cut_search_is_unbounded_unless_it_found_the_batch() {
        let attempted = at(1000);
        let mut l = Listing::tagged(BOUNDS.made_between(attempted));
        l.add_page(&[batch("w", 5000)], &["tally/l/j".to_string()]);
        l.cut = true;
        assert_eq!(
            judge(l.clone(), attempted, at(100_000), &BOUNDS),
            Proof::Unbounded
        );
        l.add_page(&[batch("tally/l/j", 1001)], &["tally/l/j".to_string()]);
        assert!(matches!(
            judge(l, attempted, at(100_000), &BOUNDS),
            Proof::Made(_)
        ));
    }

    // Invariant: a search makes at most MAX_PROBES probes, none before a
    // probe is sure to be a witness, and none while a probe this worker
    // made for the attempt may still be on its way to the list.
    #[test]
    fn probes_are_few_and_shared() {
        let attempted = at(1000);
        let from = BOUNDS.probe_from(attempted);
        assert!(
            !probe_due(attempted, at(1119), &BOUNDS, 0, None),
            "too early"
        );
        assert!(probe_due(attempted, from, &BOUNDS, 0, None));
        assert!(
            probe_due(attempted, from, &BOUNDS, 0, Some(at(1100))),
            "a probe made before the attempt's window witnesses nothing"
        );
        assert!(
            !probe_due(attempted, at(1200), &BOUNDS, 1, Some(at(1130))),
            "one of ours may still be listed"
        );
        assert!(probe_due(attempted, at(1250), &BOUNDS, 1, Some(at(1130))));
        assert!(!probe_due(attempted, at(9000), &BOUNDS, MAX_PROBES, None));
    }

    // Invariant: a search is reported when the list cannot be read within
    // its bound, when its probes are spent and no witness came, or past
    // the alarm; never once it proved something.
    #[test]
    fn a_search_past_its_bound_is_reported() {
        let attempted = at(1000);
        let alarm = Duration::from_secs(3600);
        let r = |proof: Proof, now: u64, probes| {
            unresolved(&proof, attempted, at(now), &BOUNDS, probes, alarm)
        };
        assert!(r(Proof::Unbounded, 1001, (0, None)).is_some());
        assert_eq!(r(Proof::Unproven, 1300, (1, Some(at(1130)))), None);
        assert_eq!(r(Proof::Unproven, 1300, (MAX_PROBES, Some(at(1250)))), None);
        assert!(r(Proof::Unproven, 1400, (MAX_PROBES, Some(at(1250)))).is_some());
        assert!(
            r(Proof::Unproven, 4600, (0, None)).is_some(),
            "past the alarm"
        );
        assert_eq!(r(Proof::NeverMade, 100_000, (MAX_PROBES, None)), None);
    }
}

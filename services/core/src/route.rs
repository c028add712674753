//! The critical path: which lane each runnable row takes so that its chain
//! finishes by the ledger's deadline at the least cost, and when the ledger
//! is forecast to finish.
//!
//! A row's *depth* is the number of links in the longest chain of
//! unfinished rows starting at it (1 for a row no unfinished row depends
//! on). A chain of depth `d` whose links each take a lane's turnaround `t`
//! takes `d × t`. With `left` before the deadline, a lane can finish chains
//! of depth up to `left / t`: its *reach*. Each row takes the cheapest
//! allowed lane whose reach covers its depth (batch before flex at the same
//! price: wide, shallow work stays in batch); a row no allowed lane can
//! finish in time takes the fastest one, and the deadline is at risk. As
//! links finish, the depth behind each runnable row shrinks and the plan is
//! made again at every claim: a chain's head may go by flex while its tail,
//! near enough to finish by batch, goes by batch.
//!
//! Without a deadline every row stays in batch (as before lanes existed).
//! Pure: the time left and the forecasts are arguments.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lane::{Lane, Lanes};

/// The lanes in the order routing prefers them when they cost the same:
/// cheapest first, batch before flex (flex is sheddable).
const PREFERENCE: [Lane; 4] = [Lane::Batch, Lane::Flex, Lane::Standard, Lane::Priority];

/// How long one link takes in each lane: a forecast from the ledger's and
/// the account's history, or the configured prior before there is any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turnarounds {
    #[serde(with = "crate::millis")]
    pub batch: Duration,
    #[serde(with = "crate::millis")]
    pub flex: Duration,
    #[serde(with = "crate::millis")]
    pub standard: Duration,
    #[serde(with = "crate::millis")]
    pub priority: Duration,
}

impl Default for Turnarounds {
    /// The priors before any history: a batch of a real provider takes
    /// about an hour (often less, up to a day), flex about a minute
    /// ("minutes, best effort"), standard and priority seconds.
    fn default() -> Self {
        Self {
            batch: Duration::from_secs(3600),
            flex: Duration::from_secs(60),
            standard: Duration::from_secs(10),
            priority: Duration::from_secs(5),
        }
    }
}

impl Turnarounds {
    pub fn of(&self, lane: Lane) -> Duration {
        match lane {
            Lane::Batch => self.batch,
            Lane::Flex => self.flex,
            Lane::Standard => self.standard,
            Lane::Priority => self.priority,
        }
    }

    pub fn set(&mut self, lane: Lane, t: Duration) {
        match lane {
            Lane::Batch => self.batch = t,
            Lane::Flex => self.flex = t,
            Lane::Standard => self.standard = t,
            Lane::Priority => self.priority = t,
        }
    }
}

/// The deepest chain a lane finishes within `left`, one link after
/// another.
pub fn reach(left: Duration, turnaround: Duration) -> u32 {
    if turnaround.is_zero() {
        return u32::MAX;
    }
    u32::try_from(left.as_millis() / turnaround.as_millis().max(1)).unwrap_or(u32::MAX)
}

/// The lane a row of `depth` takes, and whether its chain still finishes
/// in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub lane: Lane,
    pub in_time: bool,
}

/// The lanes `allowed` (of `offered`, the provider's), in preference order.
fn candidates(allowed: &Lanes, offered: impl Fn(Lane) -> bool) -> Vec<Lane> {
    PREFERENCE
        .into_iter()
        .filter(|l| allowed.allows(*l) && offered(*l))
        .collect()
}

/// Where a row of `depth` goes with `left` before the deadline (`None`: no
/// deadline, batch if allowed).
pub fn choose(
    depth: u32,
    left: Option<Duration>,
    allowed: &Lanes,
    offered: impl Fn(Lane) -> bool,
    t: &Turnarounds,
) -> Choice {
    let lanes = candidates(allowed, offered);
    let Some(left) = left else {
        let lane = lanes.first().copied().unwrap_or(Lane::Batch);
        return Choice {
            lane,
            in_time: true,
        };
    };
    if let Some(lane) = lanes.iter().find(|l| reach(left, t.of(**l)) >= depth) {
        return Choice {
            lane: *lane,
            in_time: true,
        };
    }
    // Nothing allowed finishes it: the fastest lane loses the least.
    let fastest = lanes
        .iter()
        .min_by_key(|l| t.of(**l))
        .copied()
        .unwrap_or(Lane::Batch);
    Choice {
        lane: fastest,
        in_time: false,
    }
}

/// The depths a claim for `lane` takes now (inclusive), or `None` when it
/// takes none: the band of depths for which [`choose`] picks `lane`.
pub fn band(
    lane: Lane,
    left: Option<Duration>,
    allowed: &Lanes,
    offered: impl Fn(Lane) -> bool + Copy,
    t: &Turnarounds,
) -> Option<(u32, u32)> {
    let lanes = candidates(allowed, offered);
    if !lanes.contains(&lane) {
        return None;
    }
    let Some(left) = left else {
        return (lanes.first() == Some(&lane)).then_some((0, u32::MAX));
    };
    // Each lane in turn takes the depths the lanes before it cannot reach,
    // up to its own reach; the fastest also takes every depth past all.
    let mut low = 0u32;
    let fastest = lanes.iter().min_by_key(|l| t.of(**l)).copied();
    for l in &lanes {
        let high = reach(left, t.of(*l));
        if *l == lane {
            let high = if Some(lane) == fastest {
                u32::MAX
            } else {
                high
            };
            return (high >= low).then_some((low, high));
        }
        low = low.max(high.saturating_add(1));
    }
    None
}

/// What finishing the unfinished rows takes under one plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// From now.
    pub duration: Duration,
    /// Whether it is within the deadline (always, without one).
    pub in_time: bool,
}

/// When the deepest chain (`depth` links) finishes with `left` before the
/// deadline, each link routed as [`choose`] routes it when it runs.
pub fn finish(
    depth: u32,
    left: Option<Duration>,
    allowed: &Lanes,
    offered: impl Fn(Lane) -> bool + Copy,
    t: &Turnarounds,
) -> Forecast {
    let mut elapsed = Duration::ZERO;
    for remaining in (1..=depth).rev() {
        let left_now = left.map(|l| l.saturating_sub(elapsed));
        let choice = choose(remaining, left_now, allowed, offered, t);
        elapsed += t.of(choice.lane);
    }
    Forecast {
        duration: elapsed,
        in_time: left.is_none_or(|l| elapsed <= l),
    }
}

/// Unfinished rows of one model and depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    pub model: String,
    pub depth: u32,
    pub rows: u64,
    /// Their estimated input tokens.
    pub input_tokens: i64,
}

/// What a plan forecasts for the unfinished rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub finish: Forecast,
    pub cost_usd: f64,
    /// Rows routed to each lane (each row as its depth routes it now).
    pub rows_by_lane: Vec<(Lane, u64)>,
}

/// The forecast of routing `work` as [`choose`] does (`all_batch`: as if
/// only batch were allowed): when its deepest chain finishes, and what
/// its rows cost at `price` (a model's price in a lane), each row
/// estimated at its input tokens and `output_per_row` output tokens.
pub fn plan(
    work: &[Work],
    left: Option<Duration>,
    allowed: &Lanes,
    offered: impl Fn(Lane) -> bool + Copy,
    t: &Turnarounds,
    price: impl Fn(&str, Lane) -> Option<crate::price::Price>,
    output_per_row: i64,
) -> Plan {
    let deepest = work.iter().map(|w| w.depth).max().unwrap_or(0);
    let finish = finish(deepest, left, allowed, offered, t);
    let mut cost = 0.0;
    let mut by_lane: Vec<(Lane, u64)> = Vec::new();
    for w in work {
        let lane = choose(w.depth, left, allowed, offered, t).lane;
        if let Some(p) = price(&w.model, lane) {
            let output = output_per_row.saturating_mul(i64::try_from(w.rows).unwrap_or(i64::MAX));
            cost = crate::money::usd(cost + p.cost(w.input_tokens, output, 0, 0));
        }
        match by_lane.iter_mut().find(|(l, _)| *l == lane) {
            Some((_, n)) => *n += w.rows,
            None => by_lane.push((lane, w.rows)),
        }
    }
    by_lane.sort();
    Plan {
        finish,
        cost_usd: cost,
        rows_by_lane: by_lane,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(l: &[Lane]) -> Lanes {
        Lanes::of(l.iter().copied()).unwrap()
    }

    fn t(batch: u64, flex: u64) -> Turnarounds {
        Turnarounds {
            batch: Duration::from_secs(batch),
            flex: Duration::from_secs(flex),
            standard: Duration::from_secs(1),
            priority: Duration::from_millis(500),
        }
    }

    const ALL: fn(Lane) -> bool = |_| true;

    // Invariant: without a deadline everything stays in batch; with one,
    // a shallow row stays in batch and a deep one goes to flex.
    #[test]
    fn shallow_rows_stay_in_batch_deep_ones_go_to_flex() {
        let allowed = lanes(&[Lane::Batch, Lane::Flex]);
        let tt = t(60, 1);
        assert_eq!(choose(40, None, &allowed, ALL, &tt).lane, Lane::Batch);
        let ten_min = Some(Duration::from_secs(600));
        assert_eq!(choose(1, ten_min, &allowed, ALL, &tt).lane, Lane::Batch);
        assert_eq!(choose(10, ten_min, &allowed, ALL, &tt).lane, Lane::Batch);
        assert_eq!(choose(11, ten_min, &allowed, ALL, &tt).lane, Lane::Flex);
        assert!(choose(11, ten_min, &allowed, ALL, &tt).in_time);
    }

    // Invariant: a row no allowed lane can finish in time takes the
    // fastest allowed lane and says the deadline is at risk.
    #[test]
    fn a_deadline_out_of_reach_takes_the_fastest_and_says_so() {
        let tt = t(60, 30);
        let c = choose(
            40,
            Some(Duration::from_secs(600)),
            &lanes(&[Lane::Batch, Lane::Flex]),
            ALL,
            &tt,
        );
        assert_eq!(
            c,
            Choice {
                lane: Lane::Flex,
                in_time: false
            }
        );
        // Standard not allowed: not chosen however fast.
        let c = choose(
            40,
            Some(Duration::from_secs(600)),
            &lanes(&[Lane::Batch]),
            ALL,
            &tt,
        );
        assert_eq!(c.lane, Lane::Batch);
        // Flex not offered (Anthropic): standard, at twice the price.
        let no_flex = |l: Lane| l != Lane::Flex;
        let c = choose(
            40,
            Some(Duration::from_secs(600)),
            &lanes(&[Lane::Batch, Lane::Flex, Lane::Standard]),
            no_flex,
            &tt,
        );
        assert_eq!(
            c,
            Choice {
                lane: Lane::Standard,
                in_time: true
            }
        );
    }

    // Invariant: the bands of the allowed lanes cover every depth once,
    // and agree with `choose` depth by depth.
    #[test]
    fn bands_partition_depths_as_choose_routes_them() {
        let allowed = lanes(&[Lane::Batch, Lane::Flex, Lane::Standard]);
        let tt = t(60, 20);
        let left = Some(Duration::from_secs(600));
        for depth in 1..200 {
            let chosen = choose(depth, left, &allowed, ALL, &tt).lane;
            let holders: Vec<Lane> = [Lane::Batch, Lane::Flex, Lane::Standard]
                .into_iter()
                .filter(|l| {
                    band(*l, left, &allowed, ALL, &tt)
                        .is_some_and(|(lo, hi)| (lo..=hi).contains(&depth))
                })
                .collect();
            assert_eq!(holders, vec![chosen], "depth {depth}");
        }
        assert_eq!(
            band(Lane::Batch, None, &allowed, ALL, &tt),
            Some((0, u32::MAX))
        );
        assert_eq!(band(Lane::Flex, None, &allowed, ALL, &tt), None);
        assert_eq!(band(Lane::Priority, left, &allowed, ALL, &tt), None);
    }

    // Invariant: a chain of 40 with 60 s batches and 1 s flex under a
    // 10-minute deadline is forecast in time; all-batch takes 40 minutes.
    #[test]
    fn the_forecast_walks_the_chain_link_by_link() {
        let tt = t(60, 1);
        let left = Some(Duration::from_secs(600));
        let plan = finish(40, left, &lanes(&[Lane::Batch, Lane::Flex]), ALL, &tt);
        assert!(plan.in_time, "{plan:?}");
        assert!(plan.duration <= Duration::from_secs(600));
        let batch = finish(40, left, &lanes(&[Lane::Batch]), ALL, &tt);
        assert_eq!(batch.duration, Duration::from_secs(2400));
        assert!(!batch.in_time);
        assert_eq!(
            finish(0, left, &lanes(&[Lane::Batch]), ALL, &tt).duration,
            Duration::ZERO
        );
    }

    // Invariant: three 40-link chains under a 10-minute deadline go by flex
    // at the batch price (the same cost as all-batch) and finish in time;
    // all-batch takes 40 turnarounds; flat rows stay in batch.
    #[test]
    fn a_plan_costs_its_lanes_and_finishes_its_deepest_chain() {
        let tt = t(60, 1);
        let left = Some(Duration::from_secs(600));
        let allowed = lanes(&[Lane::Batch, Lane::Flex]);
        let work: Vec<Work> = (1..=40)
            .map(|d| Work {
                model: "m".into(),
                depth: d,
                rows: 3,
                input_tokens: 3000,
            })
            .chain(std::iter::once(Work {
                model: "m".into(),
                depth: 1,
                rows: 100,
                input_tokens: 100_000,
            }))
            .collect();
        let batch_price = crate::price::Price {
            model: "m".into(),
            input_per_million: 1.0,
            output_per_million: 2.0,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: Lane::Batch,
        };
        let price = |_: &str, lane: Lane| Some(batch_price.scaled(lane.batch_factor(), lane));
        let routed = plan(&work, left, &allowed, ALL, &tt, price, 100);
        let batch_only = plan(&work, left, &lanes(&[Lane::Batch]), ALL, &tt, price, 100);
        assert!(routed.finish.in_time && !batch_only.finish.in_time);
        assert_eq!(batch_only.finish.duration, Duration::from_secs(2400));
        assert!(
            (routed.cost_usd - batch_only.cost_usd).abs() < 1e-9,
            "flex at the batch price"
        );
        let flex_rows = routed
            .rows_by_lane
            .iter()
            .find(|(l, _)| *l == Lane::Flex)
            .map(|x| x.1);
        assert_eq!(flex_rows, Some(3 * 30), "depths 11 to 40 go by flex");
    }
}

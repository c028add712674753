//! A ledger's forecast in words: why its plan is what it is (batch alone
//! is in time; a faster lane is needed and what it adds to the cost; or
//! the deadline cannot be met with the lanes allowed), and whether what
//! the spend cap leaves pays for it, for operators
//! reading `tallyctl status --forecast`, a flow's log or the summary.
//! Pure.

use std::time::Duration;

use crate::lane::{Lane, Lanes};
use crate::route::Plan;

/// What the explanation is about: the plan routed by the deadline, the
/// same rows all in batch, the deepest chain, the time left before the
/// deadline (`None`: no deadline) and the batch turnaround forecast.
pub struct Explained<'a> {
    pub plan: &'a Plan,
    pub all_batch: &'a Plan,
    pub depth: u32,
    pub left: Option<Duration>,
    pub batch_turnaround: Duration,
    pub allowed: &'a Lanes,
    /// What the spend cap leaves, in dollars (`None`: no dollar cap).
    pub budget: Option<f64>,
}

/// One or two sentences: what the plan does and why, and when what the
/// spend cap leaves does not pay for it (claims stop at the cap, so the
/// rows past it wait: the price allowed cannot meet the deadline).
pub fn explain(e: &Explained<'_>) -> String {
    let plan = plan_in_words(e);
    match e.budget {
        Some(left) if e.depth > 0 && e.plan.cost_usd > left + 1e-9 => {
            let batch = if e.all_batch.cost_usd > left + 1e-9 {
                format!(" and than all in batch's ${:.4}", e.all_batch.cost_usd)
            } else {
                String::new()
            };
            format!(
                "{plan}; but the spend cap leaves ${:.4}, less than the plan's ${:.4}{batch}: claims \
                 stop at the cap, so {}; raise the cap{}",
                left.max(0.0),
                e.plan.cost_usd,
                if e.left.is_some() {
                    "the deadline cannot be met at the price allowed"
                } else {
                    "the rows past it wait"
                },
                if e.left.is_some() {
                    " or move the deadline"
                } else {
                    ""
                }
            )
        }
        _ => plan,
    }
}

/// What the plan does and why.
fn plan_in_words(e: &Explained<'_>) -> String {
    if e.depth == 0 {
        return "nothing left to run".into();
    }
    let batch = format!(
        "{} link{} x {} a batch = {}",
        e.depth,
        if e.depth == 1 { "" } else { "s" },
        human(e.batch_turnaround),
        human(e.all_batch.finish.duration)
    );
    let Some(left) = e.left else {
        let first = e.allowed.iter().next().unwrap_or(Lane::Batch);
        return format!("no deadline: every row goes by {first} (the deepest chain: {batch})");
    };
    if !e.plan.finish.in_time {
        let allowed: Vec<&str> = e.allowed.iter().map(Lane::name).collect();
        return format!(
            "the deadline cannot be met with the lanes allowed ({}): the deepest chain takes {} \
             at best and {} is left; allow a faster lane or move the deadline",
            allowed.join(", "),
            human(e.plan.finish.duration),
            human(left)
        );
    }
    if e.all_batch.finish.in_time {
        return format!(
            "batch alone is in time ({batch}, {} left): every row stays in batch",
            human(left)
        );
    }
    let faster: Vec<String> = e
        .plan
        .rows_by_lane
        .iter()
        .filter(|(lane, n)| *lane != Lane::Batch && *n > 0)
        .map(|(lane, n)| format!("{n} rows by {lane}"))
        .collect();
    let extra = e.plan.cost_usd - e.all_batch.cost_usd;
    let cost = if extra.abs() < 1e-9 {
        format!("at the all-batch cost (${:.4})", e.plan.cost_usd)
    } else {
        format!(
            "${:.4} against ${:.4} all in batch ({}${:.4})",
            e.plan.cost_usd,
            e.all_batch.cost_usd,
            if extra > 0.0 { "+" } else { "-" },
            extra.abs()
        )
    };
    format!(
        "batch alone would be late ({batch}, {} left): the deep links go faster ({}), \
         finishing in {}, {cost}",
        human(left),
        faster.join(", "),
        human(e.plan.finish.duration)
    )
}

/// `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) if seconds == 0 => format!("{minutes}m"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Forecast;

    fn plan(secs: u64, in_time: bool, cost: f64, lanes: &[(Lane, u64)]) -> Plan {
        Plan {
            finish: Forecast {
                duration: Duration::from_secs(secs),
                in_time,
            },
            cost_usd: cost,
            rows_by_lane: lanes.to_vec(),
        }
    }

    fn explained<'a>(p: &'a Plan, b: &'a Plan, left: Option<u64>, allowed: &'a Lanes) -> String {
        explain(&Explained {
            plan: p,
            all_batch: b,
            depth: 40,
            left: left.map(Duration::from_secs),
            batch_turnaround: Duration::from_secs(60),
            allowed,
            budget: None,
        })
    }

    // Invariant: the words say which of the four cases the plan is in, and
    // the extra cost of a faster lane when there is one.
    #[test]
    fn each_case_is_said_with_its_figures() {
        let flex = Lanes::of([Lane::Batch, Lane::Flex]).unwrap();
        let all_batch = plan(2400, false, 0.05, &[(Lane::Batch, 120)]);
        let no_deadline = plan(2400, true, 0.05, &[(Lane::Batch, 120)]);
        assert_eq!(
            explained(&no_deadline, &no_deadline, None, &flex),
            "no deadline: every row goes by batch (the deepest chain: 40 links x 1m a batch = 40m)"
        );
        let routed = plan(570, true, 0.05, &[(Lane::Batch, 27), (Lane::Flex, 93)]);
        let text = explained(&routed, &all_batch, Some(600), &flex);
        assert!(
            text.starts_with("batch alone would be late (40 links x 1m a batch = 40m, 10m left)"),
            "{text}"
        );
        assert!(text.contains("93 rows by flex"), "{text}");
        assert!(text.ends_with("at the all-batch cost ($0.0500)"), "{text}");
        let standard = Lanes::of([Lane::Batch, Lane::Standard]).unwrap();
        let dearer = plan(570, true, 0.09, &[(Lane::Batch, 27), (Lane::Standard, 93)]);
        let text = explained(&dearer, &all_batch, Some(600), &standard);
        assert!(
            text.ends_with("$0.0900 against $0.0500 all in batch (+$0.0400)"),
            "{text}"
        );
        let batch_only = Lanes::default();
        let late = plan(2400, false, 0.05, &[(Lane::Batch, 120)]);
        let text = explained(&late, &all_batch, Some(600), &batch_only);
        assert!(
            text.starts_with("the deadline cannot be met with the lanes allowed (batch)"),
            "{text}"
        );
        let in_time = plan(2400, true, 0.05, &[(Lane::Batch, 120)]);
        let text = explained(&in_time, &in_time, Some(7200), &flex);
        assert!(text.starts_with("batch alone is in time"), "{text}");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 20 * 60)), "3h 20m");
        assert_eq!(human(Duration::from_secs(725)), "12m 5s");
    }

    // Invariant (issue 49: the most a ledger may pay): a plan costing more
    // than the spend cap leaves says the deadline cannot be met at the
    // price allowed (and whether batch alone would fit); a plan within it,
    // or no dollar cap, says nothing of the cap.
    #[test]
    fn a_plan_past_the_spend_cap_says_so() {
        let standard = Lanes::of([Lane::Batch, Lane::Standard]).unwrap();
        let all_batch = plan(2400, false, 0.05, &[(Lane::Batch, 120)]);
        let dearer = plan(570, true, 0.09, &[(Lane::Batch, 27), (Lane::Standard, 93)]);
        let with = |budget| {
            explain(&Explained {
                plan: &dearer,
                all_batch: &all_batch,
                depth: 40,
                left: Some(Duration::from_secs(600)),
                batch_turnaround: Duration::from_secs(60),
                allowed: &standard,
                budget,
            })
        };
        let text = with(Some(0.07));
        assert!(
            text.ends_with(
                "but the spend cap leaves $0.0700, less than the plan's $0.0900: claims stop at \
                 the cap, so the deadline cannot be met at the price allowed; raise the cap or \
                 move the deadline"
            ),
            "{text}"
        );
        assert!(with(Some(0.01)).contains("$0.0900 and than all in batch's $0.0500:"));
        assert!(!with(Some(0.2)).contains("spend cap"));
        assert!(!with(None).contains("spend cap"));
        let no_deadline = plan(2400, true, 0.05, &[(Lane::Batch, 120)]);
        let text = explain(&Explained {
            plan: &no_deadline,
            all_batch: &no_deadline,
            depth: 40,
            left: None,
            batch_turnaround: Duration::from_secs(60),
            allowed: &standard,
            budget: Some(0.01),
        });
        assert!(
            text.ends_with("so the rows past it wait; raise the cap"),
            "{text}"
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_secs(3 * 3600 + 20 * 60)), "3h 20m");
        assert_eq!(human(Duration::from_secs(725)), "12m 5s");
    }
}

//! The monotonic reducer: whether one event moves an operation forward.

use std::fmt;

use super::OpState;

/// Unix microseconds of the epoch: the time of an event that carries none,
/// so it loses every tie and never overrules a state that has a real time.
pub const EPOCH: i64 = 0;

/// What we hold about an operation: its applied state, the provider's update
/// time of that state, and the version the store's compare-and-swap fences on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSnapshot {
    pub state: OpState,
    /// Unix microseconds, provider time; [`EPOCH`] when the event had none.
    pub update_time: i64,
    /// 1 after the first applied event, +1 for each applied since.
    pub version: i64,
}

/// One observation of an operation, from a webhook or the poller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpEvent {
    pub state: OpState,
    /// Unix microseconds, provider time (never our receive time: delivery
    /// order is not update order, and replicas' clocks differ). `None`
    /// counts as [`EPOCH`].
    pub update_time: Option<i64>,
}

/// Why an event was not applied. `TerminalConflict` is the reason of a
/// [`Decision::Recorded`]; the others of a [`Decision::Dropped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    RegressFromTerminal,
    LowerRank,
    StaleOrEqualUpdateTime,
    TerminalConflict,
    DuplicateEvent,
}

impl DropReason {
    /// Every reason, so metrics can export zeros before the first drop.
    pub const fn all() -> [DropReason; 5] {
        [
            DropReason::RegressFromTerminal,
            DropReason::LowerRank,
            DropReason::StaleOrEqualUpdateTime,
            DropReason::TerminalConflict,
            DropReason::DuplicateEvent,
        ]
    }

    /// The stored and exported label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::RegressFromTerminal => "regress_from_terminal",
            DropReason::LowerRank => "lower_rank",
            DropReason::StaleOrEqualUpdateTime => "stale_or_equal_update_time",
            DropReason::TerminalConflict => "terminal_conflict",
            DropReason::DuplicateEvent => "duplicate_event",
        }
    }

    /// Reads a stored label back; `None` for anything else.
    pub fn parse(label: &str) -> Option<DropReason> {
        Self::all()
            .into_iter()
            .find(|reason| reason.as_str() == label)
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reducer's verdict on one event. Every verdict is stored with the
/// event; only `Applied` changes the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The event moves the operation forward; write `next` if the stored
    /// version is still the one read. `from` is `None` on first sighting.
    Applied {
        next: OpSnapshot,
        from: Option<OpState>,
    },
    /// The event would move the operation backward, or adds nothing.
    Dropped(DropReason),
    /// A different terminal after a terminal: kept in the log for an
    /// operator, not applied (`terminal_conflict`).
    Recorded,
}

impl Decision {
    /// `"applied"`, `"dropped"` or `"recorded"`.
    pub fn verdict(&self) -> &'static str {
        match self {
            Decision::Applied { .. } => "applied",
            Decision::Dropped(_) => "dropped",
            Decision::Recorded => "recorded",
        }
    }

    /// Why the event was not applied; `None` when it was.
    pub fn reason(&self) -> Option<DropReason> {
        match self {
            Decision::Applied { .. } => None,
            Decision::Dropped(reason) => Some(*reason),
            Decision::Recorded => Some(DropReason::TerminalConflict),
        }
    }

    pub fn is_applied(&self) -> bool {
        matches!(self, Decision::Applied { .. })
    }
}

/// Decides what one event does to an operation. Pure: the store reads
/// `current`, calls this, and writes `next` conditioned on `current.version`,
/// re-reading and calling again when another writer got there first.
///
/// `already_seen_delivery` says the store has this delivery id already (a
/// webhook sent twice); poller observations have no delivery id and pass
/// `false`, and a repeated observation is dropped by its update time instead.
///
/// The checks, in order (DESIGN.md §3, "Operation"):
/// 0. a delivery seen before: `duplicate_event`;
/// 1. current terminal, event not: `regress_from_terminal`;
/// 2. event ranks lower: `lower_rank`;
/// 3. equal rank and the event's time ≤ current: `stale_or_equal_update_time`;
/// 4. current terminal (so the event is a newer terminal): a different one is
///    `Recorded` (the first terminal wins); the same one is
///    `duplicate_event` (terminal is absorbing);
/// 5. otherwise applied, version + 1, with the event's time.
///
/// An event whose state is `Unknown` is never applied: it is dropped as
/// `lower_rank` (unknown ranks below everything, including another
/// unknown), and on first sighting it does not create the operation, because
/// there is no known state to create it in and guessing one could later
/// hide a real regression.
pub fn reduce(
    current: Option<&OpSnapshot>,
    event: &OpEvent,
    already_seen_delivery: bool,
) -> Decision {
    if already_seen_delivery {
        return Decision::Dropped(DropReason::DuplicateEvent);
    }
    let event_time = event.update_time.unwrap_or(EPOCH);
    let Some(current) = current else {
        return first_sighting(event.state, event_time);
    };
    if let Some(reason) = backward(current, event.state, event_time) {
        return Decision::Dropped(reason);
    }
    if current.state.is_terminal() {
        // Past the checks above, the event is a terminal with a newer time.
        return after_terminal(current.state, event.state);
    }
    Decision::Applied {
        next: OpSnapshot {
            state: event.state,
            update_time: event_time,
            version: current.version + 1,
        },
        from: Some(current.state),
    }
}

fn first_sighting(state: OpState, time: i64) -> Decision {
    if !state.is_known() {
        return Decision::Dropped(DropReason::LowerRank);
    }
    Decision::Applied {
        next: OpSnapshot {
            state,
            update_time: time,
            version: 1,
        },
        from: None,
    }
}

/// Checks 1 to 3: the event would move the operation backward or not at all.
fn backward(current: &OpSnapshot, state: OpState, time: i64) -> Option<DropReason> {
    if current.state.is_terminal() && !state.is_terminal() {
        return Some(DropReason::RegressFromTerminal);
    }
    if state.rank() < current.state.rank() || !state.is_known() {
        return Some(DropReason::LowerRank);
    }
    if state.rank() == current.state.rank() && time <= current.update_time {
        return Some(DropReason::StaleOrEqualUpdateTime);
    }
    None
}

/// Check 4: a newer terminal after a terminal is never applied.
fn after_terminal(current: OpState, event: OpState) -> Decision {
    if event == current {
        Decision::Dropped(DropReason::DuplicateEvent)
    } else {
        Decision::Recorded
    }
}

#[cfg(test)]
mod tests {
    use super::OpState::*;
    use super::*;

    fn snap(state: OpState, update_time: i64, version: i64) -> OpSnapshot {
        OpSnapshot {
            state,
            update_time,
            version,
        }
    }

    fn ev(state: OpState, update_time: i64) -> OpEvent {
        OpEvent {
            state,
            update_time: Some(update_time),
        }
    }

    fn untimed(state: OpState) -> OpEvent {
        OpEvent {
            state,
            update_time: None,
        }
    }

    fn dropped(reason: DropReason) -> Decision {
        Decision::Dropped(reason)
    }

    const TERMINALS: [OpState; 4] = [Succeeded, Failed, Cancelled, Expired];

    // The seed's table.

    #[test]
    fn running_then_old_pending_is_lower_rank() {
        let cur = snap(Running, 200, 2);
        assert_eq!(
            reduce(Some(&cur), &ev(Pending, 100), false),
            dropped(DropReason::LowerRank)
        );
    }

    #[test]
    fn succeeded_then_late_running_is_regress_from_terminal() {
        let cur = snap(Succeeded, 300, 3);
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 200), false),
            dropped(DropReason::RegressFromTerminal)
        );
        // Even when the late event claims a newer time.
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 900), false),
            dropped(DropReason::RegressFromTerminal)
        );
    }

    #[test]
    fn succeeded_then_failed_is_recorded_not_applied() {
        let cur = snap(Succeeded, 300, 3);
        assert_eq!(
            reduce(Some(&cur), &ev(Failed, 400), false),
            Decision::Recorded
        );
        assert_eq!(
            Decision::Recorded.reason(),
            Some(DropReason::TerminalConflict)
        );
    }

    #[test]
    fn running_then_newer_running_is_applied() {
        let cur = snap(Running, 200, 2);
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 250), false),
            Decision::Applied {
                next: snap(Running, 250, 3),
                from: Some(Running),
            }
        );
    }

    #[test]
    fn equal_update_time_is_dropped() {
        let cur = snap(Running, 200, 2);
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 200), false),
            dropped(DropReason::StaleOrEqualUpdateTime)
        );
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 199), false),
            dropped(DropReason::StaleOrEqualUpdateTime)
        );
    }

    // Every rule.

    #[test]
    fn a_seen_delivery_is_a_duplicate_before_anything_else() {
        assert_eq!(
            reduce(None, &ev(Running, 1), true),
            dropped(DropReason::DuplicateEvent)
        );
        // Even one that would otherwise move the operation forward.
        let cur = snap(Pending, 1, 1);
        assert_eq!(
            reduce(Some(&cur), &ev(Succeeded, 5), true),
            dropped(DropReason::DuplicateEvent)
        );
    }

    #[test]
    fn first_sighting_creates_the_operation_at_version_one() {
        for state in [Pending, Running, Succeeded, Failed, Cancelled, Expired] {
            assert_eq!(
                reduce(None, &ev(state, 42), false),
                Decision::Applied {
                    next: snap(state, 42, 1),
                    from: None,
                }
            );
        }
        assert_eq!(
            reduce(None, &untimed(Running), false),
            Decision::Applied {
                next: snap(Running, EPOCH, 1),
                from: None,
            }
        );
    }

    #[test]
    fn an_unknown_first_event_does_not_create_the_operation() {
        assert_eq!(
            reduce(None, &ev(Unknown, 42), false),
            dropped(DropReason::LowerRank)
        );
    }

    #[test]
    fn unknown_is_never_applied() {
        for state in [Pending, Running] {
            assert_eq!(
                reduce(Some(&snap(state, 1, 1)), &ev(Unknown, 99), false),
                dropped(DropReason::LowerRank)
            );
        }
        for state in TERMINALS {
            assert_eq!(
                reduce(Some(&snap(state, 1, 1)), &ev(Unknown, 99), false),
                dropped(DropReason::RegressFromTerminal)
            );
        }
        // A snapshot read back as unknown does not let another unknown in...
        assert_eq!(
            reduce(Some(&snap(Unknown, 1, 1)), &ev(Unknown, 99), false),
            dropped(DropReason::LowerRank)
        );
        // ...but any known state moves it forward.
        assert!(reduce(Some(&snap(Unknown, 1, 1)), &ev(Pending, 0), false).is_applied());
    }

    #[test]
    fn every_terminal_absorbs_every_non_terminal() {
        for terminal in TERMINALS {
            for late in [Pending, Running, Unknown] {
                assert_eq!(
                    reduce(Some(&snap(terminal, 10, 3)), &ev(late, 20), false),
                    dropped(DropReason::RegressFromTerminal),
                    "{terminal} then {late}"
                );
            }
        }
    }

    #[test]
    fn lower_rank_is_dropped_whatever_its_time() {
        let cur = snap(Running, 10, 2);
        for time in [0, 9, 10, 11, i64::MAX] {
            assert_eq!(
                reduce(Some(&cur), &ev(Pending, time), false),
                dropped(DropReason::LowerRank)
            );
        }
    }

    #[test]
    fn higher_rank_is_applied_whatever_its_time() {
        // Rank decides first; a provider clock that lags is not a regression.
        let cur = snap(Pending, 100, 1);
        assert_eq!(
            reduce(Some(&cur), &ev(Running, 50), false),
            Decision::Applied {
                next: snap(Running, 50, 2),
                from: Some(Pending),
            }
        );
        let cur = snap(Running, 100, 2);
        for terminal in TERMINALS {
            assert_eq!(
                reduce(Some(&cur), &untimed(terminal), false),
                Decision::Applied {
                    next: snap(terminal, EPOCH, 3),
                    from: Some(Running),
                }
            );
        }
    }

    #[test]
    fn a_missing_time_loses_every_tie() {
        let cur = snap(Running, 100, 2);
        assert_eq!(
            reduce(Some(&cur), &untimed(Running), false),
            dropped(DropReason::StaleOrEqualUpdateTime)
        );
        // Even against a state that itself had no time.
        let cur = snap(Running, EPOCH, 2);
        assert_eq!(
            reduce(Some(&cur), &untimed(Running), false),
            dropped(DropReason::StaleOrEqualUpdateTime)
        );
        // A real time beats the epoch.
        assert!(reduce(Some(&cur), &ev(Running, 1), false).is_applied());
    }

    #[test]
    fn terminal_conflicts_are_recorded_only_when_newer() {
        for first in TERMINALS {
            for second in TERMINALS {
                let cur = snap(first, 300, 3);
                let newer = reduce(Some(&cur), &ev(second, 400), false);
                let expected = if first == second {
                    dropped(DropReason::DuplicateEvent)
                } else {
                    Decision::Recorded
                };
                assert_eq!(newer, expected, "{first} then newer {second}");
                // Check 3 comes first: an older or equal time is stale.
                for time in [299, 300] {
                    assert_eq!(
                        reduce(Some(&cur), &ev(second, time), false),
                        dropped(DropReason::StaleOrEqualUpdateTime),
                        "{first} then {second} at {time}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_same_terminal_again_is_a_duplicate_or_stale() {
        let cur = snap(Succeeded, 300, 3);
        assert_eq!(
            reduce(Some(&cur), &ev(Succeeded, 300), false),
            dropped(DropReason::StaleOrEqualUpdateTime)
        );
        assert_eq!(
            reduce(Some(&cur), &ev(Succeeded, 301), false),
            dropped(DropReason::DuplicateEvent)
        );
    }

    #[test]
    fn applying_bumps_the_version_and_takes_the_event_time() {
        let cur = snap(Pending, 5, 7);
        match reduce(Some(&cur), &ev(Running, 6), false) {
            Decision::Applied { next, from } => {
                assert_eq!(next, snap(Running, 6, 8));
                assert_eq!(from, Some(Pending));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reason_labels() {
        let labels: Vec<_> = DropReason::all().iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            [
                "regress_from_terminal",
                "lower_rank",
                "stale_or_equal_update_time",
                "terminal_conflict",
                "duplicate_event",
            ]
        );
        for reason in DropReason::all() {
            assert_eq!(DropReason::parse(reason.as_str()), Some(reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        assert_eq!(DropReason::parse("applied"), None);
    }

    #[test]
    fn verdicts() {
        let applied = reduce(None, &ev(Pending, 1), false);
        assert_eq!((applied.verdict(), applied.reason()), ("applied", None));
        let dropped = Decision::Dropped(DropReason::LowerRank);
        assert_eq!(
            (dropped.verdict(), dropped.reason()),
            ("dropped", Some(DropReason::LowerRank))
        );
        assert_eq!(Decision::Recorded.verdict(), "recorded");
        assert!(!Decision::Recorded.is_applied());
    }
}

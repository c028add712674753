//! Property tests of the reducer: whatever order and however often the
//! events of a real history arrive, the operation ends in that history's
//! terminal state and never moves backward on the way.

use std::collections::HashSet;

use proptest::prelude::*;

use super::{Decision, OpEvent, OpSnapshot, OpState, reduce};

const TERMINALS: [OpState; 4] = [
    OpState::Succeeded,
    OpState::Failed,
    OpState::Cancelled,
    OpState::Expired,
];

/// What a provider could really emit for one batch: some PENDINGs, some
/// RUNNINGs, then exactly one terminal, at strictly increasing update times,
/// any of which may have gone missing.
fn valid_history() -> impl Strategy<Value = Vec<OpEvent>> {
    (
        0usize..3,
        0usize..4,
        prop::sample::select(TERMINALS.to_vec()),
        0i64..1_000_000_000_000,
        prop::collection::vec(1i64..1_000_000, 7),
        prop::collection::vec(prop::bool::weighted(0.2), 7),
    )
        .prop_map(|(pendings, runnings, terminal, start, gaps, missing)| {
            let states = std::iter::repeat_n(OpState::Pending, pendings)
                .chain(std::iter::repeat_n(OpState::Running, runnings))
                .chain([terminal]);
            let mut time = start;
            states
                .zip(gaps.iter().zip(&missing))
                .map(|(state, (gap, missing))| {
                    time += gap;
                    OpEvent {
                        state,
                        update_time: (!missing).then_some(time),
                    }
                })
                .collect()
        })
}

/// A delivery: which history event, and whether it came as a webhook (with a
/// delivery id the store dedupes) or from the poller (no delivery id).
type Delivery = (usize, bool);

/// A valid history delivered in any order, each event one to three times.
fn delivered_history() -> impl Strategy<Value = (Vec<OpEvent>, Vec<Delivery>)> {
    valid_history().prop_flat_map(|history| {
        let n = history.len();
        (
            Just(history),
            prop::collection::vec(1usize..=3, n),
            prop::collection::vec(any::<bool>(), 3 * n),
        )
            .prop_flat_map(|(history, copies, via_webhook)| {
                let deliveries: Vec<Delivery> = copies
                    .iter()
                    .enumerate()
                    .flat_map(|(event, &times)| std::iter::repeat_n(event, times))
                    .zip(via_webhook)
                    .collect();
                (Just(history), Just(deliveries).prop_shuffle())
            })
    })
}

fn any_event() -> impl Strategy<Value = (OpEvent, bool)> {
    (
        prop::sample::select(OpState::ALL.to_vec()),
        // A small range of times, so ties and reversals are common.
        prop::option::weighted(0.8, 0i64..6),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(state, update_time, seen)| (OpEvent { state, update_time }, seen))
}

proptest! {
    #[test]
    fn any_delivery_of_a_valid_history_ends_in_its_terminal(
        (history, deliveries) in delivered_history()
    ) {
        let mut current: Option<OpSnapshot> = None;
        let mut seen = HashSet::new();
        let (mut applied, mut dropped, mut recorded) = (0i64, 0usize, 0usize);
        for &(event, via_webhook) in &deliveries {
            let already_seen = via_webhook && !seen.insert(event);
            match reduce(current.as_ref(), &history[event], already_seen) {
                Decision::Applied { next, from } => {
                    prop_assert_eq!(from, current.map(|c| c.state));
                    if let Some(before) = current {
                        // (a) rank never decreases; terminal never changes.
                        prop_assert!(next.state.rank() >= before.state.rank());
                        prop_assert!(!before.state.is_terminal());
                    }
                    current = Some(next);
                    applied += 1;
                }
                Decision::Dropped(_) => dropped += 1,
                Decision::Recorded => recorded += 1,
            }
        }
        let terminal = history.last().unwrap().state;
        let current = current.expect("a valid history always creates the operation");
        // (b) the history's terminal, whatever the order.
        prop_assert_eq!(current.state, terminal);
        // (c) every delivery got exactly one verdict.
        prop_assert_eq!(applied as usize + dropped + recorded, deliveries.len());
        // (d) one version per applied event.
        prop_assert_eq!(current.version, applied);
        // A valid history has one terminal, so nothing can conflict with it.
        prop_assert_eq!(recorded, 0);
    }

    #[test]
    fn in_order_delivery_applies_every_timed_step(history in valid_history()) {
        // Delivered once each and in order, every event with a time is
        // progress (rank up, or same rank at a later time).
        let mut current: Option<OpSnapshot> = None;
        for event in &history {
            let decision = reduce(current.as_ref(), event, false);
            if event.update_time.is_some() {
                prop_assert!(decision.is_applied(), "{:?} on {:?}", event, current);
            }
            if let Decision::Applied { next, .. } = decision {
                current = Some(next);
            }
        }
        prop_assert_eq!(current.map(|c| c.state), history.last().map(|e| e.state));
    }

    #[test]
    fn no_sequence_moves_state_backward(events in prop::collection::vec(any_event(), 0..40)) {
        let mut current: Option<OpSnapshot> = None;
        let mut applied = 0i64;
        let mut first_terminal: Option<OpState> = None;
        for (event, seen) in &events {
            let decision = reduce(current.as_ref(), event, *seen);
            match decision {
                Decision::Applied { next, from } => {
                    prop_assert!(!seen, "a seen delivery is never applied");
                    prop_assert!(next.state.is_known(), "unknown is never applied");
                    prop_assert_eq!(from, current.map(|c| c.state));
                    prop_assert_eq!(next.version, current.map_or(1, |c| c.version + 1));
                    prop_assert_eq!(next.update_time, event.update_time.unwrap_or(0));
                    if let Some(before) = current {
                        prop_assert!(!before.state.is_terminal(), "terminal is absorbing");
                        prop_assert!(next.state.rank() >= before.state.rank());
                        if next.state.rank() == before.state.rank() {
                            prop_assert!(next.update_time > before.update_time);
                        }
                    }
                    // Redelivered without dedupe, the same event adds nothing.
                    prop_assert!(!reduce(Some(&next), event, false).is_applied());
                    if next.state.is_terminal() {
                        first_terminal.get_or_insert(next.state);
                    }
                    current = Some(next);
                    applied += 1;
                }
                Decision::Recorded => {
                    let before = current.expect("a conflict needs a current state");
                    prop_assert!(before.state.is_terminal() && event.state.is_terminal());
                    prop_assert_ne!(before.state, event.state);
                }
                Decision::Dropped(_) => {}
            }
        }
        prop_assert_eq!(current.map_or(0, |c| c.version), applied);
        if let Some(terminal) = first_terminal {
            prop_assert_eq!(current.map(|c| c.state), Some(terminal), "the first terminal wins");
        }
    }
}

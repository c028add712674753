//! The conversions the services share: protobuf's well-known types on the
//! wire. `Timestamp` from chrono (all three services), and `Duration` to
//! and from std, with the bounded durations (leases, lock TTLs) that
//! LedgerService and JobService check alike. A service's own messages are
//! converted in its `convert` module (e.g. [`crate::ledger::convert`]).
//! Pure: no I/O.

use chrono::{DateTime, Utc};
use std::time::Duration;
use tally_core::violation::Violations;

pub fn timestamp(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

pub fn opt_timestamp(t: Option<DateTime<Utc>>) -> Option<prost_types::Timestamp> {
    t.map(timestamp)
}

pub fn duration_to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A proto duration as a std one; `None` when negative or malformed.
pub fn duration(d: &prost_types::Duration) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return None;
    }
    Some(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// A lease or TTL: unset is `None` (the default applies); set, it must lie
/// within `[min, max]`.
pub fn bounded_duration(
    field: &str,
    d: Option<&prost_types::Duration>,
    min: Duration,
    max: Duration,
    v: &mut Violations,
) -> Option<Duration> {
    let d = d?;
    match duration(d) {
        Some(x) if x >= min && x <= max => Some(x),
        _ => {
            v.add(
                field,
                format!(
                    "must be between {} and {}",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_reject_negative_values() {
        let mut v = Violations::new();
        let d = bounded_duration(
            "lease",
            Some(&prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            Duration::from_secs(1),
            Duration::from_secs(10),
            &mut v,
        );
        assert!(d.is_none());
        assert_eq!(v.len(), 1);
    }
}

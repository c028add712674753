//! Times and durations as tallyctl writes and reads them (tables, JSON
//! and YAML output, flags).

/// RFC 3339 in UTC with seconds (`2026-01-02T03:04:05Z`); empty when unset.
pub fn time(t: Option<&prost_types::Timestamp>) -> String {
    let Some(t) = t else {
        return String::new();
    };
    match chrono::DateTime::from_timestamp(t.seconds, t.nanos.clamp(0, 999_999_999) as u32) {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        None => format!("{}s", t.seconds),
    }
}

/// `30m`, `1h 30m`; empty when unset.
pub fn duration(d: Option<&prost_types::Duration>) -> String {
    match d.and_then(|d| std::time::Duration::try_from(*d).ok()) {
        Some(d) => humantime::format_duration(d).to_string(),
        None => String::new(),
    }
}

/// A human duration (`30m`) as a proto Duration.
pub fn parse_duration(text: &str) -> Result<prost_types::Duration, String> {
    let d =
        humantime::parse_duration(text).map_err(|e| format!("{e} (use forms like 30s, 5m, 1h)"))?;
    prost_types::Duration::try_from(d).map_err(|e| e.to_string())
}

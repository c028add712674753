//! The flat columns CSV and Parquet share: one row → one record of typed
//! fields. Optional text is empty in CSV and null in Parquet when unset.

use crate::render;
use tally_proto::v1 as pb;

/// Column names, in order.
pub const COLUMNS: [&str; 18] = [
    "key",
    "status",
    "rule",
    "attempts_provider",
    "attempts_content",
    "attempts_infra",
    "attempts_total",
    "input_tokens",
    "output_tokens",
    "thinking_tokens",
    "cached_tokens",
    "model",
    "prompt_name",
    "prompt_version",
    "job",
    "last_error",
    "result",
    "payload",
];

/// `update_time` comes last: a timestamp column (Parquet) or RFC 3339 text
/// (CSV), not one of the text or number columns above.
pub const TIME_COLUMN: &str = "update_time";

/// One row, flat. Text fields borrow from the row.
#[derive(Debug, PartialEq)]
pub struct Record<'a> {
    pub key: &'a str,
    pub status: String,
    /// attempts provider, content, infra, total.
    pub attempts: [i32; 4],
    /// tokens input, output, thinking, cached.
    pub tokens: [i64; 4],
    /// rule, model, prompt_name, prompt_version, job, last_error, result,
    /// payload (empty when unset).
    pub text: [&'a str; 8],
    /// Microseconds since the Unix epoch.
    pub update_micros: Option<i64>,
}

impl<'a> Record<'a> {
    pub fn of(r: &'a pb::Row) -> Self {
        let a = r.attempts.unwrap_or_default();
        let u = r.usage.unwrap_or_default();
        let (prompt_name, prompt_version) = r
            .prompt
            .as_ref()
            .map_or(("", ""), |p| (p.name.as_str(), p.version.as_str()));
        Record {
            key: &r.key,
            status: render::row_status(r.status),
            attempts: [a.provider, a.content, a.infra, a.total],
            tokens: [
                u.input_tokens,
                u.output_tokens,
                u.thinking_tokens,
                u.cached_tokens,
            ],
            text: [
                &r.rule,
                &r.model,
                prompt_name,
                prompt_version,
                &r.job,
                &r.last_error,
                &r.result,
                &r.payload,
            ],
            update_micros: r
                .update_time
                .as_ref()
                .map(|t| t.seconds * 1_000_000 + i64::from(t.nanos / 1000)),
        }
    }

    /// The values in [`COLUMNS`] order, as text, then the time.
    pub fn fields(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(COLUMNS.len() + 1);
        out.push(self.key.to_string());
        out.push(self.status.clone());
        out.push(self.text[0].to_string());
        out.extend(self.attempts.iter().map(i32::to_string));
        out.extend(self.tokens.iter().map(i64::to_string));
        out.extend(self.text[1..].iter().map(|t| t.to_string()));
        out.push(self.update_micros.map_or(String::new(), rfc3339_micros));
        out
    }
}

fn rfc3339_micros(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields line up with the column names, one for one.
    #[test]
    fn fields_follow_the_columns() {
        let r = pb::Row {
            key: "k".into(),
            status: pb::RowStatus::Permanent as i32,
            rule: "http_permanent".into(),
            model: "m".into(),
            prompt: Some(pb::PromptRef {
                name: "p".into(),
                version: "v1".into(),
            }),
            attempts: Some(pb::AttemptCounts {
                provider: 1,
                content: 2,
                infra: 3,
                total: 6,
            }),
            usage: Some(pb::Usage {
                input_tokens: 10,
                output_tokens: 20,
                thinking_tokens: 30,
                cached_tokens: 40,
                cache_write_tokens: 0,
            }),
            job: "ledgers/l/jobs/j".into(),
            last_error: "bad".into(),
            payload: "{}".into(),
            update_time: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 5000,
            }),
            ..Default::default()
        };
        let f = Record::of(&r).fields();
        let mut names: Vec<&str> = COLUMNS.to_vec();
        names.push(TIME_COLUMN);
        let by_name: std::collections::HashMap<&str, &str> = names
            .iter()
            .copied()
            .zip(f.iter().map(String::as_str))
            .collect();
        assert_eq!(f.len(), names.len());
        assert_eq!(by_name["status"], "PERMANENT");
        assert_eq!(by_name["rule"], "http_permanent");
        assert_eq!(by_name["attempts_infra"], "3");
        assert_eq!(by_name["attempts_total"], "6");
        assert_eq!(by_name["thinking_tokens"], "30");
        assert_eq!(by_name["prompt_version"], "v1");
        assert_eq!(by_name["job"], "ledgers/l/jobs/j");
        assert_eq!(by_name["result"], "");
        assert_eq!(by_name["payload"], "{}");
        assert_eq!(by_name["update_time"], "1970-01-01T00:00:01.000005Z");
    }
}

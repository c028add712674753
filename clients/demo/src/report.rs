//! The closing summary: what succeeded, what was retried, what is PERMANENT
//! and why, what is BLOCKED behind it, and what the provider was paid for.
//! Pure formatting over what the run read back.

use std::collections::BTreeMap;
use std::fmt::Write;
use tally_proto::v1 as pb;

/// What the provider was asked for, from the emulator's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderCounts {
    pub batches_created: u64,
    /// Requests sent, over every batch (a row retried counts again).
    pub rows_sent: usize,
    /// Create calls refused (429).
    pub create_rejections: u64,
    pub webhooks_sent: u64,
}

/// Everything the summary shows, read after the worker stopped.
pub struct Outcome<'a> {
    pub summary: &'a pb::LedgerSummary,
    pub succeeded: &'a [pb::Row],
    pub permanent: &'a [pb::Row],
    pub blocked: &'a [pb::Row],
    pub provider: &'a ProviderCounts,
    pub enrolled_now: i32,
    pub already_present: i32,
}

pub fn render(o: &Outcome<'_>) -> String {
    let mut s = String::new();
    let retried: Vec<&pb::Row> = o
        .succeeded
        .iter()
        .filter(|r| r.attempts.as_ref().is_some_and(|a| a.total > 1))
        .collect();
    let _ = writeln!(s, "\n== ledger {} ==", o.summary.ledger);
    let _ = writeln!(s, "{}", o.summary.summary_line);
    let _ = writeln!(
        s,
        "SUCCEEDED  {:>4}  ({} of them after a retry: {})",
        o.summary.succeeded,
        retried.len(),
        examples(retried.iter().map(|r| r.key.as_str()))
    );
    let mut by_rule: BTreeMap<&str, Vec<&pb::Row>> = BTreeMap::new();
    for r in o.permanent {
        by_rule.entry(r.rule.as_str()).or_default().push(r);
    }
    let _ = writeln!(s, "PERMANENT  {:>4}", o.summary.permanent);
    for (rule, rows) in &by_rule {
        let why = rows.first().map_or("", |r| r.last_error.as_str());
        let _ = writeln!(
            s,
            "  {rule:<28} {:>3}  {}  ({})",
            rows.len(),
            examples(rows.iter().map(|r| r.key.as_str())),
            shorten(why, 70)
        );
    }
    let _ = writeln!(
        s,
        "BLOCKED    {:>4}  {}",
        o.summary.blocked,
        examples(o.blocked.iter().map(|r| r.key.as_str()))
    );
    let attempts = o.summary.attempts_total;
    let usage = o.summary.usage.unwrap_or_default();
    let _ = writeln!(
        s,
        "attempts   {attempts:>4}  tokens in={} out={}",
        usage.input_tokens, usage.output_tokens
    );
    let _ = writeln!(
        s,
        "\nthis run: {} rows enrolled ({} already present); provider: {} batches created, {} rows sent, {} create calls refused (429), {} webhooks delivered",
        o.enrolled_now,
        o.already_present,
        o.provider.batches_created,
        o.provider.rows_sent,
        o.provider.create_rejections,
        o.provider.webhooks_sent
    );
    s
}

fn examples<'a>(keys: impl Iterator<Item = &'a str>) -> String {
    let keys: Vec<&str> = keys.collect();
    match keys.len() {
        0 => "-".into(),
        n if n <= 4 => keys.join(", "),
        n => format!("{}, … (+{})", keys[..3].join(", "), n - 3),
    }
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, rule: &str, total: i32) -> pb::Row {
        pb::Row {
            key: key.into(),
            rule: rule.into(),
            last_error: "why".into(),
            attempts: Some(pb::AttemptCounts {
                total,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn groups_permanent_rows_by_rule_and_counts_retried_successes() {
        let summary = pb::LedgerSummary {
            ledger: "ledgers/demo".into(),
            succeeded: 2,
            permanent: 2,
            blocked: 1,
            ..Default::default()
        };
        let text = render(&Outcome {
            summary: &summary,
            succeeded: &[row("a", "", 1), row("b", "", 3)],
            permanent: &[row("x", "blocked", 1), row("y", "blocked", 1)],
            blocked: &[row("z", "dependency_failed", 0)],
            provider: &ProviderCounts::default(),
            enrolled_now: 0,
            already_present: 5,
        });
        assert!(text.contains("(1 of them after a retry: b)"), "{text}");
        assert!(text.contains("blocked") && text.contains("x, y"), "{text}");
        assert!(text.contains("BLOCKED       1  z"), "{text}");
        assert!(
            text.contains("0 rows enrolled (5 already present)"),
            "{text}"
        );
    }

    #[test]
    fn long_lists_are_cut() {
        assert_eq!(
            examples(["a", "b", "c", "d", "e"].into_iter()),
            "a, b, c, … (+2)"
        );
        assert_eq!(shorten("abcdef", 3), "abc…");
    }
}

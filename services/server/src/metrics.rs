//! A small Prometheus registry: labelled counters and gauges, rendered in
//! the text exposition format at `/metrics`. Small enough that a crate
//! would add more than it saves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

type Series = BTreeMap<(String, Vec<(String, String)>), f64>;

#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    help: BTreeMap<String, (&'static str, &'static str)>,
    series: Series,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a metric (`kind` is `counter` or `gauge`).
    pub fn describe(&self, name: &str, kind: &'static str, help: &'static str) {
        self.lock().help.insert(name.to_string(), (kind, help));
    }

    pub fn add(&self, name: &str, labels: &[(&str, &str)], by: f64) {
        let key = key(name, labels);
        *self.lock().series.entry(key).or_insert(0.0) += by;
    }

    pub fn inc(&self, name: &str, labels: &[(&str, &str)]) {
        self.add(name, labels, 1.0);
    }

    pub fn set(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.lock().series.insert(key(name, labels), value);
    }

    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.lock()
            .series
            .get(&key(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), value) in &inner.series {
            if name != last {
                if let Some((kind, help)) = inner.help.get(name) {
                    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                }
                last = name;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
                .collect();
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn key(name: &str, labels: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.sort();
    (name.to_string(), l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_text_format() {
        let m = Metrics::new();
        m.describe("tally_events_total", "counter", "events by verdict");
        m.inc("tally_events_total", &[("verdict", "applied")]);
        m.add(
            "tally_events_total",
            &[("verdict", "dropped"), ("reason", "lower_rank")],
            2.0,
        );
        m.set("tally_db_up", &[], 1.0);
        let text = m.render();
        assert!(text.contains("# TYPE tally_events_total counter"));
        assert!(text.contains("tally_events_total{reason=\"lower_rank\",verdict=\"dropped\"} 2"));
        assert!(text.contains("tally_db_up 1"));
        assert_eq!(m.get("tally_events_total", &[("verdict", "applied")]), 1.0);
    }
}

//! A small Prometheus registry: labelled counters, gauges and fixed-bucket
//! histograms, rendered in the text exposition format at `/metrics`. Small
//! enough that a crate would add more than it saves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

type Key = (String, Vec<(String, String)>);
type Series = BTreeMap<Key, f64>;

#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    help: BTreeMap<String, (&'static str, &'static str)>,
    series: Series,
    /// Upper bounds of each histogram's buckets, by metric name.
    buckets: BTreeMap<String, &'static [f64]>,
    histograms: BTreeMap<Key, Histogram>,
}

/// One labelled histogram: per-bucket (not cumulative) counts, sum, count.
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a metric (`kind` is `counter` or `gauge`).
    pub fn describe(&self, name: &str, kind: &'static str, help: &'static str) {
        self.lock().help.insert(name.to_string(), (kind, help));
    }

    /// Declares a histogram with fixed bucket upper bounds (ascending; the
    /// `+Inf` bucket is implied).
    pub fn describe_histogram(&self, name: &str, help: &'static str, buckets: &'static [f64]) {
        let mut inner = self.lock();
        inner.help.insert(name.to_string(), ("histogram", help));
        inner.buckets.insert(name.to_string(), buckets);
    }

    /// Records one observation in a histogram declared with
    /// [`Metrics::describe_histogram`] (an undeclared one gets only `+Inf`).
    pub fn observe(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        let mut inner = self.lock();
        let bounds = inner.buckets.get(name).copied().unwrap_or(&[]);
        let h = inner
            .histograms
            .entry(key(name, labels))
            .or_insert_with(|| Histogram {
                counts: vec![0; bounds.len() + 1],
                sum: 0.0,
                count: 0,
            });
        let i = bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(bounds.len());
        h.counts[i] += 1;
        h.sum += value;
        h.count += 1;
    }

    /// How many observations a histogram series holds.
    pub fn observed(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.lock()
            .histograms
            .get(&key(name, labels))
            .map_or(0, |h| h.count)
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
            sample(&mut out, name, labels, None, *value);
        }
        for ((name, labels), h) in &inner.histograms {
            if name != last {
                if let Some((kind, help)) = inner.help.get(name) {
                    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                }
                last = name;
            }
            let bounds = inner.buckets.get(name).copied().unwrap_or(&[]);
            let bucket = format!("{name}_bucket");
            let mut cumulative = 0;
            for (i, n) in h.counts.iter().enumerate() {
                cumulative += n;
                let le = bounds
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), f64::to_string);
                sample(&mut out, &bucket, labels, Some(&le), cumulative as f64);
            }
            sample(&mut out, &format!("{name}_sum"), labels, None, h.sum);
            sample(
                &mut out,
                &format!("{name}_count"),
                labels,
                None,
                h.count as f64,
            );
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One sample line; `le` is a histogram bucket's bound, last of the labels.
fn sample(out: &mut String, name: &str, labels: &[(String, String)], le: Option<&str>, value: f64) {
    let mut labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    if let Some(le) = le {
        labels.push(format!("le=\"{le}\""));
    }
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
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

    #[test]
    fn renders_histograms_with_cumulative_buckets() {
        let m = Metrics::new();
        m.describe_histogram("tally_d_seconds", "durations", &[0.125, 1.0]);
        m.inc("tally_a_total", &[]);
        for v in [0.0625, 0.125, 0.5, 3.0] {
            m.observe("tally_d_seconds", &[("method", "M")], v);
        }
        let text = m.render();
        assert!(text.contains("# TYPE tally_d_seconds histogram"), "{text}");
        assert!(
            text.contains("tally_d_seconds_bucket{method=\"M\",le=\"0.125\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("tally_d_seconds_bucket{method=\"M\",le=\"1\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("tally_d_seconds_bucket{method=\"M\",le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(
            text.contains("tally_d_seconds_sum{method=\"M\"} 3.6875\n"),
            "{text}"
        );
        assert!(
            text.contains("tally_d_seconds_count{method=\"M\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("tally_a_total 1\n"), "{text}");
        assert_eq!(m.observed("tally_d_seconds", &[("method", "M")]), 4);
    }
}

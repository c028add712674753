//! Percentiles, rates and the printed table.

use std::time::Duration;

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

pub fn per_sec(r: f64) -> String {
    let n = r.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out}/s")
}

/// One line of the results table.
pub struct Line {
    pub workload: String,
    pub tally: String,
    pub baseline: String,
    pub ratio: Option<f64>,
}

pub fn render(lines: &[Line]) -> String {
    let headers = ["workload", "tally", "baseline", "ratio"];
    let rows: Vec<[String; 4]> = lines
        .iter()
        .map(|l| {
            [
                l.workload.clone(),
                l.tally.clone(),
                l.baseline.clone(),
                l.ratio.map_or("-".into(), |r| format!("{r:.2}")),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let fmt = |cells: [&str; 4]| {
        format!(
            "| {:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} |",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )
    };
    let mut out = vec![fmt(headers)];
    out.push(format!(
        "|{}|{}|{}|{}|",
        "-".repeat(widths[0] + 2),
        "-".repeat(widths[1] + 2),
        "-".repeat(widths[2] + 2),
        "-".repeat(widths[3] + 2)
    ));
    for r in &rows {
        out.push(fmt([&r[0], &r[1], &r[2], &r[3]]));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_formatting() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(51));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(per_sec(123456.4), "123,456/s");
        let t = render(&[Line {
            workload: "enroll".into(),
            tally: "1/s".into(),
            baseline: "2/s".into(),
            ratio: Some(0.5),
        }]);
        assert!(t.contains("| enroll   |"));
        assert!(t.ends_with("0.50 |"));
    }
}

//! A parser of the Prometheus / OpenMetrics text format, enough for tests
//! that scrape `/metrics` and check families, label sets and values.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Family {
    pub help: String,
    /// `counter`, `gauge`, `histogram`, `info`, … (`untyped` without TYPE).
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub families: BTreeMap<String, Family>,
    pub samples: Vec<Sample>,
}

impl Scrape {
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.get(name)
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one sample named `name` with exactly `labels`.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels)
            .find(|s| s.labels.len() == labels.len())
            .map(|s| s.value)
    }

    /// The sum of the samples named `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// Every sample name in the scrape.
    pub fn names(&self) -> std::collections::BTreeSet<&str> {
        self.samples.iter().map(|s| s.name.as_str()).collect()
    }
}

/// Parses a whole exposition; an error names the line it could not read.
pub fn parse(text: &str) -> Result<Scrape, String> {
    let mut scrape = Scrape::default();
    for (i, line) in text.lines().enumerate() {
        let fail = |what: &str| format!("line {}: {what}: {line}", i + 1);
        if line.is_empty() || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (keyword, name) = (parts.next(), parts.next());
            let text = parts.next().unwrap_or("").to_string();
            let Some(name) = name else { continue };
            let family = scrape.families.entry(name.to_string()).or_default();
            match keyword {
                Some("HELP") => family.help = text,
                Some("TYPE") => family.kind = text,
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        scrape
            .samples
            .push(sample(line).ok_or_else(|| fail("bad sample"))?);
    }
    Ok(scrape)
}

fn sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut end = None;
        loop {
            // key
            let (start, c) = chars.next()?;
            if c == '}' {
                end = Some(start + 1);
                break;
            }
            let key_start = if c == ',' { chars.next()?.0 } else { start };
            let eq = inner[key_start..].find('=')? + key_start;
            let key = inner[key_start..eq].to_string();
            while chars.next()?.0 < eq {}
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => break,
                    other => value.push(other),
                }
            }
            labels.insert(key, value);
            if end.is_some() {
                break;
            }
        }
        rest = &inner[end?..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Label values with escapes, commas and braces come back as written;
    /// HELP and TYPE attach to their family.
    #[test]
    fn parses_families_samples_and_escapes() {
        let text = "# HELP t_total calls\n# TYPE t counter\n\
                    t_total{a=\"x,y}\",b=\"q\\\"\\\\\\n\"} 3\n\
                    g 1.5\nh_bucket{le=\"+Inf\"} 2\n# EOF\n";
        let s = parse(text).unwrap();
        assert_eq!(s.family("t").unwrap().kind, "counter");
        assert_eq!(s.family("t_total").unwrap().help, "calls");
        assert_eq!(
            s.sample("t_total", &[("a", "x,y}"), ("b", "q\"\\\n")]),
            Some(3.0)
        );
        assert_eq!(s.sample("g", &[]), Some(1.5));
        assert_eq!(s.sample("h_bucket", &[("le", "+Inf")]), Some(2.0));
        assert_eq!(s.sum("t_total", &[("a", "x,y}")]), 3.0);
        assert!(parse("t{a=\"x} 1\n").is_err());
    }
}

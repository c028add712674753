//! The standard `process_*` metrics, read from `/proc/self` at each scrape
//! (Linux; elsewhere the collector exports nothing):
//!
//! - `process_resident_memory_bytes`, `process_virtual_memory_bytes` (gauges);
//! - `process_cpu_seconds_total` (counter: user + system);
//! - `process_open_fds`, `process_max_fds` (gauges);
//! - `process_start_time_seconds` (gauge, Unix time).
//!
//! A file that cannot be read leaves its metrics out of that scrape; it
//! never fails the scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

#[derive(Debug, Default)]
pub struct ProcessCollector {
    _private: (),
}

impl ProcessCollector {
    pub fn new() -> Self {
        Self::default()
    }
}

/// One reading of the process's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
}

/// Parses `/proc/self/stat` (as found after the command's closing
/// parenthesis, which may itself hold spaces and parentheses), given the
/// clock ticks per second, the page size and the boot time.
pub fn parse_stat(stat: &str, ticks: f64, page: f64, boot_time: f64) -> Option<Reading> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from the 3rd (state) on: utime is the 14th, stime the 15th,
    // starttime the 22nd, vsize the 23rd, rss the 24th.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| -> Option<f64> { f.get(n - 3)?.parse().ok() };
    Some(Reading {
        cpu_seconds: (at(14)? + at(15)?) / ticks,
        start_time_seconds: boot_time + at(22)? / ticks,
        virtual_bytes: at(23)?,
        resident_bytes: at(24)? * page,
    })
}

/// The `btime` line of `/proc/stat`: the boot time, Unix seconds.
pub fn parse_boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(target_os = "linux")]
fn read() -> (Option<Reading>, Option<f64>, Option<f64>) {
    // SAFETY: sysconf only reads configuration values.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let reading = (|| {
        let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        parse_stat(&stat, ticks as f64, page as f64, boot)
    })();
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the struct it is given.
    let max = (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0)
        .then_some(limit.rlim_cur as f64);
    (reading, open, max)
}

#[cfg(not(target_os = "linux"))]
fn read() -> (Option<Reading>, Option<f64>, Option<f64>) {
    (None, None, None)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (reading, open, max) = read();
        if let Some(r) = reading {
            let c = ConstCounter::new(r.cpu_seconds);
            c.encode(e.encode_descriptor(
                "process_cpu_seconds",
                "user and system CPU time spent, in seconds",
                None,
                c.metric_type(),
            )?)?;
            gauge(
                &mut e,
                "process_resident_memory_bytes",
                "resident memory size in bytes",
                r.resident_bytes,
            )?;
            gauge(
                &mut e,
                "process_virtual_memory_bytes",
                "virtual memory size in bytes",
                r.virtual_bytes,
            )?;
            gauge(
                &mut e,
                "process_start_time_seconds",
                "start time of the process since the Unix epoch, in seconds",
                r.start_time_seconds,
            )?;
        }
        if let Some(n) = open {
            gauge(&mut e, "process_open_fds", "open file descriptors", n)?;
        }
        if let Some(n) = max {
            gauge(&mut e, "process_max_fds", "most open file descriptors", n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields are counted from after the command's last `)`, so a command
    /// holding spaces and parentheses does not shift them.
    #[test]
    fn stat_fields_are_read_after_the_command() {
        let mut stat = String::from("4242 (tally (x) y) S");
        // Fields 4..=24: field n holds n, except those set below.
        for n in 4..=24 {
            let v = match n {
                14 => 250, // utime ticks
                15 => 150, // stime ticks
                22 => 1000,
                23 => 123_456,
                24 => 10, // rss pages
                _ => n,
            };
            stat.push_str(&format!(" {v}"));
        }
        let r = parse_stat(&stat, 100.0, 4096.0, 1_700_000_000.0).unwrap();
        assert_eq!(r.cpu_seconds, 4.0);
        assert_eq!(r.start_time_seconds, 1_700_000_010.0);
        assert_eq!(r.virtual_bytes, 123_456.0);
        assert_eq!(r.resident_bytes, 40_960.0);
        assert_eq!(parse_stat("1 (x) S 2", 100.0, 4096.0, 0.0), None);
    }

    #[test]
    fn boot_time_is_the_btime_line() {
        assert_eq!(
            parse_boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000.0)
        );
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }
}

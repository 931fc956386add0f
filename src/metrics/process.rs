//! The standard `process_*` metrics (Prometheus client guidelines: start time, CPU seconds,
//! resident memory, open and maximum file descriptors), read from `/proc/self` at every scrape.
//! prometheus-client has no process collector of its own, and the few reads below are cheaper
//! than a crate.
//!
//! Owns reading and parsing those files (the parsing pure, tested on fixed text). Does not own
//! the registry (`metrics`). Off Linux, or when a file cannot be read, the metric is left out.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The collector: `/proc/self` read at every scrape.
#[derive(Debug)]
pub(super) struct Process;

/// One reading of the process.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    start_time_seconds: Option<f64>,
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl Reading {
    fn now() -> Reading {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let ticks = rustix::param::clock_ticks_per_second();
        let stat = read("/proc/self/stat").and_then(|s| Stat::parse(&s));
        let boot = read("/proc/stat").and_then(|s| boot_time(&s));
        Reading {
            start_time_seconds: stat
                .as_ref()
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / ticks as f64),
            cpu_seconds: stat
                .as_ref()
                .map(|s| (s.utime + s.stime) as f64 / ticks as f64),
            resident_bytes: stat
                .as_ref()
                .map(|s| s.rss_pages * rustix::param::page_size() as u64),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: read("/proc/self/limits").and_then(|s| max_open_files(&s)),
        }
    }
}

/// The fields of `/proc/self/stat` we export (proc(5)): times in clock ticks, RSS in pages.
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    rss_pages: u64,
}

impl Stat {
    /// Parses the line; the command name (field 2) may hold spaces and parentheses, so fields
    /// are counted from the last `)`.
    fn parse(line: &str) -> Option<Stat> {
        let rest = &line[line.rfind(')')? + 1..];
        // After `)`: field 3 (state) is index 0, so field n is index n - 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: num(14)?,
            stime: num(15)?,
            start_ticks: num(22)?,
            rss_pages: num(24)?,
        })
    }
}

/// `btime` of `/proc/stat`: boot time in Unix seconds.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let r = Reading::now();
        let gauges = [
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                r.start_time_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                r.resident_bytes.map(|b| b as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                r.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                r.max_fds.map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let m = encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    ConstGauge::new(v).metric_type(),
                )?;
                ConstGauge::new(v).encode(m)?;
            }
        }
        if let Some(v) = r.cpu_seconds {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?;
            c.encode(m)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_from_fixed_text() {
        let line = "4242 (ready prism) S 1 4242 4242 0 -1 4194560 1183 0 0 0 25 7 0 0 20 0 3 0 \
                    9001 12345678 1536 18446744073709551615 1 1 0 0 0 0 0 4096 17642 0 0 0 17";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                utime: 25,
                stime: 7,
                start_ticks: 9001,
                rss_pages: 1536
            })
        );
        assert_eq!(Stat::parse("garbage"), None);
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1764900000\nprocesses 9\n"),
            Some(1_764_900_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

    #[test]
    fn this_process_reads_as_alive() {
        let r = Reading::now();
        assert!(r.open_fds.is_some_and(|n| n >= 3), "{r:?}");
        assert!(r.resident_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.start_time_seconds.is_some_and(|t| t > 1.7e9), "{r:?}");
        assert!(r.cpu_seconds.is_some(), "{r:?}");
    }
}

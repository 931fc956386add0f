//! The table's rows: every metric the bench reports, in table order, with its scenario, unit and
//! goal, and the 64 B round trips kept for the picture.
//!
//! Does not own how a value is measured (`rounds`, `load`), nor how a row is judged and printed
//! (`report`).

use std::collections::BTreeMap;

use crate::report::{Goal, Metric};
use crate::targets::Kind;

/// Every metric, in table order.
pub struct Metrics {
    /// By short key.
    pub all: Vec<(&'static str, Metric)>,
    /// Every 64 B round trip (ns), per target, for the picture.
    pub rtt64: BTreeMap<Kind, Vec<u64>>,
}

impl Metrics {
    /// The empty table.
    pub fn new() -> Metrics {
        use Goal::*;
        let m = Metric::new;
        let small = "small round trip, open connection";
        let all = vec![
            (
                "rtt64_p50",
                m(small, "64 B added latency p50", "µs", RatioAtMost(1.0)),
            ),
            (
                "rtt64_p99",
                m(small, "64 B added latency p99", "µs", RatioAtMost(1.1)),
            ),
            (
                "rtt1k_p50",
                m(small, "1 KiB added latency p50", "µs", RatioAtMost(1.0)),
            ),
            (
                "rtt1k_p99",
                m(small, "1 KiB added latency p99", "µs", RatioAtMost(1.1)),
            ),
            (
                "conn_p50",
                m("connect + first byte", "p50", "µs", RatioAtMost(1.0)),
            ),
            ("conn_p99", m("connect + first byte", "p99", "µs", None)),
            (
                "conn_cpu",
                m(
                    "connect + first byte",
                    "proxy CPU per connection",
                    "µs",
                    None,
                ),
            ),
            (
                "conn_wait",
                m(
                    "connect + first byte",
                    "proxy run-queue wait per connection",
                    "µs",
                    None,
                ),
            ),
            (
                "conn_runs",
                m(
                    "connect + first byte",
                    "proxy put on a CPU per connection (after a sleep or a preemption)",
                    "times",
                    None,
                ),
            ),
            (
                "conn_sleeps",
                m(
                    "connect + first byte",
                    "proxy sleeps per connection",
                    "times",
                    None,
                ),
            ),
            (
                "down_mbs",
                m("bulk 64 MiB", "download", "MB/s", RatioAtLeast(1.4)),
            ),
            (
                "up_mbs",
                m("bulk 64 MiB", "upload", "MB/s", RatioAtLeast(1.4)),
            ),
            (
                "down_cpu",
                m(
                    "bulk 64 MiB",
                    "download proxy CPU",
                    "s/GiB",
                    RatioAtMost(0.5),
                ),
            ),
            (
                "up_cpu",
                m("bulk 64 MiB", "upload proxy CPU", "s/GiB", RatioAtMost(0.5)),
            ),
            (
                "down_cpu_stat",
                m(
                    "bulk 64 MiB",
                    "download proxy CPU, utime+stime",
                    "s/GiB",
                    None,
                ),
            ),
            (
                "up_cpu_stat",
                m(
                    "bulk 64 MiB",
                    "upload proxy CPU, utime+stime",
                    "s/GiB",
                    None,
                ),
            ),
            (
                "conc_rps",
                m(
                    "1000 conns × 20 round trips",
                    "requests/s",
                    "1/s",
                    RatioAtLeast(1.1),
                ),
            ),
            (
                "conc_p99",
                m(
                    "1000 conns × 20 round trips",
                    "p99",
                    "µs",
                    RatioAtMost(1.0 / 1.1),
                ),
            ),
            (
                "conc_cpu",
                m(
                    "1000 conns × 20 round trips",
                    "proxy CPU per request",
                    "µs",
                    None,
                ),
            ),
            (
                "conc_segs",
                m(
                    "1000 conns × 20 round trips",
                    "TCP segments sent on loopback per request (all parties)",
                    "segments",
                    None,
                ),
            ),
            (
                "idle_rss",
                m(
                    "5000 idle connections",
                    "RSS per connection",
                    "B",
                    RatioAtMost(0.5),
                ),
            ),
            (
                "idle_fds",
                m(
                    "5000 idle connections",
                    "fds per connection",
                    "fds",
                    AbsExactly(2.0),
                ),
            ),
            (
                "churn_cps",
                m(
                    "5000 short connections",
                    "connections/s",
                    "1/s",
                    RatioAtLeast(1.0),
                ),
            ),
            (
                "churn_cpu",
                m(
                    "5000 short connections",
                    "proxy CPU per connection",
                    "µs",
                    None,
                ),
            ),
            (
                "churn_segs",
                m(
                    "5000 short connections",
                    "TCP segments sent on loopback per connection (all parties)",
                    "segments",
                    None,
                ),
            ),
            (
                "churn_rss",
                m(
                    "5000 short connections",
                    "RSS after − before",
                    "MB",
                    AbsAtMost(10.0),
                ),
            ),
            (
                "churn_fds",
                m(
                    "5000 short connections",
                    "fds after − before",
                    "fds",
                    AbsExactly(0.0),
                ),
            ),
            (
                "round_rss",
                m("whole round", "RSS at the end − at start", "MB", None),
            ),
            (
                "start",
                m("process start", "exec → accepting", "ms", AbsAtMost(20.0)),
            ),
        ];
        Metrics {
            all,
            rtt64: BTreeMap::new(),
        }
    }

    pub fn push(&mut self, key: &str, kind: Kind, v: f64) {
        let (_, m) = self
            .all
            .iter_mut()
            .find(|(k, _)| *k == key)
            .expect("known metric key");
        m.push(kind, v);
    }
}

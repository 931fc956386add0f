//! What a real-lab phase came to, from the records: the lease client's request lines, the
//! balancer's connection records and the Node's `Ready` condition. Pure: records in, figures out;
//! times are wall-clock seconds.

use crate::partition::balancer_log::Ended;

/// One phase of the run: its name and when it began and ended.
#[derive(Clone, Debug)]
pub struct Phase {
    pub name: &'static str,
    pub from: f64,
    pub to: f64,
}

/// The figures of one phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Figures {
    pub phase: &'static str,
    /// The longest time without a successful lease renewal that overlaps the phase, in seconds.
    pub longest_lease_gap: f64,
    /// Requests of the client (lease and main) that failed in the phase.
    pub failed_requests: usize,
    /// Connections the balancer closed in the phase, by reason.
    pub closes: std::collections::BTreeMap<String, usize>,
}

/// The end time of every successful lease renewal (a `PUT` of the Lease, or the `POST` that
/// creates it), in order. A `GET` proves nothing: one from the watch cache succeeds on an
/// apiserver without quorum.
pub fn lease_oks(lines: &[serde_json::Value]) -> Vec<f64> {
    let mut oks: Vec<f64> = lines
        .iter()
        .filter(|l| {
            l["client"] == "lease"
                && (l["method"] == "PUT" || l["method"] == "POST")
                && l["status"]
                    .as_u64()
                    .is_some_and(|s| (200..300).contains(&s))
        })
        .filter_map(|l| Some(l["start"].as_f64()? + l["seconds"].as_f64()?))
        .collect();
    oks.sort_by(f64::total_cmp);
    oks
}

/// Whether a request line failed: an error, or a 5xx or 429 answer.
fn failed(l: &serde_json::Value) -> bool {
    l.get("error").is_some() || l["status"].as_u64().is_some_and(|s| s >= 500 || s == 429)
}

/// The figures of `phase`.
pub fn figures(phase: &Phase, lines: &[serde_json::Value], ended: &[Ended]) -> Figures {
    let oks = lease_oks(lines);
    let mut longest: f64 = 0.0;
    for w in oks.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b >= phase.from && a <= phase.to {
            longest = longest.max(b - a);
        }
    }
    // A gap still open when the phase ends.
    if let Some(&last) = oks.iter().rfind(|&&t| t <= phase.to) {
        if !oks.iter().any(|&t| t > last && t <= phase.to) {
            longest = longest.max(phase.to - last);
        }
    }
    let in_phase = |t: f64| t >= phase.from && t <= phase.to;
    let failed_requests = lines
        .iter()
        .filter(|l| l["start"].as_f64().is_some_and(in_phase) && failed(l))
        .count();
    let mut closes = std::collections::BTreeMap::new();
    for e in ended
        .iter()
        .filter(|e| e.ended_by == "balancer" && in_phase(e.t))
    {
        *closes.entry(e.reason.clone()).or_insert(0) += 1;
    }
    Figures {
        phase: phase.name,
        longest_lease_gap: longest,
        failed_requests,
        closes,
    }
}

/// The Node's `Ready` condition: its status and when it last changed (Unix seconds).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ready {
    pub status: String,
    pub reason: String,
    pub since: f64,
}

/// The `Ready` condition of a Node object.
pub fn ready(node: &serde_json::Value) -> Option<Ready> {
    let c = node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some(Ready {
        status: c["status"].as_str()?.to_string(),
        reason: c["reason"].as_str().unwrap_or_default().to_string(),
        since: rfc3339(c["lastTransitionTime"].as_str()?)?,
    })
}

/// `2026-12-07T06:52:30Z` as Unix seconds.
fn rfc3339(t: &str) -> Option<f64> {
    crate::partition::balancer_log::parse_timestamp(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(start: f64, ok: bool) -> serde_json::Value {
        if ok {
            serde_json::json!({"client": "lease", "method": "PUT", "start": start, "seconds": 0.01, "status": 200})
        } else {
            serde_json::json!({"client": "lease", "method": "PUT", "start": start, "seconds": 10.0, "error": "timeout"})
        }
    }

    #[test]
    fn real_lab_figures_count_the_gap_failures_and_closes_of_a_phase() {
        // A GET answered from the watch cache renews nothing.
        let cached = serde_json::json!({"client": "lease", "method": "GET", "start": 25.0, "seconds": 0.01, "status": 200});
        let lines = vec![
            cached,
            lease(0.0, true),
            lease(10.0, true),
            lease(20.0, false),
            lease(30.0, true),
            lease(40.0, true),
        ];
        let ended = vec![
            Ended {
                t: 25.0,
                backend: "10.77.2.1:6443".into(),
                ended_by: "balancer".into(),
                reason: "turned_unready".into(),
            },
            Ended {
                t: 26.0,
                backend: "10.77.2.1:6443".into(),
                ended_by: "client".into(),
                reason: String::new(),
            },
        ];
        let phase = Phase {
            name: "fault",
            from: 15.0,
            to: 35.0,
        };
        let f = figures(&phase, &lines, &ended);
        assert!((f.longest_lease_gap - 20.0).abs() < 0.1, "{f:?}");
        assert_eq!(f.failed_requests, 1);
        assert_eq!(f.closes.get("turned_unready"), Some(&1));
        assert_eq!(f.closes.len(), 1);
        // A gap still open at the phase's end counts to the end.
        let open = Phase {
            name: "open",
            from: 45.0,
            to: 100.0,
        };
        assert!((figures(&open, &lines, &[]).longest_lease_gap - 60.0).abs() < 0.1);
    }

    #[test]
    fn real_lab_reads_the_nodes_ready_condition() {
        let node = serde_json::json!({"status": {"conditions": [
            {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2026-12-07T06:00:00Z"},
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "lastTransitionTime": "2026-12-07T06:52:30Z"}]}});
        let r = ready(&node).expect("Ready");
        assert_eq!(r.status, "Unknown");
        assert_eq!(r.reason, "NodeStatusUnknown");
        assert_eq!(rfc3339("2026-12-07T06:52:30Z"), Some(r.since));
    }
}

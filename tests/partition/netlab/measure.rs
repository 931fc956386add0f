//! Figures of the lab's links: ping and TCP connect times between hosts, through
//! `tests/lab/netprobe.py` in a host's namespace, and the probe echo listener they connect to.

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::time::Instant;

use super::{lab_dir, Host, NetLab};
use crate::support::netns::{check, output_within};

/// TCP port of the probe echo listener that [`NetLab::measure`] starts on demand.
pub const PROBE_PORT: u16 = 7900;

/// Measured figures for one direction of one host pair.
#[derive(Clone, Debug)]
pub struct LinkFigures {
    pub from: Host,
    pub to: Host,
    /// The round trip the lab is configured to add.
    pub target: Duration,
    pub ping_ms: Vec<f64>,
    pub ping_lost: usize,
    /// TCP connect (SYN → SYN-ACK) times.
    pub connect_ms: Vec<f64>,
    pub connect_errors: Vec<String>,
}

impl LinkFigures {
    pub fn ping_median(&self) -> f64 {
        median(&self.ping_ms)
    }

    pub fn connect_median(&self) -> f64 {
        median(&self.connect_ms)
    }

    /// One line: `node -> dc-a  target 43.0 ms  ping min/med/max 43.1/43.3/44.0 ms (0 lost) ...`.
    pub fn line(&self) -> String {
        let (pmin, pmax) = min_max(&self.ping_ms);
        let (cmin, cmax) = min_max(&self.connect_ms);
        format!(
            "{:>7} -> {:<7} target {:>5.1} ms | ping min/med/max {:>5.1}/{:>5.1}/{:>5.1} ms ({} lost) | connect min/med/max {:>5.1}/{:>5.1}/{:>5.1} ms ({} failed)",
            self.from.name(),
            self.to.name(),
            self.target.as_secs_f64() * 1000.0,
            pmin,
            self.ping_median(),
            pmax,
            self.ping_lost,
            cmin,
            self.connect_median(),
            cmax,
            self.connect_errors.len(),
        )
    }
}

/// The median of some samples (NaN if there are none).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::NAN, f64::NAN), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

impl NetLab {
    /// Runs `tests/lab/netprobe.py ARGS` in a host's namespace and parses its JSON line.
    pub fn netprobe(
        &self,
        host: Host,
        args: &[&str],
        timeout: Duration,
    ) -> Result<serde_json::Value, String> {
        let script = lab_dir().join("netprobe.py");
        let mut cmd = self.command(host, "python3");
        cmd.arg(script).args(args);
        let out = output_within(&mut cmd, timeout)?;
        let text = check(&format!("netprobe {args:?} in {}", host.name()), &out)?;
        serde_json::from_str(text.trim()).map_err(|e| format!("netprobe output {text:?}: {e}"))
    }

    /// ICMP echo RTTs from one host to another, 20 ms apart, each reply awaited up to `timeout`:
    /// (samples in ms, number lost).
    pub fn ping(&self, from: Host, to: Host, count: usize, timeout: Duration) -> (Vec<f64>, usize) {
        let budget = Duration::from_secs(5) + (timeout + Duration::from_millis(50)) * count as u32;
        let args = [
            "ping".to_string(),
            to.ip().to_string(),
            count.to_string(),
            "0.02".to_string(),
            timeout.as_secs_f64().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = self
            .netprobe(from, &args, budget)
            .unwrap_or_else(|e| panic!("ping {} -> {}: {e}", from.name(), to.name()));
        let samples = v["rtt_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        (samples, v["lost"].as_u64().unwrap_or(0) as usize)
    }

    /// TCP connect times from a host to `ip:port`: (samples in ms, errors).
    pub fn connect_times(
        &self,
        from: Host,
        ip: Ipv4Addr,
        port: u16,
        count: usize,
        timeout: Duration,
    ) -> (Vec<f64>, Vec<String>) {
        let budget = Duration::from_secs(5) + timeout * count as u32 * 2;
        let v = self
            .netprobe(
                from,
                &[
                    "connect",
                    &ip.to_string(),
                    &port.to_string(),
                    &count.to_string(),
                    &timeout.as_secs_f64().to_string(),
                ],
                budget,
            )
            .unwrap_or_else(|e| panic!("connect {} -> {ip}:{port}: {e}", from.name()));
        let samples = v["connect_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        let errors = v["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        (samples, errors)
    }

    /// Starts (once) a TCP echo listener on `host:PROBE_PORT` and waits until it accepts.
    pub fn ensure_probe_listener(&self, host: Host) {
        let mut listeners = self.listeners.lock().expect("listeners");
        if listeners.contains_key(&host) {
            return;
        }
        let mut cmd = self.command(host, "python3");
        cmd.arg("-u")
            .arg(lab_dir().join("netprobe.py"))
            .arg("listen")
            .arg(host.ip().to_string())
            .arg(PROBE_PORT.to_string());
        let proc = self
            .spawn(&format!("listen-{}", host.name()), cmd)
            .expect("spawn probe listener");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !proc.log_text().contains("ready") {
            assert!(
                Instant::now() < deadline,
                "probe listener in {} did not start: {}",
                host.name(),
                proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        listeners.insert(host, proc);
    }

    /// Pings and TCP-connects (to the probe listener) from one host to another, `count` each.
    pub fn measure(&self, from: Host, to: Host, count: usize) -> LinkFigures {
        self.ensure_probe_listener(to);
        let (ping_ms, ping_lost) = self.ping(from, to, count, Duration::from_secs(1));
        let (connect_ms, connect_errors) =
            self.connect_times(from, to.ip(), PROBE_PORT, count, Duration::from_secs(2));
        LinkFigures {
            from,
            to,
            target: self.rtts.between(from, to),
            ping_ms,
            ping_lost,
            connect_ms,
            connect_errors,
        }
    }

    /// ICMP echo requests a host has received so far (`/proc/net/snmp` `Icmp: InEchos`), to see a
    /// one-way path work when the replies cannot come back.
    pub fn icmp_echos_received(&self, host: Host) -> u64 {
        let out = self
            .output(
                host,
                "cat",
                &["/proc/net/snmp"],
                &[],
                Duration::from_secs(5),
            )
            .expect("read /proc/net/snmp");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut icmp = text.lines().filter(|l| l.starts_with("Icmp:"));
        let (names, values) = (icmp.next().unwrap_or(""), icmp.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "InEchos")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    }
}

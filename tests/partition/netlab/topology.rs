//! Building the lab's network: the namespaces, the bridge and one veth per host, then per host the
//! base iptables rules (the `RP-FAULT` jump, the NFQUEUE delay queues) and its `nfq_delay.py`
//! helper. It does not own the lab's lifecycle (`lifecycle.rs`) or its faults (`faults.rs`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use super::{lab_dir, Host, LabProcess, NetLab};
use crate::support::netns::{self, check, run};

impl NetLab {
    pub(super) fn build(&mut self) -> Result<(), String> {
        let br = self.bridge_ns();
        for host in Host::ALL {
            netns::add(&self.ns(host))?;
        }
        run(&["ip", "-n", &br, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        for host in Host::ALL {
            let ns = self.ns(host);
            let port = format!("v-{}", host.name());
            let addr = format!("{}/16", host.ip());
            netns::veth(&br, &port, "eth0", &ns)?;
            run(&["ip", "-n", &br, "link", "set", &port, "master", "br0", "up"])?;
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        for host in Host::ALL {
            self.install_delay(host)?;
        }
        Ok(())
    }

    /// Base rules of one host (fault chain, delay queues) and its delay helper.
    fn install_delay(&mut self, host: Host) -> Result<(), String> {
        // Distinct one-way delays (µs) from this host's far peers: one queue each.
        let mut queues: BTreeMap<u128, (u16, Vec<Host>)> = BTreeMap::new();
        for peer in Host::ALL.into_iter().filter(|&p| p != host) {
            let one_way = self.rtts.between(host, peer).as_micros() / 2;
            if one_way > 0 {
                let next = queues.len() as u16 + 1;
                queues
                    .entry(one_way)
                    .or_insert((next, Vec::new()))
                    .1
                    .push(peer);
            }
        }
        let mut rules = String::from("*filter\n:RP-FAULT - [0:0]\n-A INPUT -j RP-FAULT\n");
        for (num, peers) in queues.values() {
            for peer in peers {
                rules.push_str(&format!(
                    "-A INPUT -i eth0 -s {}/32 -j NFQUEUE --queue-num {num} --queue-bypass\n",
                    peer.ip()
                ));
            }
        }
        rules.push_str("COMMIT\n");

        if !queues.is_empty() {
            // Bind the queues before any packet is sent to them (bypass would let it through).
            let mut cmd = self.command(host, "python3");
            cmd.arg("-u").arg(lab_dir().join("nfq_delay.py"));
            for (one_way, (num, _)) in &queues {
                cmd.arg("--queue")
                    .arg(format!("{num}:{:.3}", *one_way as f64 / 1000.0));
            }
            let log = self.path(&format!("delay-{}.log", host.name()));
            let log_file = std::fs::File::create(&log).map_err(|e| format!("{log:?}: {e}"))?;
            let mut child = cmd
                .stdin(Stdio::piped()) // EOF when this process dies: the helper exits
                .stdout(Stdio::piped())
                .stderr(log_file)
                .spawn()
                .map_err(|e| format!("spawn nfq_delay.py: {e}"))?;
            let stdout = child.stdout.take().expect("stdout");
            let proc = LabProcess {
                child,
                log: log.clone(),
            };
            self.delayers.push(proc);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send(line);
            });
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(line) if line.trim() == "ready" => {}
                other => {
                    return Err(format!(
                        "nfq_delay.py in {} did not start ({other:?}): {}",
                        host.name(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    ))
                }
            }
        }
        let mut restore = self.command(host, "iptables-restore");
        restore
            .arg("-w")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = restore
            .spawn()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .map_err(|e| format!("iptables-restore: {e}"))?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        check(&format!("iptables-restore in {}", host.name()), &out)?;
        Ok(())
    }
}

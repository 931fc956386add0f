//! A real three-member etcd cluster (Debian's etcd 3.4), one member per site namespace, peers
//! over the lab's delayed links. Members are named after their site (`dc-a`, `dc-b`, `witness`),
//! serve clients on `http://<site ip>:2379` and `http://127.0.0.1:2379` inside their namespace,
//! and run with `--pre-vote` (CheckQuorum is always on in etcd): a member cut off from the leader
//! stays without one, as in the field report, instead of disrupting the quorum.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::netlab::{lab_print, on_path, skip, Host, LabProcess, NetLab};

mod read;

pub use read::{read, spawn_read, ReadResult};

pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// The client URL of a site's etcd member, reachable from every lab namespace (from its own site
/// without added delay). Panics for the node, which has no member.
pub fn client_url(site: Host) -> String {
    assert!(site != Host::Node, "the node runs no etcd member");
    format!("http://{}:{CLIENT_PORT}", site.ip())
}

/// The peer URL of a site's etcd member.
pub fn peer_url(site: Host) -> String {
    assert!(site != Host::Node, "the node runs no etcd member");
    format!("http://{}:{PEER_PORT}", site.ip())
}

/// One member's own view (`etcdctl endpoint status` against itself).
#[derive(Clone, Debug)]
pub struct MemberStatus {
    /// The leader it follows; `None` while it has none.
    pub leader: Option<Host>,
    pub raft_term: u64,
}

/// The running cluster; members are killed on drop (and with the lab anyway), then their data
/// (on /dev/shm) is removed.
pub struct EtcdCluster<'a> {
    lab: &'a NetLab,
    members: BTreeMap<Host, LabProcess>,
    ids: BTreeMap<u64, Host>,
    _data: tempfile::TempDir,
}

impl<'a> EtcdCluster<'a> {
    /// Starts the three members (without waiting: see [`EtcdCluster::wait_healthy`]), or returns
    /// `None` after printing why it is skipped (etcd not installed) unless
    /// `READYPRISM_REQUIRE_NETNS=1`, which makes that a failure.
    /// `flags` go to every member (`--election-timeout 10000`).
    pub fn start(lab: &'a NetLab, test: &str, flags: &[&str]) -> Option<EtcdCluster<'a>> {
        EtcdCluster::start_bin(lab, test, flags, std::path::Path::new("etcd"))
    }

    /// [`EtcdCluster::start`] with the members' binary `etcd` (the real parts' etcd 3.7; the
    /// health checks still use `etcdctl` from the path).
    pub fn start_bin(
        lab: &'a NetLab,
        test: &str,
        flags: &[&str],
        etcd: &std::path::Path,
    ) -> Option<EtcdCluster<'a>> {
        for tool in ["etcd", "etcdctl"] {
            if !on_path(tool) {
                skip(
                    test,
                    &format!("`{tool}` is not installed (Debian etcd-server, etcd-client)"),
                );
                return None;
            }
        }
        // Data on tmpfs: fsync latency of the disk is not what the lab measures.
        let shm = std::path::Path::new("/dev/shm");
        // Named after the lab, so that its cleanup removes it even after the test process died.
        let name = format!("{}-etcd-", lab.prefix());
        let builder = {
            let mut b = tempfile::Builder::new();
            b.prefix(&name);
            b
        };
        let data = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .expect("etcd data dir");
        let initial_cluster = Host::SITES
            .iter()
            .map(|s| format!("{}={}", s.name(), peer_url(*s)))
            .collect::<Vec<_>>()
            .join(",");
        let token = lab.ns(Host::Node);
        let mut members = BTreeMap::new();
        for site in Host::SITES {
            let dir: PathBuf = data.path().join(site.name());
            let mut cmd = lab.command(site, etcd);
            cmd.args(["--name", site.name()])
                .arg("--data-dir")
                .arg(&dir)
                .args(["--listen-peer-urls", &peer_url(site)])
                .args(["--initial-advertise-peer-urls", &peer_url(site)])
                .args([
                    "--listen-client-urls",
                    &format!("{},http://127.0.0.1:{CLIENT_PORT}", client_url(site)),
                ])
                .args(["--advertise-client-urls", &client_url(site)])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &token])
                .args(["--pre-vote=true", "--logger=zap", "--log-outputs=stderr"])
                .args(flags);
            // Only our flags count: no ETCD_* from the environment.
            for (k, _) in std::env::vars() {
                if k.starts_with("ETCD") {
                    cmd.env_remove(k);
                }
            }
            let proc = lab
                .spawn(&format!("etcd-{}", site.name()), cmd)
                .expect("spawn etcd");
            members.insert(site, proc);
        }
        Some(EtcdCluster {
            lab,
            members,
            ids: BTreeMap::new(),
            _data: data,
        })
    }

    /// Sends `signal` (`STOP`, `CONT`) to a member.
    pub fn signal(&self, site: Host, signal: &str) -> Result<(), String> {
        self.members[&site].signal(signal)
    }

    /// All client URLs, comma-separated (for `--endpoints`).
    pub fn endpoints(&self) -> String {
        Host::SITES
            .iter()
            .map(|s| client_url(*s))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The member's log so far.
    pub fn member_log(&self, site: Host) -> String {
        self.members
            .get(&site)
            .map(|p| p.log_text())
            .unwrap_or_default()
    }

    fn etcdctl(&self, from: Host, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["--command-timeout=2s", "--dial-timeout=2s"];
        all.extend_from_slice(args);
        let out = self.lab.output(
            from,
            "etcdctl",
            &all,
            &[("ETCDCTL_API", "3")],
            Duration::from_secs(10),
        )?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "etcdctl {args:?} in {}: {}",
                from.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn load_ids(&mut self) -> Result<(), String> {
        let text = self.etcdctl(
            Host::Witness,
            &[
                "--endpoints",
                &client_url(Host::Witness),
                "member",
                "list",
                "-w",
                "json",
            ],
        )?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("member list {text:?}: {e}"))?;
        let mut ids = BTreeMap::new();
        for m in v["members"].as_array().into_iter().flatten() {
            let id = m["ID"].as_u64().ok_or("member without ID")?;
            let name = m["name"].as_str().unwrap_or_default();
            if let Some(site) = Host::SITES.into_iter().find(|s| s.name() == name) {
                ids.insert(id, site);
            }
        }
        if ids.len() != 3 {
            return Err(format!(
                "member list names {} of 3 members: {text}",
                ids.len()
            ));
        }
        self.ids = ids;
        Ok(())
    }

    fn id_of(&self, site: Host) -> Option<u64> {
        self.ids
            .iter()
            .find(|(_, s)| **s == site)
            .map(|(id, _)| *id)
    }

    /// A member's own view of the cluster, asked of that member from its own namespace.
    pub fn status(&self, site: Host) -> Result<MemberStatus, String> {
        let text = self.etcdctl(
            site,
            &[
                "--endpoints",
                &client_url(site),
                "endpoint",
                "status",
                "-w",
                "json",
            ],
        )?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("endpoint status {text:?}: {e}"))?;
        let s = &v[0]["Status"];
        let leader = s["leader"].as_u64().unwrap_or(0);
        Ok(MemberStatus {
            leader: self.ids.get(&leader).copied(),
            raft_term: s["raftTerm"].as_u64().unwrap_or(0),
        })
    }

    /// The leader, if a majority of members follow the same one.
    pub fn leader(&self) -> Option<Host> {
        let mut votes: BTreeMap<Host, usize> = BTreeMap::new();
        for site in Host::SITES {
            if let Ok(MemberStatus {
                leader: Some(l), ..
            }) = self.status(site)
            {
                *votes.entry(l).or_default() += 1;
            }
        }
        votes.into_iter().find(|(_, n)| *n >= 2).map(|(l, _)| l)
    }

    /// A linearizable read against one member, from its own site ([`read`]).
    pub fn linearizable_read(&self, site: Host) -> ReadResult {
        read(self.lab, site)
    }

    /// Waits until every member follows the same leader and answers a linearizable read; returns
    /// how long that took.
    pub fn wait_healthy(&mut self, timeout: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            if self.ids.is_empty() {
                if let Err(e) = self.load_ids() {
                    last = e;
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
            let views: Vec<_> = Host::SITES.iter().map(|s| self.status(*s)).collect();
            let leaders: Vec<_> = views
                .iter()
                .map(|v| v.as_ref().ok().and_then(|s| s.leader))
                .collect();
            if leaders[0].is_some() && leaders.iter().all(|l| *l == leaders[0]) {
                let reads: Vec<_> = Host::SITES
                    .iter()
                    .map(|s| self.linearizable_read(*s))
                    .collect();
                if reads.iter().all(|r| r.ok) {
                    return Ok(started.elapsed());
                }
                last = format!("reads: {reads:?}");
            } else {
                last = format!("views: {views:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "etcd not healthy within {timeout:?}: {last}\n{}",
            self.logs_tail(20)
        ))
    }

    /// Moves the leadership to `to` (`etcdctl move-leader`) and waits until a majority follows it.
    pub fn move_leader(&self, to: Host, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let target = self
            .id_of(to)
            .ok_or("member ids unknown: wait_healthy first")?;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.leader() {
                Some(l) if l == to => return Ok(()),
                Some(l) => {
                    // Asked of the leader itself, from its own namespace.
                    let endpoints = format!("{},{}", client_url(l), self.endpoints());
                    if let Err(e) = self.etcdctl(
                        l,
                        &[
                            "--endpoints",
                            &endpoints,
                            "move-leader",
                            &format!("{target:x}"),
                        ],
                    ) {
                        last = e;
                    }
                }
                None => last = "no leader".into(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "leader not moved to {} within {timeout:?}: {last}",
            to.name()
        ))
    }

    /// The last `n` lines of every member's log.
    pub fn logs_tail(&self, n: usize) -> String {
        let mut out = String::new();
        for site in Host::SITES {
            let log = self.member_log(site);
            let lines: Vec<_> = log.lines().collect();
            out.push_str(&format!("--- etcd {} (last {n} lines)\n", site.name()));
            for l in &lines[lines.len().saturating_sub(n)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Prints every member's view, for a test's figures.
    pub fn print_views(&self, label: &str) {
        let mut text = format!("etcd views {label}:");
        for site in Host::SITES {
            match self.status(site) {
                Ok(s) => text.push_str(&format!(
                    " {}: leader {} term {};",
                    site.name(),
                    s.leader.map(Host::name).unwrap_or("none"),
                    s.raft_term
                )),
                Err(e) => text.push_str(&format!(" {}: {e};", site.name())),
            }
        }
        lab_print(&text);
    }
}

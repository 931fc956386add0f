//! What the applied faults mean for each site at a moment, the invariants' ground truth: `Good`
//! (reachable from the node, its etcd member surely in a quorum), `Bad` (unreachable from the
//! node, or its member stopped or cut off), or `Unsure` (lossy, or a peer fault whose effect on
//! raft depends on who leads). Pure: applied events and a time in, states out.
//!
//! Conservative on purpose: an invariant applies only where the model is sure, so that a
//! violation is readyprism's, not the model's guess.

use crate::partition::netlab::Host::{self, Node};

use super::schedule::{Event, Fault, Kind, Poke};

/// An event as the nemesis applied it: actual start and end (seconds from the schedule's start;
/// a poke's end is its start, a restart's when the new process listened), and the member a
/// `LeaderStopped` stopped.
#[derive(Clone, Debug)]
pub struct Applied {
    pub event: Event,
    pub start: f64,
    pub end: f64,
    pub resolved: Option<Host>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    Good,
    Unsure,
    Bad,
}

/// The fault's hosts as far as etcd's peer traffic goes (none for faults on the node's links
/// only), and whether it cuts the node's path to a site.
fn etcd_hosts(f: &Fault, resolved: Option<Host>) -> Vec<Host> {
    let sites = |hs: &[Host]| -> Vec<Host> { hs.iter().copied().filter(|h| *h != Node).collect() };
    match *f {
        Fault::NoQuorum(s) | Fault::EtcdStopped(s) | Fault::Isolated(s) => vec![s],
        Fault::LeaderStopped => resolved.into_iter().collect(),
        Fault::Cut(a, b) | Fault::OneWay(a, b) | Fault::Loss(a, b, _) => {
            if a == Node || b == Node {
                Vec::new()
            } else {
                sites(&[a, b])
            }
        }
        Fault::SynBlackHole(_) | Fault::GracefulRestart(_) | Fault::Unlisted(_) => Vec::new(),
    }
}

/// Whether a fault takes `site` down itself: its member stopped or cut from all peers, or its
/// apiserver restarting (shutting down, then gone until the heal starts it again). A site left
/// out of the Endpoints object is not down: it answers, with quorum.
fn member_down(f: &Fault, resolved: Option<Host>, site: Host) -> bool {
    match *f {
        Fault::NoQuorum(s)
        | Fault::EtcdStopped(s)
        | Fault::Isolated(s)
        | Fault::GracefulRestart(s) => s == site,
        Fault::LeaderStopped => resolved == Some(site),
        _ => false,
    }
}

/// The node's zone's site: a failback brings connections here.
pub const HOME: Host = Host::DcB;

/// The backends in the config with discovery on (`run.rs`): the sites an answer cannot remove.
pub const SEEDS: [Host; 2] = [Host::DcA, Host::Witness];

/// What a fault does to the node's path to `site`. A site the Endpoints object leaves out is
/// unsure unless it is a seed: the balancer removes it, rightly, and learns it again only at a
/// poll after it is listed again.
fn node_path(f: &Fault, site: Host) -> Site {
    let touches = |a: Host, b: Host| (a == Node && b == site) || (b == Node && a == site);
    match *f {
        Fault::Isolated(s) | Fault::SynBlackHole(s) if s == site => Site::Bad,
        Fault::Cut(a, b) | Fault::OneWay(a, b) if touches(a, b) => Site::Bad,
        Fault::Loss(a, b, _) if touches(a, b) => Site::Unsure,
        Fault::Unlisted(s) if s == site && !SEEDS.contains(&s) => Site::Unsure,
        _ => Site::Good,
    }
}

fn faults_at(applied: &[Applied], t: f64) -> Vec<(Fault, Option<Host>)> {
    applied
        .iter()
        .filter(|a| a.start <= t && t < a.end)
        .filter_map(|a| match a.event.kind {
            Kind::Fault(f) => Some((f, a.resolved)),
            Kind::Poke(_) => None,
        })
        .collect()
}

/// Each site's state at `t`.
pub fn sites_at(applied: &[Applied], t: f64) -> Vec<(Host, Site)> {
    let faults = faults_at(applied, t);
    let clean: Vec<Host> = Host::SITES
        .into_iter()
        .filter(|s| faults.iter().all(|(f, r)| !etcd_hosts(f, *r).contains(s)))
        .collect();
    Host::SITES
        .into_iter()
        .map(|site| {
            let path = faults
                .iter()
                .map(|(f, _)| node_path(f, site))
                .fold(Site::Good, worst);
            let down = faults.iter().any(|(f, r)| member_down(f, *r, site));
            let member = if down {
                Site::Bad
            } else if clean.contains(&site) && clean.len() >= 2 {
                Site::Good
            } else {
                Site::Unsure
            };
            (site, worst(path, member))
        })
        .collect()
}

fn worst(a: Site, b: Site) -> Site {
    match (a, b) {
        (Site::Bad, _) | (_, Site::Bad) => Site::Bad,
        (Site::Unsure, _) | (_, Site::Unsure) => Site::Unsure,
        _ => Site::Good,
    }
}

/// The moments the model can change: every start and end.
pub fn edges(applied: &[Applied]) -> Vec<f64> {
    let mut t: Vec<f64> = applied.iter().flat_map(|a| [a.start, a.end]).collect();
    t.sort_by(f64::total_cmp);
    t.dedup();
    t
}

/// The sites in state `want` throughout `[from, to]` (the model is constant between edges).
pub fn throughout(applied: &[Applied], (from, to): (f64, f64), want: Site) -> Vec<Host> {
    let mut probes = vec![from, to];
    probes.extend(edges(applied).into_iter().filter(|&e| e > from && e < to));
    Host::SITES
        .into_iter()
        .filter(|s| {
            probes.iter().all(|&t| {
                sites_at(applied, t)
                    .iter()
                    .any(|(h, st)| h == s && *st == want)
            })
        })
        .collect()
}

/// Restart windows: from the restart's start to when the new process listened.
pub fn restarts(applied: &[Applied]) -> Vec<(f64, f64)> {
    applied
        .iter()
        .filter(|a| a.event.kind == Kind::Poke(Poke::Restart))
        .map(|a| (a.start, a.end))
        .collect()
}

/// The end of the last fault (or 0).
pub fn last_heal(applied: &[Applied]) -> f64 {
    applied
        .iter()
        .filter(|a| matches!(a.event.kind, Kind::Fault(_)))
        .map(|a| a.end)
        .fold(0.0, f64::max)
}

mod tests {
    use super::*;
    use crate::partition::netlab::Host::{DcA, DcB, Witness};

    fn fault(f: Fault, start: f64, end: f64) -> Applied {
        Applied {
            event: Event {
                at: start,
                len: end - start,
                kind: Kind::Fault(f),
            },
            start,
            end,
            resolved: None,
        }
    }

    fn state(applied: &[Applied], t: f64, site: Host) -> Site {
        sites_at(applied, t)
            .into_iter()
            .find(|(h, _)| *h == site)
            .map(|(_, s)| s)
            .unwrap_or(Site::Unsure)
    }

    #[test]
    fn chaos_model_a_stopped_member_is_bad_while_the_others_stay_good() {
        let a = [fault(Fault::EtcdStopped(DcA), 1.0, 5.0)];
        assert_eq!(state(&a, 2.0, DcA), Site::Bad);
        assert_eq!(state(&a, 2.0, DcB), Site::Good);
        assert_eq!(state(&a, 6.0, DcA), Site::Good);
    }

    #[test]
    fn chaos_model_a_peer_cut_makes_both_ends_unsure() {
        let a = [fault(Fault::Cut(DcA, DcB), 0.0, 5.0)];
        assert_eq!(state(&a, 1.0, DcA), Site::Unsure);
        assert_eq!(state(&a, 1.0, DcB), Site::Unsure);
        assert_eq!(state(&a, 1.0, Witness), Site::Unsure);
        let b = [fault(Fault::Cut(Node, DcB), 0.0, 5.0)];
        assert_eq!(state(&b, 1.0, DcB), Site::Bad);
        assert_eq!(throughout(&b, (0.0, 4.0), Site::Good), vec![DcA, Witness]);
    }

    #[test]
    fn chaos_model_a_restarting_apiserver_is_bad_an_unlisted_seed_stays_good() {
        let a = [fault(Fault::GracefulRestart(DcB), 1.0, 15.0)];
        assert_eq!(state(&a, 2.0, DcB), Site::Bad);
        assert_eq!(state(&a, 2.0, DcA), Site::Good);
        assert_eq!(state(&a, 15.5, DcB), Site::Good);
        // A seed left out stays good; dc-b, known only from the list, is unsure meanwhile.
        let b = [fault(Fault::Unlisted(DcA), 1.0, 15.0)];
        assert_eq!(
            throughout(&b, (0.0, 16.0), Site::Good),
            vec![DcA, DcB, Witness]
        );
        let c = [fault(Fault::Unlisted(DcB), 1.0, 15.0)];
        assert_eq!(state(&c, 2.0, DcB), Site::Unsure);
        assert_eq!(throughout(&c, (0.0, 16.0), Site::Good), vec![DcA, Witness]);
    }
}

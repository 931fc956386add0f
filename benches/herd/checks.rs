//! What makes the run fail. Always: a result missing, a balancer process that died, and what
//! readyprism could have avoided whatever its closing rules (a refused dial while apiservers
//! accept, clients left unconnected at the end). With `HERD_ASSERT_GOALS=1` also readyprism's
//! goals for each fault (see `benches/README.md`).

use crate::fleet::Kind;
use crate::measure::Outcome;
use crate::scenario::Scenario;

/// Problems with the run itself, whatever the goals: one line each; empty when none.
pub fn always(scenarios: &[Scenario], kinds: &[Kind], outcomes: &[Outcome]) -> Vec<String> {
    let mut bad = Vec::new();
    for s in scenarios {
        for k in kinds {
            let Some(o) = find(outcomes, *s, *k) else {
                bad.push(format!("{} / {}: no result", s.name(), k.name()));
                continue;
            };
            if !o.balancers_alive {
                bad.push(format!(
                    "{} / {}: a balancer process died",
                    s.name(),
                    k.name()
                ));
            }
            if !matches!(k, Kind::Readyprism | Kind::Paced) {
                continue;
            }
            // Every scenario leaves at least two apiservers accepting and answering, and
            // readyprism fails open and dials the next candidate: a dial it refuses is one it
            // could have avoided.
            if o.dials_failed > 0 {
                bad.push(format!(
                    "{} / {}: refused {} client dial(s) while apiservers accepted",
                    s.name(),
                    k.name(),
                    o.dials_failed
                ));
            }
            if o.connected_at_end < o.clients {
                bad.push(format!(
                    "{} / {}: {} of {} clients not connected at the end",
                    s.name(),
                    k.name(),
                    o.clients - o.connected_at_end,
                    o.clients
                ));
            }
        }
    }
    bad
}

/// readyprism's goals (`HERD_ASSERT_GOALS=1`): one line per goal missed; empty when all are met.
pub fn goals(outcomes: &[Outcome]) -> Vec<String> {
    let mut bad = Vec::new();
    for o in outcomes
        .iter()
        .filter(|o| o.balancer == Kind::Readyprism.name())
    {
        let mut miss = |what: String| bad.push(format!("{} / readyprism: {what}", o.scenario));
        match o.scenario {
            "blink3" | "blink8" => {
                if o.closed_by_balancer > 0 {
                    miss(format!(
                        "closed {} connections on a cluster-wide blink",
                        o.closed_by_balancer
                    ));
                }
                let burst = burst_bound(o.clients);
                if o.peak_per_s > burst {
                    miss(format!(
                        "re-dial burst of {}/s (no burst: at most {burst}/s)",
                        o.peak_per_s
                    ));
                }
            }
            "drain" => {
                if o.on_victim_at_close != Some(0) {
                    miss(format!(
                        "{} connection(s) still on the draining apiserver at its listener close",
                        o.on_victim_at_close.unwrap_or(0)
                    ));
                }
                if o.client_errors > 0 {
                    miss(format!("{} client error(s)", o.client_errors));
                }
                let bound = o.spread_bound_per_s.unwrap_or(0.0);
                if o.peak_per_s as f64 > bound {
                    miss(format!(
                        "peak re-dial rate {}/s over 2 × moved / {} s = {bound:.1}/s",
                        o.peak_per_s,
                        crate::measure::HANDOFF_WINDOW_S
                    ));
                }
            }
            "return" => {
                // Paced re-entry, when it ran: a third of today's peak at most.
                let paced = outcomes
                    .iter()
                    .find(|p| p.scenario == "return" && p.balancer == Kind::Paced.name());
                if let Some(p) = paced {
                    if p.peak_per_100ms * 3 > o.peak_per_100ms {
                        miss(format!(
                            "paced re-entry's peak {}/100 ms over a third of today's {}/100 ms",
                            p.peak_per_100ms, o.peak_per_100ms
                        ));
                    }
                }
            }
            "quorum" if o.all_off_victim_s.is_none() => {
                miss("connections left on the apiserver without quorum at the end".to_string());
            }
            _ => {}
        }
    }
    bad
}

/// "No re-dial burst" on a blink: at most 1 % of the clients (at least 1) re-dial in any second.
pub fn burst_bound(clients: usize) -> usize {
    (clients / 100).max(1)
}

/// The outcome of `s` against `k`.
pub fn find(outcomes: &[Outcome], s: Scenario, k: Kind) -> Option<&Outcome> {
    outcomes
        .iter()
        .find(|o| o.scenario == s.name() && o.balancer == k.name())
}

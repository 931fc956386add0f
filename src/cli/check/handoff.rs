//! What a planned hand-off needs of the apiservers, as `check` prints it: kube-apiserver's
//! `--shutdown-delay-duration` must outlast the time from its first `[-]shutdown` answer to the
//! last hand-off close: the next probe (`interval` with its jitter), that probe's `timeout`, and
//! `handoff_window`. The shipped Talos control-plane patches set 15 s (talos/README.md, "The
//! apiserver's shutdown window"); `check` warns when the config needs more.
//!
//! Pure: durations in, text out. Does not own the hand-off (`proxy::turn`) nor the window the
//! balancer learns at run time (`health::shutdown_window`).

use std::time::Duration;

use crate::backend::Routing;
use crate::config::HealthConfig;
use crate::health::JITTER_PERCENT;

/// `--shutdown-delay-duration` in the project's Talos control-plane patches.
pub const TALOS_PATCH_DELAY: Duration = Duration::from_secs(15);

/// The shortest `--shutdown-delay-duration` a hand-off fits into: the next probe starts at most
/// `interval` (+ jitter) after the drain began, answers within `timeout`, then the closes are
/// spread over `handoff_window`.
pub fn needed(health: &HealthConfig, routing: &Routing) -> Duration {
    health.interval
        + health.interval * JITTER_PERCENT / 100
        + health.timeout
        + routing.handoff_window
}

/// The report's comment line.
pub fn render(health: &HealthConfig, routing: &Routing) -> String {
    format!(
        "# planned hand-off: keep kube-apiserver's --shutdown-delay-duration above {} (interval {} + {JITTER_PERCENT} % + timeout {} + handoff_window {}); the Talos patches set {}; hand-offs fit into 0.7 of each apiserver's learned window\n",
        secs(needed(health, routing)),
        secs(health.interval),
        secs(health.timeout),
        secs(routing.handoff_window),
        secs(TALOS_PATCH_DELAY)
    )
}

/// The warning when the config needs more than the Talos patches give.
pub fn warning(health: &HealthConfig, routing: &Routing) -> Option<String> {
    let need = needed(health, routing);
    (need >= TALOS_PATCH_DELAY).then(|| {
        format!(
            "a planned hand-off needs kube-apiserver's --shutdown-delay-duration above {} but the shipped Talos control-plane patches set {}: raise it there (cluster.apiServer.extraArgs, or the KubeAPIServerConfig document on Talos 1.14) or shorten handoff_window; until then readyprism fits hand-offs into 0.7 of the window it learns",
            secs(need),
            secs(TALOS_PATCH_DELAY)
        )
    })
}

fn secs(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default health settings, `handoff_window` in seconds.
    fn config(handoff: u64) -> (HealthConfig, Routing) {
        let health = crate::testing::fixtures::health_config();
        let routing = Routing {
            handoff_window: Duration::from_secs(handoff),
            ..Routing::default()
        };
        (health, routing)
    }

    #[test]
    fn the_defaults_need_13_5_s_and_fit_the_talos_patches() {
        let (h, r) = config(5);
        assert_eq!(needed(&h, &r), Duration::from_millis(13_500));
        assert!(render(&h, &r).contains("above 13.5s"), "{}", render(&h, &r));
        assert_eq!(warning(&h, &r), None);
    }

    #[test]
    fn a_longer_hand_off_window_is_warned_of() {
        let (h, r) = config(8);
        let w = warning(&h, &r).expect("a warning");
        assert!(w.contains("above 16.5s") && w.contains("set 15s"), "{w}");
    }
}

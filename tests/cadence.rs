//! The probe cadence follows the node's traffic (`health.remote_interval`, off by default): a
//! ready apiserver of another zone that carries none of the node's connections is probed less often while one of the
//! node's own zone is ready, and at `interval` again as soon as the node's zone has none ready.
//! Counted at the fake apiservers, as the fleet's apiservers would count them.

use std::sync::atomic::Ordering::SeqCst;

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::*;

use crate::support::*;

/// `/readyz` answers each fake gave while `local` answered `n` more: (local's, remote's).
async fn probes_while(local: &FakeApiserver, remote: &FakeApiserver, n: u64) -> (u64, u64) {
    let hits = |f: &FakeApiserver| f.control.readyz_hits.load(SeqCst);
    let (l0, r0) = (hits(local), hits(remote));
    poll(&format!("{n} more probes of the local apiserver"), || {
        hits(local) >= l0 + n
    })
    .await;
    (hits(local) - l0, hits(remote) - r0)
}

#[tokio::test]
async fn an_idle_remote_apiserver_is_probed_at_the_remote_interval_until_home_has_none_ready() {
    let lab = Lab::new();
    let health =
        "health: { interval: 1s, timeout: 800ms, fast_interval: 150ms, remote_interval: 3s }\n";
    let (local, remote, app) = lab.local_and_remote(health).await;
    let (l, r) = probes_while(&local, &remote, 9).await;
    assert!(
        r * 2 <= l,
        "home ready: the idle remote apiserver probed {r} times while the local one was {l} times"
    );

    // The local apiserver fails its checks: picks would go to the remote one, probed at once at
    // `interval` again.
    local.control.set_ready(false);
    wait_states(&app, &[Unready, Ready]).await;
    let (l, r) = probes_while(&local, &remote, 9).await;
    assert!(
        r * 3 >= l * 2,
        "home unready: the remote apiserver probed {r} times while the local one was {l} times"
    );
}

#[tokio::test]
async fn by_default_every_backend_is_probed_alike() {
    let lab = Lab::new();
    let (local, remote, _app) = lab.local_and_remote("").await;
    let (l, r) = probes_while(&local, &remote, 9).await;
    assert!(
        r * 3 >= l * 2,
        "remote_interval at its default: the remote apiserver probed {r} times while the local one was {l} times"
    );
}

//! Waiting in tests, never a fixed sleep: [`patience`] (the one deadline), waits on the table's
//! published snapshots ([`wait_until`], [`wait_states`], [`wait_probed`]) and polls with that
//! deadline ([`poll`], [`eventually`]). It does not read metrics itself (`metrics.rs`).

use std::time::Duration;

use readyprism::admin::StatusDoc;
use readyprism::app::App;
use readyprism::verdict::State;

use super::backend_metric;

/// Generous bound for things that should happen in well under a second: 10 s, or
/// `READYPRISM_TEST_PATIENCE_MS` when set (a slow or heavily loaded machine may want more).
pub fn patience() -> Duration {
    static PATIENCE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *PATIENCE.get_or_init(|| {
        let ms = std::env::var("READYPRISM_TEST_PATIENCE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        Duration::from_millis(ms)
    })
}

/// Waits until the status document satisfies `pred`, re-checking on every published snapshot.
pub async fn wait_until(app: &App, what: &str, pred: impl Fn(&StatusDoc) -> bool) -> StatusDoc {
    let mut gen = app.subscribe();
    let wait = async {
        loop {
            let doc = app.status();
            if pred(&doc) {
                return doc;
            }
            gen.changed().await.expect("table writer alive");
        }
    };
    tokio::time::timeout(patience(), wait)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "timed out waiting for: {what}; last status: {:?}",
                app.status()
            )
        })
}

/// Waits until every backend has a decided state equal to `states`, in config order.
pub async fn wait_states(app: &App, states: &[State]) -> StatusDoc {
    wait_until(app, &format!("states {states:?}"), |s| {
        s.backends.len() == states.len()
            && s.backends
                .iter()
                .zip(states)
                .all(|(b, want)| b.state == *want)
    })
    .await
}

/// Waits until every backend has finished at least `probes` probes.
pub async fn wait_probed(app: &App, probes: u64) -> StatusDoc {
    poll("each backend probed enough times", || {
        app.status().backends.iter().all(|b| {
            let n = |r: &str| {
                let extra = format!(",result=\"{r}\"");
                backend_metric(app, "readyprism_health_checks_total", &b.address, &extra)
            };
            n("pass") + n("fail") >= probes
        })
    })
    .await;
    app.status()
}

/// Polls `cond` every 10 ms until true or [`patience`] passes.
pub async fn poll(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + patience();
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Retries `f` every 10 ms until it yields `Some`, or panics after [`patience`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience();
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

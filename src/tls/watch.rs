//! The certificate watcher: stats the files every [`CHECK_INTERVAL`], loads them again when their
//! stamps move or are too fresh to trust (and while loads fail, every [`LOAD_RETRY_INTERVAL`]),
//! and offers what it loaded to
//! [`TlsSource::apply`]. Every stat and read runs on the blocking pool, never on the runtime
//! thread that relays and probes: a file on a hung mount or a FIFO must not stop them.
//!
//! Does not own the rule for what replaces what ([`TlsSource::apply`]) nor reading a file safely
//! (`files`).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::files::Stamps;
use super::{publish_client_cert, Applied, TlsError, TlsSource, TlsState};
use crate::metrics::Metrics;
use crate::watched_file::{CHECK_INTERVAL, LOAD_RETRY_INTERVAL};

/// Why a load by the watcher left the material in use as it was.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Load(TlsError),
    #[error("{}: the client certificate file disappeared; keeping the one loaded before", gone.display())]
    Gone { gone: std::path::PathBuf },
}

impl TlsSource {
    /// Re-reads the files whenever their stamps change (or are too fresh to trust), until cancelled. A load that fails keeps
    /// the previous material in use (one WARN per spell) and is retried every
    /// [`LOAD_RETRY_INTERVAL`]; so is a client certificate file that disappeared after one was loaded.
    pub async fn watch(self: Arc<Self>, metrics: Arc<Metrics>, cancel: CancellationToken) {
        let mut retry = Retry::default();
        let mut seen = seen_after(self.current().stamps.clone(), SystemTime::now());
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            }
            let base = self.current();
            let files = base.files.clone();
            let Some(now) = blocking(&cancel, move || Stamps::of(&files)).await else {
                return;
            };
            if !retry.due(seen.as_ref() != Some(&now), &now, Instant::now()) {
                continue;
            }
            let files = base.files.clone();
            let Some(loaded) = blocking(&cancel, move || TlsSource::load(&files)).await else {
                return;
            };
            let outcome = loaded
                .map_err(Refused::Load)
                .and_then(|state| self.offer(&base, state, &metrics, retry.failed_since.is_some()));
            match outcome {
                Ok(stamps) => {
                    retry = Retry::default();
                    seen = seen_after(stamps, SystemTime::now());
                }
                Err(e) => {
                    if retry.failed_since.is_none() {
                        tracing::warn!(error = %e, "TLS files cannot be loaded; keeping the previous ones, retrying every 5s");
                    } else {
                        tracing::debug!(error = %e, "TLS files still cannot be loaded");
                    }
                    retry.failed(now, Instant::now());
                }
            }
        }
    }

    /// Applies what the watcher loaded from `base`'s files; returns the stamps it was loaded at.
    /// `recovering`: the loads before failed, so even "unchanged" is news worth a line.
    fn offer(
        &self,
        base: &Arc<TlsState>,
        state: TlsState,
        metrics: &Metrics,
        recovering: bool,
    ) -> Result<Stamps, Refused> {
        match self.apply_over(base, &state) {
            Some(Applied::Replaced {
                generation,
                client_cert,
            }) => {
                tracing::info!(
                    client_cert = client_cert.as_str(),
                    generation,
                    "TLS files changed; reloaded"
                );
                publish_client_cert(metrics, &client_cert);
                Ok(state.stamps)
            }
            Some(Applied::Unchanged) => {
                if recovering {
                    tracing::info!("TLS files can be loaded again; the ones in use are unchanged");
                }
                Ok(state.stamps)
            }
            Some(Applied::Kept { gone }) => Err(Refused::Gone { gone }),
            // A reload replaced the material meanwhile; it wins, and the next tick looks at its files.
            None => Ok(state.stamps),
        }
    }
}

/// Runs `f` on the blocking pool; `None` when cancelled first.
async fn blocking<T: Send + 'static>(
    cancel: &CancellationToken,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let task = tokio::task::spawn_blocking(f);
    tokio::select! {
        _ = cancel.cancelled() => None,
        done = task => Some(done.expect("a TLS file read does not panic")),
    }
}

/// The stamps the next tick compares with after a load at `stamps`: none (load again) while any
/// is too fresh to trust, so a same-size rewrite in the same second as the load is not missed.
/// Such a load finds the same content and changes nothing.
fn seen_after(stamps: Stamps, now: SystemTime) -> Option<Stamps> {
    stamps.trusted(now).then_some(stamps)
}

/// When the watcher loads the files again: on a change, and while loads fail, every
/// [`LOAD_RETRY_INTERVAL`] even without one.
#[derive(Debug, Default)]
struct Retry {
    /// The files as they were at the last failed load, and when that was.
    failed_since: Option<(Stamps, Instant)>,
}

impl Retry {
    fn due(&self, changed: bool, now: &Stamps, at: Instant) -> bool {
        match &self.failed_since {
            None => changed,
            Some((seen, when)) => seen != now || at.duration_since(*when) >= LOAD_RETRY_INTERVAL,
        }
    }

    fn failed(&mut self, files: Stamps, at: Instant) {
        self.failed_since = Some((files, at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TlsFiles;
    use std::time::Duration;

    /// Files naming only a CA, `dir/ca.crt`, not written yet.
    fn ca_only(dir: &tempfile::TempDir) -> TlsFiles {
        TlsFiles {
            ca: dir.path().join("ca.crt"),
            client_cert: None,
            client_key: None,
        }
    }

    #[test]
    fn files_loaded_within_two_seconds_of_a_write_are_loaded_again_next_tick() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ca_only(&dir);
        std::fs::write(&files.ca, "x").expect("write");
        let stamps = Stamps::of(&files);
        let now = SystemTime::now();
        assert_eq!(seen_after(stamps.clone(), now), None, "just written");
        let later = now + Duration::from_secs(3);
        assert_eq!(seen_after(stamps.clone(), later), Some(stamps));
        assert_eq!(
            seen_after(Stamps::none(), now),
            Some(Stamps::none()),
            "no files, nothing racy"
        );
    }

    #[test]
    fn a_failed_load_is_retried_on_a_change_or_every_retry_interval() {
        let t0 = Instant::now();
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ca_only(&dir);
        let before = Stamps::of(&files);
        std::fs::write(&files.ca, "x").expect("write");
        let other = Stamps::of(&files);
        let mut r = Retry::default();
        assert!(
            !r.due(false, &before, t0),
            "nothing changed, nothing failed"
        );
        assert!(r.due(true, &before, t0));
        r.failed(before.clone(), t0);
        assert!(!r.due(false, &before, t0 + Duration::from_secs(1)));
        assert!(
            r.due(false, &before, t0 + LOAD_RETRY_INTERVAL),
            "retried though nothing changed"
        );
        assert!(
            r.due(false, &other, t0 + Duration::from_secs(1)),
            "and at once on a change"
        );
    }
}

//! The table's request for one confirm probe of a backend (the escape route of another backend's
//! connections, or a backend that just turned unready: does it still fail?), and the count of
//! those its monitor made.
//!
//! Does not own when a confirm is needed (`table::escape`) or the bound on them (`health`: at
//! most one per probe interval).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// One backend's confirm requests: the writer asks, the monitor takes.
#[derive(Debug, Default)]
pub struct Confirm {
    asked: Notify,
    /// Confirm probes made (`readyprism_confirm_probes_total`).
    made: AtomicU64,
}

impl Confirm {
    /// Asks for a confirm probe; asks made before the monitor looks are one.
    pub fn ask(&self) {
        self.asked.notify_one();
    }

    /// Completes once a confirm probe was asked for.
    pub async fn asked(&self) {
        self.asked.notified().await;
    }

    /// Counts a confirm probe made.
    pub fn made(&self) {
        self.made.fetch_add(1, Ordering::Relaxed);
    }

    /// Confirm probes made.
    pub fn count(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }
}

//! What an operator, the demo or a test sees of a running app while [`super::App::run`] owns it.
//!
//! Owns nothing but a shared reference to what the admin endpoints read.

use std::sync::Arc;

use tokio::sync::watch;

use crate::admin::{Admin, StatusDoc};

/// A running app's `/status`, `/metrics` and snapshot generations. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Handle {
    pub(super) admin: Arc<Admin>,
}

impl Handle {
    /// The `/status` document as of now.
    pub fn status(&self) -> StatusDoc {
        self.admin.status()
    }

    /// Notified with the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.admin.table.subscribe()
    }

    /// The `/metrics` text as of now.
    pub fn metrics_text(&self) -> String {
        self.admin.metrics.encode()
    }
}

impl AsRef<Handle> for Handle {
    fn as_ref(&self) -> &Handle {
        self
    }
}

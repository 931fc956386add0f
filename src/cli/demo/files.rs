//! The demo's private directory for its CA and client certificate: created 0700 under the
//! temporary directory, unique per run, and removed when dropped.

use std::path::PathBuf;

use super::DemoError;

/// The demo's private directory for the CA and the client certificate; removed when dropped.
pub(super) struct DemoDir {
    path: PathBuf,
}

impl DemoDir {
    pub(super) fn create() -> Result<DemoDir, DemoError> {
        use std::os::unix::fs::DirBuilderExt;
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "readyprism-demo-{}-{seq}-{nanos}",
            std::process::id()
        ));
        let created = std::fs::DirBuilder::new().mode(0o700).create(&path);
        created.map_err(|cause| DemoError::Files {
            path: path.clone(),
            cause,
        })?;
        Ok(DemoDir { path })
    }

    pub(super) fn write(&self, name: &str, contents: &str) -> Result<PathBuf, DemoError> {
        let path = self.path.join(name);
        match std::fs::write(&path, contents) {
            Ok(()) => Ok(path),
            Err(cause) => Err(DemoError::Files { path, cause }),
        }
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove the demo's temporary files");
        }
    }
}

//! The demo's private directory for its CA and client certificate: created 0700 under the
//! temporary directory, unique per run, its files written 0600 (as kubelet writes its key, so the
//! balancer has nothing to warn about), and removed when dropped.

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

    /// Writes `contents` to a new file `name`, readable by its owner only (it may hold a key).
    pub(super) fn write(&self, name: &str, contents: &str) -> Result<PathBuf, DemoError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path.join(name);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(contents.as_bytes()));
        match written {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_writes_its_key_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = DemoDir::create().expect("demo dir");
        let key = dir
            .write("kubelet-client-current.pem", "key")
            .expect("write");
        let mode = std::fs::metadata(&key).expect("stat").permissions().mode() & 0o777;
        assert_eq!(format!("{mode:o}"), "600");
        assert_eq!(std::fs::read_to_string(&key).expect("read"), "key");
    }
}

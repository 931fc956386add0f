//! The discovery cache: the last known list of discovered backends on disk, so a node that
//! restarts while the control plane is being replaced starts with the apiservers it last knew.
//!
//! Owns the file's format (one type for writer and reader), the atomic write (`atomic_write`'s, mode 0600) and the start-up read with the safe
//! reads of `watched_file`, and the look before a run at whether the path can hold a cache at all
//! ([`preflight`], for `readyprism check`). A missing, unreadable or corrupt cache never stops the
//! balancer: it is said once and ignored. Does not own when it is written (`discovery`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic_write::{self, Unfit};
use crate::watched_file::{self, FileError, ReadError};

/// The cache file's content. `version` lets a later format be told apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFile {
    /// Format version: 1.
    pub version: u32,
    /// The discovered backends (never the static ones), in address order.
    pub backends: Vec<SocketAddr>,
}

/// The format written and understood.
pub const VERSION: u32 = 1;

/// Why the cache could not be written. Always names the cache, never its temporary file.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing failed (tried again at the next poll).
    #[error("{path}: cannot write the discovery cache: {cause}")]
    Io {
        /// The cache.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// Something that is not a readyprism cache is there (a mistyped path): left alone.
    #[error("{path}: not a readyprism discovery cache ({why}); it is left alone and not written")]
    NotACache {
        /// The cache path.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
}

impl WriteError {
    /// Whether trying again later can help (it cannot while another file is there).
    pub fn retryable(&self) -> bool {
        matches!(self, WriteError::Io { .. })
    }
}

/// Why the cache at start-up was not used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// There is none yet (a first start): nothing to say beyond a note.
    #[error("no discovery cache yet")]
    Missing,
    /// It exists but cannot be read (permissions, not a regular file, over 1 MiB).
    #[error("discovery cache {0}")]
    Unreadable(FileError),
    /// It does not hold a cache of this format.
    #[error("the discovery cache is corrupt: {0}")]
    Corrupt(String),
}

/// Whether `path` can hold the discovery cache (blocks), for `readyprism check`: see
/// [`atomic_write::preflight`].
pub fn preflight(path: &Path) -> Result<(), Unfit> {
    atomic_write::preflight(path, is_cache, "a discovery cache", "discovery cache")
}

/// Reads the cache at `path` (blocks; a small file read once at start-up).
pub fn load(path: &Path) -> Result<Vec<SocketAddr>, LoadError> {
    let contents = watched_file::read(path).map_err(|e| match &e.error {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => LoadError::Missing,
        _ => LoadError::Unreadable(e),
    })?;
    let file: CacheFile =
        serde_json::from_slice(&contents.bytes).map_err(|e| LoadError::Corrupt(e.to_string()))?;
    if file.version != VERSION {
        return Err(LoadError::Corrupt(format!(
            "version {} (this readyprism writes {VERSION})",
            file.version
        )));
    }
    Ok(file.backends)
}

/// Replaces the cache at `path` with `backends`, atomically: readers (the next start-up) see the
/// old file or the new one, never a half-written one, also across a power loss (blocks). Never
/// replaces a file that is not a readyprism cache. The temporary file beside it has a random
/// name and is created new (`O_EXCL`, `O_NOFOLLOW`, mode 0600): a file or symlink planted there
/// fails the write, it is never followed nor written through.
pub fn store(path: &Path, backends: &[SocketAddr]) -> Result<(), WriteError> {
    let io = |cause| WriteError::Io {
        path: path.to_path_buf(),
        cause,
    };
    if let Some(why) = not_a_cache(path) {
        return Err(WriteError::NotACache {
            path: path.to_path_buf(),
            why,
        });
    }
    let file = CacheFile {
        version: VERSION,
        backends: backends.to_vec(),
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    atomic_write::replace(path, text.as_bytes(), 0o600).map_err(io)
}

/// What is at `path` if it is neither missing nor a readyprism cache (any version). A symlink or
/// an unreadable file counts as not one: only what was read as a cache is replaced.
fn not_a_cache(path: &Path) -> Option<String> {
    atomic_write::not_ours(path, is_cache, "a discovery cache")
}

/// Whether `bytes` are a readyprism cache of any version (its shape, not its addresses).
fn is_cache(bytes: &[u8]) -> bool {
    let shape = serde_json::from_slice::<serde_json::Value>(bytes).ok();
    shape.is_some_and(|v| {
        v.get("version").is_some_and(|n| n.is_u64())
            && v.get("backends").is_some_and(|b| b.is_array())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache stored with two addresses, then replaced with the first:
    /// (its directory, its file, the two addresses).
    fn replaced() -> (tempfile::TempDir, PathBuf, Vec<SocketAddr>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("backends.json");
        assert!(matches!(load(&path), Err(LoadError::Missing)));
        let list: Vec<SocketAddr> = vec![
            "10.0.1.10:6443".parse().expect("literal"),
            "[fd00::1]:6443".parse().expect("literal"),
        ];
        store(&path, &list).expect("store");
        store(&path, &list[..1]).expect("replace");
        (dir, path, list)
    }

    #[test]
    fn a_stored_list_loads_back() {
        let (_dir, path, list) = replaced();
        assert_eq!(load(&path).expect("load"), list[..1]);
    }

    #[test]
    fn storing_leaves_no_temporary_file() {
        let (dir, _, _) = replaced();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["backends.json"]);
    }

    #[test]
    fn a_corrupt_or_foreign_cache_is_refused_with_its_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("backends.json");
        for text in [
            "{\"version\":1,\"backends\":[\"nope\"]}",
            "garbage",
            "{\"version\":2,\"backends\":[]}",
        ] {
            std::fs::write(&path, text).expect("write");
            assert!(matches!(load(&path), Err(LoadError::Corrupt(_))), "{text}");
        }
        assert!(
            matches!(load(dir.path()), Err(LoadError::Unreadable(_))),
            "a directory"
        );
    }

    #[test]
    fn a_file_that_is_not_a_cache_is_never_written_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        let kubeconfig = "apiVersion: v1\nkind: Config\n";
        std::fs::write(&path, kubeconfig).expect("write");
        let list: Vec<SocketAddr> = vec!["10.0.1.10:6443".parse().expect("literal")];
        let e = store(&path, &list).expect_err("refused");
        assert!(!e.retryable());
        assert!(
            e.to_string().contains("not a readyprism discovery cache"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), kubeconfig);
        // A cache of another version is readyprism's: replaced.
        std::fs::write(&path, "{\"version\":2,\"backends\":[]}").expect("write");
        store(&path, &list).expect("a cache of another version");
        assert_eq!(load(&path).expect("load"), list);
    }

    #[test]
    fn the_cache_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("backends.json");
        store(&path, &[]).expect("store");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_failed_write_names_the_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("gone").join("backends.json");
        let e = store(&missing, &[]).expect_err("no directory");
        assert!(e.retryable());
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}:", missing.display())),
            "{text}"
        );
        assert!(!text.contains(".tmp-"), "{text}");
    }
}

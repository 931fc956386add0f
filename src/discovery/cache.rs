//! The discovery cache: the last known list of discovered backends on disk, so a node that
//! restarts while the control plane is being replaced starts with the apiservers it last knew.
//!
//! Owns the file's format (one type for writer and reader), the atomic write (a temporary file in
//! the same directory, fsync, rename, fsync of the directory) and the start-up read with the safe
//! reads of `watched_file`. A missing, unreadable or corrupt cache never stops the balancer: it is
//! said once and ignored. Does not own when it is written (`discovery`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::watched_file::{self, ReadError};

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

/// Why the cache could not be written (it is tried again after the next change).
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot write the discovery cache: {cause}")]
pub struct WriteError {
    /// The file (or its temporary file) that failed.
    pub path: PathBuf,
    /// Why.
    pub cause: std::io::Error,
}

/// Why the cache at start-up was not used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// There is none yet (a first start): nothing to say beyond a note.
    #[error("no discovery cache yet")]
    Missing,
    /// It exists but cannot be read (permissions, not a regular file, over 1 MiB).
    #[error("cannot read the discovery cache: {0}")]
    Unreadable(ReadError),
    /// It does not hold a cache of this format.
    #[error("the discovery cache is corrupt: {0}")]
    Corrupt(String),
}

/// Reads the cache at `path` (blocks; a small file read once at start-up).
pub fn load(path: &Path) -> Result<Vec<SocketAddr>, LoadError> {
    let contents = watched_file::read(path).map_err(|e| match e {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => LoadError::Missing,
        e => LoadError::Unreadable(e),
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
/// old file or the new one, never a half-written one, also across a power loss (blocks).
pub fn store(path: &Path, backends: &[SocketAddr]) -> Result<(), WriteError> {
    let file = CacheFile {
        version: VERSION,
        backends: backends.to_vec(),
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| WriteError {
        path: path.to_path_buf(),
        cause: std::io::Error::other(e),
    })?;
    text.push('\n');
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let err = |p: &Path| {
        let p = p.to_path_buf();
        move |cause| WriteError { path: p, cause }
    };
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp); // may not exist; the error that matters is `e`
        return Err(err(&tmp)(e));
    }
    // The rename is durable once the directory is.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_list_loads_back_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("backends.json");
        assert!(matches!(load(&path), Err(LoadError::Missing)));
        let list: Vec<SocketAddr> = vec![
            "10.0.1.10:6443".parse().expect("literal"),
            "[fd00::1]:6443".parse().expect("literal"),
        ];
        store(&path, &list).expect("store");
        store(&path, &list[..1]).expect("replace");
        assert_eq!(load(&path).expect("load"), list[..1]);
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
}

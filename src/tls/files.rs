//! One certificate, key or CA file read, and the stamps of the three files the watcher compares.
//! The read itself (regular files only, never blocking, at most 1 MiB, a stamp and a digest
//! instead of the content) and its error's one wording are `watched_file`'s.
//!
//! Does not parse PEM (`load`) nor decide when to read (`watch`, which calls this from the
//! blocking pool).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::TlsError;
use crate::config::TlsFiles;
use crate::watched_file::{self, Contents, Stamp};

/// The stamps of the CA, client certificate and key files (`None`: absent, not a regular file or
/// not configured); any change (a rename, a write, a `chmod`, a same-size in-place edit that
/// keeps the mtime) makes the watcher read the files again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps([Option<Stamp>; 3]);

impl Stamps {
    /// Stats the three files (following symlinks, as kubelet's `-current.pem` is one).
    pub fn of(files: &TlsFiles) -> Stamps {
        let stamp = |p: Option<&PathBuf>| Stamp::now(p?).ok();
        Stamps([
            stamp(Some(&files.ca)),
            stamp(files.client_cert.as_ref()),
            stamp(files.client_key.as_ref()),
        ])
    }

    /// Whether every stamp is old enough that a later write must change it (see
    /// [`Stamp::trusted`]): a file written in the same second as it was read could keep its stamp.
    pub fn trusted(&self, now: SystemTime) -> bool {
        self.0.iter().flatten().all(|s| s.trusted(now))
    }

    /// Stamps that match no real files (tests).
    #[cfg(test)]
    pub fn none() -> Stamps {
        Stamps([None, None, None])
    }
}

/// Reads a certificate, key or CA file (see [`watched_file::read`]).
pub fn read(path: &Path) -> Result<Contents, TlsError> {
    Ok(watched_file::read(path)?)
}

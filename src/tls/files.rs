//! One certificate, key or CA file read in TLS's words (every error names the file), and the
//! stamps of the three files the watcher compares. The read itself (regular files only, never
//! blocking, at most 1 MiB, a stamp and a digest instead of the content) is `watched_file`'s.
//!
//! Does not parse PEM (`load`) nor decide when to read (`watch`, which calls this from the
//! blocking pool).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::TlsError;
use crate::config::TlsFiles;
use crate::watched_file::{self, Contents, Kind, Stamp};

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
    watched_file::read(path).map_err(|e| error(path, e))
}

/// `watched_file`'s error, naming the file; a directory in the words the kernel would use.
fn error(path: &Path, e: watched_file::ReadError) -> TlsError {
    let path = path.to_path_buf();
    match e {
        watched_file::ReadError::Io(cause) => TlsError::Read { path, cause },
        watched_file::ReadError::NotRegular(Kind::Directory) => TlsError::Read {
            path,
            cause: std::io::Error::from_raw_os_error(libc::EISDIR),
        },
        watched_file::ReadError::NotRegular(kind) => TlsError::NotRegular {
            path,
            what: kind.as_str(),
        },
        watched_file::ReadError::TooLarge { .. } => TlsError::TooLarge { path },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watched_file::ReadError as Shared;

    #[test]
    fn every_read_error_names_the_certificate_file_and_a_directory_reads_as_eisdir() {
        let exe = std::env::current_exe().expect("the test binary");
        let stamp = Stamp::now(&exe).expect("a regular file's stamp");
        let eacces = std::io::Error::from_raw_os_error(libc::EACCES);
        let cases = [
            (Shared::TooLarge { stamp }, "larger than 1 MiB"),
            (
                Shared::NotRegular(Kind::Directory),
                "cannot read: Is a directory (os error 21)",
            ),
            (
                Shared::NotRegular(Kind::Fifo),
                "cannot read: a FIFO, not a regular file",
            ),
            (
                Shared::Io(eacces),
                "cannot read: Permission denied (os error 13)",
            ),
        ];
        for (e, said) in cases {
            let e = error(Path::new("/ca.crt"), e);
            assert_eq!(e.to_string(), format!("/ca.crt: {said}"));
        }
    }
}

//! Reading one certificate, key or CA file without ever blocking on it: regular files only, at
//! most [`MAX_FILE_BYTES`], and what is remembered of a file is a stat stamp and a content hash,
//! never the content.
//!
//! Does not parse PEM (`tls`) nor decide when to read (`tls`'s watcher, which calls this from the
//! blocking pool).

use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::TlsError;
use crate::config::TlsFiles;

/// The largest certificate file read. A kubelet client certificate is ~2 KiB and a CA bundle of a
/// hundred certificates ~150 KiB, so 1 MiB is plenty; a larger file is refused rather than held.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// What `stat` says of one file; any change (a rename, a write, a `chmod`, a same-size in-place
/// edit that keeps the mtime — ctime moves then) makes the watcher read the files again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The stamps of the CA, client certificate and key files (`None`: absent or not configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps([Option<Stamp>; 3]);

impl Stamps {
    /// Stats the three files (following symlinks, as kubelet's `-current.pem` is one).
    pub fn of(files: &TlsFiles) -> Stamps {
        let stamp = |p: Option<&PathBuf>| -> Option<Stamp> {
            let m = std::fs::metadata(p?).ok()?;
            Some(Stamp {
                dev: m.dev(),
                ino: m.ino(),
                len: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            })
        };
        Stamps([
            stamp(Some(&files.ca)),
            stamp(files.client_cert.as_ref()),
            stamp(files.client_key.as_ref()),
        ])
    }

    /// Stamps that match no real files (tests).
    #[cfg(test)]
    pub fn none() -> Stamps {
        Stamps([None, None, None])
    }
}

/// A 64-bit hash of a file's content: tells a real change from a `touch`.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`]. A FIFO, socket or device is refused
/// before it is opened, and opened non-blocking in case it became one in between: a FIFO with no
/// writer would otherwise hang the open forever.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |cause| TlsError::Read {
        path: path.to_path_buf(),
        cause,
    };
    regular(path, &std::fs::metadata(path).map_err(read_error)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    regular(path, &file.metadata().map_err(read_error)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Refuses what is not a regular file, in the words the kernel would use for a directory.
fn regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), TlsError> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    if kind.is_dir() {
        return Err(TlsError::Read {
            path: path.to_path_buf(),
            cause: std::io::Error::from_raw_os_error(libc::EISDIR),
        });
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(TlsError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_regular_files_of_at_most_a_mebibyte_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let small = dir.path().join("small.pem");
        std::fs::write(&small, b"x").expect("write");
        assert_eq!(read(&small).expect("read"), b"x");

        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'x'; MAX_FILE_BYTES as usize + 1]).expect("write");
        let e = read(&big).expect_err("too large");
        assert_eq!(
            e.to_string(),
            format!("{}: larger than 1 MiB", big.display())
        );

        let e = read(dir.path()).expect_err("a directory");
        assert!(e.to_string().contains("cannot read: Is a directory"), "{e}");

        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.expect("mkfifo").success());
        let e = read(&fifo).expect_err("a FIFO, refused without blocking");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: cannot read: a FIFO, not a regular file",
                fifo.display()
            )
        );
    }

    #[test]
    fn a_same_size_edit_that_keeps_the_mtime_moves_the_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, b"aaaa").expect("write");
        let files = TlsFiles {
            ca: ca.clone(),
            client_cert: None,
            client_key: None,
        };
        let before = Stamps::of(&files);
        let mtime = std::fs::metadata(&ca)
            .expect("stat")
            .modified()
            .expect("mtime");
        // As `cp --preserve=timestamps` or `rsync --inplace -t` do: same size, mtime put back.
        // The kernel's file clock is coarse (a tick), so edit until ctime has moved: only ctime
        // can tell the stamps apart.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            std::fs::write(&ca, b"bbbb").expect("write");
            let f = std::fs::File::options()
                .write(true)
                .open(&ca)
                .expect("open");
            f.set_modified(mtime).expect("set mtime");
            let meta = std::fs::metadata(&ca).expect("stat");
            assert_eq!(meta.modified().ok(), Some(mtime));
            if Stamps::of(&files) != before {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stamp never moved"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

//! Reading the config file without trusting what sits at its path: regular files only, never a
//! blocking open (a FIFO), at most [`MAX_BYTES`], and a [`Digest`] of the bytes so nobody has to
//! keep a copy to notice a change.
//!
//! Owns the file's bytes and stat stamp; does not parse them (`Config::parse`) and does not decide
//! when to read (`watch`). Every function here blocks: call it off the runtime thread.

use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The largest config accepted. A real one is a few KiB; 1 MiB bounds the read, the hash and the
/// parse of a file that is not what it should be (a log written to the wrong path).
pub const MAX_BYTES: u64 = 1024 * 1024;

/// Why the file at the config path cannot be used now.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Missing, unreadable (EACCES), out of descriptors (EMFILE) or another I/O error.
    #[error("{file}: cannot read config: {cause}")]
    Io {
        /// Config file path.
        file: String,
        /// Underlying I/O error.
        cause: std::io::Error,
    },
    /// A directory, FIFO, socket or device: never opened for reading (a FIFO would block).
    #[error("{file}: not a regular file ({kind}); not loaded")]
    NotRegular {
        /// Config file path.
        file: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// More than [`MAX_BYTES`].
    #[error("{file}: larger than 1 MiB; not loaded")]
    TooLarge {
        /// Config file path.
        file: String,
        /// The file's stamp, which stands for its content (the bytes are never read).
        stamp: Stamp,
    },
}

/// What `stat` says about the file: any write, rename, `chmod` or `touch` changes it. The ctime is
/// in it because a same-size write that restores the mtime (`cp --preserve=timestamps`, `rsync
/// --inplace -t`) changes nothing else, and nobody can set the ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// How long after its mtime a stamp is not trusted to change with the next write: a write in
/// the same timestamp granule (a jiffy on Linux, 1 s or 2 s on some filesystems) leaves it as is.
const RACY: Duration = Duration::from_secs(2);

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The file as `stat` (following symlinks, as a ConfigMap's `..data` needs) sees it now.
    pub fn now(path: &Path) -> Result<Stamp, ReadError> {
        let m = std::fs::metadata(path).map_err(|cause| io_error(path, cause))?;
        regular(path, &m)?;
        Ok(Stamp::of(&m))
    }

    /// False while the mtime is within [`RACY`] of `now`: a later write could keep the same stamp,
    /// so the file must be read again (git's "racily clean" entries).
    pub fn trusted(&self, now: SystemTime) -> bool {
        let mtime = match u64::try_from(self.mtime.0) {
            Ok(s) => {
                SystemTime::UNIX_EPOCH + Duration::new(s, self.mtime.1.clamp(0, 999_999_999) as u32)
            }
            Err(_) => return true,
        };
        let apart = now.duration_since(mtime).unwrap_or_else(|e| e.duration());
        apart >= RACY
    }
}

/// A short fingerprint of content (SipHash with fixed keys: stable within a run, which is all a
/// change detector needs; whoever can write the file can change the config anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(u64);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use std::hash::Hasher;
        let mut h = std::hash::DefaultHasher::new();
        h.write(bytes);
        Digest(h.finish())
    }

    /// A digest standing for a file too large to read: changes whenever its stamp does.
    pub fn of_stamp(stamp: &Stamp) -> Digest {
        Digest::of(format!("{stamp:?}").as_bytes())
    }
}

/// The bytes of the config file and the stamp they were read under.
#[derive(Debug)]
pub struct Contents {
    /// The file's bytes (at most [`MAX_BYTES`]).
    pub bytes: Vec<u8>,
    /// The opened file's stamp, taken before reading: a write during the read changes the file's
    /// stamp afterwards, so it is read again.
    pub stamp: Stamp,
    /// Digest of `bytes`.
    pub digest: Digest,
}

/// Reads the file at `path`: `stat` first (nothing but a regular file is opened), then a
/// non-blocking open (the path may have become a FIFO in between) checked again by `fstat`, then
/// at most [`MAX_BYTES`].
pub fn read(path: &Path) -> Result<Contents, ReadError> {
    Stamp::now(path)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|cause| io_error(path, cause))?;
    let m = f.metadata().map_err(|cause| io_error(path, cause))?;
    regular(path, &m)?;
    let stamp = Stamp::of(&m);
    too_large(path, m.len(), stamp)?;
    let mut bytes = Vec::new();
    Read::by_ref(&mut f)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|cause| io_error(path, cause))?;
    too_large(path, bytes.len() as u64, stamp)?;
    let digest = Digest::of(&bytes);
    Ok(Contents {
        bytes,
        stamp,
        digest,
    })
}

fn too_large(path: &Path, len: u64, stamp: Stamp) -> Result<(), ReadError> {
    if len > MAX_BYTES {
        return Err(ReadError::TooLarge {
            file: path.display().to_string(),
            stamp,
        });
    }
    Ok(())
}

fn regular(path: &Path, m: &Metadata) -> Result<(), ReadError> {
    let t = m.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(ReadError::NotRegular {
        file: path.display().to_string(),
        kind,
    })
}

fn io_error(path: &Path, cause: std::io::Error) -> ReadError {
    ReadError::Io {
        file: path.display().to_string(),
        cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_up_to_the_cap_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "a: 1\n").expect("write");
        let c = read(&path).expect("a small regular file");
        assert_eq!(c.bytes, b"a: 1\n");
        assert_eq!(c.digest, Digest::of(b"a: 1\n"));
        std::fs::write(&path, vec![b'#'; MAX_BYTES as usize]).expect("write");
        assert!(read(&path).is_ok(), "exactly the cap is fine");
        std::fs::write(&path, vec![b'#'; MAX_BYTES as usize + 1]).expect("write");
        let e = read(&path).expect_err("over the cap");
        assert_eq!(
            e.to_string(),
            format!("{}: larger than 1 MiB; not loaded", path.display())
        );
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir(&path).expect("mkdir");
        let e = read(&path).expect_err("a directory");
        assert!(
            e.to_string()
                .ends_with("not a regular file (a directory); not loaded"),
            "{e}"
        );
        std::fs::remove_dir(&path).expect("rmdir");
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        if made.is_ok_and(|s| s.success()) {
            let e = read(&path).expect_err("a FIFO, without blocking");
            assert!(e.to_string().contains("(a FIFO)"), "{e}");
        }
    }

    #[test]
    fn a_stamp_is_trusted_only_once_its_mtime_is_two_seconds_old() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "a: 1\n").expect("write");
        let s = Stamp::now(&path).expect("stamp");
        let now = SystemTime::now();
        assert!(!s.trusted(now), "just written");
        assert!(s.trusted(now + RACY + Duration::from_secs(1)));
        assert!(
            s.trusted(now - RACY - Duration::from_secs(1)),
            "far in the future"
        );
    }
}

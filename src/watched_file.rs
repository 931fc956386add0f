//! A small file that readyprism watches (the config, the certificate, key and CA files), read
//! without trusting what sits at its path: regular files only, never a blocking open (a FIFO), at
//! most [`MAX_BYTES`]; remembered as a [`Stamp`] and a [`Digest`], never as its content; checked
//! every [`CHECK_INTERVAL`], and a load that failed tried again every [`LOAD_RETRY_INTERVAL`].
//!
//! Depends on nothing else in the crate. Its error ([`FileError`]) names the file and has one
//! wording for every reader; callers add only what the file is for (the config adds "not
//! loaded", a certificate the field that named it). Does not parse the bytes nor decide when to
//! read (the callers' watchers). Every function here blocks: call it off the runtime thread.

use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The largest file read. A config is a few KiB, a kubelet client certificate ~2 KiB and a CA
/// bundle of a hundred certificates ~150 KiB; 1 MiB bounds the read, the hash and the parse of a
/// file that is not what it should be (a log written to the wrong path) rather than holding it.
pub const MAX_BYTES: u64 = 1 << 20;

/// How often a watched file is stat'ed. A change reaches use within this (plus one probe for a
/// config); rotations and edits happen minutes apart, and a `stat` a second costs nothing.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How often a load that failed (a rejected config, unreadable or mismatched certificates) is
/// tried again while the file still holds it: a `chmod`, a fixed mount or a CA file landing a
/// moment later changes no content. Bounded, so what stays broken costs one load every 5 s.
pub const LOAD_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// How long after its last change (mtime or ctime, the later) a stamp is not trusted: a write in
/// the same timestamp granule (a jiffy on Linux, 1 s or 2 s on some filesystems) leaves it as is,
/// and a file changed this recently may still be being written (an in-place write caught between
/// its truncate and its last byte).
pub const RACY: Duration = Duration::from_secs(2);

/// What stands at the path instead of a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Directory,
    /// A FIFO: opening one for reading blocks until a writer comes.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A block or character device.
    Device,
    /// A symbolic link, as `lstat` reports one (a read follows links and never sees one).
    Symlink,
    /// Anything else `stat` can report.
    Other,
}

impl Kind {
    /// What a file of type `t` is; `None` for a regular file.
    pub fn of(t: std::fs::FileType) -> Option<Kind> {
        Some(if t.is_file() {
            return None;
        } else if t.is_dir() {
            Kind::Directory
        } else if t.is_symlink() {
            Kind::Symlink
        } else if t.is_fifo() {
            Kind::Fifo
        } else if t.is_socket() {
            Kind::Socket
        } else if t.is_block_device() || t.is_char_device() {
            Kind::Device
        } else {
            Kind::Other
        })
    }

    /// As a sentence names it: `a directory`, `a FIFO`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Directory => "a directory",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Device => "a device",
            Kind::Symlink => "a symbolic link",
            Kind::Other => "not a file",
        }
    }
}

/// A file that cannot be read now, named: `/etc/readyprism/config.yaml: cannot read: …`.
#[derive(Debug, thiserror::Error)]
#[error("{}: {error}", path.display())]
pub struct FileError {
    /// The path as given.
    pub path: PathBuf,
    /// Why it cannot be read.
    pub error: ReadError,
}

/// Why a file cannot be read now (the file is named by [`FileError`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Missing, unreadable (EACCES), out of descriptors (EMFILE) or another I/O error.
    #[error("cannot read: {0}")]
    Io(std::io::Error),
    /// Not a regular file: never opened for reading (a FIFO would block).
    #[error("cannot read: not a regular file ({})", .0.as_str())]
    NotRegular(Kind),
    /// More than [`MAX_BYTES`].
    #[error("larger than 1 MiB")]
    TooLarge {
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

    /// The regular file at `path` as `stat` (following symlinks, as a ConfigMap's `..data` and
    /// kubelet's `-current.pem` need) sees it now.
    pub fn now(path: &Path) -> Result<Stamp, FileError> {
        Stamp::at(path).map_err(|error| FileError::new(path, error))
    }

    fn at(path: &Path) -> Result<Stamp, ReadError> {
        let m = std::fs::metadata(path).map_err(ReadError::Io)?;
        regular(&m)?;
        Ok(Stamp::of(&m))
    }

    /// False while the later of the mtime and the ctime is within [`RACY`] of `now`: a later
    /// write could keep the same stamp (git's "racily clean" entries), and the file may still be
    /// being written. The ctime counts because an edit that puts an old mtime back
    /// (`cp --preserve=timestamps`) changes only it.
    pub fn trusted(&self, now: SystemTime) -> bool {
        let at = |(secs, nanos): (i64, i64)| -> Option<SystemTime> {
            let secs = u64::try_from(secs).ok()?;
            Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos.clamp(0, 999_999_999) as u32))
        };
        let Some(changed) = at(self.mtime).max(at(self.ctime)) else {
            return true;
        };
        let apart = now.duration_since(changed).unwrap_or_else(|e| e.duration());
        apart >= RACY
    }
}

/// A short fingerprint of content (SipHash with fixed keys: stable within a run, which is all a
/// change detector needs; whoever can write the file can change what it configures anyway). Tells
/// a real change from a `touch`.
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

/// The bytes of a file and the stamp they were read under.
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
pub fn read(path: &Path) -> Result<Contents, FileError> {
    read_regular(path).map_err(|error| FileError::new(path, error))
}

impl FileError {
    /// `error`, naming the file at `path`.
    pub fn new(path: &Path, error: ReadError) -> FileError {
        FileError {
            path: path.to_path_buf(),
            error,
        }
    }
}

fn read_regular(path: &Path) -> Result<Contents, ReadError> {
    Stamp::at(path)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Io)?;
    let m = f.metadata().map_err(ReadError::Io)?;
    regular(&m)?;
    let stamp = Stamp::of(&m);
    too_large(m.len(), stamp)?;
    let mut bytes = Vec::new();
    Read::by_ref(&mut f)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    too_large(bytes.len() as u64, stamp)?;
    let digest = Digest::of(&bytes);
    Ok(Contents {
        bytes,
        stamp,
        digest,
    })
}

fn too_large(len: u64, stamp: Stamp) -> Result<(), ReadError> {
    if len > MAX_BYTES {
        return Err(ReadError::TooLarge { stamp });
    }
    Ok(())
}

fn regular(m: &Metadata) -> Result<(), ReadError> {
    match Kind::of(m.file_type()) {
        None => Ok(()),
        Some(kind) => Err(ReadError::NotRegular(kind)),
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
        assert!(matches!(e.error, ReadError::TooLarge { .. }), "{e}");
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir(&path).expect("mkdir");
        let e = read(&path).expect_err("a directory");
        assert!(
            matches!(e.error, ReadError::NotRegular(Kind::Directory)),
            "{e}"
        );
        std::fs::remove_dir(&path).expect("rmdir");
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.expect("mkfifo").success());
        let e = read(&path).expect_err("a FIFO, without blocking");
        assert!(matches!(e.error, ReadError::NotRegular(Kind::Fifo)), "{e}");
        std::fs::remove_file(&path).expect("rm");
        let e = read(&path).expect_err("missing");
        assert!(matches!(e.error, ReadError::Io(_)), "{e}");
    }

    #[test]
    fn every_read_error_names_the_file_in_one_wording() {
        // A file of this test's own: the test binary may be replaced by a build meanwhile.
        let dir = std::env::temp_dir().join(format!("readyprism-stamp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("regular");
        std::fs::write(&file, "x").expect("write");
        let stamp = Stamp::now(&file).expect("a regular file's stamp");
        std::fs::remove_dir_all(&dir).expect("rm");
        let eacces = std::io::Error::from_raw_os_error(libc::EACCES);
        for (e, said) in [
            (ReadError::TooLarge { stamp }, "larger than 1 MiB"),
            (
                ReadError::NotRegular(Kind::Directory),
                "cannot read: not a regular file (a directory)",
            ),
            (
                ReadError::NotRegular(Kind::Fifo),
                "cannot read: not a regular file (a FIFO)",
            ),
            (
                ReadError::Io(eacces),
                "cannot read: Permission denied (os error 13)",
            ),
        ] {
            let e = FileError::new(Path::new("/ca.crt"), e);
            assert_eq!(e.to_string(), format!("/ca.crt: {said}"));
        }
    }

    #[test]
    fn a_stamp_is_trusted_only_once_its_last_change_is_two_seconds_old() {
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
        // An old mtime put back (`cp --preserve=timestamps`): the ctime is new, so not yet.
        let hour_ago = now - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(hour_ago))
            .expect("set mtime");
        let s = Stamp::now(&path).expect("stamp");
        assert!(!s.trusted(SystemTime::now()), "the ctime just moved");
        assert!(s.trusted(SystemTime::now() + RACY + Duration::from_secs(1)));
    }

    #[test]
    fn a_same_size_edit_that_keeps_the_mtime_moves_the_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, b"aaaa").expect("write");
        let before = Stamp::now(&ca).expect("stamp");
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
            if Stamp::now(&ca).expect("stamp") != before {
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

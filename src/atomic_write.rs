//! Replacing a small file atomically without trusting its directory: a temporary file with a
//! random name created new beside it (`O_EXCL`, `O_NOFOLLOW`), written, synced, renamed over the
//! target, then the directory synced. Readers see the old file or the new one, never half of one,
//! also across a power loss; a file or symlink planted at the temporary name fails the write, it
//! is never followed nor written through. A file's name leaves room for its temporary file's
//! ([`MAX_NAME`]).
//!
//! Shared by the discovery cache and the status file, with the one rule both follow before a
//! write: a writer replaces only its own file ([`not_ours`]). Does not own what is written, nor
//! what makes a file its writer's own (each caller says).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::watched_file::{self, Kind};

/// Why a path cannot hold a writer's file, seen before a run (`readyprism check`): the writes
/// would fail or be refused. Names the path first; `name` is the file's name in words
/// (`discovery cache`, `status file`).
#[derive(Debug, thiserror::Error)]
pub enum Unfit {
    /// Something other than a regular file is at the path: never read nor written over.
    #[error("{} is {}, not a regular file: the {name} is neither read nor written there", path.display(), kind.as_str())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: Kind,
        /// The file in words.
        name: &'static str,
    },
    /// A regular file that is not the writer's own (a mistyped path): left alone, never written.
    #[error("{}: not a readyprism {name} ({why}); it is left alone and the {name} is never written", path.display())]
    NotOurs {
        /// The path.
        path: PathBuf,
        /// What is there instead.
        why: String,
        /// The file in words.
        name: &'static str,
    },
    /// The directory the file (and its temporary file) would be written in does not exist.
    #[error("{}: its directory {} does not exist: the {name} cannot be written", path.display(), dir.display())]
    NoDirectory {
        /// The path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// The file in words.
        name: &'static str,
    },
    /// The directory is something else, or cannot be written in (permissions, a read-only
    /// filesystem).
    #[error("{}: its directory {} {why}: the {name} cannot be written", path.display(), dir.display())]
    Unwritable {
        /// The path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// Why, as a predicate: `is a regular file, not a directory`, `is not writable: …`.
        why: String,
        /// The file in words.
        name: &'static str,
    },
}

/// Whether `path` can hold the file `name` (blocks; a few `stat`s, a read and an `access(2)`,
/// nothing created): nothing at all at the path, or a regular file `ours` accepts (its content
/// called `what` otherwise), in a directory that exists and this process may write in.
pub fn preflight(
    path: &Path,
    ours: impl FnOnce(&[u8]) -> bool,
    what: &str,
    name: &'static str,
) -> Result<(), Unfit> {
    // Nothing there (a first start) is fine; a failed look is the directory's fault: see below.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if let Some(kind) = Kind::of(m.file_type()) {
            let path = path.to_path_buf();
            return Err(Unfit::NotRegular { path, kind, name });
        }
        if let Some(why) = not_ours(path, ours, what) {
            let path = path.to_path_buf();
            return Err(Unfit::NotOurs { path, why, name });
        }
    }
    let dir = directory(path);
    let unwritable = |why: String| Unfit::Unwritable {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        why,
        name,
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Unfit::NoDirectory {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            name,
        }),
        Err(e) => Err(unwritable(format!("cannot be looked at: {e}"))),
        Ok(m) => match Kind::of(m.file_type()) {
            Some(Kind::Directory) => {
                use rustix::fs::Access;
                rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK)
                    .map_err(|e| unwritable(format!("is not writable: {e}")))
            }
            Some(kind) => Err(unwritable(format!("is {}, not a directory", kind.as_str()))),
            None => Err(unwritable("is a regular file, not a directory".into())),
        },
    }
}

/// The directory a file at `path` is written in (with its temporary file).
pub fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// What stands at `path` if it is neither missing nor a regular file whose content `ours`
/// accepts (blocks): `not a regular file` (a symlink too), why it cannot be read, or `its content
/// is not {what}`. Only what was read as the writer's own is ever replaced.
pub fn not_ours(path: &Path, ours: impl FnOnce(&[u8]) -> bool, what: &str) -> Option<String> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(e.to_string()),
        Ok(m) => m,
    };
    if !meta.file_type().is_file() {
        return Some("not a regular file".into());
    }
    match watched_file::read(path) {
        Err(e) => Some(e.error.to_string()),
        Ok(c) => (!ours(&c.bytes)).then(|| format!("its content is not {what}")),
    }
}

/// What the temporary file's name adds to the file's own: `.` before it, `.tmp-` and 16 hex
/// digits after it ([`temporary`]).
pub const TEMPORARY_EXTRA: usize = ".".len() + ".tmp-".len() + 16;

/// The longest name (in bytes) a file replaced here may have: `NAME_MAX` (255 on every Linux
/// filesystem the files live on) less [`TEMPORARY_EXTRA`], or its temporary file cannot be
/// created, and it can never be written.
pub const MAX_NAME: usize = 255 - TEMPORARY_EXTRA;

/// Replaces `path` with `bytes`, created with permission bits `mode` (blocks: call it on the
/// blocking pool). The temporary file is removed when any step after its creation fails.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    replace_through(path, &temporary(path, random()), bytes, mode)
}

/// The temporary file beside `path` that a write with `random` goes through:
/// `.NAME.tmp-<16 hex digits>`.
fn temporary(path: &Path, random: u64) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".tmp-{random:016x}"));
    directory(path).join(name)
}

/// [`replace`] through the temporary file `tmp`, its name chosen: created new here, or the write
/// fails. Whatever is at `tmp` already (a file, a symlink planted since the choice) is never
/// opened, followed nor removed.
fn replace_through(path: &Path, tmp: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)
        .and_then(|mut f| {
            let done = f.write_all(bytes).and_then(|()| f.sync_all());
            done.and_then(|()| std::fs::rename(tmp, path))
                .inspect_err(|_| {
                    let _ = std::fs::remove_file(tmp); // ours: created new above
                })
        })?;
    // The rename is durable once the directory is.
    std::fs::File::open(directory(path)).and_then(|d| d.sync_all())
}

/// A name no other process can guess in advance: the standard library's per-process random
/// hash keys, mixed with the time.
fn random() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((now, std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_replaced_file_has_the_new_bytes_with_its_mode_leaving_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("status.json");
        replace(&path, b"one", 0o644).expect("create");
        replace(&path, b"two", 0o644).expect("replace");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o644 & !umask_bits());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["status.json"]);
    }

    #[test]
    fn a_missing_directory_fails_the_write_creating_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gone").join("status.json");
        assert!(replace(&path, b"x", 0o600).is_err());
        assert!(!dir.path().join("gone").exists());
    }

    /// The file `status.json` in a new directory, with a victim file beside it (`keep me`) and
    /// the temporary name a write of it will go through, chosen but not yet created.
    fn chosen() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("status.json");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me\n").expect("write");
        let tmp = temporary(&path, random());
        (dir, path, victim, tmp)
    }

    /// The write of `path` through `tmp` failed, leaving `victim` and `path` as they were.
    fn refused(path: &Path, tmp: &Path, victim: &Path) {
        let e = replace_through(path, tmp, b"written through\n", 0o644).expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read(victim).expect("read"), b"keep me\n");
        assert!(!path.exists(), "nothing renamed over the file");
    }

    #[test]
    fn a_symlink_planted_at_the_chosen_temporary_name_is_never_followed() {
        let (dir, path, victim, tmp) = chosen();
        std::os::unix::fs::symlink(&victim, &tmp).expect("plant");
        refused(&path, &tmp, &victim);
        let elsewhere = dir.path().join("elsewhere");
        std::fs::remove_file(&tmp).expect("unplant");
        std::os::unix::fs::symlink(&elsewhere, &tmp).expect("plant a dangling link");
        refused(&path, &tmp, &victim);
        assert!(!elsewhere.exists(), "created through the dangling link");
        assert!(tmp.is_symlink(), "the planted link is left alone");
    }

    #[test]
    fn a_file_planted_at_the_chosen_temporary_name_is_never_written_through() {
        let (_dir, path, victim, tmp) = chosen();
        std::fs::hard_link(&victim, &tmp).expect("plant a second name of the victim");
        refused(&path, &tmp, &victim);
    }

    #[test]
    fn the_temporary_name_adds_what_the_name_bound_leaves_room_for() {
        let name = "n".repeat(MAX_NAME);
        let tmp = temporary(&Path::new("/d").join(&name), u64::MAX);
        let tmp_name = tmp.file_name().expect("a name").len();
        assert_eq!(tmp_name, name.len() + TEMPORARY_EXTRA);
        assert_eq!(tmp_name, 255, "NAME_MAX");
        assert_eq!(tmp.parent(), Some(Path::new("/d")), "beside the file");
    }

    /// The bits the process umask takes away from a new file (the test process's own).
    fn umask_bits() -> u32 {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = dir.path().join("probe");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o777)
            .open(&probe)
            .expect("probe");
        let mode = std::fs::metadata(&probe)
            .expect("meta")
            .permissions()
            .mode();
        !mode & 0o777
    }
}

//! The config file's read in the config's words: every error names the file and says the config
//! was not loaded. The read itself (regular files only, never blocking, at most 1 MiB, a stamp and
//! a digest instead of the content) is `watched_file`'s.
//!
//! Owns the wording; does not parse the bytes (`Config::parse`) and does not decide when to read
//! (`watch`). Every function here blocks: call it off the runtime thread.

use std::path::Path;

use crate::watched_file::{self, Contents, Stamp};

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
    /// More than [`watched_file::MAX_BYTES`].
    #[error("{file}: larger than 1 MiB; not loaded")]
    TooLarge {
        /// Config file path.
        file: String,
        /// The file's stamp, which stands for its content (the bytes are never read).
        stamp: Stamp,
    },
}

impl ReadError {
    /// `watched_file`'s error, naming the config file at `path`.
    fn at(path: &Path, e: watched_file::ReadError) -> ReadError {
        let file = path.display().to_string();
        match e {
            watched_file::ReadError::Io(cause) => ReadError::Io { file, cause },
            watched_file::ReadError::NotRegular(kind) => ReadError::NotRegular {
                file,
                kind: kind.as_str(),
            },
            watched_file::ReadError::TooLarge { stamp } => ReadError::TooLarge { file, stamp },
        }
    }
}

/// The config file's stamp now (see [`Stamp::now`]).
pub fn stamp(path: &Path) -> Result<Stamp, ReadError> {
    Stamp::now(path).map_err(|e| ReadError::at(path, e))
}

/// Reads the config file (see [`watched_file::read`]).
pub fn read(path: &Path) -> Result<Contents, ReadError> {
    watched_file::read(path).map_err(|e| ReadError::at(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watched_file::{Kind, ReadError as Shared};

    #[test]
    fn every_read_error_names_the_config_file_and_says_it_was_not_loaded() {
        let exe = std::env::current_exe().expect("the test binary");
        let stamp = Stamp::now(&exe).expect("a regular file's stamp");
        let eacces = std::io::Error::from_raw_os_error(libc::EACCES);
        for (e, said) in [
            (Shared::TooLarge { stamp }, "larger than 1 MiB; not loaded"),
            (
                Shared::NotRegular(Kind::Directory),
                "not a regular file (a directory); not loaded",
            ),
            (
                Shared::NotRegular(Kind::Fifo),
                "not a regular file (a FIFO); not loaded",
            ),
            (
                Shared::Io(eacces),
                "cannot read config: Permission denied (os error 13)",
            ),
        ] {
            let e = ReadError::at(Path::new("/c.yaml"), e);
            assert_eq!(e.to_string(), format!("/c.yaml: {said}"));
        }
    }
}

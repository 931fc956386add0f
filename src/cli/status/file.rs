//! Reading a status file for `readyprism status --file`: a path, or `-` for standard input
//! (`talosctl read … | readyprism status --file -`), bounded in size ([`MAX_FILE`]) and in time
//! ([`FILE_TIMEOUT`]), as `--admin` is bounded by `cli::http::GET_TIMEOUT`.
//!
//! Owns the bounded read. Does not own the document (`admin::status`) nor the table (`status`).

use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

use super::{cell, Fetched, StatusError, MAX_ERROR};

/// The most a status file may hold: far above 64 + the static backends' documents.
pub const MAX_FILE: u64 = 1024 * 1024;

/// Bound on the whole read. A file on disk reads in microseconds; `talosctl read` streams a
/// small file within a few seconds even through a distant endpoint. Past this it is a FIFO or a
/// pipe that nobody writes to, or a writer that stalled: said so, not waited for.
pub const FILE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a status file (`status_file`, or `-` for standard input) as `fetch` reads `/status`
/// (blocks, at most [`FILE_TIMEOUT`]; at most [`MAX_FILE`] bytes).
///
/// The read runs on a thread of its own: opening a FIFO and reading a pipe block where no timeout
/// reaches them. When the bound passes, that thread is left blocked; the command exits without it.
pub fn read_file(path: &str) -> Result<Fetched, StatusError> {
    let err = |cause| StatusError::File {
        path: path.to_string(),
        cause,
    };
    let (tx, rx) = mpsc::channel();
    let owned = path.to_string();
    std::thread::Builder::new()
        .name("status-file".into())
        .spawn(move || {
            // The receiver is gone only once the bound passed: nothing to tell.
            let _ = tx.send(read_bounded(&owned));
        })
        .map_err(err)?;
    let bytes = match rx.recv_timeout(FILE_TIMEOUT) {
        Ok(read) => read.map_err(err)?,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            return Err(StatusError::FileTimeout {
                path: path.to_string(),
            })
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(err(std::io::Error::other(
                "the read ended without a result",
            )))
        }
    };
    if bytes.len() as u64 > MAX_FILE {
        return Err(err(std::io::Error::other(format!(
            "more than {MAX_FILE} bytes"
        ))));
    }
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let doc = serde_json::from_str(&body).map_err(|e| StatusError::NotAStatusFile {
        path: path.to_string(),
        reason: cell::cell(&e.to_string(), MAX_ERROR),
    })?;
    Ok(Fetched {
        body: cell::json_escaped(body.trim_end()),
        doc,
    })
}

/// At most [`MAX_FILE`] + 1 bytes of `path` (`-`: standard input), to its end (blocks).
fn read_bounded(path: &str) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if path == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_FILE + 1)
            .read_to_end(&mut bytes)?;
    } else {
        std::fs::File::open(path)?
            .take(MAX_FILE + 1)
            .read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

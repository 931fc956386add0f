//! The demo's log region: while the live view owns the terminal, log lines are kept here (the
//! last few) instead of written to stderr, where the next refresh would wipe them the moment
//! they appear. The view shows them in a region of its own.
//!
//! Owns the kept lines and the writer `tracing` formats into. Does not own the view (`view`) or
//! choosing this writer (`main`).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// How many log lines are kept: more than the view has room for.
const KEPT: usize = 16;

/// The kept lines, oldest first. One process runs one demo, so one region.
static LINES: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// A writer for `tracing_subscriber::fmt().with_writer(logs::writer)`: each formatted event is
/// split into lines and kept.
pub fn writer() -> Writer {
    Writer
}

/// See [`writer`].
#[derive(Debug)]
pub struct Writer;

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let mut lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
        for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
            if lines.len() == KEPT {
                lines.pop_front();
            }
            lines.push_back(line.to_string());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The kept lines, oldest first.
pub(super) fn lines() -> Vec<String> {
    let lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    lines.iter().cloned().collect()
}

/// Whether the region is in use: `main` chooses it when the demo's live view owns the terminal.
pub fn wanted(format_is_text: bool) -> bool {
    use std::io::IsTerminal;
    format_is_text && std::io::stdout().is_terminal()
}

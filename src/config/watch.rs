//! Noticing that the config file's content changed, for a static pod's process that nobody can
//! send SIGHUP: written in place or replaced by rename (as Talos and editors do).
//!
//! Owns the change detection and its memory: [`look`] (a `stat` every tick, a read only when the
//! stamp changed or a retry is due; blocking, run off the runtime thread) and [`ConfigWatch`] (a
//! pure decision over what was seen: reload, retry, warn, or nothing). Does not own reloading,
//! logging or counting (`signals`), nor reading the file (`file`).
//!
//! The guarantees: the baseline is the digest of the bytes the running config was parsed from;
//! the seen stamp only advances after a successful read, so a failed read is retried next tick;
//! a change is acted on once the file has been still for [`RACY`](crate::watched_file::RACY), so
//! a write in progress is never applied half-written nor counted as a rejection;
//! a rejected config is retried every [`LOAD_RETRY_INTERVAL`] while the file still holds it (it
//! may name a CA file that lands a moment later). The file is looked at every
//! [`CHECK_INTERVAL`](crate::watched_file::CHECK_INTERVAL) by `signals`.

use std::time::SystemTime;

use tokio::time::Instant;

use super::{Config, ConfigError, Source};
use crate::watched_file::{self, Digest, FileError, ReadError, Stamp, LOAD_RETRY_INTERVAL};

/// What one look at the file found.
// One per tick, moved once and never stored: boxing the config would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Look {
    /// The stamp is the one last read successfully: nothing to read.
    Unchanged,
    /// The file was read (or found too large): what it holds and the config it parses to.
    Read {
        /// The stamp it was read under; `None` when too fresh to trust (read again next tick).
        stamp: Option<Stamp>,
        /// Digest of the bytes (of the stamp, for a file too large to read).
        digest: Digest,
        /// The config they parse to, or why not.
        loaded: Result<Config, ConfigError>,
    },
    /// Nothing usable is at the path now (missing, a directory, unreadable, out of descriptors).
    Unusable(FileError),
}

/// Looks at the config file at wall-clock time `now`: a `stat`, then a read and parse when the
/// stamp differs from `seen` or `force` is set. Blocks: call it in `spawn_blocking`.
pub fn look(source: &Source, seen: Option<Stamp>, force: bool, now: SystemTime) -> Look {
    if !force {
        match Stamp::now(&source.path) {
            Ok(now) if Some(now) == seen => return Look::Unchanged,
            Ok(_) => {}
            Err(e) => return Look::Unusable(e),
        }
    }
    let fresh = |stamp: Stamp| stamp.trusted(now).then_some(stamp);
    match watched_file::read(&source.path) {
        Ok(c) => Look::Read {
            stamp: fresh(c.stamp),
            digest: c.digest,
            loaded: source.parse(&c.bytes),
        },
        Err(
            e @ FileError {
                error: ReadError::TooLarge { stamp },
                ..
            },
        ) => Look::Read {
            stamp: fresh(stamp),
            digest: Digest::of_stamp(&stamp),
            loaded: Err(e.into()),
        },
        Err(e) => Look::Unusable(e),
    }
}

/// Whether a load is the first for its content or a retry of one rejected before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// New content.
    First,
    /// Content rejected before, tried again after [`LOAD_RETRY_INTERVAL`].
    Retry,
}

/// What to do after a look.
#[allow(clippy::large_enum_variant)] // as `Look`
#[derive(Debug)]
pub enum Action {
    /// Nothing.
    Stay,
    /// The file cannot be used (the first look of a spell, or another reason than before): WARN
    /// once; the running config stays.
    Warn(String),
    /// Reload with this config (or reject it with its error).
    Load {
        /// The config, or why the content does not load.
        loaded: Result<Config, ConfigError>,
        /// Digest of the content, for [`ConfigWatch::applied`] / [`ConfigWatch::rejected`].
        digest: Digest,
        /// First attempt or a retry.
        attempt: Attempt,
    },
}

/// The decision for one look.
#[derive(Debug)]
pub struct Decision {
    /// The file is readable again after a spell of [`Action::Warn`] (INFO once).
    pub recovered: bool,
    /// What to do.
    pub action: Action,
}

/// Whether a rejection is news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Content not rejected just before: count it and log it.
    New,
    /// The same content rejected again (a retry): neither counted nor logged again.
    Again,
}

/// What the watch remembers between ticks. Holds digests and stamps, never the file's content.
#[derive(Debug)]
pub struct ConfigWatch {
    /// Digest of the content the running config was parsed from (set at start-up and by every
    /// successful reload).
    running: Digest,
    /// Stamp of the last successful read; `None` before the first, after a failed one and while
    /// the stamp is too fresh to trust: the next tick reads.
    seen: Option<Stamp>,
    /// The last rejected content and when it was tried; cleared when the file holds the running
    /// content again or another reload succeeds.
    rejected: Option<(Digest, Instant)>,
    /// Why the file cannot be used, during such a spell (so it is logged once).
    unusable: Option<String>,
}

impl ConfigWatch {
    /// Starts from the content the running config was parsed from: a file that differs on the
    /// first tick (an edit during start-up) is a change.
    pub fn new(running: Digest) -> ConfigWatch {
        ConfigWatch {
            running,
            seen: None,
            rejected: None,
            unusable: None,
        }
    }

    /// The stamp to compare the next [`look`] with.
    pub fn seen(&self) -> Option<Stamp> {
        self.seen
    }

    /// True when a rejected config is due for another attempt (the next look must read even if
    /// the stamp is unchanged).
    pub fn retry_due(&self, now: Instant) -> bool {
        self.rejected
            .is_some_and(|(_, at)| now.duration_since(at) >= LOAD_RETRY_INTERVAL)
    }

    /// Decides what a look means.
    pub fn decide(&mut self, look: Look, now: Instant) -> Decision {
        let stay = |recovered| Decision {
            recovered,
            action: Action::Stay,
        };
        match look {
            Look::Unchanged => stay(false),
            Look::Unusable(e) => {
                self.seen = None;
                let why = ConfigError::from(e).to_string();
                if self.unusable.as_ref() == Some(&why) {
                    return stay(false);
                }
                self.unusable = Some(why.clone());
                Decision {
                    recovered: false,
                    action: Action::Warn(why),
                }
            }
            Look::Read {
                stamp,
                digest,
                loaded,
            } => {
                let recovered = self.unusable.take().is_some();
                self.seen = stamp;
                if digest == self.running {
                    self.rejected = None;
                    return stay(recovered);
                }
                if stamp.is_none() {
                    // Changed within the last RACY: maybe still being written (an in-place write
                    // caught between its truncate and its last byte). Nothing is applied,
                    // rejected or counted until it has been still that long; it is read again
                    // on the next tick.
                    return stay(recovered);
                }
                let attempt = match self.rejected {
                    Some((d, at)) if d == digest => {
                        if now.duration_since(at) < LOAD_RETRY_INTERVAL {
                            return stay(recovered);
                        }
                        Attempt::Retry
                    }
                    _ => Attempt::First,
                };
                Decision {
                    recovered,
                    action: Action::Load {
                        loaded,
                        digest,
                        attempt,
                    },
                }
            }
        }
    }

    /// The content with `digest` is running now.
    pub fn applied(&mut self, digest: Digest) {
        self.running = digest;
        self.rejected = None;
    }

    /// The content with `digest` was rejected at `now`; retried after [`LOAD_RETRY_INTERVAL`] while
    /// the file still holds it.
    pub fn rejected(&mut self, digest: Digest, now: Instant) -> Rejection {
        let news = match self.rejected {
            Some((d, _)) if d == digest => Rejection::Again,
            _ => Rejection::New,
        };
        self.rejected = Some((digest, now));
        news
    }
}

#[cfg(test)]
mod tests;

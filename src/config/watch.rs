//! Noticing that the config file's content changed, for a static pod's process that nobody can
//! send SIGHUP: written in place or replaced by rename (as Talos and editors do).
//!
//! Owns only the change detection: a cheap `stat` every tick, and a read of the file only when the
//! stat changed, compared by content so a `touch` is no reload. Does not own reloading (`signals`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the file is checked. A config change reaches routing within this plus one probe.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

type Stamp = Option<(SystemTime, u64, u64)>;

/// The last seen state of one config file.
#[derive(Debug)]
pub struct ConfigWatch {
    path: PathBuf,
    stamp: Stamp,
    /// Content as last seen (`None`: unreadable or absent then).
    content: Option<Vec<u8>>,
}

impl ConfigWatch {
    /// Starts from the file as it is now (the content the running config came from).
    pub fn new(path: &Path) -> ConfigWatch {
        ConfigWatch {
            path: path.to_path_buf(),
            stamp: stamp(path),
            content: std::fs::read(path).ok(),
        }
    }

    /// True once per change of content since the last call (or [`ConfigWatch::sync`]). A file
    /// that disappears is no change: the running config stays, and its return is compared again.
    pub fn changed(&mut self) -> bool {
        let now = stamp(&self.path);
        if now == self.stamp || now.is_none() {
            return false;
        }
        self.stamp = now;
        let content = std::fs::read(&self.path).ok();
        if content.is_none() || content == self.content {
            return false;
        }
        self.content = content;
        true
    }

    /// Takes the file as it is now as seen (after a reload triggered by something else).
    pub fn sync(&mut self) {
        *self = ConfigWatch::new(&self.path);
    }
}

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_changes_count_once_and_touches_or_removals_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "a: 1\n").expect("write");
        let mut w = ConfigWatch::new(&path);
        assert!(!w.changed(), "nothing changed yet");
        std::fs::write(&path, "a: 22\n").expect("write in place");
        assert!(w.changed());
        assert!(!w.changed(), "once per change");
        // Same content, new inode: no reload.
        let tmp = dir.path().join("c.yaml.tmp");
        std::fs::write(&tmp, "a: 22\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(!w.changed(), "same content");
        // New content by rename, as Talos and editors write.
        std::fs::write(&tmp, "a: 333\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(w.changed());
        std::fs::remove_file(&path).expect("remove");
        assert!(!w.changed(), "a missing file keeps the running config");
        std::fs::write(&path, "a: 333\n").expect("write back");
        assert!(!w.changed(), "back with the content already running");
    }
}

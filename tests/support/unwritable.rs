//! A directory made unwritable for a test, even for root (the lab runs as root).

use std::path::{Path, PathBuf};

/// Makes `dir` unwritable for as long as it lives, even for root: mode 0555, and where that is
/// not enough (root), the immutable attribute. Undone on drop so the lab can be removed.
pub struct Unwritable(PathBuf);

impl Unwritable {
    pub fn new(dir: &Path) -> Unwritable {
        let chmod = |mode| {
            let perms = std::os::unix::fs::PermissionsExt::from_mode(mode);
            std::fs::set_permissions(dir, perms).expect("chmod");
        };
        chmod(0o555);
        let guard = Unwritable(dir.to_path_buf());
        if writable(dir) {
            let set = std::process::Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status();
            assert!(set.is_ok_and(|s| s.success()), "chattr +i {dir:?}");
        }
        assert!(!writable(dir), "{dir:?} is still writable");
        guard
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
        let perms = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        let _ = std::fs::set_permissions(&self.0, perms);
    }
}

/// Whether a file can be created in `dir` (and removes it again).
pub fn writable(dir: &Path) -> bool {
    let probe = dir.join(".probe");
    let made = std::fs::write(&probe, "").is_ok();
    let _ = std::fs::remove_file(&probe);
    made
}

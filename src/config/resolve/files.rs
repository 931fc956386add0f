//! The files the balancer writes, as the config names them (`status_file`, `discovery.cache`):
//! each an absolute path naming a file, its name short enough to leave room for its temporary
//! file's ([`atomic_write::MAX_NAME`]), and no two the same (the first write would make the other
//! file "not ours", and it would never be written).
//!
//! Owns those rules and where their errors point. Does not own writing the files
//! (`atomic_write`) nor looking at what is at their paths (`check`, `atomic_write::preflight`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Resolver, DEFAULT_STATUS_FILE};
use crate::atomic_write;
use crate::config::{locate, ConfigError};

/// A written file's path from its config text: absolute, naming a file whose name fits. Else why
/// not, to follow the quoted text (`must be an absolute path (e.g. {example})`).
pub(in crate::config) fn written_file(text: &str, example: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return Err(format!("must be an absolute path (e.g. {example})"));
    }
    match path.file_name() {
        _ if text.ends_with('/') => Err("must name a file, not a directory".into()),
        None => Err("must name a file, not a directory".into()),
        Some(name) if name.as_bytes().len() > atomic_write::MAX_NAME => Err(format!(
            "names a file of {} bytes, which can never be written: at most {} fit (its temporary \
             file's name adds {} bytes, and a file name has at most 255)",
            name.as_bytes().len(),
            atomic_write::MAX_NAME,
            atomic_write::TEMPORARY_EXTRA
        )),
        Some(_) => Ok(path),
    }
}

impl Resolver<'_> {
    /// `status_file`: [`DEFAULT_STATUS_FILE`] when absent, `""` turns it off; else a
    /// [`written_file`].
    pub(super) fn status_file(&self, raw: Option<String>) -> Result<Option<PathBuf>, ConfigError> {
        let text = match raw {
            None => return Ok(Some(PathBuf::from(DEFAULT_STATUS_FILE))),
            Some(t) if t.is_empty() => return Ok(None),
            Some(t) => t,
        };
        let checked = if Path::new(&text).is_absolute() {
            written_file(&text, DEFAULT_STATUS_FILE)
        } else {
            Err(format!(
                "must be an absolute path (e.g. {DEFAULT_STATUS_FILE}), or \"\" to keep none"
            ))
        };
        checked.map(Some).map_err(|why| {
            self.invalid(
                locate::key_line(self.src, "status_file", 1),
                "status_file",
                format!("{text:?} {why}"),
            )
        })
    }

    /// The status file and the discovery cache are two files. The error names the field the
    /// config file sets: `status_file`, or `discovery.cache` when the status file is the default.
    pub(super) fn distinct_files(
        &self,
        status_file: Option<&Path>,
        status_file_set: bool,
        cache: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let (Some(status), Some(cache)) = (status_file, cache) else {
            return Ok(());
        };
        if status != cache {
            return Ok(());
        }
        let both = "the status file and the discovery cache need a file each (the cache would \
                    never be written over a status document)";
        Err(if status_file_set {
            self.invalid(
                locate::key_line(self.src, "status_file", 1),
                "status_file",
                format!("{:?} is also discovery.cache: {both}", status.display()),
            )
        } else {
            let block = locate::key_line(self.src, "discovery", 1);
            let line = block.and_then(|at| locate::key_line(self.src, "cache", at));
            self.invalid(
                line.or(block),
                "discovery.cache",
                format!(
                    "{:?} is also the status file (status_file's default): {both}",
                    cache.display()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::atomic_write::MAX_NAME;
    use crate::config::Config;

    const MINIMAL: &str = "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";

    fn err(src: &str) -> String {
        Config::parse(src, "node.yaml")
            .expect_err("rejected")
            .to_string()
    }

    #[test]
    fn a_file_name_leaves_room_for_its_temporary_files() {
        let fits = format!("/var/lib/readyprism/{}", "s".repeat(MAX_NAME));
        let over = format!("/var/lib/readyprism/{}", "s".repeat(MAX_NAME + 1));
        let ok = Config::parse(&format!("{MINIMAL}status_file: {fits}\n"), "node.yaml");
        assert!(ok.is_ok(), "{ok:?}");
        let e = err(&format!("{MINIMAL}status_file: {over}\n"));
        assert!(e.starts_with("node.yaml:5: status_file: "), "{e}");
        assert!(e.contains("names a file of 234 bytes"), "{e}");
        let cache = format!("discovery:\n  endpoints: true\n  cache: {over}\n");
        let e = err(&format!("{MINIMAL}{cache}"));
        assert!(e.starts_with("node.yaml:7: discovery.cache: "), "{e}");
        assert!(e.contains("at most 233 fit"), "{e}");
    }

    #[test]
    fn the_status_file_and_the_cache_are_two_files() {
        let same = "/var/lib/readyprism/x.json";
        let src = format!(
            "{MINIMAL}discovery:\n  endpoints: true\n  cache: {same}\nstatus_file: /var/lib/readyprism//x.json\n"
        );
        let e = err(&src);
        assert!(e.starts_with("node.yaml:8: status_file: "), "{e}");
        assert!(e.contains("is also discovery.cache"), "{e}");
        let default = "/var/lib/readyprism/status.json";
        let e = err(&format!("{MINIMAL}discovery:\n  cache: {default}\n"));
        assert!(e.starts_with("node.yaml:6: discovery.cache: "), "{e}");
        assert!(e.contains("status_file's default"), "{e}");
        let off = format!("{MINIMAL}discovery:\n  cache: {default}\nstatus_file: \"\"\n");
        assert!(Config::parse(&off, "node.yaml").is_ok(), "no status file");
    }
}

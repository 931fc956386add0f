//! Unit tests for the config watch: the decision over looks, and looks at real files.

use super::*;
use std::path::Path;
use std::time::Duration;

const A: &str = "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";
const B: &str = "backends:\n  - address: 10.0.1.11:6443\ntls:\n  ca: /ca.crt\n";

fn source(dir: &tempfile::TempDir) -> Source {
    Source {
        path: dir.path().join("c.yaml"),
        zone: None,
    }
}

/// Writes `text` with an mtime an hour ago, so its stamp is trusted at once.
fn write_old(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("write");
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(hour_ago))
        .expect("set mtime");
}

/// Wall-clock time well after the test's writes: their stamps have settled.
fn settled() -> SystemTime {
    SystemTime::now() + Duration::from_secs(10)
}

/// A look that read `text` under a stamp that has settled (last changed an hour ago).
fn read(text: &str) -> Look {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("settled");
    write_old(&path, text);
    let stamp = Stamp::now(&path).expect("stamp");
    assert!(
        stamp.trusted(SystemTime::now() + Duration::from_secs(10)),
        "settled"
    );
    Look::Read {
        stamp: Some(stamp),
        digest: Digest::of(text.as_bytes()),
        loaded: Config::parse(text, "c.yaml"),
    }
}

/// A look that read `text` a moment after it was written: the stamp is not trusted yet.
fn read_fresh(text: &str) -> Look {
    Look::Read {
        stamp: None,
        digest: Digest::of(text.as_bytes()),
        loaded: Config::parse(text, "c.yaml"),
    }
}

#[test]
fn a_file_changed_a_moment_ago_is_acted_on_only_once_it_has_been_still() {
    let now = Instant::now();
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    // Caught between the truncate and the last byte: does not parse, and is neither rejected
    // nor counted ...
    let half = &B[..10];
    assert!(matches!(
        w.decide(read_fresh(half), now).action,
        Action::Stay
    ));
    assert_eq!(w.seen(), None, "read again next tick");
    // ... nor is a whole new file applied before it has been still.
    assert!(matches!(w.decide(read_fresh(B), now).action, Action::Stay));
    // Once still, it loads; a config that stays broken is then rejected (once).
    assert!(is_load(&w.decide(read(B), now), Attempt::First));
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    assert!(is_load(&w.decide(read(half), now), Attempt::First));
}

fn emfile() -> Look {
    let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
    Look::Unusable(FileError::new(Path::new("c.yaml"), ReadError::Io(emfile)))
}

fn is_load(step: &Decision, attempt: Attempt) -> bool {
    matches!(step.action, Action::Load { attempt: a, .. } if a == attempt)
}

#[test]
fn the_baseline_is_the_loaded_content_so_an_edit_after_the_load_is_a_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source(&dir);
    std::fs::write(&src.path, A).expect("write");
    let loaded = src.load().expect("load");
    assert_eq!(loaded.digest, Digest::of(A.as_bytes()));
    let now = Instant::now();
    let mut unedited = ConfigWatch::new(loaded.digest);
    let step = unedited.decide(look(&src, unedited.seen(), false, settled()), now);
    assert!(matches!(step.action, Action::Stay), "{step:?}");
    // Edited between the load and the first tick (while the app starts).
    std::fs::write(&src.path, B).expect("edit");
    let mut w = ConfigWatch::new(loaded.digest);
    let step = w.decide(look(&src, w.seen(), false, settled()), now);
    assert!(is_load(&step, Attempt::First), "{step:?}");
}

#[test]
fn a_failed_read_leaves_the_file_unseen_so_the_next_tick_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source(&dir);
    write_old(&src.path, A);
    let now = Instant::now();
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    assert!(matches!(
        w.decide(look(&src, None, false, settled()), now).action,
        Action::Stay
    ));
    assert!(w.seen().is_some(), "an old file's stamp is trusted");
    assert!(matches!(
        look(&src, w.seen(), false, settled()),
        Look::Unchanged
    ));
    // The file changes, and its read fails (EMFILE): nothing is marked as seen.
    write_old(&src.path, B);
    assert!(matches!(w.decide(emfile(), now).action, Action::Warn(_)));
    assert_eq!(w.seen(), None);
    let step = w.decide(look(&src, w.seen(), false, settled()), now);
    assert!(step.recovered, "readable again");
    assert!(is_load(&step, Attempt::First), "{step:?}");
}

#[test]
fn an_unusable_file_warns_once_per_spell_per_reason() {
    let now = Instant::now();
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    assert!(matches!(w.decide(emfile(), now).action, Action::Warn(_)));
    for _ in 0..3 {
        let step = w.decide(emfile(), now);
        assert!(matches!(step.action, Action::Stay) && !step.recovered);
    }
    let not_regular = ReadError::NotRegular(crate::watched_file::Kind::Directory);
    let dir = Look::Unusable(FileError::new(Path::new("c.yaml"), not_regular));
    assert!(matches!(w.decide(dir, now).action, Action::Warn(w) if w.contains("directory")));
    let back = w.decide(read(A), now);
    assert!(back.recovered && matches!(back.action, Action::Stay));
    assert!(!w.decide(read(A), now).recovered, "recovered once");
    assert!(
        matches!(w.decide(emfile(), now).action, Action::Warn(_)),
        "a new spell"
    );
}

#[test]
fn a_rejected_config_is_retried_every_five_seconds_while_the_file_holds_it() {
    let t0 = Instant::now();
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    let b = Digest::of(B.as_bytes());
    assert!(is_load(&w.decide(read(B), t0), Attempt::First));
    assert_eq!(w.rejected(b, t0), Rejection::New);
    let soon = t0 + Duration::from_secs(1);
    assert!(!w.retry_due(soon));
    assert!(
        matches!(w.decide(read(B), soon).action, Action::Stay),
        "not yet"
    );
    let due = t0 + LOAD_RETRY_INTERVAL;
    assert!(w.retry_due(due));
    assert!(is_load(&w.decide(read(B), due), Attempt::Retry));
    assert_eq!(w.rejected(b, due), Rejection::Again, "counted once");
    assert!(
        !w.retry_due(due + Duration::from_secs(1)),
        "bounded: 5 s from the last try"
    );
    assert!(w.retry_due(due + LOAD_RETRY_INTERVAL));
    // Another content is news; the first again is news again.
    let c = "backends:\n  - address: 10.0.1.12:6443\ntls:\n  ca: /ca.crt\n";
    assert!(is_load(&w.decide(read(c), due), Attempt::First));
    assert_eq!(w.rejected(Digest::of(c.as_bytes()), due), Rejection::New);
    // Back to the running content: nothing to retry any more.
    assert!(matches!(w.decide(read(A), due).action, Action::Stay));
    assert!(!w.retry_due(due + LOAD_RETRY_INTERVAL * 10));
    // The retry succeeds: running from now on.
    assert!(is_load(&w.decide(read(B), due), Attempt::First));
    assert_eq!(w.rejected(b, due), Rejection::New);
    let later = due + LOAD_RETRY_INTERVAL;
    assert!(is_load(&w.decide(read(B), later), Attempt::Retry));
    w.applied(b);
    assert!(!w.retry_due(later + LOAD_RETRY_INTERVAL));
    assert!(matches!(w.decide(read(B), later).action, Action::Stay));
}

#[test]
fn a_same_size_edit_that_restores_the_mtime_is_seen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source(&dir);
    write_old(&src.path, A);
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    w.decide(look(&src, None, false, settled()), Instant::now());
    let mtime = std::fs::metadata(&src.path)
        .and_then(|m| m.modified())
        .expect("mtime");
    // `cp --preserve=timestamps` of a same-size file over it, in place.
    assert_eq!(A.len(), B.len());
    std::fs::write(&src.path, B).expect("write");
    std::fs::File::options()
        .write(true)
        .open(&src.path)
        .and_then(|f| f.set_modified(mtime))
        .expect("restore mtime");
    let step = w.decide(look(&src, w.seen(), false, settled()), Instant::now());
    assert!(is_load(&step, Attempt::First), "{step:?}");
}

#[test]
fn the_same_content_touched_renamed_or_restamped_is_no_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source(&dir);
    std::fs::write(&src.path, A).expect("write");
    let mut w = ConfigWatch::new(Digest::of(A.as_bytes()));
    let now = Instant::now();
    assert!(matches!(
        w.decide(look(&src, None, false, SystemTime::now()), now)
            .action,
        Action::Stay
    ));
    assert_eq!(
        w.seen(),
        None,
        "a stamp this fresh is not trusted: read again"
    );
    assert!(matches!(
        look(&src, w.seen(), false, SystemTime::now()),
        Look::Read { .. }
    ));
    let tmp = dir.path().join("c.yaml.tmp");
    std::fs::write(&tmp, A).expect("write");
    std::fs::rename(&tmp, &src.path).expect("rename");
    assert!(matches!(
        w.decide(look(&src, w.seen(), false, SystemTime::now()), now)
            .action,
        Action::Stay
    ));
    std::fs::remove_file(&src.path).expect("remove");
    assert!(matches!(
        w.decide(look(&src, w.seen(), false, SystemTime::now()), now)
            .action,
        Action::Warn(_)
    ));
    std::fs::write(&src.path, A).expect("write back");
    let back = w.decide(look(&src, w.seen(), false, SystemTime::now()), now);
    assert!(
        back.recovered && matches!(back.action, Action::Stay),
        "back with the running content"
    );
}

//! The named checks a failed `/readyz` lists: kube-apiserver answers a failing `/readyz` with one
//! line per check (`[+]ping ok`, `[-]etcd failed: reason withheld`) and then `readyz check
//! failed` (k8s.io/apiserver `pkg/server/healthz/healthz.go`, `handleRootHealth`).
//!
//! Owns parsing those lines into a bounded list: names of `[a-z0-9-]` only, at most
//! [`MAX_NAMES`], at most [`MAX_BYTES`] of names in all; what is left over is counted, not kept.
//! Does not own how a reason reads (`https::reason`) or what a draining backend means
//! (`table::transitions`).

use std::fmt;
use std::sync::Arc;

/// At most this many check names are kept from one answer.
pub const MAX_NAMES: usize = 8;
/// At most this many bytes of names (joined by `, `) are kept from one answer.
pub const MAX_BYTES: usize = 200;
/// The longest one name may be.
const MAX_NAME: usize = 64;

/// The check kube-apiserver fails during its graceful shutdown (`--shutdown-delay-duration`),
/// while it still serves everything else (k8s.io/apiserver `pkg/server/healthz.go`,
/// `shutdownCheck`).
pub const SHUTDOWN: &str = "shutdown";

/// The failing checks of one `/readyz` answer, in the order the apiserver listed them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FailingChecks {
    names: Arc<[Box<str>]>,
    /// Failing checks listed but not kept (over the bounds).
    more: u32,
}

impl FailingChecks {
    /// No named check failed (or the body was not kube-apiserver's list).
    pub fn none() -> FailingChecks {
        FailingChecks::default()
    }

    /// The `[-]NAME failed` lines of a `/readyz` body. Lines that are not in that form, or
    /// whose name has other characters than `[a-z0-9-]`, are not checks.
    pub fn parse(body: &[u8]) -> FailingChecks {
        let text = String::from_utf8_lossy(body);
        let mut names: Vec<Box<str>> = Vec::new();
        let mut bytes = 0;
        let mut more = 0u32;
        for name in text.lines().filter_map(failed_name) {
            let joined = bytes + name.len() + if names.is_empty() { 0 } else { 2 };
            if names.len() < MAX_NAMES && joined <= MAX_BYTES {
                bytes = joined;
                names.push(name.into());
            } else {
                more = more.saturating_add(1);
            }
        }
        FailingChecks {
            names: names.into(),
            more,
        }
    }

    /// A list of names, as tests and the simulation build one.
    pub fn of(names: &[&str]) -> FailingChecks {
        let body: String = names.iter().map(|n| format!("[-]{n} failed\n")).collect();
        FailingChecks::parse(body.as_bytes())
    }

    /// The names kept, in the apiserver's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// Failing checks listed beyond the bounds.
    pub fn more(&self) -> u32 {
        self.more
    }

    /// No named check was listed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.more == 0
    }

    /// The only failing check is `shutdown`: the apiserver is draining on purpose and still
    /// serves what it has.
    pub fn only_shutdown(&self) -> bool {
        self.more == 0 && self.names.len() == 1 && &*self.names[0] == SHUTDOWN
    }
}

impl fmt::Display for FailingChecks {
    /// `etcd, etcd-readiness`, and `, 3 more` when some were not kept.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        if self.more > 0 {
            let sep = if self.names.is_empty() { "" } else { ", " };
            write!(f, "{sep}{} more", self.more)?;
        }
        Ok(())
    }
}

/// `NAME` of a line `[-]NAME failed…`, when NAME is a check's name.
fn failed_name(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("[-]")?;
    let (name, tail) = rest.split_once(' ')?;
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (valid && tail.starts_with("failed")).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBE: &str = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n\
        [+]informer-sync ok\n[-]etcd-readiness failed: reason withheld\nreadyz check failed\n";

    #[test]
    fn a_kube_apiserver_body_names_its_failing_checks_in_order() {
        let checks = FailingChecks::parse(KUBE.as_bytes());
        assert_eq!(
            checks.names().collect::<Vec<_>>(),
            ["etcd", "etcd-readiness"]
        );
        assert_eq!(checks.to_string(), "etcd, etcd-readiness");
        assert!(!checks.only_shutdown());
    }

    #[test]
    fn a_body_without_check_lines_names_none() {
        for body in [
            "",
            "Internal Server Error",
            "<html>oops</html>",
            "[-]",
            "[-]etcd",
        ] {
            assert!(FailingChecks::parse(body.as_bytes()).is_empty(), "{body:?}");
        }
    }

    #[test]
    fn names_with_other_characters_are_not_checks() {
        let body = "[-]Etcd failed\n[-]e\u{1b}[31m failed\n[-]a/b failed\n[-]ok-1 failed\n";
        let checks = FailingChecks::parse(body.as_bytes());
        assert_eq!(checks.to_string(), "ok-1");
    }

    #[test]
    fn at_most_eight_names_are_kept_and_the_rest_counted() {
        let names: Vec<String> = (0..11).map(|i| format!("check-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let checks = FailingChecks::of(&refs);
        assert_eq!(checks.names().count(), MAX_NAMES);
        assert_eq!(checks.more(), 3);
        assert!(checks.to_string().ends_with("check-7, 3 more"), "{checks}");
    }

    #[test]
    fn at_most_two_hundred_bytes_of_names_are_kept() {
        let long = "x".repeat(60);
        let checks = FailingChecks::of(&[&long, &long, &long, &long]);
        assert_eq!(
            checks.names().count(),
            3,
            "3×60 + 2×2 = 184 bytes; a fourth is over"
        );
        assert_eq!(checks.more(), 1);
        assert!(checks.to_string().len() <= MAX_BYTES + ", 1 more".len());
    }

    #[test]
    fn only_a_lone_shutdown_check_is_a_drain() {
        assert!(FailingChecks::of(&[SHUTDOWN]).only_shutdown());
        assert!(!FailingChecks::of(&[SHUTDOWN, "etcd"]).only_shutdown());
        assert!(!FailingChecks::of(&["etcd"]).only_shutdown());
        assert!(!FailingChecks::none().only_shutdown());
    }
}

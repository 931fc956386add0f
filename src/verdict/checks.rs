//! The named checks a failed `/readyz` lists: kube-apiserver answers a failing `/readyz` with one
//! line per check (`[+]ping ok`, `[-]etcd failed: reason withheld`) and then `readyz check
//! failed` (k8s.io/apiserver `pkg/server/healthz/healthz.go`, `handleRootHealth`).
//!
//! Owns parsing those lines into a bounded list: names as k8s.io/apiserver gives them (`[a-z0-9-]`
//! in `/`-separated parts: `etcd`, `poststarthook/rbac/bootstrap-roles`), each once, at most
//! [`MAX_NAMES`], at most [`MAX_BYTES`] of names in all; a failing line left over, or one whose
//! name is not such a name, is counted, not kept. Does not own how a reason reads
//! (`https::reason`) or what a draining backend means (`table::transitions`).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// At most this many check names are kept from one answer.
pub const MAX_NAMES: usize = 8;
/// At most this many bytes of names (joined by `, `) are kept from one answer.
pub const MAX_BYTES: usize = 200;
/// The longest one name may be: k8s.io/apiserver's longest are about 70 bytes
/// (`poststarthook/start-kube-apiserver-identity-lease-garbage-collector`).
const MAX_NAME: usize = 128;

/// The check kube-apiserver fails during its graceful shutdown (`--shutdown-delay-duration`),
/// while it still serves everything else (k8s.io/apiserver `pkg/server/healthz.go`,
/// `shutdownCheck`).
pub const SHUTDOWN: &str = "shutdown";

/// The failing checks of one `/readyz` answer, in the order the apiserver listed them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FailingChecks {
    names: Arc<[Box<str>]>,
    /// Failing checks listed but not kept: over the bounds, or a `[-]` line whose name is not a
    /// check's name.
    more: u32,
}

impl FailingChecks {
    /// No named check failed (or the body was not kube-apiserver's list).
    pub fn none() -> FailingChecks {
        FailingChecks::default()
    }

    /// The `[-]NAME failed` lines of a `/readyz` body, each name once. Another `[-]` line (a
    /// name with other characters, too long, not followed by `failed`) is a failing check that
    /// cannot be named: counted in [`FailingChecks::more`], never dropped.
    pub fn parse(body: &[u8]) -> FailingChecks {
        let text = String::from_utf8_lossy(body);
        let mut seen: HashSet<&str> = HashSet::new();
        let mut names: Vec<Box<str>> = Vec::new();
        let mut bytes = 0;
        let mut more = 0u32;
        for line in text.lines().filter_map(failing_line) {
            let name = match line {
                Failing::Named(name) if seen.insert(name) => name,
                Failing::Named(_) => continue, // named twice: one check
                Failing::Unnamed => {
                    more = more.saturating_add(1);
                    continue;
                }
            };
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

    /// No failing check was listed, named or not.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.more == 0
    }

    /// At least one failing check was named.
    pub fn any_named(&self) -> bool {
        !self.names.is_empty()
    }

    /// The only failing check is `shutdown`: the apiserver is draining on purpose and still
    /// serves what it has. Any other failing line, named or not, kept or not, says otherwise.
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

/// A `[-]` line of a health answer: a failing check.
enum Failing<'a> {
    /// `[-]NAME failed…` with NAME a check's name.
    Named(&'a str),
    /// Any other `[-]` line: a check failed that cannot be named.
    Unnamed,
}

/// What `line` says, if it is a `[-]` line.
fn failing_line(line: &str) -> Option<Failing<'_>> {
    let rest = line.trim().strip_prefix("[-]")?;
    let named = rest
        .split_once(' ')
        .filter(|(name, tail)| is_check_name(name) && tail.starts_with("failed"));
    Some(named.map_or(Failing::Unnamed, |(name, _)| Failing::Named(name)))
}

/// k8s.io/apiserver's form of a check's name: `/`-separated parts of `[a-z0-9-]`, none empty, at
/// most [`MAX_NAME`] bytes.
fn is_check_name(name: &str) -> bool {
    name.len() <= MAX_NAME
        && name.split('/').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
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
    fn a_body_without_failing_lines_names_none() {
        for body in [
            "",
            "Internal Server Error",
            "<html>oops</html>",
            "[+]etcd ok",
        ] {
            assert!(FailingChecks::parse(body.as_bytes()).is_empty(), "{body:?}");
        }
    }

    #[test]
    fn a_failing_line_without_a_check_name_is_counted_not_named() {
        let body = "[-]Etcd failed\n[-]e\u{1b}[31m failed\n[-]a//b failed\n[-]/a failed\n\
            [-]etcd\n[-]\n[-]ok-1 failed\n";
        let checks = FailingChecks::parse(body.as_bytes());
        assert_eq!(checks.names().collect::<Vec<_>>(), ["ok-1"]);
        assert_eq!(checks.more(), 6);
        assert_eq!(checks.to_string(), "ok-1, 6 more");
    }

    #[test]
    fn kube_apiserver_names_with_slashes_are_checks() {
        let body = "[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n\
            [-]poststarthook/start-kube-apiserver-identity-lease-garbage-collector failed: x\n";
        let checks = FailingChecks::parse(body.as_bytes());
        assert_eq!(
            checks.names().collect::<Vec<_>>(),
            [
                "poststarthook/rbac/bootstrap-roles",
                "poststarthook/start-kube-apiserver-identity-lease-garbage-collector"
            ]
        );
        assert_eq!(checks.more(), 0);
        let long = "x".repeat(MAX_NAME + 1);
        assert_eq!(FailingChecks::of(&[&long]).more(), 1, "too long: counted");
    }

    #[test]
    fn a_check_named_twice_is_one_check() {
        let checks = FailingChecks::of(&["etcd", "shutdown", "etcd", "shutdown"]);
        assert_eq!(checks.names().collect::<Vec<_>>(), ["etcd", "shutdown"]);
        assert_eq!(checks.more(), 0);
        let names: Vec<String> = (0..10).map(|i| format!("check-{}", i % 9)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let over = FailingChecks::of(&refs);
        assert_eq!(
            (over.names().count(), over.more()),
            (MAX_NAMES, 1),
            "{over}"
        );
        assert!(FailingChecks::of(&[SHUTDOWN, SHUTDOWN]).only_shutdown());
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
        let long: Vec<String> = "abcd".chars().map(|c| c.to_string().repeat(60)).collect();
        let refs: Vec<&str> = long.iter().map(String::as_str).collect();
        let checks = FailingChecks::of(&refs);
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
        for other in [
            "poststarthook/rbac/bootstrap-roles",
            "Etcd",
            "e\u{1b}",
            &"x".repeat(200),
        ] {
            let both = FailingChecks::of(&[SHUTDOWN, other]);
            assert!(!both.only_shutdown(), "shutdown and {other:?}: {both}");
        }
        let unnamed = "[-]shutdown failed: reason withheld\n[-]\u{fffd}\n";
        assert!(!FailingChecks::parse(unnamed.as_bytes()).only_shutdown());
    }
}

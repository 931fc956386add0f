//! Why a dial failed, classified once for client connections and probes alike: this node's own
//! shortage (never counted against a backend) or the backend's fault — the backend or the path
//! to it — which counts as a failed check, passive or active, and one wording for logs, `/status`
//! and metric labels.
//!
//! The classification is a deny-list of this node's shortages: any other error, including ones
//! nobody listed (ENETDOWN, EPERM from a local OUTPUT rule), says this node cannot reach the
//! backend now, and routing elsewhere is the right answer. Does not own the dial (`dial`).
//! A leaf: reads nothing else of the crate.

use std::io;
use std::time::Duration;

/// Who a failed dial says something about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// This node ran short (descriptors, local ports, buffers, memory) or was interrupted: no news
    /// of the backend, so no health check counts it and no other backend is tried.
    ThisNode,
    /// The backend, or the path from this node to it, failed: a failed check.
    Backend,
}

/// A dial that did not connect.
/// `1 attempt`, `3 attempts`.
fn attempts(n: u32) -> String {
    if n == 1 {
        "1 attempt".to_string()
    } else {
        format!("{n} attempts")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Nothing connected within the budget (SYNs unanswered: a black hole or a full accept queue).
    // Debug of a Duration reads as the config writes it: `1s`, `300ms`.
    #[error("dial: timeout after {:?}", .0)]
    Timeout(Duration),
    /// Every planned attempt went unanswered before the budget ran out (a budget longer than the
    /// plan, as a probe's): this many SYNs, no SYN-ACK.
    #[error("dial: timeout: {} unanswered", attempts(*.0))]
    Unanswered(u32),
    /// The name resolved to no address.
    #[error("dial: the name has no address")]
    NoAddress,
    /// Resolving the name failed.
    #[error("dial: cannot resolve: {0}")]
    Resolve(io::Error),
    /// `socket`/`connect` failed, as the kernel said.
    #[error("dial: {}", wording(.0))]
    Connect(io::Error),
}

/// The [`DialError::label`]s of this node's shortages, each exported (at 0) from start-up.
pub const SHORTAGE_LABELS: [&str; 4] = ["descriptors", "ports", "memory", "interrupted"];

impl DialError {
    /// Who is to blame.
    pub fn blame(&self) -> Blame {
        match self {
            DialError::Connect(e) => blame_of(e),
            DialError::Timeout(_)
            | DialError::Unanswered(_)
            | DialError::NoAddress
            | DialError::Resolve(_) => Blame::Backend,
        }
    }

    /// The class of a failed check this dial error was (a timeout, a refusal, any other dial
    /// failure).
    pub fn class(&self) -> crate::verdict::FailClass {
        use crate::verdict::FailClass;
        match self.label() {
            "timeout" => FailClass::Timeout,
            "refused" => FailClass::Refused,
            _ => FailClass::Dial,
        }
    }

    /// A short, bounded label for metrics: `refused`, `timeout`, `unreachable`, `reset`,
    /// `denied`, `resolve`, `other`; for this node's shortages `descriptors`, `ports`, `memory`,
    /// `interrupted`.
    pub fn label(&self) -> &'static str {
        let e = match self {
            DialError::Timeout(_) | DialError::Unanswered(_) => return "timeout",
            DialError::NoAddress | DialError::Resolve(_) => return "resolve",
            DialError::Connect(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => "refused",
            Some(libc::ETIMEDOUT) => "timeout",
            Some(
                libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTDOWN
                | libc::ENONET,
            ) => "unreachable",
            Some(libc::ECONNRESET | libc::ECONNABORTED) => "reset",
            Some(libc::EPERM | libc::EACCES) => "denied",
            Some(libc::EMFILE | libc::ENFILE) => "descriptors",
            Some(libc::EADDRNOTAVAIL | libc::EADDRINUSE) => "ports",
            Some(libc::ENOBUFS | libc::ENOMEM | libc::EAGAIN) => "memory",
            Some(libc::EINTR) => "interrupted",
            _ => match e.kind() {
                io::ErrorKind::ConnectionRefused => "refused",
                io::ErrorKind::TimedOut => "timeout",
                _ if blame_of(e) == Blame::ThisNode => "memory",
                _ => "other",
            },
        }
    }
}

/// The deny-list: errors that are this node's, whatever the backend.
fn blame_of(e: &io::Error) -> Blame {
    let local = matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EADDRNOTAVAIL
                | libc::EADDRINUSE
                | libc::EAGAIN
                | libc::EINTR
        )
    ) || (e.raw_os_error().is_none()
        && matches!(
            e.kind(),
            io::ErrorKind::OutOfMemory
                | io::ErrorKind::AddrNotAvailable
                | io::ErrorKind::AddrInUse
                | io::ErrorKind::Interrupted
        ));
    if local {
        Blame::ThisNode
    } else {
        Blame::Backend
    }
}

/// How an operator reads a connect error: `connection refused`, not `Connection refused (os error
/// 111)`; a shortage says it is this node's.
fn wording(e: &io::Error) -> String {
    let words = match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "connection refused",
        Some(libc::ETIMEDOUT) => "timed out",
        Some(libc::EHOSTUNREACH) => "host unreachable",
        Some(libc::ENETUNREACH) => "network unreachable",
        Some(libc::ENETDOWN) => "network down",
        Some(libc::EHOSTDOWN) => "host down",
        Some(libc::ENONET) => "not on the network",
        Some(libc::ECONNRESET) => "connection reset",
        Some(libc::ECONNABORTED) => "connection aborted",
        Some(libc::EPERM) => "not permitted (a local firewall rule?)",
        Some(libc::EACCES) => "permission denied",
        Some(libc::EAFNOSUPPORT) => "address family not supported",
        Some(libc::EMFILE) => "this node: out of file descriptors (process limit)",
        Some(libc::ENFILE) => "this node: out of file descriptors (system limit)",
        Some(libc::ENOBUFS) => "this node: out of socket buffers",
        Some(libc::ENOMEM) => "this node: out of memory",
        Some(libc::EADDRNOTAVAIL) => "this node: no local port or address available",
        Some(libc::EADDRINUSE) => "this node: local address in use",
        Some(libc::EAGAIN) => "this node: out of resources",
        Some(libc::EINTR) => "this node: interrupted",
        _ => return strip_os_error(&e.to_string()),
    };
    words.to_string()
}

/// `Invalid argument (os error 22)` → `invalid argument`.
fn strip_os_error(s: &str) -> String {
    let s = s.split(" (os error").next().unwrap_or(s);
    let mut out = s.to_string();
    if let Some(first) = out.get(..1) {
        let lower = first.to_lowercase();
        out.replace_range(..1, &lower);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every errno connect(2) and socket(2) can return on Linux (their man pages), plus the
    /// asynchronous errors a non-blocking connect reports through SO_ERROR.
    #[test]
    fn every_errno_of_connect_has_one_class_with_one_wording() {
        use Blame::*;
        let table: &[(i32, Blame, &str)] = &[
            // The backend, or the path to it.
            (libc::ECONNREFUSED, Backend, "refused"),
            (libc::ETIMEDOUT, Backend, "timeout"),
            (libc::EHOSTUNREACH, Backend, "unreachable"),
            (libc::ENETUNREACH, Backend, "unreachable"),
            (libc::ENETDOWN, Backend, "unreachable"),
            (libc::EHOSTDOWN, Backend, "unreachable"),
            (libc::ENONET, Backend, "unreachable"),
            (libc::ECONNRESET, Backend, "reset"),
            (libc::ECONNABORTED, Backend, "reset"),
            (libc::EPERM, Backend, "denied"),
            (libc::EACCES, Backend, "denied"),
            (libc::EAFNOSUPPORT, Backend, "other"),
            (libc::EPROTO, Backend, "other"),
            (libc::EPROTOTYPE, Backend, "other"),
            (libc::EPROTONOSUPPORT, Backend, "other"),
            (libc::EINVAL, Backend, "other"),
            (libc::EISCONN, Backend, "other"),
            (libc::EALREADY, Backend, "other"),
            (libc::EINPROGRESS, Backend, "other"),
            (libc::EBADF, Backend, "other"),
            (libc::EFAULT, Backend, "other"),
            (libc::ENOTSOCK, Backend, "other"),
            // This node.
            (libc::EMFILE, ThisNode, "descriptors"),
            (libc::ENFILE, ThisNode, "descriptors"),
            (libc::EADDRNOTAVAIL, ThisNode, "ports"),
            (libc::EADDRINUSE, ThisNode, "ports"),
            (libc::ENOBUFS, ThisNode, "memory"),
            (libc::ENOMEM, ThisNode, "memory"),
            (libc::EAGAIN, ThisNode, "memory"),
            (libc::EINTR, ThisNode, "interrupted"),
        ];
        for &(errno, blame, label) in table {
            let e = DialError::Connect(io::Error::from_raw_os_error(errno));
            let text = e.to_string();
            assert_eq!(e.blame(), blame, "{text}");
            assert_eq!(e.label(), label, "{text}");
            assert!(text.starts_with("dial: "), "{text}");
            assert!(!text.contains("os error"), "{text}");
            assert_eq!(
                blame == ThisNode,
                text.contains("this node"),
                "a shortage says it is this node's: {text}"
            );
            assert_eq!(
                blame == ThisNode,
                SHORTAGE_LABELS.contains(&label),
                "a shortage's label is declared for start-up: {label}"
            );
        }
        assert_eq!(
            DialError::Connect(io::Error::from_raw_os_error(libc::ECONNREFUSED)).to_string(),
            "dial: connection refused"
        );
        let timeout = DialError::Timeout(Duration::from_secs(1));
        assert_eq!(timeout.to_string(), "dial: timeout after 1s");
        assert_eq!((timeout.blame(), timeout.label()), (Backend, "timeout"));
        assert_eq!(
            DialError::Unanswered(1).to_string(),
            "dial: timeout: 1 attempt unanswered"
        );
        let unanswered = DialError::Unanswered(3);
        assert_eq!(
            unanswered.to_string(),
            "dial: timeout: 3 attempts unanswered"
        );
        assert_eq!(
            (unanswered.blame(), unanswered.label()),
            (Backend, "timeout")
        );
    }

    #[test]
    fn an_error_without_an_errno_is_classified_by_its_kind() {
        let e = DialError::Connect(io::Error::from(io::ErrorKind::OutOfMemory));
        assert_eq!(e.blame(), Blame::ThisNode);
        let e = DialError::Connect(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!((e.blame(), e.label()), (Blame::Backend, "refused"));
        let e = DialError::Resolve(io::Error::other("no such host"));
        assert_eq!(e.blame(), Blame::Backend);
    }
}

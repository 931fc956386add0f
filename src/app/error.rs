//! Why a config could not be applied, as one line that names the config field to blame.
//!
//! Does not own the config's own errors (`config`) or the files' (`tls`).

use std::net::SocketAddr;

use crate::config::{Config, ListenField};
use crate::tls::TlsError;

/// Why a config could not be applied: the balancer could not start, or a reload was rejected.
/// One line each, naming the culprit.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A listener could not be bound (port in use, address not local, …). A taken 7445 (KubePrism's
    /// port) says how to check whether KubePrism still holds it.
    #[error("cannot listen on {addr}: {cause}{}", kubeprism_hint(.addr, .cause))]
    Bind {
        /// Which listener field the address comes from.
        field: ListenField,
        /// The address.
        addr: SocketAddr,
        /// Why.
        cause: std::io::Error,
    },
    /// A CA, certificate or key file is unusable.
    #[error("{0}")]
    Tls(TlsError),
    /// Internal: the table writer is gone (only during shutdown).
    #[error("the routing table is shutting down")]
    TableGone,
}

/// KubePrism, the balancer readyprism replaces on Talos, listens on 7445 too: a deployment that
/// did not turn it off (a delete of a `KubePrismConfig` the node does not have is skipped
/// silently) shows up as this port in use, so the one error line says what to check.
fn kubeprism_hint(addr: &SocketAddr, cause: &std::io::Error) -> &'static str {
    const KUBEPRISM_PORT: u16 = 7445;
    if addr.port() == KUBEPRISM_PORT && cause.kind() == std::io::ErrorKind::AddrInUse {
        ": is KubePrism still enabled? (talosctl get kubeprismstatuses)"
    } else {
        ""
    }
}

impl ApplyError {
    /// The config itself is to blame (a file it names is unusable), not this node's state at run
    /// time (a port in use): the command exits with the rejection's code.
    pub fn is_rejection(&self) -> bool {
        matches!(self, ApplyError::Tls(_))
    }

    /// The error with the config file, line, column and field it is about, when a field is to
    /// blame (reads the file for the line: blocks).
    pub fn placed(self, source: &crate::config::Source, config: &Config) -> Placed {
        Placed {
            at: self.field(config).map(|field| source.place(&field)),
            error: self,
        }
    }

    /// The config field the error is about (`tls.ca`, `listen[1]`, `admin`), as `config` places
    /// it; `None` when no field is to blame.
    pub fn field(&self, config: &Config) -> Option<String> {
        match self {
            ApplyError::Bind { field, addr, .. } => Some(config.listener_field(*field, *addr)),
            ApplyError::Tls(e) => config
                .tls
                .field_of(e.path(), e.is_about_key())
                .map(str::to_string),
            ApplyError::TableGone => None,
        }
    }
}

/// An [`ApplyError`] and where the config sets what is to blame: one line,
/// `config.yaml:6:3: tls.ca: /ca.crt: cannot read: …` (just the error when no field is to blame).
#[derive(Debug, thiserror::Error)]
#[error("{}{error}", at.as_deref().map(|at| format!("{at}: ")).unwrap_or_default())]
pub struct Placed {
    /// `file:line:column: field`, or `file: field` for a default.
    pub at: Option<String>,
    /// The error.
    pub error: ApplyError,
}

impl From<TlsError> for ApplyError {
    fn from(e: TlsError) -> Self {
        ApplyError::Tls(e)
    }
}

//! The test toolkit, one for unit and integration tests alike: sockets that fail the way networks
//! do (`sockets.rs`), plain TCP backends that say their name, hold or answer a canned reply
//! (`backends.rs`), domain fixtures for the crate's own unit tests (`fixtures.rs`: a backend's
//! spec and snapshot entry, also behind the snapshot benchmark's `snapshot_bench` with the hidden
//! `bench-internals` feature), and, with the `sim` feature, a cluster's CA with fake apiservers serving its
//! TLS (`apiservers.rs`) and a client to talk to them directly (`https_client.rs`). Compiled for the crate's own tests and with the `sim` feature (the
//! integration tests); the daemon never uses it.
//!
//! It starts no balancer and waits for no state: the integration tests' `support/` does that.

mod backends;
#[cfg(any(test, feature = "bench-internals"))]
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        reason = "the snapshot benchmark needs only a spec and an entry"
    )
)]
pub(crate) mod fixtures;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod snapshot_bench;
mod sockets;

#[cfg(feature = "sim")]
mod apiservers;
#[cfg(feature = "sim")]
mod https_client;

#[cfg(feature = "sim")]
pub use apiservers::{fake_serving, Cluster};
pub use backends::{answers, holds, says};
#[cfg(feature = "sim")]
pub use https_client::HttpsConn;
pub use sockets::{refusing, short_queue, BlackHole, EVICT_SPREAD, FAILBACK_SPREAD};

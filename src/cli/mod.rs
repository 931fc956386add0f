//! The operator tools: `readyprism check`, `readyprism status`, `readyprism talos check-installer`
//! and `readyprism demo`, and the plain HTTP GET they and
//! the tests use to read an admin endpoint. None of this runs inside the balancer.

pub mod check;
#[cfg(feature = "sim")]
pub mod demo;
pub mod http;
pub mod installer;
pub mod status;

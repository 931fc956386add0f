//! Integration tests: the balancer end to end against in-process fake apiservers with real mutual
//! TLS on port 0.

mod support;

mod core_cli;
mod core_health;
mod core_picking;
mod core_relay;
mod ops_cli;
mod ops_lifecycle;
mod ops_metrics;

//! Integration tests: the balancer end to end against in-process fake apiservers with real mutual
//! TLS on port 0, named by behaviour.

mod support;

mod addresses;
mod admin_hardening;
mod admin_host;
mod admin_page;
mod alerts;
mod architecture;
mod blink;
mod cadence;
mod check_paths;
mod cli;
mod client_cert;
mod config_errors;
mod config_watch;
mod dead_paths;
mod demo;
mod discovery;
mod discovery_hardening;
mod escape;
mod failback;
mod failing_checks;
mod handoff;
mod health;
mod hostile;
mod installer;
mod lifecycle;
mod observability;
mod overload;
mod own_addresses;
mod partition;
mod passive;
mod picking;
mod properties;
mod real_apiserver;
mod records;
mod reentry;
mod relay;
mod shutdown_window;
mod sim_shutdown;
mod stalled_readers;
mod status_file;
mod status_file_writes;
mod tls_files;
mod zones;

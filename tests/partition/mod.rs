//! The partition lab: real network namespaces with the field report's delays, faults as
//! iptables rules, and a real three-member etcd cluster. Needs root; without it (or without
//! `ip netns`) the lab tests say why they are skipped, unless `READYPRISM_REQUIRE_NETNS=1`.
//! Helper programs live in `tests/lab/` (see its README). The lab itself (`netlab`, `etcd`) uses
//! only std, serde_json, tempfile and external processes; the scenarios (`cast`, `runner`,
//! `scenarios`) run the real binary and use the library only for its in-memory CA.

pub mod balancer_log;
pub mod balancers;
pub mod cast;
pub mod client;
pub mod etcd;
pub mod figures;
pub mod lease;
pub mod netlab;
pub mod runner;
pub mod timeline;

mod blink;
mod chaos;
mod dying_path;
mod handoff;
mod head_to_head;
mod lab_tests;
mod membership;
mod real_k8s;
pub mod scenarios;

//! The partition lab (issue 7): real network namespaces with the field report's delays, faults as
//! iptables rules, and a real three-member etcd cluster. Needs root; without it (or without
//! `ip netns`) the lab tests say why they are skipped, unless `READYPRISM_REQUIRE_NETNS=1`.
//! Helper programs live in `tests/lab/` (see its README). This module uses only std, serde_json,
//! tempfile and external processes, not the readyprism library.

#![allow(dead_code)]

pub mod etcd;
pub mod netlab;

mod lab_tests;

//! readyprism: a node-local Kubernetes API server load balancer that routes new connections only to
//! apiservers whose `/readyz` passes — same zone first, then by measured `/readyz` latency — and
//! closes connections to an apiserver that turns unready.
//!
//! ```text
//!  health::ProbeTask ──probe──▶ health::state (rise/fall) ──TableCmd──▶ table writer
//!        (one per backend)                                               │ ArcSwap::store
//!                                                                        ▼
//!  client ──▶ proxy (load snapshot ─▶ pick ─▶ dial with retry ─▶ relay) ◀── Snapshot ──▶ admin
//!                       ▲ evict signal when a backend stops being ready ─┘
//! ```
//!
//! Modules: [`config`] (YAML → typed), [`backend`] (identity, health, snapshot), [`table`] (the one
//! `ArcSwap`), [`health`], [`pick`] (pure), [`proxy`] + [`relay`], [`admin`], [`metrics`], [`tls`],
//! [`app`] (wiring), [`shutdown`] (signals), and for people and tests: `status`, `demo`, `fake`, `pki`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod backend;
pub mod config;
pub mod demo;
pub mod fake;
pub mod health;
pub mod metrics;
pub mod pick;
pub mod pki;
pub mod proxy;
pub mod relay;
pub mod shutdown;
pub mod status;
pub mod table;
pub mod tls;

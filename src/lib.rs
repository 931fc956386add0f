//! readyprism: a node-local Kubernetes API server load balancer that routes new connections only to
//! apiservers whose `/readyz` passes — same zone first, then by measured `/readyz` latency — and
//! closes connections to an apiserver that turns unready.
//!
//! ```text
//!  health::Monitor ─probe─▶ health::rise_fall ──TableCmd──▶ table writer ── transitions (pure)
//!    (one per backend)                                          │ publish, then bump evictions
//!                                                               ▼
//!  client ──▶ proxy (load Snapshot ─▶ pick (pure) ─▶ dial with retry ─▶ relay) ◀── admin /status
//!                       ▲ backend::Eviction fires when a backend stops being ready ─┘
//! ```
//!
//! The daemon: [`config`] (YAML → typed), [`backend`] (identity, eviction, the snapshot),
//! [`table`] (the one `ArcSwap`, its writer and its pure transitions), [`health`] (probe,
//! rise/fall, monitor), [`pick`] (pure), [`proxy`] + [`relay`], [`dial`], [`accept`], [`admin`] (and the
//! `/status` type), [`metrics`], [`tls`], [`app`] (wiring), [`signals`].
//! Operator tools: [`cli`] (`status`, `demo`). Simulation for the demo and tests: `sim`.
//!
//! Dependencies point one way: `health::verdict` ← `pick` ← `backend` ← `table` ← `health`
//! (monitor) / `proxy` / `admin` ← `app` ← `signals` ← `main`; `config` reads `backend` and `pick`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod accept;
pub mod admin;
pub mod app;
pub(crate) mod backend;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_support;
pub mod cli;
pub mod config;
pub(crate) mod dial;
pub(crate) mod eviction;
pub mod health;
pub(crate) mod metrics;
pub mod pick;
pub(crate) mod proxy;
pub(crate) mod relay;
pub mod signals;
#[cfg(feature = "sim")]
pub mod sim;
pub(crate) mod table;
pub(crate) mod tls;

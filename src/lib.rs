//! readyprism: a node-local Kubernetes API server load balancer that routes new connections only to
//! apiservers whose `/readyz` passes — same zone first, then by measured `/readyz` latency — and
//! closes connections to an apiserver that turns unready.
//!
//! ```text
//!  ┌─ backend::Inbox, one per backend: News::{DialFailed, Connected, ConfirmAsked} ◀─────────┐
//!  ▼                                                                                         │
//!  health::Monitor ─probe─▶ rise_fall ─TableCmd::Health─▶ table::Writer ─ transitions (pure) │
//!    probe → fold → publish → request check → wait        │ Effects: publish, then bump;     │
//!    request check ─overload (pure)─TableCmd::Degraded───▶│                                  │
//!                                                         │ call-offs; confirm asks ─────────┤ (2)
//!  discovery ─TableCmd::Configure (via app) ─────────────▶│ (3)                              │
//!                                                         ▼                                  │
//!  client ─▶ proxy (load Snapshot ─▶ pick ─▶ dial, retry ─▶ relay) ◀─ admin /status          │
//!             │  ▲ eviction::Eviction: a bump closes at its turn (eviction::turn)            │
//!             └─ failed and connected dials, dead paths ─────────────────────────────────────┘ (1)
//! ```
//!
//! The runtime feedback loops: (1) proxy → monitor → writer → proxy: failed client dials count as
//! failed checks, a fall publishes, the writer bumps the backend's connections; (2) writer → monitor
//! → writer: an unready backend's connections wait for a confirm probe of their escape route and of
//! the backend itself, so an eviction may wait for a confirm (at most one per interval each);
//! (3) discovery → app → writer: a changed Endpoints list reconfigures the table, which may remove
//! backends (`removed`).
//!
//! The daemon: [`config`] (YAML → typed), [`backend`] (identity, live counts, the snapshot),
//! [`verdict`] (a backend's health as decided), [`eviction`] (closing a backend's connections,
//! and why), [`table`] (the one `ArcSwap`, its writer and its pure transitions), [`health`]
//! (probe, rise/fall, monitor), [`https`] (the apiserver client the probe and discovery share),
//! [`pick`] (pure), [`overload`] (pure: a request check's answer finds a ready apiserver
//! degraded, ranked after the healthy ones), [`pacing`] (pure: paced re-entry), [`proxy`] (and its per-connection record) + [`relay`] (and [`stall`]: why its writes to a
//! backend are stuck), [`dial`] (and what a
//! failed dial means), [`jitter`], [`accept`], [`admin`] (and the `/status` type), [`metrics`],
//! [`tls`], [`discovery`] (the backend list following the cluster's Endpoints object), [`app`]
//! (wiring and the one loop), [`signals`], [`watched_file`] (reading a config or certificate file
//! safely), [`atomic_write`] (replacing a file atomically). Operator tools: [`cli`] (`check`,
//! `status`, `talos check-installer`, `demo`). Simulation for the demo and tests: `sim`; the test toolkit (failing
//! sockets, plain backends, a CA with fake apiservers), for every test: `testing`.
//!
//! Layers, lowest first. A module imports only from layers below its own; the test
//! `architecture::no_module_imports_its_own_layer_or_one_above` reads this list and fails naming
//! the import that breaks it, and a module missing from the list:
//!
//! ```text
//! layer 0: accept eviction jitter overload pacing signals stall verdict visible watched_file
//! layer 1: atomic_write dial pick relay
//! layer 2: backend
//! layer 3: config metrics
//! layer 4: tls
//! layer 5: https table
//! layer 6: admin discovery health proxy
//! layer 7: app
//! layer 8: sim
//! layer 9: cli testing
//! ```
//!
//! Nothing below `metrics` holds a Prometheus handle: the domain keeps plain atomics, which
//! `metrics` reads at scrape time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod accept;
pub mod admin;
pub mod app;
pub(crate) mod atomic_write;
pub(crate) mod backend;
pub mod cli;
pub mod config;
pub(crate) mod dial;
pub mod discovery;
pub(crate) mod eviction;
pub mod health;
pub(crate) mod https;
pub(crate) mod jitter;
pub(crate) mod metrics;
pub mod overload;
pub mod pacing;
pub mod pick;
pub(crate) mod proxy;
pub(crate) mod relay;
pub mod signals;
#[cfg(feature = "sim")]
pub mod sim;
pub(crate) mod stall;
pub(crate) mod table;
#[cfg(any(test, feature = "sim", feature = "bench-internals"))]
pub mod testing;
pub(crate) mod tls;
pub mod verdict;
pub(crate) mod visible;
pub(crate) mod watched_file;

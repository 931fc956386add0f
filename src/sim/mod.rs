//! The simulation, for the demo and the tests: a simulated kube-apiserver and an in-memory
//! certificate authority. Nothing here runs in the balancer itself; it is built only with the
//! `sim` feature (on by default), which is also what pulls in `rcgen`.

pub mod apiserver;
mod control;
pub mod etcd;
mod etcd_check;
pub mod pki;
pub mod process;
pub mod readyz;
mod routes;
mod shutdown;
pub mod tls;

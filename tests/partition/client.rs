//! What the kubelet-like client (`tests/lab/kubelet.py`) records: one JSON line per request,
//! stream event, stream end or failed dial, lease attempt and `/slow` request. Only the type;
//! starting the client is `cast`'s, the figures `figures`' and `lease`'s.

use serde::Deserialize;

/// One line of the client's output (see `tests/lab/kubelet.py`).
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum ClientEvent {
    /// A request of the steady load.
    Req(Exchange),
    Line {
        t: f64,
        c: u32,
        site: String,
    },
    End {
        t: f64,
        c: u32,
        reason: String,
    },
    DialError {
        t: f64,
        error: String,
    },
    Lease {
        t0: f64,
        t1: f64,
        ok: bool,
        site: Option<String>,
        attempt: u32,
        conn: String,
        error: Option<String>,
    },
    /// A `/slow` request.
    Slow(Exchange),
}

/// One request and its answer (or failure), from the client's side.
#[derive(Clone, Debug, Deserialize)]
pub struct Exchange {
    pub t0: f64,
    pub t1: f64,
    pub ok: bool,
    /// The site that answered (its `X-Site` header).
    pub site: Option<String>,
    pub attempts: u32,
    pub error: Option<String>,
}

//! The signals a run acts on: SIGHUP (reload) and SIGTERM/SIGINT (end the run).
//!
//! Handlers are installed before anything is served ([`Signals::install`] comes before
//! `App::start`), so a signal right after start never takes its default action and kills the
//! process. Owns installing them and naming the one that came; what each does is `App::run`.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGTERM and SIGINT, installed together: the signals that end a run.
#[derive(Debug)]
pub struct Termination {
    term: Signal,
    int: Signal,
}

impl Termination {
    /// Installs the handlers; from now on these signals are delivered here, not fatal.
    pub fn install() -> io::Result<Termination> {
        Ok(Termination {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for either; answers its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Every signal `run` acts on.
#[derive(Debug)]
pub struct Signals {
    hup: Signal,
    end: Termination,
}

impl Signals {
    /// Installs every handler; call before anything binds or serves.
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            end: Termination::install()?,
        })
    }

    /// SIGHUP, and the signals that end the run.
    pub fn split(self) -> (Signal, Termination) {
        (self.hup, self.end)
    }
}

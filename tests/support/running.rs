//! [`Running`]: the balancer in process, started from a config file as `readyprism run` starts it
//! and run with the file watched for changes, on a thread and runtime of its own whose every
//! thread logs into its own [`Logs`]. What tests of log lines, listeners, metrics and status
//! read without spawning the binary. It has no signals, exit code or stderr: those stay with
//! `process.rs`.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::cell::RefCell;
use std::path::Path;
use std::thread::JoinHandle;

use readyprism::app::{App, ConfigFile, Control};
use readyprism::config::Source;
use tokio_util::sync::CancellationToken;

use super::logs::Logs;
use super::observed::Observed;
use super::patience;

thread_local! {
    /// The app's subscriber on a thread of its runtime's blocking pool, from start to stop.
    static SUBSCRIBED: RefCell<Option<tracing::dispatcher::DefaultGuard>> = const { RefCell::new(None) };
}

/// A balancer running in process; dropping it ends it at once, as a kill ends the binary. What
/// it logs and answers is [`Observed`], which it derefs to.
pub struct Running {
    observed: Observed,
    kill: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl std::ops::Deref for Running {
    type Target = Observed;
    fn deref(&self) -> &Observed {
        &self.observed
    }
}

impl Running {
    /// Loads `config` as `readyprism run --config <config>` does (no zone from a flag or the
    /// environment), starts the app and waits until it listens.
    pub fn start(config: &Path) -> Running {
        let logs = Logs::default();
        let dispatch = logs.dispatch();
        let kill = CancellationToken::new();
        let (bound, listening) = std::sync::mpsc::channel();
        let source = Source {
            path: config.to_path_buf(),
            zone: None,
        };
        let killed = kill.clone();
        let thread = std::thread::Builder::new()
            .name("readyprism-app".into())
            .spawn(move || {
                let _subscribed = tracing::dispatcher::set_default(&dispatch);
                let on_start = dispatch.clone();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .on_thread_start(move || {
                        let guard = tracing::dispatcher::set_default(&on_start);
                        SUBSCRIBED.with(|s| *s.borrow_mut() = Some(guard));
                    })
                    .on_thread_stop(|| SUBSCRIBED.with(|s| drop(s.borrow_mut().take())))
                    .build()
                    .expect("the app's runtime");
                rt.block_on(async move {
                    let loaded = source.load().expect("a valid config file");
                    let app = App::start(loaded.config).await.expect("start balancer");
                    let _ = bound.send((app.listen_addrs(), app.admin_addr()));
                    let control = Control {
                        config: Some(ConfigFile {
                            source,
                            running: loaded.digest,
                        }),
                        hangup: None,
                        end: Box::pin(std::future::pending()),
                    };
                    tokio::select! {
                        () = app.run(control) => {}
                        () = killed.cancelled() => {}
                    }
                });
                rt.shutdown_timeout(std::time::Duration::from_millis(200));
            })
            .expect("spawn the app's thread");
        let (listens, admin) = listening
            .recv_timeout(patience())
            .expect("the app did not start listening (its thread panicked or hung)");
        Running {
            observed: Observed::new(logs, &listens, admin),
            kill,
            thread: Some(thread),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill.cancel();
        if let Some(thread) = self.thread.take() {
            // A panic on the app's thread already failed the test through `start` or a wait.
            let _ = thread.join();
        }
    }
}

//! The `readyprism` command line: parse, set up logging and crypto, dispatch, map errors to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use readyprism::app::{App, ConfigFile, Control};
use readyprism::cli::{check, installer, status};
use readyprism::config::{Node, NodeZone, Source, ZoneSource};
use readyprism::signals::Signals;

/// mimalloc instead of glibc's malloc. Each connection makes three 128-byte-aligned allocations
/// (its tokio task and its two sockets' registrations), which glibc serves from its slow
/// `memalign` path (no thread cache; it splits and later consolidates chunks) and pads with
/// slack; mimalloc serves them from its size classes. Measured with `cargo bench --bench proxy`
/// (`benches/README.md`, "Latest results"): RSS per idle connection 1250 → 873 B; proxy CPU per
/// short connection and per request within the noise or slightly lower. Its feature `no_thp`
/// keeps transparent huge pages off its memory: with them, zeroing fresh 2 MiB pages took three
/// quarters of the start-up's CPU (`perf record`: `folio_zero_user`), 18 ms instead of 5.5 ms
/// in the first half second, and exec → accepting went from ~3 to ~6 ms.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "readyprism",
    version,
    about = "Node-local Kubernetes API server load balancer routing by /readyz, zone and latency"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log filter (e.g. `info`, `debug`, `readyprism=debug`); RUST_LOG also works.
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The config file and the zone override, shared by `run` and `check`.
#[derive(clap::Args)]
struct ConfigArgs {
    /// Config file (YAML).
    #[arg(long, short)]
    config: PathBuf,
    /// This node's zone; overrides the config's `zone` and `zones`.
    #[arg(long, env = "READYPRISM_ZONE")]
    zone: Option<String>,
    /// Where `zone` came from: filled in after parsing (clap knows, the derive does not say).
    #[arg(skip = ZoneSource::Flag)]
    zone_source: ZoneSource,
}

impl ConfigArgs {
    fn source(self) -> Source {
        Source {
            path: self.config,
            zone: self.zone.map(|name| NodeZone {
                name,
                source: self.zone_source,
            }),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the balancer.
    Run(ConfigArgs),
    /// Validate a config file (and the CA, certificate and key it names) and print it with
    /// defaults filled in.
    Check {
        #[command(flatten)]
        args: ConfigArgs,
        /// Do not read the CA, certificate and key files: for validating a config away from the
        /// node they exist on (e.g. in CI, before rolling it out).
        #[arg(long)]
        skip_node_files: bool,
        /// The node grace period (kube-controller-manager `--node-monitor-grace-period`: 40s,
        /// 50s from Kubernetes 1.32) that the NotReady budget is compared with.
        #[arg(long, value_parser = node_grace, default_value_t = readyprism::config::DurationValue(readyprism::cli::check::budget::DEFAULT_NODE_GRACE))]
        node_grace: readyprism::config::DurationValue,
        /// Also print the control plane's load (probes, TLS handshakes and discovery GETs a
        /// second, per apiserver) from this many nodes running this config.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        fleet_size: Option<u64>,
    },
    /// Show a running balancer's backends, or those a status file holds (exit 0: one is ready,
    /// 1: none is, 2: unreachable or unreadable).
    Status {
        /// The balancer's admin address.
        #[arg(long, default_value = readyprism::config::DEFAULT_ADMIN)]
        admin: String,
        /// Print the raw `/status` JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// Read a status file (`status_file`) instead of asking the admin port; `-` reads
        /// standard input (`talosctl read /var/lib/readyprism/status.json | readyprism status --file -`).
        #[arg(long, conflicts_with = "admin")]
        file: Option<String>,
    },
    /// Talos tools.
    #[command(subcommand)]
    Talos(TalosCommand),
    /// Run simulated apiservers behind the balancer (a fourth joins through discovery) and watch the picks live.
    #[cfg(feature = "sim")]
    Demo {
        /// Stop after this long (e.g. 30s, 2m); default: until Ctrl-C.
        #[arg(long, value_parser = readyprism::config::DurationValue::parse)]
        duration: Option<readyprism::config::DurationValue>,
        /// The balancer's client listener.
        #[arg(long, default_value = readyprism::config::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
        /// The balancer's admin listener.
        #[arg(long, default_value = readyprism::config::DEFAULT_ADMIN)]
        admin: std::net::SocketAddr,
        /// Print the config the demo's balancer runs with (a starting point for `run`) and exit.
        #[arg(long)]
        print_config: bool,
    },
    /// Run one simulated apiserver (mutual TLS, /readyz, /whoami, /watch), e.g. one per site of a
    /// network lab; with --etcd, /readyz is a linearizable read from that etcd member.
    #[cfg(feature = "sim")]
    SimApiserver(readyprism::sim::process::ApiserverOptions),
}

#[derive(Subcommand)]
enum TalosCommand {
    /// Check that an installer image carries the readyprism system extension: list the
    /// extensions in its UKI's initramfs (exit 0: readyprism is one; 1: it is not, or the input
    /// is no installer for the architecture).
    CheckInstaller {
        /// The installer: an image tarball (`docker save`, `crane pull --format=tarball`,
        /// `skopeo copy … oci-archive:`) or an exported root filesystem directory.
        installer: PathBuf,
        /// The architecture whose UKI (`usr/install/<arch>/vmlinuz.efi`) is read.
        #[arg(long, value_enum, default_value = "amd64")]
        arch: installer::Arch,
    },
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Run(args) | Command::Check { args, .. } = &mut cli.command {
        let from_env = matches
            .subcommand()
            .is_some_and(|(_, m)| m.value_source("zone") == Some(ValueSource::EnvVariable));
        if from_env {
            args.zone_source = ZoneSource::Env;
            // An empty READYPRISM_ZONE is unset (a template that left it blank); an empty
            // --zone stays an error.
            if args.zone.as_deref().is_some_and(|z| z.trim().is_empty()) {
                args.zone = None;
            }
        }
    }
    // The demo's live view owns the terminal: its log lines go to a region of the screen.
    #[cfg(feature = "sim")]
    let demo_screen =
        matches!(
            cli.command,
            Command::Demo {
                print_config: false,
                ..
            }
        ) && readyprism::cli::demo::logs::wanted(matches!(cli.log_format, LogFormat::Text));
    #[cfg(not(feature = "sim"))]
    let demo_screen = false;
    if let Err(e) = init_tracing(cli.log_format, cli.log_level.as_deref(), demo_screen) {
        eprintln!("readyprism: {e:#}");
        return ExitCode::from(2);
    }
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(Failure::Runtime(e)) => {
            eprintln!("readyprism: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
        Err(Failure::Rejected(e)) => {
            eprintln!("readyprism: {e:#}");
            ExitCode::from(EXIT_REJECTED)
        }
    }
}

/// `run` or `check` failed at run time: a listener cannot be bound, the runtime cannot start.
const EXIT_FAILED: u8 = 1;
/// The config was rejected: it, or a CA, certificate or key file it names, is unusable.
const EXIT_REJECTED: u8 = 3;

/// Why a command failed, which picks its exit code.
enum Failure {
    /// The config was rejected ([`EXIT_REJECTED`]).
    Rejected(anyhow::Error),
    /// Anything else ([`EXIT_FAILED`]).
    Runtime(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Runtime(e)
    }
}

fn dispatch(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Check {
            args,
            skip_node_files,
            node_grace,
            fleet_size,
        } => {
            let node = if skip_node_files {
                Node::Elsewhere
            } else {
                Node::Here
            };
            let checked =
                check::check(&args.source(), node, node_grace.0, fleet_size).map_err(|e| {
                    if e.is_rejection() {
                        Failure::Rejected(e.into())
                    } else {
                        Failure::Runtime(e.into())
                    }
                })?;
            print!("{}", checked.report);
            for warning in checked.warnings {
                eprintln!("readyprism check: WARN: {warning}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => {
            let source = args.source();
            let loaded = source.load().map_err(|e| Failure::Rejected(e.into()))?;
            let config = loaded.config;
            block_on(async move {
                let signals = Signals::install().context("signal handling")?;
                let app = App::start(config.clone()).await.map_err(|e| {
                    let rejection = e.is_rejection();
                    let line = anyhow::Error::new(e.placed(&source, &config));
                    if rejection {
                        Failure::Rejected(line)
                    } else {
                        Failure::Runtime(line)
                    }
                })?;
                let file = ConfigFile {
                    source,
                    running: loaded.digest,
                };
                app.run(Control::daemon(signals, file)).await;
                Ok::<_, Failure>(ExitCode::SUCCESS)
            })
        }
        Command::Status { admin, json, file } => {
            let fetched = match file {
                Some(path) => status::read_file(&path),
                None => block_on(async move { Ok::<_, Failure>(status::fetch(&admin).await) })?,
            };
            match fetched {
                Ok(fetched) => {
                    let text = if json {
                        format!("{}\n", fetched.body)
                    } else {
                        status::render_table(&fetched.doc)
                    };
                    std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())
                        .context("writing to stdout")?;
                    Ok(ExitCode::from(status::exit_code(&fetched.doc)))
                }
                Err(e) => {
                    eprintln!("readyprism status: {e}");
                    Ok(ExitCode::from(status::EXIT_UNREACHABLE))
                }
            }
        }
        Command::Talos(TalosCommand::CheckInstaller { installer, arch }) => {
            let found = installer::inspect(&installer, arch).context("check-installer")?;
            std::io::Write::write_all(&mut std::io::stdout().lock(), found.render().as_bytes())
                .context("writing to stdout")?;
            found.readyprism().context("check-installer")?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "sim")]
        Command::Demo {
            print_config: true,
            listen,
            admin,
            ..
        } => {
            let text = readyprism::cli::demo::print_config(listen, admin);
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())
                .context("writing to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "sim")]
        Command::Demo {
            duration,
            listen,
            admin,
            print_config: false,
        } => {
            let opts = readyprism::cli::demo::DemoOptions {
                duration: duration.map(|d| d.0),
                listen,
                admin,
                show: true,
            };
            block_on(async move {
                readyprism::cli::demo::run_until_signalled(opts)
                    .await
                    .context("demo")
            })?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "sim")]
        Command::SimApiserver(opts) => {
            block_on(async move {
                readyprism::sim::process::run_until_signalled(opts)
                    .await
                    .context("sim-apiserver")
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--node-grace`: a duration as in the config, more than zero and at most an hour (Kubernetes'
/// default is 40 s or 50 s; the budget's arithmetic stays far from overflow).
fn node_grace(text: &str) -> Result<readyprism::config::DurationValue, String> {
    let d = readyprism::config::DurationValue::parse(text)?;
    if d.0.is_zero() {
        return Err("the node grace period must be more than 0s".into());
    }
    if d.0 > std::time::Duration::from_secs(3600) {
        return Err(format!(
            "the node grace period {d} is more than the maximum of 60m"
        ));
    }
    Ok(d)
}

/// Runs `fut` on a fresh single-threaded runtime. Afterwards, blocking work still running (a DNS
/// lookup that hangs) gets 200 ms, so exit stays within `shutdown_grace` + 1 s.
///
/// One thread, like HAProxy's `nbthread 1`: the balancer's work is syscalls, and a second worker
/// only adds cross-thread wake-ups (a futex pair per readiness event) and work stealing between
/// the accept loop and connection tasks. Measured with `cargo bench --bench proxy` and callgrind:
/// 16 % fewer instructions per relayed round trip. Blocking work (DNS, file reads) still runs on
/// the blocking pool.
fn block_on<T, E: From<anyhow::Error>>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(fut);
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

fn init_tracing(format: LogFormat, level: Option<&str>, demo_screen: bool) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).with_context(|| format!("--log-level {l:?}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    #[cfg(feature = "sim")]
    if demo_screen {
        // Short lines for the demo's log region: no time (the screen has its own), no target;
        // and, unless a level was asked for, without the one record per connection (the demo
        // opens one a second, and the screen's traffic lines show where each went), which would
        // push the state changes off the region within seconds.
        let filter = match level {
            Some(_) => filter,
            None => filter.add_directive(
                "readyprism::proxy::record=warn"
                    .parse()
                    .context("the demo's log filter")?,
            ),
        };
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(readyprism::cli::demo::logs::writer)
            .init();
        return Ok(());
    }
    let _ = demo_screen;
    // Colour only for a person at a terminal: never in container logs, journald or a pipe, and
    // never with NO_COLOR set (https://no-color.org).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

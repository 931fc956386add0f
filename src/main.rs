//! The `readyprism` command line: parse, set up logging and crypto, dispatch, map errors to exit codes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use readyprism::app::App;
use readyprism::config::{Config, DurationValue};
use readyprism::demo::DemoOptions;
use readyprism::status;
use tokio::signal::unix::{signal, SignalKind};

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

#[derive(Subcommand)]
enum Command {
    /// Run the balancer.
    Run {
        /// Config file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// This node's zone; overrides the config's `zone`.
        #[arg(long, env = "READYPRISM_ZONE")]
        zone: Option<String>,
    },
    /// Validate a config file and print it with defaults filled in.
    Check {
        /// Config file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// This node's zone; overrides the config's `zone`.
        #[arg(long, env = "READYPRISM_ZONE")]
        zone: Option<String>,
    },
    /// Show a running balancer's backends (exit 0: one is ready, 1: none is, 2: unreachable).
    Status {
        /// The balancer's admin address.
        #[arg(long, default_value = readyprism::config::DEFAULT_ADMIN)]
        admin: String,
        /// Print the raw `/status` JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Run three simulated apiservers behind the balancer and watch the picks live.
    Demo {
        /// Stop after this long (e.g. 30s, 2m); default: until Ctrl-C.
        #[arg(long, value_parser = DurationValue::parse)]
        duration: Option<DurationValue>,
        /// The balancer's client listener.
        #[arg(long, default_value = readyprism::config::DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// The balancer's admin listener.
        #[arg(long, default_value = readyprism::config::DEFAULT_ADMIN)]
        admin: SocketAddr,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_tracing(cli.log_format, cli.log_level.as_deref()) {
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
        Err(e) => {
            eprintln!("readyprism: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check { config, zone } => {
            let config = load(&config, zone)?;
            print!("{}", config.to_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { config: path, zone } => {
            let config = load(&path, zone.clone())?;
            block_on(async move {
                let app = App::start(config).await?;
                let apply: readyprism::shutdown::Override = Box::new(move |c: &mut Config| {
                    if let Some(z) = &zone {
                        c.zone = Some(z.clone());
                    }
                });
                readyprism::shutdown::run_until_signalled(app, path, apply)
                    .await
                    .context("signal handling")?;
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Status { admin, json } => {
            match block_on(async move { Ok(status::fetch(&admin).await) })? {
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
        Command::Demo {
            duration,
            listen,
            admin,
        } => {
            let opts = DemoOptions {
                duration: duration.map(|d| d.0),
                listen,
                admin,
                show: true,
            };
            block_on(async move {
                let quit = tokio_util::sync::CancellationToken::new();
                let mut term = signal(SignalKind::terminate()).context("signal handling")?;
                let mut int = signal(SignalKind::interrupt()).context("signal handling")?;
                let demo = readyprism::demo::run(opts, quit.clone());
                tokio::pin!(demo);
                loop {
                    tokio::select! {
                        report = &mut demo => return report.map(|_| ()).context("demo"),
                        _ = term.recv() => quit.cancel(),
                        _ = int.recv() => quit.cancel(),
                    }
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(path: &std::path::Path, zone: Option<String>) -> anyhow::Result<Config> {
    let mut config = Config::load(path)?;
    if let Some(z) = zone {
        anyhow::ensure!(
            !z.trim().is_empty(),
            "--zone / READYPRISM_ZONE must not be empty"
        );
        config.zone = Some(z);
    }
    Ok(config)
}

/// Runs `fut` on a fresh multi-threaded runtime. Afterwards, blocking work still running (a DNS
/// lookup that hangs) gets 200 ms, so exit stays within `shutdown_grace` + 1 s.
fn block_on<T>(fut: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(fut);
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

fn init_tracing(format: LogFormat, level: Option<&str>) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).with_context(|| format!("--log-level {l:?}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

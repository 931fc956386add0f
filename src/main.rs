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
    init_tracing(cli.log_format, cli.log_level.as_deref());
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
            let rt = runtime()?;
            rt.block_on(async move {
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
        Command::Status { admin, json } => match runtime()?.block_on(status::fetch(&admin)) {
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
        },
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
            runtime()?
                .block_on(readyprism::demo::run(opts))
                .context("demo")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(path: &std::path::Path, zone: Option<String>) -> anyhow::Result<Config> {
    let mut config = Config::load(path)?;
    if zone.is_some() {
        config.zone = zone;
    }
    Ok(config)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn init_tracing(format: LogFormat, level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::new(l),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

//! The `readyprism` command line: parse, set up logging and crypto, dispatch, map errors to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use readyprism::app::App;
use readyprism::config::Config;

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

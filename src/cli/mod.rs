//! The command line: `serve` (the default), `healthcheck`, `check-config`, `version`.
//!
//! Same verbs and flags as the reference server's CLI; a bare invocation
//! (with or without serve flags) serves. The `abx` companion CLI is its own crate (`crates/abx`).

mod check_config;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::config::{Config, Options};
use crate::server;

/// `agent-sandbox-server`: the in-sandbox agent server.
#[derive(Debug, Parser)]
#[command(name = "agent-sandbox-server", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `serve` when no subcommand is given.
    #[command(flatten)]
    pub serve: Options,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve(Options),
    /// GET /health of a running server; exit 0 when healthy, 1 otherwise.
    Healthcheck(HealthcheckArgs),
    /// Validate the configuration and policy and print the effective endpoint table.
    CheckConfig(check_config::CheckConfigArgs),
    /// Print the version.
    Version,
}

/// Options of `healthcheck`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthcheckArgs {
    /// Host of the server.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the server.
    #[arg(long, default_value_t = crate::config::DEFAULT_PORT)]
    pub port: u16,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 2.0)]
    pub timeout: f64,
}

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => serve(cli.serve),
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Healthcheck(args)) => healthcheck(&args),
        Some(Command::CheckConfig(args)) => check_config::run(args),
        Some(Command::Version) => {
            println!("{}", crate::SERVER_VERSION);
            ExitCode::SUCCESS
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

fn serve(args: Options) -> ExitCode {
    let config = match Config::resolve(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("configuration error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _log = crate::logging::init(config.log_format, &config.log_level);
    abx_domain::syscalls::tune_allocator();
    let result = runtime().map_err(|e| e.to_string()).and_then(|rt| {
        rt.block_on(async {
            // Installed before the listeners announce themselves, so no signal is missed.
            let signal = server::shutdown_signal().map_err(|e| e.to_string())?;
            let mut running = server::start(&config).await.map_err(|e| e.to_string())?;
            tokio::select! {
                () = signal => tracing::info!("shutting down"),
                () = running.wait() => return Err("the API listener stopped".to_string()),
            }
            running.shutdown().await;
            Ok(())
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agent-sandbox-server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn healthcheck(args: &HealthcheckArgs) -> ExitCode {
    let timeout = Duration::try_from_secs_f64(args.timeout).unwrap_or(Duration::from_secs(2));
    let url = format!("http://{}:{}", args.host, args.port);
    let healthy = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| {
            rt.block_on(async {
                // One attempt: a probe reports the state now; its caller retries.
                let builder = abx_client::Client::builder(&url).timeout(timeout);
                let Ok(client) = builder.retry(abx_client::RetryPolicy::NEVER).build() else {
                    return false;
                };
                client.health().await.unwrap_or(false)
            })
        })
        .unwrap_or(false);
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

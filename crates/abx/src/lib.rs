//! `abx`: the companion command line, driving a server from outside with the
//! companion client.
//!
//! A crate of its own on [`abx_client`] and the wire types
//! ([`abx_wire`]) only: it does not depend on the daemon, so nothing here
//! can import one of its modules.
//!
//! Verbs are grouped by domain, one file each (`core.rs`, ...), and
//! flattened into one command. URL and token come from `--url`/`--token` or
//! `ABX_SERVER_URL`/`ABX_SERVER_TOKEN`. Every failure prints one line to
//! stderr and exits non-zero.

mod code;
mod commands;
mod core;
mod files;
mod process;
mod pty;
mod system;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use abx_client::{Client, ClientError};

/// `abx`: drive an agent-sandbox-server from outside.
#[derive(Debug, Parser)]
#[command(name = "abx", version, about)]
pub struct ClientCli {
    /// Server URL.
    #[arg(long, env = "ABX_SERVER_URL", default_value = "http://127.0.0.1:9000", global = true)]
    pub url: String,
    /// Server token.
    #[arg(long, env = "ABX_SERVER_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: ClientCommand,
}

/// Every verb, by domain.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Health and discovery.
    #[command(flatten)]
    Core(core::CoreCommand),
    /// Processes.
    #[command(flatten)]
    Process(process::ProcessCommand),
    /// System information, environment, ports and packages.
    #[command(flatten)]
    System(system::SystemCommand),
    /// Files.
    #[command(flatten)]
    Files(files::FilesCommand),
    /// Interactive terminals.
    #[command(flatten)]
    Pty(pty::PtyCommand),
    /// Registered commands.
    #[command(flatten)]
    Commands(commands::CommandsCommand),
    /// Code execution and git.
    #[command(flatten)]
    Code(code::CodeCommand),
}

/// Why a verb failed: a client error, or an exit code the verb chose.
#[derive(Debug)]
pub enum Failure {
    /// The call failed; printed as one line.
    Client(ClientError),
    /// Another problem, printed as one line.
    Message(String),
    /// Exit with this code, nothing printed (for example a remote process's code).
    Exit(u8),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

/// Parses the command line, runs the verb, returns the exit code.
pub fn main() -> ExitCode {
    let cli = ClientCli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("abx: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let client = Client::builder(&cli.url).token(cli.token.clone()).build()?;
        match cli.command {
            ClientCommand::Core(command) => core::run(&client, command).await,
            ClientCommand::Process(command) => process::run(&client, command).await,
            ClientCommand::System(command) => system::run(&client, command).await,
            ClientCommand::Files(command) => files::run(&client, command).await,
            ClientCommand::Pty(command) => pty::run(&client, command).await,
            ClientCommand::Commands(command) => commands::run(&client, command).await,
            ClientCommand::Code(command) => code::run(&client, command).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Exit(code)) => ExitCode::from(code),
        Err(Failure::Client(e)) => {
            eprintln!("abx: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Message(m)) => {
            eprintln!("abx: {m}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::Message(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// Prints a listing: `items` as pretty JSON with `--json`, else one `line` each.
pub fn print_list<T: serde::Serialize>(items: &[T], json: bool, line: impl Fn(&T) -> String) -> Result<(), Failure> {
    if json {
        return print_json(&items);
    }
    for item in items {
        println!("{}", line(item));
    }
    Ok(())
}

/// A `NAME=value` argument (`--env`, `setenv`): the name must not be empty.
pub fn parse_assignment(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=value, got '{raw}'")),
    }
}

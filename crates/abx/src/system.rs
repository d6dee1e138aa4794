//! `abx info`, `abx metrics`, `abx env`, `abx setenv`, `abx ports`, `abx packages`.

use abx_client::Client;
use clap::Subcommand;

use super::{parse_assignment, print_json, print_list, Failure};

/// System verbs.
#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Print the machine's description (OS, CPUs, memory, disk, cgroup limits) as JSON.
    Info,
    /// Print current load, CPU, memory, disk and cgroup use as JSON.
    Metrics,
    /// Print the environment children start with, as NAME=value lines.
    Env {
        /// Only these variables.
        names: Vec<String>,
    },
    /// Set variables for every child started from now on.
    Setenv {
        /// NAME=value assignments.
        #[arg(required = true, value_parser = parse_assignment)]
        assignments: Vec<(String, String)>,
    },
    /// List listening TCP ports: protocol, address:port, pid and process.
    Ports {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// List installed packages as `name version` lines.
    Packages {
        /// pip, npm or dpkg.
        #[arg(long, default_value = "pip")]
        manager: String,
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a system verb.
pub async fn run(client: &Client, command: SystemCommand) -> Result<(), Failure> {
    match command {
        SystemCommand::Info => print_json(&client.system_info().await?),
        SystemCommand::Metrics => print_json(&client.system_metrics().await?),
        SystemCommand::Env { names } => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            for (name, value) in client.env(&names).await? {
                println!("{name}={value}");
            }
            Ok(())
        }
        SystemCommand::Setenv { assignments } => {
            for name in client.set_env(assignments).await? {
                println!("{name}");
            }
            Ok(())
        }
        SystemCommand::Ports { json } => print_list(&client.ports().await?, json, |port| {
            let owner = match (port.pid, &port.process) {
                (Some(pid), Some(name)) => format!("{pid} {name}"),
                (Some(pid), None) => pid.to_string(),
                _ => "-".into(),
            };
            format!("{}\t{}:{}\t{owner}", port.protocol, port.address, port.port)
        }),
        SystemCommand::Packages { manager, json } => {
            let list = client.packages(&manager).await?;
            if json {
                return print_json(&list);
            }
            for package in list.packages {
                println!("{} {}", package.name, package.version);
            }
            Ok(())
        }
    }
}

//! `abx health`, `abx capabilities`, `abx check`.

use abx_client::Client;
use abx_wire::api::CheckRequest;
use clap::Subcommand;

use super::{print_json, Failure};

/// Health and discovery verbs.
#[derive(Debug, Subcommand)]
pub enum CoreCommand {
    /// Exit 0 when the server is healthy, 1 otherwise.
    Health,
    /// Print the discovery document as JSON.
    Capabilities,
    /// Print the server's decision for a call to ENDPOINT.
    Check {
        /// Endpoint id.
        endpoint: String,
        /// Path to check.
        #[arg(long)]
        path: Option<String>,
        /// Operation: read, write, delete or exec.
        #[arg(long)]
        op: Option<String>,
    },
}

/// Runs a core verb.
pub async fn run(client: &Client, command: CoreCommand) -> Result<(), Failure> {
    match command {
        CoreCommand::Health => {
            if client.health().await? {
                println!("ok");
                Ok(())
            } else {
                Err(Failure::Message("the server is not healthy".into()))
            }
        }
        CoreCommand::Capabilities => print_json(&client.capabilities().await?),
        CoreCommand::Check { endpoint, path, op } => {
            let decision = client.check(&CheckRequest { endpoint, path, paths: None, op }).await?;
            print_json(&decision)?;
            if decision.allowed {
                Ok(())
            } else {
                Err(Failure::Exit(3))
            }
        }
    }
}

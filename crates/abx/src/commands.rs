//! `abx commands` (the registered commands and their arguments) and
//! `abx run NAME [ARG=value | ARG:=json]...` (run one, print its result).

use abx_client::Client;
use clap::Subcommand;
use serde_json::{Map, Value};

use super::{parse_assignment, print_json, print_list, Failure};

/// Registered-command verbs.
#[derive(Debug, Subcommand)]
pub enum CommandsCommand {
    /// List the registered commands this token may run.
    Commands {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Run a registered command and print its result (text as it is, anything else as JSON).
    Run {
        /// The command's name.
        name: String,
        /// Arguments: NAME=text (the server converts it to the declared type) or NAME:=JSON (`tags:='["a","b"]'`).
        #[arg(value_name = "ARG", value_parser = parse_arg)]
        args: Vec<(String, Value)>,
    },
}

fn parse_arg(raw: &str) -> Result<(String, Value), String> {
    if let Some((name, json)) = raw.split_once(":=").filter(|(n, _)| !n.is_empty() && !n.contains('=')) {
        let value = serde_json::from_str(json).map_err(|e| format!("'{name}:=' needs JSON: {e}"))?;
        return Ok((name.to_string(), value));
    }
    let (name, text) = parse_assignment(raw).map_err(|_| format!("expected NAME=value or NAME:=json, got '{raw}'"))?;
    Ok((name, Value::String(text)))
}

/// Runs a registered-command verb.
pub async fn run(client: &Client, command: CommandsCommand) -> Result<(), Failure> {
    match command {
        CommandsCommand::Commands { json } => print_list(&client.commands().await?, json, |c| {
            let args: Vec<String> = c
                .args
                .iter()
                .map(|a| {
                    let default = a.default.as_deref().map(|d| format!(" = {d}")).unwrap_or_default();
                    let optional = if a.required { "" } else { "?" };
                    format!("{}{optional}: {}{default}", a.name, a.kind)
                })
                .collect();
            format!("{}({})\t{}", c.name, args.join(", "), c.description)
        }),
        CommandsCommand::Run { name, args } => {
            let args: Map<String, Value> = args.into_iter().collect();
            match client.run_command(&name, &args).await? {
                Value::String(text) => {
                    println!("{text}");
                    Ok(())
                }
                other => print_json(&other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_arg;
    use serde_json::json;

    #[test]
    fn args_are_text_or_json() {
        assert_eq!(parse_arg("name=a=b"), Ok(("name".into(), json!("a=b"))));
        assert_eq!(parse_arg("tags:=[\"x\"]"), Ok(("tags".into(), json!(["x"]))));
        assert_eq!(parse_arg("n:=3"), Ok(("n".into(), json!(3))));
        assert!(parse_arg("=x").is_err());
        assert!(parse_arg("n:=nope").is_err());
    }
}

//! `abx run-code`, `abx contexts …`, `abx run-once`, `abx git-status`, `abx git-diff`.

use std::io::{Read, Write};

use abx_client::{Client, CodeClient};
use abx_wire::api::code::{CodeRunRequest, CreateContextRequest, ExecuteRequest, OutputLine};
use clap::Subcommand;

use super::{print_json, Failure};

/// Code execution verbs.
#[derive(Debug, Subcommand)]
pub enum CodeCommand {
    /// Run code in a code context, printing its output as it comes (exit 1 if it raised).
    RunCode {
        /// The code; `-` or nothing reads it from stdin.
        code: Option<String>,
        /// Language of the default context to run in (python, javascript, bash).
        #[arg(long, conflicts_with = "context")]
        language: Option<String>,
        /// Context to run in.
        #[arg(long)]
        context: Option<String>,
        /// Variable for this execution only (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
        env: Vec<(String, String)>,
        /// Interrupt the execution after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// Code-interpreter URL.
        #[arg(long, env = "ABX_CODE_URL", default_value = "http://127.0.0.1:49999")]
        code_url: String,
    },
    /// Create, list, restart or delete code contexts.
    Contexts {
        /// What to do.
        #[command(subcommand)]
        command: ContextsCommand,
        /// Code-interpreter URL.
        #[arg(long, env = "ABX_CODE_URL", default_value = "http://127.0.0.1:49999", global = true)]
        code_url: String,
    },
    /// Run a snippet once with POST /code/run and exit with its exit code.
    RunOnce {
        /// The code; `-` or nothing reads it from stdin.
        code: Option<String>,
        /// python, node or bash.
        #[arg(long, default_value = "python")]
        language: String,
        /// Seconds before it is killed.
        #[arg(long)]
        timeout: Option<f64>,
    },
    /// Print the git status of a repository as JSON.
    GitStatus {
        /// Repository directory.
        #[arg(default_value = ".")]
        path: String,
    },
    /// Print the diff of a repository.
    GitDiff {
        /// Repository directory.
        #[arg(default_value = ".")]
        path: String,
        /// The index instead of the working tree.
        #[arg(long)]
        staged: bool,
        /// Only this file.
        #[arg(long)]
        file: Option<String>,
    },
}

/// Context verbs.
#[derive(Debug, Subcommand)]
pub enum ContextsCommand {
    /// Create a context and print it.
    Create {
        /// Language (default python).
        #[arg(long)]
        language: Option<String>,
        /// Working directory (default: the server's base directory).
        #[arg(long)]
        cwd: Option<String>,
    },
    /// List contexts.
    List,
    /// Restart a context: a fresh interpreter in the same directory.
    Restart {
        /// Context id.
        id: String,
    },
    /// Delete a context.
    Delete {
        /// Context id.
        id: String,
    },
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("'{raw}' is not NAME=VALUE"))
}

fn code_or_stdin(code: Option<String>) -> Result<String, Failure> {
    match code.as_deref() {
        Some("-") | None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| Failure::Message(format!("cannot read stdin: {e}")))?;
            Ok(text)
        }
        Some(_) => Ok(code.unwrap_or_default()),
    }
}

/// Runs a code verb.
pub async fn run(client: &Client, command: CodeCommand) -> Result<(), Failure> {
    match command {
        CodeCommand::RunCode { code, language, context, env, timeout, code_url } => {
            let request = ExecuteRequest {
                code: code_or_stdin(code)?,
                context_id: context,
                language,
                env_vars: (!env.is_empty()).then(|| env.into_iter().collect()),
                timeout,
            };
            stream(&client.code_interpreter(&code_url), &request).await
        }
        CodeCommand::Contexts { command, code_url } => {
            let code = client.code_interpreter(&code_url);
            match command {
                ContextsCommand::Create { language, cwd } => {
                    print_json(&code.create_context(&CreateContextRequest { cwd, language }).await?)
                }
                ContextsCommand::List => print_json(&code.list_contexts().await?),
                ContextsCommand::Restart { id } => Ok(code.restart_context(&id).await?),
                ContextsCommand::Delete { id } => Ok(code.delete_context(&id).await?),
            }
        }
        CodeCommand::RunOnce { code, language, timeout } => {
            let result = client.run_once(&CodeRunRequest { code: code_or_stdin(code)?, language, timeout }).await?;
            print!("{}", result.stdout);
            eprint!("{}", result.stderr);
            match u8::try_from(result.exit_code) {
                Ok(0) => Ok(()),
                Ok(code) => Err(Failure::Exit(code)),
                Err(_) => Err(Failure::Exit(1)),
            }
        }
        CodeCommand::GitStatus { path } => print_json(&client.git_status(&path).await?),
        CodeCommand::GitDiff { path, staged, file } => {
            let diff = client.git_diff(&path, staged, file.as_deref()).await?;
            print!("{}", diff.diff);
            Ok(())
        }
    }
}

/// Prints an execution's lines as they arrive; exit 1 when it ends with an error.
async fn stream(code: &CodeClient, request: &ExecuteRequest) -> Result<(), Failure> {
    let mut lines = code.execute(request).await?;
    let mut failed = false;
    while let Some(line) = lines.next().await? {
        match line {
            OutputLine::Stdout { text, .. } => {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            OutputLine::Stderr { text, .. } => eprint!("{text}"),
            OutputLine::Result(result) => {
                let formats: Vec<&str> = [
                    ("html", result.html.is_some()),
                    ("markdown", result.markdown.is_some()),
                    ("svg", result.svg.is_some()),
                    ("png", result.png.is_some()),
                    ("jpeg", result.jpeg.is_some()),
                    ("pdf", result.pdf.is_some()),
                    ("latex", result.latex.is_some()),
                    ("json", result.json.is_some()),
                ]
                .into_iter()
                .filter_map(|(name, present)| present.then_some(name))
                .collect();
                if let Some(text) = &result.text {
                    println!("{text}");
                }
                if !formats.is_empty() {
                    eprintln!("[result also as {}]", formats.join(", "));
                }
            }
            OutputLine::Error { name, value, traceback } => {
                failed = true;
                if traceback.is_empty() {
                    eprintln!("{name}: {value}");
                } else {
                    eprint!("{traceback}");
                    if !traceback.ends_with('\n') {
                        eprintln!();
                    }
                }
            }
            OutputLine::NumberOfExecutions { .. }
            | OutputLine::Keepalive
            | OutputLine::EndOfExecution
            | OutputLine::Execution { .. }
            | OutputLine::Gap { .. }
            | OutputLine::Unknown => {}
        }
    }
    if failed {
        Err(Failure::Exit(1))
    } else {
        Ok(())
    }
}

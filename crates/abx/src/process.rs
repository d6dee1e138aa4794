//! `abx exec`, `abx start`, `abx ps`, `abx kill`, `abx logs`, `abx stdin`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use abx_client::Client;
use abx_wire::api::process::{ExecRequest, ShellEvent};
use abx_wire::codec::shlex::join;
use clap::{Args, Subcommand};
use futures_util::StreamExt;

use super::{print_json, Failure};

/// How a command is run (shared by `exec` and `start`).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Working directory (default: the server's base directory).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Extra environment variable, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = key_value)]
    pub env: Vec<(String, String)>,
    /// Wall-clock limit in seconds.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Run the words as one `/bin/sh -c` script instead of a program and its arguments.
    #[arg(long)]
    pub shell: bool,
    /// Run as this user (the server must run as root).
    #[arg(long)]
    pub user: Option<String>,
    /// The command and its arguments (after `--` if they start with `-`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

impl RunArgs {
    fn request(&self) -> ExecRequest {
        let command = if self.shell { self.command.join(" ") } else { join(&self.command) };
        let env: BTreeMap<String, String> = self.env.iter().cloned().collect();
        ExecRequest {
            command,
            cwd: self.cwd.clone(),
            env: (!env.is_empty()).then_some(env),
            timeout: self.timeout,
            shell: self.shell,
            user: self.user.clone(),
            ..ExecRequest::default()
        }
    }
}

fn key_value(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("'{raw}' is not KEY=VALUE"))
}

/// Process verbs.
#[derive(Debug, Subcommand)]
pub enum ProcessCommand {
    /// Run a command on the server, streaming its output; exit with its exit code.
    Exec(RunArgs),
    /// Start a background process and print its pid.
    Start {
        /// Keep its output for `abx logs`.
        #[arg(long)]
        capture: bool,
        /// Give it a stdin pipe for `abx stdin`.
        #[arg(long)]
        stdin: bool,
        /// How to run it.
        #[command(flatten)]
        run: RunArgs,
    },
    /// List the processes the server started.
    Ps {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send a signal (INT, KILL, TERM, CONT, TSTP or its number) to a started process's group.
    Kill {
        /// The process id.
        pid: i32,
        /// The signal.
        #[arg(short, long, default_value = "TERM")]
        signal: String,
    },
    /// Print a captured process's output (`-f`: follow until it exits).
    Logs {
        /// The process id.
        pid: i32,
        /// Keep printing until the process has exited.
        #[arg(short, long)]
        follow: bool,
    },
    /// Write DATA (or everything on this program's stdin) to a started process's stdin.
    Stdin {
        /// The process id.
        pid: i32,
        /// Text to write; without it, this program's stdin is sent.
        data: Option<String>,
        /// Close the process's stdin afterwards.
        #[arg(long)]
        eof: bool,
    },
}

fn signal_number(name: &str) -> Result<i32, Failure> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    match bare {
        "INT" => Ok(2),
        "KILL" => Ok(9),
        "TERM" => Ok(15),
        "CONT" => Ok(18),
        "TSTP" => Ok(20),
        other => other.parse().map_err(|_| Failure::Message(format!("unknown signal '{name}'"))),
    }
}

/// The shell convention for a process's status: its code, or 128 + the signal.
fn exit_byte(code: i32) -> u8 {
    let code = if code < 0 { 128 - code } else { code };
    u8::try_from(code & 0xff).unwrap_or(1)
}

/// Runs a process verb.
pub async fn run(client: &Client, command: ProcessCommand) -> Result<(), Failure> {
    match command {
        ProcessCommand::Exec(args) => exec(client, &args.request()).await,
        ProcessCommand::Start { capture, stdin, run } => {
            let request = ExecRequest { capture_output: capture, stdin, ..run.request() };
            println!("{}", client.start(&request).await?.pid);
            Ok(())
        }
        ProcessCommand::Ps { json } => {
            let processes = client.processes().await?;
            if json {
                return print_json(&processes);
            }
            println!("{:>8}  {:<8}  {:>5}  COMMAND", "PID", "STATE", "EXIT");
            for p in processes {
                let code = p.exit_code.map(|c| c.to_string()).unwrap_or_default();
                println!("{:>8}  {:<8}  {:>5}  {}", p.pid, p.state, code, p.command);
            }
            Ok(())
        }
        ProcessCommand::Kill { pid, signal } => {
            client.signal(pid, signal_number(&signal)?).await?;
            Ok(())
        }
        ProcessCommand::Logs { pid, follow } => logs(client, pid, follow).await,
        ProcessCommand::Stdin { pid, data, eof } => {
            let bytes = match data {
                Some(text) => text.into_bytes(),
                None => {
                    use tokio::io::AsyncReadExt;
                    let mut all = Vec::new();
                    tokio::io::stdin().read_to_end(&mut all).await.map_err(|e| Failure::Message(e.to_string()))?;
                    all
                }
            };
            client.write_stdin(pid, &bytes, eof).await?;
            Ok(())
        }
    }
}

async fn exec(client: &Client, request: &ExecRequest) -> Result<(), Failure> {
    let events = client.shell_stream(request).await?;
    tokio::pin!(events);
    let mut failure = None;
    while let Some(event) = events.next().await {
        match event? {
            ShellEvent::Stdout { data } => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{data}");
                let _ = out.flush();
            }
            ShellEvent::Stderr { data } => eprintln!("{data}"),
            ShellEvent::Error { error } => failure = Some(error),
            ShellEvent::Exit { exit_code } => {
                return match failure.as_deref() {
                    Some("timeout") => {
                        eprintln!("abx: the command timed out and was terminated");
                        Err(Failure::Exit(124))
                    }
                    Some(other) => Err(Failure::Message(other.to_string())),
                    None if exit_code == 0 => Ok(()),
                    None => Err(Failure::Exit(exit_byte(exit_code))),
                };
            }
        }
    }
    Err(Failure::Message(failure.unwrap_or_else(|| "the stream ended without an exit status".into())))
}

async fn logs(client: &Client, pid: i32, follow: bool) -> Result<(), Failure> {
    let print = |stream: &str, data: &str| {
        if stream == "stderr" {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(data.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(data.as_bytes());
            let _ = out.flush();
        }
    };
    if !follow {
        let output = client.output(pid, 0, Duration::ZERO).await?;
        for event in output.events {
            print(&event.stream, &event.data);
        }
        return Ok(());
    }
    let events = client.follow(pid, 0, Duration::from_secs(5));
    tokio::pin!(events);
    while let Some(event) = events.next().await {
        let event = event?;
        print(&event.stream, &event.data);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_byte(0), 0);
        assert_eq!(exit_byte(3), 3);
        assert_eq!(exit_byte(-9), 137);
        assert_eq!(exit_byte(-15), 143);
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(signal_number("term").ok(), Some(15));
        assert_eq!(signal_number("SIGKILL").ok(), Some(9));
        assert_eq!(signal_number("2").ok(), Some(2));
        assert!(signal_number("HUP").is_err());
    }
}

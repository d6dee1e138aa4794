//! `abx shell` (an interactive terminal in the sandbox) and `abx terminals`.
//!
//! `shell` creates a session (or attaches to one), puts the local terminal
//! in raw mode, forwards keystrokes, follows window size changes (SIGWINCH),
//! and exits with the remote shell's exit code (128 + the signal when a
//! signal killed it). Piped (non-terminal) input is sent as it is, followed
//! by an end-of-file (`^D`), so `printf 'make\n' | abx shell` works.

use std::io::{IsTerminal, Read};

use abx_client::{pty_url, Client};
use abx_wire::api::{PtyClientMessage, PtyCreateRequest};
use abx_wire::codec::utf8::Utf8Decoder;
use clap::Subcommand;
use rustix::termios::{self, OptionalActions, Termios};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::{parse_assignment, print_list, Failure};

/// Terminal verbs.
#[derive(Debug, Subcommand)]
pub enum PtyCommand {
    /// Open an interactive shell in the sandbox; exits with the shell's exit code.
    Shell {
        /// The shell to start.
        #[arg(long, default_value = "/bin/bash")]
        shell: String,
        /// Attach to this existing session instead of creating one.
        #[arg(long, value_name = "SESSION_ID")]
        attach: Option<String>,
        /// Keep the session after the shell exits or this command ends (default: close one we created).
        #[arg(long)]
        keep: bool,
        /// The PTY WebSocket base URL (default: the create answer's ws_url, or the API host on port 9001).
        #[arg(long, env = "ABX_PTY_URL", value_name = "URL")]
        pty_url: Option<String>,
        /// Variables for the shell, NAME=value.
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_assignment)]
        env: Vec<(String, String)>,
    },
    /// List terminal sessions.
    Terminals {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a terminal verb.
pub async fn run(client: &Client, command: PtyCommand) -> Result<(), Failure> {
    match command {
        PtyCommand::Terminals { json } => print_list(&client.pty_list().await?, json, |s| {
            let state = match s.exit_code {
                None => "running".to_string(),
                Some(code) => format!("exited {code}"),
            };
            format!("{}\t{}\t{}\t{}x{}\t{state}\tattached {}", s.id, s.pid, s.shell, s.cols, s.rows, s.attached)
        }),
        PtyCommand::Shell { shell, attach, keep, pty_url: base, env } => {
            let (cols, rows) = local_size();
            let (id, url, created) = match attach {
                Some(id) => {
                    let base = base.unwrap_or_else(|| default_pty_base(client.base_url()));
                    (id.clone(), pty_url(&base, &id), false)
                }
                None => {
                    let env = (!env.is_empty()).then(|| env.into_iter().collect());
                    let request = PtyCreateRequest { shell: Some(shell), cols: Some(cols), rows: Some(rows), env };
                    let created = client.pty_create(&request).await?;
                    let url = base.map_or(created.ws_url.clone(), |b| pty_url(&b, &created.session_id));
                    (created.session_id, url, true)
                }
            };
            let outcome = interact(client, &url, (cols, rows)).await;
            if created && !keep {
                let _ = client.pty_close(&id).await;
            }
            match outcome? {
                0 => Ok(()),
                code => Err(Failure::Exit(code)),
            }
        }
    }
}

/// `ws://<host of the API URL>:9001`.
fn default_pty_base(api: &str) -> String {
    let rest = api.split_once("://").map_or(api, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => format!("[{}]", v6.split(']').next().unwrap_or(v6)),
        None => authority.split(':').next().unwrap_or(authority).to_string(),
    };
    format!("ws://{host}:{}", abx_wire::endpoints::Port::Pty.default_number())
}

/// The local terminal's size, or 80x24.
fn local_size() -> (u16, u16) {
    match rustix::termios::tcgetwinsize(std::io::stdout()) {
        Ok(size) if size.ws_col > 0 && size.ws_row > 0 => (size.ws_col, size.ws_row),
        _ => (80, 24),
    }
}

/// Restores the local terminal's mode when dropped.
struct RawMode(Option<Termios>);

impl RawMode {
    fn enter() -> RawMode {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return RawMode(None);
        }
        let Ok(saved) = termios::tcgetattr(&stdin) else { return RawMode(None) };
        let mut raw = saved.clone();
        raw.make_raw();
        match termios::tcsetattr(&stdin, OptionalActions::Now, &raw) {
            Ok(()) => RawMode(Some(saved)),
            Err(_) => RawMode(None),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take() {
            let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Drain, &saved);
        }
    }
}

/// Bridges the local terminal and the session until the shell exits; returns the exit code for this process.
async fn interact(client: &Client, url: &str, size: (u16, u16)) -> Result<u8, Failure> {
    let connection = client.pty_connect(url).await?;
    let (mut sender, mut receiver) = connection.split();
    let interactive = std::io::stdin().is_terminal();
    let _raw = RawMode::enter();
    // A plain thread, not the runtime's blocking pool: a read blocked on the
    // keyboard must not keep the runtime from shutting down.
    let (keys_tx, mut keys) = mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut winch = signal(SignalKind::window_change()).map_err(|e| Failure::Message(e.to_string()))?;
    sender.send(&PtyClientMessage::Resize { cols: size.0, rows: size.1 }).await?;
    let mut decoder = Utf8Decoder::new();
    let mut stdin_open = true;
    let mut stdout = tokio::io::stdout();
    loop {
        tokio::select! {
            message = receiver.recv() => match message? {
                None => return Err(Failure::Message("the server closed the terminal connection".into())),
                Some(m) if m.kind == "output" => {
                    let text = m.data.unwrap_or_default();
                    stdout.write_all(text.as_bytes()).await.map_err(|e| Failure::Message(e.to_string()))?;
                    stdout.flush().await.map_err(|e| Failure::Message(e.to_string()))?;
                }
                Some(m) if m.is_event("exited") => {
                    sender.close().await;
                    let code = m.exit_code.unwrap_or(1);
                    return Ok(match m.signal {
                        Some(signal) => u8::try_from(128 + signal).unwrap_or(255),
                        None => u8::try_from(code).unwrap_or(1),
                    });
                }
                Some(_) => {}
            },
            keys_read = keys.recv(), if stdin_open => match keys_read {
                Some(bytes) => {
                    let data = decoder.decode(&bytes);
                    if !data.is_empty() {
                        sender.send(&PtyClientMessage::Input { data }).await?;
                    }
                }
                None => {
                    stdin_open = false;
                    if !interactive {
                        sender.send(&PtyClientMessage::Input { data: "\u{4}".into() }).await?;
                    }
                }
            },
            _ = winch.recv() => {
                let (cols, rows) = local_size();
                sender.send(&PtyClientMessage::Resize { cols, rows }).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::default_pty_base;

    #[test]
    fn the_default_pty_base_is_the_api_host_on_9001() {
        assert_eq!(default_pty_base("http://10.1.2.3:9000"), "ws://10.1.2.3:9001");
        assert_eq!(default_pty_base("http://[::1]:9000/x"), "ws://[::1]:9001");
        assert_eq!(default_pty_base("http://sandbox"), "ws://sandbox:9001");
    }
}

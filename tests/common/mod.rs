//! Test harness: start the real binary on an ephemeral port in a fresh
//! temporary base directory, learn its address from its `listening` line,
//! and stop it (by PID) when the test ends.

#![allow(dead_code)]
// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

pub mod agents;
pub mod cgroup;
pub mod envd;
pub mod mcp;
pub mod ndjson;
pub mod sse;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use abx_client::Client;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

/// The token test servers use unless told otherwise.
pub const TOKEN: &str = "test-token-5f1d";

/// How a test server is started.
pub struct ServerBuilder {
    host: String,
    token: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    base: Option<PathBuf>,
    launcher: Vec<String>,
}

impl ServerBuilder {
    /// Starts the binary through `argv` (a program that then `exec`s it, as
    /// `setpriv` or `prlimit` do), so the server's PID stays the binary's.
    pub fn launcher<I: IntoIterator<Item = S>, S: Into<String>>(mut self, argv: I) -> Self {
        self.launcher = argv.into_iter().map(Into::into).collect();
        self
    }

    /// Uses `dir` as the base directory instead of a fresh empty one.
    pub fn base_dir(mut self, dir: &Path) -> Self {
        self.base = Some(dir.to_path_buf());
        self
    }

    /// Sets or clears `ABX_SERVER_TOKEN`.
    pub fn token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(str::to_string);
        self
    }

    /// Sets the address to bind (default 127.0.0.1).
    pub fn host(mut self, host: &str) -> Self {
        self.host = host.into();
        self
    }

    /// Adds command-line arguments after `serve`.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable of the server.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the server and waits until it listens.
    pub fn start(self) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = match &self.base {
            Some(base) => base.clone(),
            None => {
                let base = dir.path().join("base");
                std::fs::create_dir(&base).expect("base dir");
                base
            }
        };
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).expect("log file");
        let binary = env!("CARGO_BIN_EXE_agent-sandbox-server");
        let mut command = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg("serve")
            .args(["--host", &self.host, "--port", "0", "--pty-port", "0"])
            .arg("--base-dir")
            .arg(&base)
            .args(if self.args.iter().any(|a| a == "--code-port") { &[][..] } else { &["--code-port", "0"][..] })
            .args(if self.args.iter().any(|a| a == "--envd-port") { &[][..] } else { &["--envd-port", "0"][..] })
            .args(&self.args)
            .env_remove("ABX_SERVER_TOKEN")
            .env_remove("ABX_SERVER_ENABLED_GROUPS")
            .env_remove("ABX_SERVER_CONFIG")
            .env_remove("ABX_SERVER_POLICY")
            .env_remove("ABX_SERVER_POLICY_FILE")
            .env_remove("ABX_SERVER_PRESET")
            .env("RUST_LOG", "debug")
            // A home of its own, as in a sandbox: shells the tests start must
            // not run this machine's ~/.bashrc (pyenv's rehash lock can hang them).
            .env("HOME", dir.path())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        if let Some(token) = &self.token {
            command.env("ABX_SERVER_TOKEN", token);
        }
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut listeners = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let mut parts = line.split_whitespace();
                    if let (Some("listening"), Some(name), Some(url)) = (parts.next(), parts.next(), parts.next()) {
                        listeners.push((name.to_string(), url.to_string()));
                        if name == "api" {
                            break url.to_string();
                        }
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    panic!("server did not start; its log:\n{log}");
                }
            }
        };
        TestServer { child, url, token: self.token, dir, base, log_path, listeners, lines: rx }
    }
}

/// A running server, killed when dropped.
pub struct TestServer {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The token it requires, if any.
    pub token: Option<String>,
    dir: tempfile::TempDir,
    /// Its base directory (empty at start).
    pub base: PathBuf,
    log_path: PathBuf,
    /// Every `listening <name> <url>` line seen at start.
    pub listeners: Vec<(String, String)>,
    lines: mpsc::Receiver<String>,
}

/// The `abx` command line (the workspace's `abx` package), beside the
/// daemon's binary. `scripts/test` builds both; a plain `cargo test` builds
/// only this package's binaries, so it is built here the first time.
pub fn abx() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = std::path::Path::new(env!("CARGO_BIN_EXE_agent-sandbox-server")).with_file_name("abx");
            if !path.is_file() {
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let built = Command::new(cargo)
                    .args(["build", "--quiet", "--bin", "abx"])
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .status()
                    .expect("cargo runs");
                assert!(built.success() && path.is_file(), "{} is missing: cargo build --bin abx", path.display());
            }
            path
        })
        .clone()
}

/// A server builder with the default test token.
pub fn server() -> ServerBuilder {
    ServerBuilder {
        host: "127.0.0.1".into(),
        token: Some(TOKEN.into()),
        args: Vec::new(),
        env: Vec::new(),
        base: None,
        launcher: Vec::new(),
    }
}

/// A server with the default test token.
pub fn start() -> TestServer {
    server().start()
}

impl TestServer {
    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pids of the server's children now (a refusal must leave none).
    pub fn children(&self) -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).expect("tasks");
        tasks
            .filter_map(Result::ok)
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// A companion client with the server's token.
    pub fn client(&self) -> Client {
        Client::builder(&self.url).token(self.token.clone()).build().expect("client")
    }

    /// `ws://<addr>` of the PTY WebSocket listener.
    pub fn pty_base(&self) -> String {
        let url = self.listeners.iter().find(|(name, _)| name == "pty").map(|(_, url)| url.as_str());
        url.expect("the server announced its PTY listener").replacen("http://", "ws://", 1)
    }

    /// A plain HTTP client, no credentials.
    pub fn http(&self) -> reqwest::Client {
        reqwest::Client::new()
    }

    /// `url` + `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.token.as_deref().unwrap_or_default())
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits until the log contains `needle` (the server logs through a
    /// background writer), and returns the log; panics after `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(Instant::now() < deadline, "log never contained {needle:?}:\n{log}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The temporary directory holding the base dir and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends `signal` to the server and waits for it to exit, within `timeout`.
    /// Returns its exit status (`None` if it is still running).
    pub fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal, timeout: Duration) -> Option<WaitStatus> {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(waitpid(pid, None));
        });
        nix::sys::signal::kill(pid, signal).expect("signal server");
        rx.recv_timeout(timeout).ok().and_then(Result::ok)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The inotify instances `pid` holds and the watches in them, from its
/// `/proc/<pid>/fd` and `fdinfo`; `None` where this process may not look
/// (the daemon is not dumpable: only root, or `CAP_SYS_PTRACE`, sees them).
pub fn inotify_usage(pid: u32) -> Option<(usize, usize)> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let (mut instances, mut watches) = (0, 0);
    for fd in fds.filter_map(Result::ok) {
        if std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == "anon_inode:inotify") {
            instances += 1;
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()));
            watches += info.unwrap_or_default().lines().filter(|l| l.starts_with("inotify wd:")).count();
        }
    }
    Some((instances, watches))
}

/// A small tmpfs mounted for one test (a disk that fills up), unmounted
/// when dropped; `None` where mounting is not allowed (not root).
pub struct SmallDisk {
    /// Where it is mounted.
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl SmallDisk {
    /// Mounts a 1 MiB one in a fresh directory, or says why it cannot.
    pub fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("small");
        std::fs::create_dir(&path).expect("mkdir");
        let mut disk = SmallDisk::mount_at(&path, "1m")?;
        disk._dir = Some(dir);
        Some(disk)
    }

    /// Mounts one of `size` (`1m`, `512m`) on the existing directory `path`, or says why it cannot.
    pub fn mount_at(path: &Path, size: &str) -> Option<SmallDisk> {
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a small tmpfs here (needs root)");
            return None;
        }
        Some(SmallDisk { path: path.to_path_buf(), _dir: None })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Waits until `pid` is dead or a zombie (it is not the test's child, so
/// there is no exit to await); whether it went within `timeout`.
pub async fn pid_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
        if matches!(state, None | Some('Z' | 'X')) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pid a test's script wrote to `file` (waiting up to 5 s for it).
pub async fn pid_in(file: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = std::fs::read_to_string(file).ok().and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", file.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! Starting and stopping Chromium: finding the program, its flags, a profile
//! of its own, learning its DevTools address, and leaving nothing behind.
//!
//! Chromium is spawned through the supervisor in a process group of its own;
//! its zygote, renderer, GPU and utility processes stay in that group, so
//! one `killpg` ends them all. Its crash handler (`chrome_crashpad_handler`)
//! double-forks into a session of its own; with `HOME` set to the profile
//! its command line names the profile, and [`Launched::stop`] ends whatever
//! still names it after the group is gone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::BrowserError;
use crate::environment::ChildEnv;
use crate::process::{supervisor, Job, SpawnOptions};

/// Programs looked up on `PATH` when no path is configured.
pub const DEFAULT_PROGRAMS: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// How long Chromium gets to print its DevTools address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long Chromium gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The window (and so viewport) size, Playwright's default.
pub const VIEWPORT: (u32, u32) = (1280, 720);

/// A running Chromium.
#[derive(Debug)]
pub struct Launched {
    /// Its process group.
    pub job: Job,
    /// `ws://127.0.0.1:<port>/devtools/browser/<id>`.
    pub ws_url: String,
    profile: Option<tempfile::TempDir>,
}

/// The program to run: `configured` (a path, or a name looked up on
/// `PATH`), else the first of [`DEFAULT_PROGRAMS`] found on `PATH`.
///
/// # Errors
/// [`BrowserError::NotInstalled`] when there is none.
pub fn find_program(configured: Option<&str>, path_var: Option<&str>) -> Result<PathBuf, BrowserError> {
    let search = |name: &str| -> Option<PathBuf> {
        if name.contains('/') {
            return is_executable(Path::new(name)).then(|| PathBuf::from(name));
        }
        std::env::split_paths(path_var.unwrap_or_default()).map(|dir| dir.join(name)).find(|p| is_executable(p))
    };
    let found = match configured {
        Some(name) => search(name),
        None => DEFAULT_PROGRAMS.iter().find_map(|name| search(name)),
    };
    found.ok_or_else(|| BrowserError::NotInstalled { program: configured.unwrap_or("chromium").to_string() })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Chromium's flags for a headless browser on a machine with no network
/// beyond loopback, with its profile in `profile`, every connection through
/// the daemon's `proxy` ([`super::egress`], served by the edge): every scheme, loopback included
/// (`<-loopback>` removes Chromium's implicit bypass), WebRTC without UDP
/// that would go around it, no DNS prefetch.
pub fn flags(profile: &Path, no_sandbox: bool, proxy: SocketAddr) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--headless",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
        "--metrics-recording-only",
        "--password-store=basic",
        "--use-mock-keychain",
        "--mute-audio",
        "--hide-scrollbars",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    if no_sandbox {
        flags.push("--no-sandbox".into());
    }
    flags.push(format!("--proxy-server=http://{proxy}"));
    flags.push("--proxy-bypass-list=<-loopback>".into());
    flags.push("--force-webrtc-ip-handling-policy=disable_non_proxied_udp".into());
    flags.push("--webrtc-ip-handling-policy=disable_non_proxied_udp".into());
    flags.push("--dns-prefetch-disable".into());
    flags.push(format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1));
    flags.push(format!("--user-data-dir={}", profile.display()));
    flags.push("about:blank".into());
    flags
}

/// Starts `program` with a fresh profile and waits for its DevTools address.
/// Chromium's own sandbox is off for root (it refuses to run otherwise) and,
/// after one failed start that says so, where the container gives an
/// unprivileged user no namespaces for it: the sandbox the daemon runs in
/// is then the boundary.
///
/// # Errors
/// [`BrowserError::Start`] when it cannot be spawned, exits, or says
/// nothing within the start timeout.
pub async fn launch(program: &Path, env: &ChildEnv, proxy: SocketAddr) -> Result<Launched, BrowserError> {
    let root = nix::unistd::geteuid().is_root();
    match launch_once(program, env, root, proxy).await {
        Err(BrowserError::Start(detail)) if !root && detail.contains("sandbox") => {
            tracing::warn!(detail, "Chromium's sandbox is unavailable here; starting it with --no-sandbox");
            launch_once(program, env, true, proxy).await
        }
        other => other,
    }
}

async fn launch_once(
    program: &Path,
    env: &ChildEnv,
    no_sandbox: bool,
    proxy: SocketAddr,
) -> Result<Launched, BrowserError> {
    let start = |detail: String| BrowserError::Start(detail);
    let profile = tempfile::Builder::new()
        .prefix("abx-browser-")
        .tempdir()
        .map_err(|e| start(format!("cannot make a profile directory: {e}")))?;
    let mut command = std::process::Command::new(program);
    command
        .args(flags(profile.path(), no_sandbox, proxy))
        .env_clear()
        .envs(env.snapshot())
        // Chromium's own files (crash reports, NSS database) stay in the profile.
        .env("HOME", profile.path())
        .current_dir(profile.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let spawned = supervisor()
        .spawn(command, SpawnOptions { die_with_parent: true, ..SpawnOptions::default() })
        .map_err(|e| start(format!("cannot run {}: {e}", program.display())))?;
    let mut launched = Launched { job: spawned.job, ws_url: String::new(), profile: Some(profile) };
    let Some(stderr) = spawned.stderr else {
        launched.stop().await;
        return Err(start("no standard error to read".into()));
    };
    let reader = match crate::process::receiver(stderr) {
        Ok(reader) => reader,
        Err(e) => {
            launched.stop().await;
            return Err(start(format!("cannot read its output: {e}")));
        }
    };
    match tokio::time::timeout(START_TIMEOUT, devtools_address(reader)).await {
        Ok(Ok(url)) => {
            launched.ws_url = url;
            tracing::info!(pid = launched.job.pid(), program = %program.display(), "browser started");
            Ok(launched)
        }
        Ok(Err(detail)) => {
            launched.stop().await;
            Err(start(detail))
        }
        Err(_) => {
            launched.stop().await;
            Err(start(format!("no DevTools address within {}s", START_TIMEOUT.as_secs())))
        }
    }
}

/// Reads standard error until `DevTools listening on ws://...`, then drains
/// the rest in the background (Chromium blocks on a full pipe).
async fn devtools_address(reader: tokio::net::unix::pipe::Receiver) -> Result<String, String> {
    let mut reader = BufReader::new(reader);
    let mut last = String::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader).take(64 * 1024).read_until(b'\n', &mut line).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("it exited at start: {}", last.trim()));
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(url) = text.trim().strip_prefix("DevTools listening on ") {
            let url = url.trim().to_string();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
            });
            return Ok(url);
        }
        tracing::debug!(line = %text.trim_end(), "browser");
        if !text.contains("dbus") {
            last = text.into_owned();
        }
    }
}

impl Launched {
    /// Ends the whole group (SIGTERM, then SIGKILL), whatever escaped it
    /// that still names the profile, and removes the profile.
    pub async fn stop(&mut self) {
        self.job.terminate(STOP_GRACE).await;
        if let Some(profile) = self.profile.take() {
            let dir = profile.path().to_path_buf();
            let _ = tokio::task::spawn_blocking(move || {
                end_processes_naming(&dir);
                drop(profile);
            })
            .await;
        }
    }
}

/// SIGKILLs every process whose command line names `dir` (Chromium's crash
/// handlers, which leave the process group); returns how many.
fn end_processes_naming(dir: &Path) -> usize {
    let needle = dir.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut ended = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            ended += 1;
        }
    }
    if ended > 0 {
        tracing::debug!(ended, "ended browser processes outside its group");
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_the_path_or_refused_with_the_package_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let program = dir.path().join("chromium");
        std::fs::write(&program, "#!/bin/sh\n").expect("write");
        let path = dir.path().to_str().expect("utf-8");
        assert!(matches!(find_program(None, Some(path)), Err(BrowserError::NotInstalled { .. })), "not executable");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(find_program(None, Some(path)).expect("found"), program);
        let absolute = program.to_str().expect("utf-8");
        assert_eq!(find_program(Some(absolute), None).expect("found"), program);
        let err = find_program(Some("nope-browser"), Some(path)).expect_err("missing");
        assert!(err.to_string().contains("apt-get install"), "{err}");
    }

    #[test]
    fn flags_keep_the_browser_off_the_network_and_in_its_profile() {
        let proxy: SocketAddr = "127.0.0.1:4567".parse().expect("addr");
        let flags = flags(Path::new("/tmp/p"), true, proxy);
        for flag in [
            "--headless",
            "--no-sandbox",
            "--disable-quic",
            "--user-data-dir=/tmp/p",
            "--remote-debugging-port=0",
            "--proxy-server=http://127.0.0.1:4567",
            "--proxy-bypass-list=<-loopback>",
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        ] {
            assert!(flags.iter().any(|f| f == flag), "{flag}");
        }
        assert!(!super::flags(Path::new("/tmp/p"), false, proxy).iter().any(|f| f == "--no-sandbox"));
    }
}

//! The README's command blocks, run: the tour against the real binary on
//! ephemeral ports, every `curl` of it checked. A block that builds,
//! installs or runs the whole suite is skipped, and the test names each
//! skipped block with its reason; a new block must be classified here
//! (run, or skipped with a reason) or the test fails.

#![allow(clippy::disallowed_methods)] // the test drives curl from outside; no reaper here

mod common;

use std::process::Command;

const README: &str = include_str!("../README.md");

/// The line that starts the daemon in the tour; the test starts the binary instead.
const SERVE: &str = "cargo run --release -- serve";

/// One fenced `sh` block: its first line in the README and its text.
struct Block {
    line: usize,
    text: String,
}

fn sh_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in readme.lines().enumerate() {
        match (&mut open, line.trim_end()) {
            (None, "```sh" | "```bash" | "```console") => open = Some(Block { line: n + 2, text: String::new() }),
            (Some(_), "```") => blocks.extend(open.take()),
            (Some(block), text) => {
                block.text.push_str(text);
                block.text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(open.is_none(), "README.md: a code block is not closed");
    blocks
}

/// Why `block` is not run; `None` for the tour, which is.
fn skipped(block: &Block) -> Option<&'static str> {
    let text = block.text.trim();
    if text == "scripts/test" {
        return Some("runs the whole suite: installs packages and takes many minutes");
    }
    if text.starts_with(SERVE) && !text.contains('\n') && !text.ends_with('&') {
        return Some("builds the release binary and serves in the foreground; the tour runs the same command line");
    }
    if text.contains(SERVE) && text.contains("curl") {
        return None;
    }
    panic!(
        "README.md line {}: a command block this test neither runs nor skips; make it part of the tour or add it to \
         `skipped` with its reason:\n{text}",
        block.line
    );
}

/// What one `curl` of the tour must answer, by the path it calls.
fn check(path: &str, answer: &str, notes: &str, base: &std::path::Path) {
    let compact: String = answer.split_whitespace().collect();
    match path {
        "/health" => assert_eq!(compact, r#"{"status":"ok"}"#),
        "/capabilities" => assert!(compact.contains(r#""file_ops":true"#), "{answer}"),
        "/files/content" => {
            assert!(compact.contains(&format!(r#""bytes":{}"#, notes.len())), "{answer}");
            assert_eq!(std::fs::read_to_string(base.join("notes.txt")).expect("uploaded"), notes);
        }
        "/files/stat" => {
            assert!(compact.contains(r#""exists":true"#), "{answer}");
            assert!(compact.contains(&format!(r#""size":{}"#, notes.len())), "{answer}");
        }
        "/shell" => assert!(compact.contains(r#""stdout":"3notes.txt\n""#), "{answer}"),
        "/execute" => {
            assert!(compact.contains(r#""text":"2""#), "{answer}");
            assert!(compact.ends_with(r#"{"type":"end_of_execution"}"#), "{answer}");
        }
        other => panic!("the tour calls {other}: say here what it must answer"),
    }
}

/// The path of the one URL on a tour line (`localhost:PORT/path?query`).
fn url_path(line: &str) -> &str {
    let at = line.find("localhost:").unwrap_or_else(|| panic!("no localhost URL in {line:?}"));
    let rest = &line[at..];
    let rest = &rest[rest.find('/').unwrap_or(rest.len())..];
    let end = rest.find(|c: char| c == '?' || c == '"' || c == '\'' || c.is_whitespace()).unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn readme_tour_runs_against_the_binary_and_the_rest_is_listed_as_skipped() {
    let blocks = sh_blocks(README);
    let mut tours = Vec::new();
    for block in &blocks {
        match skipped(block) {
            Some(why) => println!("skipped: README.md line {}: {why}", block.line),
            None => tours.push(block),
        }
    }
    assert_eq!(tours.len(), 1, "one tour");
    let tour = &tours[0].text;

    let token = tour
        .lines()
        .find_map(|l| l.trim().strip_prefix("export ABX_SERVER_TOKEN="))
        .expect("the tour sets ABX_SERVER_TOKEN");
    let serve = tour.lines().find(|l| l.contains(SERVE)).expect("the tour starts the daemon");
    let args: Vec<&str> = serve[serve.find(SERVE).expect("serve") + SERVE.len()..]
        .trim()
        .trim_end_matches('&')
        .split_whitespace()
        .collect();
    let (host, rest) = match args.as_slice() {
        ["--host", host, rest @ ..] => (*host, rest),
        rest => ("127.0.0.1", rest),
    };
    let server = common::server().token(Some(token)).host(host).args(rest.iter().copied()).start();
    let listener = |name: &str| {
        let url = server.listeners.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone());
        url.unwrap_or_else(|| panic!("no {name} listener")).trim_start_matches("http://").to_string()
    };
    let ports = [("localhost:9000", listener("api")), ("localhost:49999", listener("code"))];

    // The tour's local file: three lines, uploaded and then counted by /shell.
    let local = server.dir().join("local");
    std::fs::create_dir(&local).expect("mkdir");
    let notes = "one\ntwo\nthree\n";
    std::fs::write(local.join("notes.txt"), notes).expect("notes.txt");

    // Each curl fails the script on an error status and ends its answer with a marker line.
    let mut script = String::from(
        "set -euo pipefail\ncurl() { command curl --silent --show-error --fail-with-body --max-time 60 \"$@\"; \
         printf '\\n--- end of answer\\n'; }\n",
    );
    let mut paths = Vec::new();
    for spelled in tour.lines().filter(|l| !l.contains(SERVE)) {
        if spelled.trim_start().starts_with("curl ") {
            paths.push(url_path(spelled).to_string());
        }
        let mut line = spelled.to_string();
        for (from, to) in &ports {
            line = line.replace(from, to);
        }
        assert!(!line.contains("localhost:"), "the tour uses a port this test does not map: {line}");
        script.push_str(&line);
        script.push('\n');
    }
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&local)
        .env("HOME", server.dir())
        .env_remove("ABX_SERVER_TOKEN")
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the tour failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<&str> = stdout.split("\n--- end of answer\n").filter(|a| !a.trim().is_empty()).collect();
    assert_eq!(answers.len(), paths.len(), "one answer per curl:\n{stdout}");
    for (path, answer) in paths.iter().zip(&answers) {
        let answer_line = answer.trim().replace('\n', " ");
        println!("ran: {path}: {}", answer_line.chars().take(160).collect::<String>());
        check(path, answer, notes, &server.base);
    }
    for needed in ["/health", "/files/stat", "/shell"] {
        assert!(paths.iter().any(|p| p == needed), "the tour no longer calls {needed}");
    }
}

#[test]
fn url_paths_are_read_from_tour_lines() {
    assert_eq!(url_path(r#"curl -H "$H" "localhost:9000/files/stat?path=notes.txt""#), "/files/stat");
    assert_eq!(url_path("curl localhost:9000/health                # liveness"), "/health");
    assert_eq!(url_path(r#"curl -d '{"code": "1 + 1"}' localhost:49999/execute"#), "/execute");
}

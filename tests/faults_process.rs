//! Fault injection against the real binary, the process side: a child the
//! OOM killer takes, a fork bomb inside a process limit, a child that closes
//! its stdout and runs on, and a gigabyte of output for a slow reader. Each
//! limit is a cgroup the test makes (skipped, saying why, where the machine
//! cannot make one). The daemon must live, answer, and report what happened.
//! docs/RELIABILITY.md lists every fault test.

// Tests are separate processes without the daemon's reaper: waiting on their own children is fine.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use abx_wire::api::process::{ExecRequest, ShellEvent};
use common::cgroup::{Cgroup, Limits};
use futures_util::StreamExt;

/// A background request bounded in time, so nothing outlives a failed test.
fn bounded(command: &str) -> ExecRequest {
    ExecRequest { timeout: Some(120.0), capture_output: true, ..ExecRequest::new(command) }
}

/// A field of `/proc/<pid>/status`, in kB or as a count.
fn proc_status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon is alive");
    let line = text.lines().find(|l| l.starts_with(field)).expect("field");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("number")
}

/// Waits until `pid` has exited; returns its output and exit code.
async fn finish(client: &abx_client::Client, pid: i32, limit: Duration) -> (String, Option<i32>) {
    let deadline = Instant::now() + limit;
    let (mut since, mut text) = (0, String::new());
    loop {
        let out = client.output(pid, since, Duration::from_secs(2)).await.expect("output");
        text.extend(out.events.iter().map(|e| e.data.as_str()));
        since = out.next;
        if out.state == "exited" && out.events.is_empty() {
            return (text, out.exit_code);
        }
        assert!(Instant::now() < deadline, "process {pid} still running after {limit:?}");
    }
}

#[tokio::test]
async fn a_child_eating_memory_is_oom_killed_and_the_daemon_lives() {
    let limits = Limits { memory: Some(256 << 20), pids: None };
    let cgroup = match Cgroup::create("oom", limits) {
        Ok(cgroup) => cgroup,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let server = common::start();
    cgroup.add(server.pid());
    let client = server.client();
    // 8 MiB more every step, touched so it is resident, until the limit.
    let eat = "python3 -c 'import sys\nchunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n'";
    let pid = client.start(&bounded(eat)).await.expect("start").pid;
    let started = Instant::now();
    let (_, exit) = finish(&client, pid, Duration::from_secs(60)).await;
    eprintln!("OOM: the child was killed after {:?}; oom_kill {}", started.elapsed(), cgroup.oom_kills());
    assert_eq!(exit, Some(-9), "the child died of SIGKILL, reported as -9");
    assert!(cgroup.oom_kills() >= 1, "the OOM killer fired");
    assert!(client.health().await.expect("health"), "the daemon lives");
    let info = client.process(pid).await.expect("process");
    assert_eq!((info.state.as_str(), info.exit_code), ("exited", Some(-9)));
    let ok = client.shell(&ExecRequest::new("echo still-here")).await.expect("shell");
    assert_eq!(ok.stdout, "still-here\n");
}

#[tokio::test]
async fn a_fork_bomb_inside_a_process_limit_is_contained_and_killed() {
    let limits = Limits { memory: None, pids: Some(256) };
    let cgroup = match Cgroup::create("forkbomb", limits) {
        Ok(cgroup) => cgroup,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let server = common::start();
    cgroup.add(server.pid());
    let client = server.client();
    let before = cgroup.pids_current();
    // The first shell returns at once; its group runs on without it and bombs.
    let bomb = "bash -c '(sleep 0.5; f() { f | f & }; f) & exit 0'";
    let pid = client.start(&bounded(bomb)).await.expect("start").pid;
    // (Its captured output goes on: the bomb's shells complain on the inherited stderr.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.process(pid).await.expect("process").state != "exited" {
        assert!(Instant::now() < deadline, "the first shell did not return");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The bomb fills the limit.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cgroup.pids_current() < 250 {
        assert!(Instant::now() < deadline, "the bomb never reached the limit: {}", cgroup.pids_current());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The daemon still answers while the limit is full.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let asked = Instant::now();
        assert!(client.health().await.expect("health while full"));
        slowest = slowest.max(asked.elapsed());
    }
    eprintln!("fork bomb: {} tasks in the cgroup, slowest /health {slowest:?}", cgroup.pids_current());
    assert!(slowest < Duration::from_secs(2), "health took {slowest:?}");
    // A new process cannot start: a clear error, not a hang or a crash.
    let refused = client.shell(&ExecRequest::new("true")).await;
    if let Err(e) = &refused {
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(client.process(pid).await.expect("process").exit_code, Some(0));
    client.signal(pid, 9).await.expect("the group of an exited process can still be killed");
    // Until the whole group is gone: then there is nothing left to signal.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = client.signal(pid, 9).await;
        if let Err(gone) = &left {
            assert!(gone.to_string().contains("already exited"), "{gone}");
            break;
        }
        assert!(Instant::now() < deadline, "the bomb outlived its kill: {} tasks", cgroup.pids_current());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while cgroup.pids_current() > before + 8 {
        assert!(Instant::now() < deadline, "tasks left after the kill: {}", cgroup.pids_current());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ok = client.shell(&ExecRequest::new("echo recovered")).await.expect("shell after the bomb");
    assert_eq!(ok.stdout, "recovered\n");
}

#[tokio::test]
async fn a_child_that_closes_stdout_and_runs_on_is_still_followed() {
    let server = common::start();
    let client = server.client();
    let started = Instant::now();
    let pid = client
        .start(&bounded("sh -c 'exec >&-; echo to-stderr >&2; sleep 1; echo done >&2; exit 3'"))
        .await
        .expect("start")
        .pid;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(client.process(pid).await.expect("process").state, "running", "stdout closed is not exited");
    let (text, exit) = finish(&client, pid, Duration::from_secs(20)).await;
    assert_eq!((text.as_str(), exit), ("to-stderr\ndone\n", Some(3)));
    assert!(started.elapsed() >= Duration::from_secs(1));
    // `/shell` waits for the exit, not for the end of stdout.
    let asked = Instant::now();
    let result = client.shell(&ExecRequest::new("sh -c 'exec >&- 2>&-; sleep 1; exit 4'")).await.expect("shell");
    assert_eq!(result.exit_code, 4);
    assert!(asked.elapsed() >= Duration::from_secs(1), "answered before the exit");
}

#[tokio::test]
async fn a_shell_whose_background_child_keeps_stdout_open_still_answers() {
    let server = common::start();
    let client = server.client();
    let asked = Instant::now();
    let request = ExecRequest { timeout: Some(30.0), ..ExecRequest::new("sh -c 'sleep 20 & echo started'") };
    let result = client.shell(&request).await.expect("shell");
    assert_eq!((result.stdout.as_str(), result.exit_code), ("started\n", 0));
    assert!(asked.elapsed() < Duration::from_secs(10), "waited {:?} for a grandchild's stdout", asked.elapsed());
    // The same for `/shell/stream`: the exit event comes at the command's exit.
    let asked = Instant::now();
    let request = ExecRequest { timeout: Some(30.0), ..ExecRequest::new("sh -c 'sleep 20 & echo streamed'") };
    let events: Vec<ShellEvent> =
        client.shell_stream(&request).await.expect("stream").map(|e| e.expect("event")).collect().await;
    assert_eq!(
        events,
        [ShellEvent::Stdout { data: "streamed".into() }, ShellEvent::Exit { exit_code: 0 }],
        "{events:?}"
    );
    assert!(asked.elapsed() < Duration::from_secs(10), "the stream waited {:?}", asked.elapsed());
}

#[tokio::test]
async fn a_gigabyte_of_output_to_a_slow_reader_keeps_memory_flat_and_reports_the_loss() {
    let server = common::start();
    let client = server.client();
    let baseline = proc_status(server.pid(), "VmRSS:");
    // About 1 GB of numbered lines: 1..=115_000_000 is 1.03 GB.
    let pid = client.start(&bounded("seq 1 115000000")).await.expect("start").pid;
    let (mut since, mut expected, mut peak) = (0u64, 1u64, 0u64);
    let (mut lost_once, mut reads, mut carry) = (false, 0, String::new());
    // After a loss the first line may be cut: skip it, then take up the count from the next.
    let (mut skip_cut, mut resync) = (false, false);
    loop {
        let out = client.output(pid, since, Duration::from_secs(2)).await.expect("output");
        reads += 1;
        peak = peak.max(proc_status(server.pid(), "VmRSS:"));
        if out.lagged {
            (lost_once, skip_cut, resync) = (true, true, true);
            carry.clear();
        }
        for event in &out.events {
            carry.push_str(&event.data);
        }
        let complete = carry.rfind('\n').map_or(0, |at| at + 1);
        for line in carry[..complete].lines() {
            if std::mem::take(&mut skip_cut) {
                continue;
            }
            let number = line.parse::<u64>().ok();
            if std::mem::take(&mut resync) {
                expected = number.expect("a whole line after the cut");
            }
            assert_eq!(number, Some(expected), "a line lost or cut without a report");
            expected += 1;
        }
        carry.drain(..complete);
        since = out.next;
        if out.state == "exited" && out.events.is_empty() {
            assert_eq!(out.exit_code, Some(0));
            assert!(out.dropped, "the budget dropped old output, and says so");
            break;
        }
        // A slow reader: a pause after each read.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("1 GB of output: RSS {baseline} kB before, {peak} kB at most, over {reads} reads");
    assert!(lost_once, "a slow reader was told it lagged");
    assert_eq!(expected, 115_000_001, "the tail is retained up to the end");
    assert!(peak < baseline + 48 * 1024, "RSS went from {baseline} kB to {peak} kB over {reads} reads");
}

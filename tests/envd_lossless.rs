//! Black-box tests of envd's "never lose a byte" guarantee on
//! `process.Process` streams: a slow reader holds the process back and gets
//! every byte; a stalled subscriber cannot hold a fast one back beyond the
//! outpaced bound and learns exactly what it lost; a `Connect` after the
//! replay buffer moved on ends with `data_loss`, never a clean `end`.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use common::envd::{call, Frames};
use common::TestServer;

/// The output of `seq 1 n`.
fn seq(n: u32) -> Vec<u8> {
    (1..=n).flat_map(|i| format!("{i}\n").into_bytes()).collect()
}

/// Opens a `Start` stream of `bash -c script`.
async fn start(server: &TestServer, script: &str, tag: &str) -> Frames {
    let body = json!({"process": {"cmd": "/bin/bash", "args": ["-c", script]}, "tag": tag});
    let (status, _, frames) = Frames::open(server, "process.Process/Start", body, &[]).await;
    assert_eq!(status, 200);
    frames
}

/// Reads a stream to its end: `(stdout, the end event or the end-of-stream error)`.
async fn drain(frames: &mut Frames) -> (Vec<u8>, Value) {
    let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).expect("base64");
    let mut out = Vec::new();
    loop {
        let (flags, message) = frames.next().await.expect("a frame");
        if flags == 2 {
            return (out, message);
        }
        out.extend(b64(&message["event"]["data"]["stdout"]));
        if let Some(end) = message["event"].get("end") {
            return (out, json!({"end": end}));
        }
    }
}

/// The `(bytes, events)` a `data_loss` message reports lost.
fn lost_of(end: &Value) -> (usize, usize) {
    assert_eq!(end["error"]["code"], "data_loss", "{end}");
    let message = end["error"]["message"].as_str().expect("a message");
    let numbers: Vec<usize> =
        message.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).take(2).collect();
    assert!(message.contains(" bytes of output (") && message.contains("exit status 0"), "{message}");
    (numbers[0], numbers[1])
}

#[tokio::test]
async fn a_slow_start_reader_gets_every_byte_before_the_end() {
    let server = common::server().token(None).start();
    let mut frames = start(&server, "seq 1 1500000", "slow").await;
    assert!(frames.next().await.expect("start").1["event"]["start"]["pid"].is_u64());
    // A reader that looks away while the process writes 10 MB, far more than the replay buffer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (out, end) = drain(&mut frames).await;
    assert_eq!(end, json!({"end": {"exited": true, "status": "exit status 0"}}));
    assert!(out == seq(1_500_000), "every byte, in order ({} bytes)", out.len());
}

#[tokio::test]
async fn a_stalled_subscriber_cannot_hold_a_fast_one_and_learns_its_exact_loss() {
    let server = common::server().token(None).start();
    let expected = seq(3_000_000);
    let mut fast = start(&server, "read go; seq 1 3000000", "shared").await;
    let pid = fast.next().await.expect("start").1["event"]["start"]["pid"].as_u64().expect("a pid");
    let (status, _, mut stalled) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"pid": pid}}), &[]).await;
    assert_eq!(status, 200);
    let (status, _) =
        call(&server, "process.Process/SendInput", json!({"process": {"pid": pid}, "input": {"stdin": "Cg=="}}), None)
            .await;
    assert_eq!(status, 200);
    let began = Instant::now();
    let (out, end) = drain(&mut fast).await;
    assert_eq!(end["end"]["status"], "exit status 0", "{end}");
    assert!(out == expected, "the fast reader gets every byte ({} of {})", out.len(), expected.len());
    assert!(began.elapsed() < Duration::from_secs(25), "released well before the stall bound: {:?}", began.elapsed());
    assert!(stalled.next().await.expect("start").1["event"]["start"].is_object());
    let (got, end) = drain(&mut stalled).await;
    let (lost, events) = lost_of(&end);
    assert!(lost > 0 && events > 0, "{end}");
    assert_eq!(got.len() + lost, expected.len(), "what it got plus what it lost is everything: {end}");
    // Usually one gap; a reader still stalled when it is lapped again (a
    // loaded machine) has more, and the end reports them all.
    let gaps = gaps(&expected, &got).expect("what it got is the output with runs left out, in order");
    assert!(!gaps.is_empty() && gaps.iter().sum::<usize>() == lost, "gaps {gaps:?} are the loss reported: {end}");
}

/// The runs of `expected` left out of `got` (their lengths, in order), or
/// `None` if `got` is not `expected` with runs left out.
fn gaps(expected: &[u8], got: &[u8]) -> Option<Vec<usize>> {
    let (mut e, mut g, mut gaps) = (0, 0, Vec::new());
    loop {
        let same = expected[e..].iter().zip(&got[g..]).take_while(|(a, b)| a == b).count();
        (e, g) = (e + same, g + same);
        if g == got.len() {
            break;
        }
        // `seq`'s output never repeats 64 bytes, so the next piece is found once.
        let probe = &got[g..got.len().min(g + 64)];
        let skipped = memchr::memmem::find(&expected[e..], probe)?;
        gaps.push(skipped);
        e += skipped;
    }
    if e < expected.len() {
        gaps.push(expected.len() - e);
    }
    Some(gaps)
}

#[tokio::test]
async fn a_connect_after_the_buffer_moved_on_ends_with_data_loss() {
    let server = common::server().token(None).start();
    let expected = seq(1_000_000);
    let mut first = start(&server, "seq 1 1000000", "gone").await;
    let (out, end) = drain(&mut first).await;
    assert!(out == expected && end["end"]["status"] == "exit status 0", "{end}");
    let (_, _, mut late) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"tag": "gone"}}), &[]).await;
    let (got, end) = drain(&mut late).await;
    let (lost, _) = lost_of(&end);
    assert!(lost > 0 && got.len() + lost == expected.len(), "{} + {lost}", got.len());
    assert!(got == expected[lost..], "the held tail, after the reported gap");
}

#[tokio::test]
async fn a_terminal_connect_past_its_scrollback_ends_with_data_loss() {
    let server = common::server().token(None).args(["--pty-scrollback-bytes", "4096"]).start();
    let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).expect("base64");
    // About 60 KB of terminal output, then the shell waits to be told to exit.
    let script = "seq 1 12000; read line";
    let process = json!({"cmd": "/bin/bash", "args": ["-c", script]});
    let body = json!({"process": process, "pty": {"size": {"cols": 80, "rows": 24}}, "tag": "tty"});
    let (status, _, mut first) = Frames::open(&server, "process.Process/Start", body, &[]).await;
    assert_eq!(status, 200);
    let pid = first.next().await.expect("start").1["event"]["start"]["pid"].as_u64().expect("pid");
    let mut whole = Vec::new();
    while !String::from_utf8_lossy(&whole).contains("12000") {
        let (_, message) = first.next().await.expect("terminal output");
        whole.extend(b64(&message["event"]["data"]["pty"]));
    }
    let (_, _, mut late) =
        Frames::open(&server, "process.Process/Connect", json!({"process": {"pid": pid}}), &[]).await;
    assert!(late.next().await.expect("start").1["event"]["start"].is_object());
    let input =
        json!({"process": {"pid": pid}, "input": {"pty": base64::engine::general_purpose::STANDARD.encode("x\n")}});
    assert_eq!(call(&server, "process.Process/SendInput", input, None).await.0, 200);
    let mut got = Vec::new();
    let end = loop {
        let (flags, message) = late.next().await.expect("a frame");
        if flags == 2 {
            break message;
        }
        got.extend(b64(&message["event"]["data"]["pty"]));
        assert!(message["event"].get("end").is_none(), "a clean end after lost output: {message}");
    };
    assert_eq!(end["error"]["code"], "data_loss", "{end}");
    let message = end["error"]["message"].as_str().expect("a message");
    let lost: usize = message.split(' ').next().and_then(|n| n.parse().ok()).expect("a byte count");
    assert!(message.contains("bytes of terminal output were lost") && message.contains("exit status 0"), "{message}");
    assert!(lost > 40_000 && got.len() <= 4096 + 64, "lost {lost}, got {} of the scrollback", got.len());
}

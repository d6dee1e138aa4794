//! Black-box tests of re-attaching to a code execution (issue 32): an
//! execution started with `X-Abx-Detach: keep` outlives its connection, and
//! `GET /executions/{id}` after a cursor replays the rest, every numbered
//! line exactly once, then `end_of_execution`; a cursor the buffer no longer
//! holds gets a `gap` with the exact count; bad cursors are 400; another
//! identity's id is not found. Without the header nothing changes: the
//! answer carries no id and dropping the connection interrupts.

mod common;

use std::time::Duration;

use serde_json::{json, Value};

use common::ndjson::{attach, execute, Answer, Received};
use common::{TestServer, TOKEN};

/// Reads an answer to its end into `received`; returns the line types seen.
async fn read_all(answer: &mut Answer, received: &mut Received) -> Vec<String> {
    let mut kinds = Vec::new();
    while let Some((value, raw)) = answer.lines.next().await {
        kinds.push(received.take(&value, &raw));
    }
    assert!(received.ended, "the answer ends with end_of_execution: {kinds:?}");
    kinds
}

/// Prints `n` numbered lines, pausing at the middle so a client can leave while it runs.
fn counting(n: u32) -> (String, String) {
    let code = format!(
        "import time\nfor i in range({n}):\n    print(f'line-{{i:06}}')\n    if i == {half}:\n        time.sleep(0.5)\n",
        half = n / 2
    );
    (code, (0..n).map(|i| format!("line-{i:06}\n")).collect())
}

#[tokio::test]
async fn a_detached_execution_outlives_its_connection_and_a_reattach_gets_every_line_once() {
    let server = common::start();
    let (code, expected) = counting(4000);
    let mut first = execute(&server, TOKEN, &code, Some("keep")).await;
    assert_eq!(first.status, 200, "{}", first.error);
    let id = first.execution_id.clone().expect("an X-Abx-Execution-Id header");
    let mut received = Received::default();
    let (value, raw) = first.lines.next().await.expect("a first line");
    assert_eq!(value, json!({"type": "execution", "execution_id": id}), "the id comes first");
    received.take(&value, &raw);
    // Leave after some output, while the execution runs.
    while !received.stdout().contains("line-000100") {
        let (value, raw) = first.lines.next().await.expect("a line");
        assert_ne!(received.take(&value, &raw), "end_of_execution");
    }
    drop(first);
    // Re-attach from the cursor (as Last-Event-ID), after the execution went on without a client.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut again = attach(&server, TOKEN, &id, Some(&received.cursor()), false).await;
    assert_eq!((again.status, again.execution_id.as_deref()), (200, Some(id.as_str())), "{}", again.error);
    let kinds = read_all(&mut again, &mut received).await;
    assert_eq!(kinds.first().map(String::as_str), Some("execution"));
    assert!(!kinds.iter().any(|k| k == "error" || k == "gap"), "not interrupted, nothing lost: {kinds:?}");
    assert!(received.stdout() == expected, "every line exactly once ({} bytes)", received.stdout().len());
    // A re-attach from the start (as ?after=) after the end replays it all again.
    let mut replay = Received::default();
    let mut from_start = attach(&server, TOKEN, &id, Some(&format!("{id}:0:0")), true).await;
    assert_eq!(from_start.status, 200, "{}", from_start.error);
    read_all(&mut from_start, &mut replay).await;
    assert_eq!((replay.lines, replay.gaps), (received.lines, vec![]));
}

#[tokio::test]
async fn a_reattach_past_the_held_lines_gets_an_exact_gap() {
    let server = common::start();
    // About 8.6 MB of lines, past the 4 MiB a detached execution holds.
    let code = "for i in range(8000):\n    print(f'{i:0>1000}')\n";
    let mut started = execute(&server, TOKEN, code, Some("keep")).await;
    assert_eq!(started.status, 200, "{}", started.error);
    let id = started.execution_id.clone().expect("an id");
    // A reader attached from the start gets everything (the execution waits for it): the oracle.
    let mut oracle = Received::default();
    let mut all = attach(&server, TOKEN, &id, None, false).await;
    // The starting connection takes two lines and leaves.
    let mut early = Received::default();
    while early.passed < 2 {
        let (value, raw) = started.lines.next().await.expect("a line");
        early.take(&value, &raw);
    }
    drop(started);
    read_all(&mut all, &mut oracle).await;
    assert!(oracle.gaps.is_empty(), "an attached reader loses nothing");
    let printed: String = (0..8000).map(|i| format!("{i:0>1000}\n")).collect();
    assert!(oracle.stdout() == printed, "every line, in order");
    assert_eq!(early.lines[..], oracle.lines[..2]);
    // Late, from the cursor after two lines: a gap, then exactly the held tail.
    let mut late = attach(&server, TOKEN, &id, Some(&early.cursor()), false).await;
    assert_eq!(late.status, 200, "{}", late.error);
    read_all(&mut late, &mut early).await;
    assert_eq!(early.gaps.len(), 1, "{:?}", early.gaps);
    let (at, lines, bytes) = early.gaps[0];
    assert_eq!(at, 2);
    let lost = &oracle.lines[2..2 + lines as usize];
    assert_eq!(bytes, lost.iter().map(|l| l.len() as u64).sum::<u64>(), "the gap's bytes are exact");
    assert_eq!(early.lines[2..], oracle.lines[2 + lines as usize..], "then the held tail");
    let held: u64 = early.lines[2..].iter().map(|l| l.len() as u64).sum();
    // The 4 MiB budget counts a bookkeeping overhead per line on top of its bytes.
    assert!(held <= 4 << 20 && held > 2 << 20, "the budget's worth is held: {held}");
}

#[tokio::test]
async fn bad_cursors_are_400_and_unknown_ids_404() {
    let server = common::start();
    let mut done = execute(&server, TOKEN, "print('a')\nprint('b')", Some("keep")).await;
    let id = done.execution_id.clone().expect("an id");
    let mut received = Received::default();
    read_all(&mut done, &mut received).await;
    let other = execute(&server, TOKEN, "1", Some("keep")).await.execution_id.expect("another id");
    let status = |answer: Answer| (answer.status, answer.error);
    let (passed, bytes) = (received.passed, received.bytes);
    for (cursor, needle) in [
        (format!("{id}:{}:{bytes}", passed + 1), "past what it produced"),
        (format!("{id}:{passed}:{}", bytes + 1), "past what it produced"),
        (format!("{id}:1:1"), "not a line boundary"),
        (format!("{other}:0:0"), "is not one of execution"),
        ("nonsense".to_string(), "is not <execution>:<lines>:<bytes>"),
    ] {
        for in_query in [false, true] {
            let (code, text) = status(attach(&server, TOKEN, &id, Some(&cursor), in_query).await);
            assert_eq!(code, 400, "{cursor}: {text}");
            assert!(text.contains(needle), "{cursor}: {text}");
        }
    }
    let (code, text) = status(attach(&server, TOKEN, "123", None, false).await);
    assert_eq!(code, 404, "{text}");
    assert!(text.starts_with("Execution 123 not found"), "{text}");
    let (code, text) = status(execute(&server, TOKEN, "1", Some("maybe")).await);
    assert_eq!((code, text.as_str()), (400, "X-Abx-Detach must be 'keep'"));
}

fn two_identities() -> (tempfile::TempDir, TestServer) {
    let policy = json!({"auth": {"tokens": [
        {"id": "alice", "scopes": ["process:run", "process:read"], "token_env": "ABX_TEST_ALICE"},
        {"id": "bob", "scopes": ["process:run", "process:read"], "token_env": "ABX_TEST_BOB"},
    ]}});
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    let server = common::server()
        .token(None)
        .env("ABX_TEST_ALICE", "alice-token-71c2")
        .env("ABX_TEST_BOB", "bob-token-0d9e")
        .args(["--policy", &path.display().to_string()])
        .start();
    (dir, server)
}

#[tokio::test]
async fn another_identity_does_not_find_an_execution() {
    let (_dir, server) = two_identities();
    let mut mine = execute(&server, "alice-token-71c2", "print('secret')", Some("keep")).await;
    assert_eq!(mine.status, 200, "{}", mine.error);
    let id = mine.execution_id.clone().expect("an id");
    read_all(&mut mine, &mut Received::default()).await;
    let theirs = attach(&server, "bob-token-0d9e", &id, None, false).await;
    assert_eq!(theirs.status, 404, "{}", theirs.error);
    assert!(theirs.error.contains("not found"), "{}", theirs.error);
    let mut again = Received::default();
    let mut owner = attach(&server, "alice-token-71c2", &id, None, false).await;
    read_all(&mut owner, &mut again).await;
    assert_eq!(again.stdout(), "secret\n");
}

#[tokio::test]
async fn without_the_header_nothing_changes_and_a_drop_still_interrupts() {
    let server = common::start();
    let mut plain = execute(&server, TOKEN, "print('x')", None).await;
    assert_eq!((plain.status, plain.execution_id.as_deref()), (200, None));
    let mut kinds = Vec::new();
    while let Some((value, _)) = plain.lines.next().await {
        kinds.push(value["type"].as_str().expect("type").to_string());
    }
    assert_eq!(kinds, ["number_of_executions", "stdout", "end_of_execution"]);
    // A loop that would run forever: dropping the connection interrupts it, the context stays usable.
    let mut looping = execute(&server, TOKEN, "n = 0\nprint('go')\nwhile True:\n    n += 1", None).await;
    while looping.lines.next().await.expect("a line").0["type"] != "stdout" {}
    drop(looping);
    let read_n = || async {
        let mut answer = execute(&server, TOKEN, "n", None).await;
        let mut text = None;
        while let Some((value, _)) = answer.lines.next().await {
            if value["type"] == "result" {
                text = value["text"].as_str().map(str::to_string);
            }
        }
        text.expect("n's value").parse::<u64>().expect("a number")
    };
    let first: u64 = tokio::time::timeout(Duration::from_secs(10), read_n()).await.expect("not blocked");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(read_n().await, first, "the loop was interrupted");
}

/// The `execution` line and the id header are ignored by a protocol parser
/// that dispatches on `type` (the SDK's, see tests/conformance): checked
/// here on the raw lines, which are the protocol's own plus that one.
#[tokio::test]
async fn a_detached_answer_is_the_plain_answer_plus_its_id_line() {
    let server = common::start();
    let code = "print('one')\n1 + 1";
    let mut plain = execute(&server, TOKEN, code, None).await;
    let shape = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().map(|o| o.remove("timestamp"));
        v
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    while let Some((value, _)) = plain.lines.next().await {
        a.push(shape(&value));
    }
    let mut kept = execute(&server, TOKEN, code, Some("keep")).await;
    while let Some((value, _)) = kept.lines.next().await {
        b.push(shape(&value));
    }
    assert_eq!(b[0]["type"], "execution");
    // The execution counter moved on by one between the two.
    assert_eq!((a[0]["execution_count"].as_u64(), b[1]["execution_count"].as_u64()), (Some(1), Some(2)));
    assert_eq!(a[1..], b[2..]);
}

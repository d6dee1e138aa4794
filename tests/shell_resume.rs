//! Black-box tests of `/shell/stream` resume: line events carry ids, a
//! client that lost its connection resumes with `Last-Event-ID` and gets
//! every line exactly once; a resume past what the run still holds gets an
//! explicit `gap` with exact counts; bad cursors are 400.

mod common;

use serde_json::Value;

use common::sse::{stream, Events};

/// Reads to the `exit` event: `(stdout lines joined with newlines, gaps, exit code)`.
async fn rest(events: &mut Events) -> (String, Vec<Value>, i64) {
    let (mut out, mut gaps) = (String::new(), Vec::new());
    while let Some((name, _, data)) = events.next().await {
        match name.as_str() {
            "stdout" => {
                out.push_str(data["data"].as_str().expect("data"));
                out.push('\n');
            }
            "gap" => gaps.push(data),
            "exit" => return (out, gaps, data["exit_code"].as_i64().expect("code")),
            other => panic!("unexpected {other}: {data}"),
        }
    }
    panic!("the stream ended without exit");
}

fn seq(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// The output of `seq -f %0999g 1 n`: lines of 1,000 bytes.
fn wide(n: u32) -> String {
    (1..=n).map(|i| format!("{i:0999}\n")).collect()
}

#[tokio::test]
async fn a_cut_stream_resumes_after_its_last_event_id_with_every_line_once() {
    let server = common::start();
    let (status, mut first, _) = stream(&server, "seq 1 50000", None).await;
    assert_eq!(status, 200);
    let mut got = String::new();
    let mut last = None;
    for _ in 0..1000 {
        let (name, id, data) = first.next().await.expect("an event");
        assert_eq!(name, "stdout");
        got.push_str(data["data"].as_str().expect("data"));
        got.push('\n');
        last = id;
    }
    let last = last.expect("line events carry ids");
    drop(first);
    let (status, mut again, _) = stream(&server, "ignored on resume", Some(&last)).await;
    assert_eq!(status, 200);
    let (tail, gaps, code) = rest(&mut again).await;
    assert_eq!((gaps, code), (vec![], 0));
    got.push_str(&tail);
    assert!(got == seq(50_000), "every line exactly once ({} bytes)", got.len());
}

#[tokio::test]
async fn a_resume_past_the_held_lines_gets_an_exact_gap_and_bad_cursors_are_400() {
    let server = common::start();
    let expected = wide(6000);
    let (_, mut first, _) = stream(&server, "seq -f %0999g 1 6000", None).await;
    let (_, id, data) = first.next().await.expect("the first line");
    assert_eq!(data["data"].as_str(), Some(&expected[..999]));
    let id = id.expect("an id");
    let (out, _, code) = rest(&mut first).await;
    assert_eq!((out.len() + 1000, code), (expected.len(), 0));
    // Within the grace after the end, resume from the first line: 6 MB later, past the 4 MiB held.
    let (status, mut late, _) = stream(&server, "x", Some(&id)).await;
    assert_eq!(status, 200);
    let (tail, gaps, code) = rest(&mut late).await;
    assert_eq!((gaps.len(), code), (1, 0), "{gaps:?}");
    let lost = gaps[0]["bytes"].as_u64().expect("bytes") as usize;
    assert!(lost > 0 && 1000 + lost + tail.len() == expected.len(), "{lost} + {}", tail.len());
    assert!(tail == expected[1000 + lost..], "the held tail, right after the reported gap");
    let lines_lost = gaps[0]["events"].as_u64().expect("events") as usize;
    assert_eq!(lines_lost * 1000, lost, "the lost lines, counted exactly");
    let run = id.split(':').next().expect("a run");
    for (bad, why) in [
        ("nonsense".to_string(), "malformed"),
        (format!("{run}:99999999:1"), "from the future"),
        (format!("{run}:5999:1"), "an offset the run never gave"),
        ("1:0:1000".to_string(), "another stream"),
    ] {
        let (status, _, body) = stream(&server, "x", Some(&bad)).await;
        assert_eq!(status, 400, "{why}: {body}");
        assert!(body.contains("Last-Event-ID") || body.contains("No stream"), "{why}: {body}");
    }
}

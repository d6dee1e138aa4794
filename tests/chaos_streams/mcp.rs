//! The chaos test's MCP producers: a `tools/call` of `run` with a progress
//! token, whose command prints a known pattern, one progress notification
//! per line. Each client reads a random number of events, cuts the
//! connection and resumes with `GET /mcp` and `Last-Event-ID` (the last id,
//! or one time in four a random older one), checking each line as it
//! arrives: line `n` must come next, with the event id `n` after the first
//! one's, so nothing is lost, repeated or reordered. A `-32030`
//! `data_loss` answer is a gap: the client checks that `lost` is exactly
//! the messages between its id and `resume_from`, counts them, and resumes
//! from `resume_from`. The stream keeps 256 messages: a regular producer
//! prints fewer lines than that, so it must see no gap; the overflowing one
//! stays away at its first cut until its call has ended (well over 256
//! lines) and must see the error with the exact count.

use serde_json::json;

use super::common::mcp::{event_of, Events, Session};
use super::common::TestServer;
use super::{pattern, Rng, Tally};

/// Messages a call's stream keeps (`STREAM_MESSAGES` in src/http/mcp/streams.rs).
const RING: u64 = 256;

/// The request id of every producer's call (each has its own session).
const CALL: u64 = 7;

/// The sequence number of a call stream's event id (`<stream>:<seq>`).
fn seq(id: &str) -> u64 {
    id.rsplit(':').next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a call stream's id: {id}"))
}

/// One MCP producer, cut `cuts` times at random points (see the module doc).
pub async fn mcp_producer(server: &TestServer, k: u64, cuts: u64, rng: &mut Rng, overflow: bool) -> Tally {
    // Under the ring's 256 messages (the lines, the answer) and 1 MiB (the lines, the stdout in the answer).
    let (lines, width) =
        if overflow { (300 + rng.below(300), 16 + rng.below(48)) } else { (20 + rng.below(220), 16 + rng.below(900)) };
    let (command, expected) = pattern(k, lines, width as usize);
    let line = |n: u64| &expected[(n as usize - 1) * (width as usize + 1)..n as usize * (width as usize + 1) - 1];
    let session = Session::open(server).await;
    let call = json!({"jsonrpc": "2.0", "id": CALL, "method": "tools/call", "params": {
        "name": "run", "arguments": {"command": command, "shell": true, "max_output_bytes": expected.len()},
        "_meta": {"progressToken": format!("p{k}")}}});
    let response = session.post(&call).send().await.expect("send");
    assert_eq!(response.status().as_u16(), 200, "p{k}");
    let mut events = Events::of(response);
    let mut tally = Tally { producer: k, ..Tally::default() };
    // The next line due; the event id of line 1 less one; the id after each line
    // received (or gap) with the line due after it.
    let (mut next, mut base, mut ids) = (1u64, None::<u64>, Vec::<(String, u64)>::new());
    let answer = loop {
        let window = ((lines + 1 - next) / (cuts - tally.cuts.min(cuts) + 1)).max(1);
        let cut_after = (tally.cuts < cuts).then(|| 1 + rng.below(window));
        let mut read = 0;
        let ended = loop {
            if cut_after.is_some_and(|n| read >= n) {
                break None;
            }
            let (id, message) =
                events.next().await.unwrap_or_else(|| panic!("p{k}: the stream ended before the answer"));
            if message["id"] == CALL {
                break Some((id, message));
            }
            assert_eq!(message["method"], "notifications/progress", "p{k}: {message}");
            let n = message["params"]["progress"].as_f64().expect("progress") as u64;
            assert_eq!(n, next, "p{k}: line {n} when line {next} was due: {message}");
            assert_eq!(message["params"]["message"].as_str(), Some(line(n)), "p{k}: line {n}");
            let base = *base.get_or_insert(seq(&id) - 1);
            assert_eq!(seq(&id), base + n, "p{k}: line {n}'s event id {id}");
            next += 1;
            ids.push((id, next));
            read += 1;
        };
        match ended {
            Some((id, message)) if message["error"]["code"] == -32030 => {
                let data = &message["error"]["data"];
                let (last, _) = ids.last().expect("an id resumed from");
                let from = data["resume_from"].as_str().expect("resume_from");
                let lost = data["lost"].as_u64().expect("lost");
                assert_eq!((data["code"].as_str(), id.as_str()), (Some("data_loss"), from), "p{k}: {message}");
                assert_eq!(lost, seq(from) - seq(last), "p{k}: the loss counts what lies between: {message}");
                if overflow && tally.gaps == 0 {
                    // Away until the answer was sent: the ring holds its last 256 messages, the answer's included.
                    let answer = base.expect("a line") + lines + 1;
                    assert_eq!((seq(from), data["held"].as_u64()), (answer - RING, Some(RING)), "p{k}: {message}");
                }
                assert!(overflow, "p{k}: {lines} lines fit in the ring, yet {lost} were lost: {message}");
                let bytes: usize = (next..next + lost).map(|n| line(n).len() + 1).sum();
                (tally.gaps, tally.gap_bytes) = (tally.gaps + 1, tally.gap_bytes + bytes as u64);
                next += lost;
                ids.push((from.to_string(), next));
            }
            Some((_, message)) => break message,
            None => {
                drop(events);
                tally.cuts += 1;
                if overflow && tally.cuts == 1 {
                    let answer = base.expect("a line") + lines + 1;
                    session.wait_sent(&event_of(&ids[0].0, answer)).await;
                }
                if rng.below(4) == 0 {
                    ids.truncate(1 + rng.below(ids.len() as u64) as usize);
                    next = ids.last().expect("an id").1;
                }
            }
        }
        let response = session.resume(&ids.last().expect("an id").0).await;
        assert_eq!(response.status().as_u16(), 200, "p{k}");
        events = Events::of(response);
    };
    assert_eq!(next, lines + 1, "p{k}: the answer after every line: {answer}");
    let result = &answer["result"]["structuredContent"];
    assert_eq!((result["exit_code"].as_i64(), result["stdout"].as_str()), (Some(0), Some(expected.as_str())), "p{k}");
    assert!(!overflow || tally.gaps > 0 || cuts == 0, "p{k}: the overflowing producer's late resume reports its loss");
    (tally.messages, tally.bytes) = (lines, expected.len() as u64);
    tally
}

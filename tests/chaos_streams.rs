//! A seeded, bounded chaos test of the streaming surfaces: producers write
//! known byte patterns through `/shell/stream`, envd `Start`, detached
//! code executions (`X-Abx-Detach: keep`) and MCP `run` calls with a
//! progress token (`chaos_streams/mcp.rs`), or known files under an envd
//! `WatchDir`; their clients read a random number of events, cut the
//! connection at random points and resume (`Last-Event-ID`, `Connect`,
//! `GET /executions/{id}`, `abx-watch-resume`, `GET /mcp` with
//! `Last-Event-ID`), from the last id or from a random older one. Every
//! byte received is checked against what was produced: none lost, none
//! duplicated, and where a resume asks for more than the buffer holds (one
//! envd producer and one MCP producer overflow it on purpose), an explicit
//! gap, `data_loss` or `-32030` with the exact count.
//!
//! The PTY WebSocket is not here: a re-attach replays the scrollback
//! without a cursor or a count of what it no longer holds, so there is no
//! exact gap to check (see docs/RELIABILITY.md).
//!
//! Small by default (a few seconds); `CHAOS_PRODUCERS`, `CHAOS_CUTS`,
//! `CHAOS_PARALLEL` and `CHAOS_SEED` scale it (`scripts/chaos` runs a large one).

mod common;
#[path = "chaos_streams/mcp.rs"]
mod mcp;

use base64::Engine;
use serde_json::{json, Value};

use common::envd::{call, Frames};
use common::ndjson::{self, Received};
use common::sse::stream;
use common::TestServer;

/// A small deterministic generator (xorshift64*), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What producer `k` writes: `lines` lines `p<k>-<n>` padded to `width` bytes (and a newline).
fn pattern(k: u64, lines: u64, width: usize) -> (String, String) {
    let command = format!("seq -f 'p{k}-%0{}g' 1 {lines}", width - 2 - k.to_string().len());
    let expected = (1..=lines).map(|n| format!("p{k}-{n:0w$}\n", w = width - 2 - k.to_string().len())).collect();
    (command, expected)
}

/// What the chaos found on one producer.
#[derive(Default, Debug)]
struct Tally {
    producer: u64,
    cuts: u64,
    bytes: u64,
    gaps: u64,
    gap_bytes: u64,
    /// File events checked (watch producers).
    events: u64,
    /// Progress messages checked (MCP producers).
    messages: u64,
}

/// One `/shell/stream` producer, cut `cuts` times at random points.
async fn shell_producer(server: &TestServer, k: u64, cuts: u64, rng: &mut Rng) -> Tally {
    let width = 16 + rng.below(48) as usize;
    let (command, expected) = pattern(k, 2000 + rng.below(20_000), width);
    let mut tally = Tally { producer: k, ..Tally::default() };
    // What the client holds: the output as received, and the id after each line.
    let (mut got, mut ids): (String, Vec<(String, usize)>) = (String::new(), Vec::new());
    let (status, mut events, _) = stream(server, &command, None).await;
    assert_eq!(status, 200);
    loop {
        // Cut within an even share of the lines still to come, so every planned cut happens.
        let remaining = expected.len().saturating_sub(got.len()) as u64 / width as u64;
        let window = (remaining / (cuts - tally.cuts.min(cuts) + 1)).max(1);
        let cut_after = (tally.cuts < cuts).then(|| 1 + rng.below(window));
        let mut read = 0;
        let ended = loop {
            if cut_after.is_some_and(|n| read >= n) {
                break false;
            }
            let Some((name, id, data)) = events.next().await else { panic!("p{k}: the stream ended without exit") };
            read += 1;
            match name.as_str() {
                "stdout" => {
                    got.push_str(data["data"].as_str().expect("data"));
                    got.push('\n');
                    ids.push((id.expect("an id"), got.len()));
                }
                "gap" => {
                    let bytes = data["bytes"].as_u64().expect("bytes");
                    let at = got.len();
                    got.push_str(&expected[at..at + bytes as usize]);
                    (tally.gaps, tally.gap_bytes) = (tally.gaps + 1, tally.gap_bytes + bytes);
                }
                "exit" => {
                    assert_eq!(data["exit_code"], 0, "p{k}");
                    break true;
                }
                other => panic!("p{k}: unexpected {other}: {data}"),
            }
        };
        if ended {
            break;
        }
        drop(events);
        tally.cuts += 1;
        // Resume from the last id, or (one time in four) from an older one, forgetting what followed.
        if !ids.is_empty() && rng.below(4) == 0 {
            let keep = 1 + rng.below(ids.len() as u64) as usize;
            ids.truncate(keep);
            got.truncate(ids[keep - 1].1);
        }
        let last = ids.last().map(|(id, _)| id.clone());
        let (status, resumed, body) = match last {
            Some(last) => stream(server, "resume", Some(&last)).await,
            None => stream(server, &command, None).await,
        };
        assert_eq!(status, 200, "p{k}: {body}");
        events = resumed;
    }
    assert!(got == expected, "p{k}: every byte once ({} of {} bytes)", got.len(), expected.len());
    tally.bytes = got.len() as u64;
    tally
}

/// One code producer: a detached execution printing the pattern in its own
/// context, cut at random points and re-attached (`GET /executions/{id}`)
/// after the last line or (one time in four) an older one. It stays under
/// the 4 MiB a detached execution holds, so any gap is a failure.
async fn code_producer(server: &TestServer, k: u64, cuts: u64, rng: &mut Rng) -> Tally {
    let (lines, width) = (2000 + rng.below(15_000), 16 + rng.below(32) as usize);
    let pad = width - 2 - k.to_string().len();
    let code = format!("for n in range(1, {}):\n    print(f'p{k}-{{n:0{pad}}}')\n", lines + 1);
    let expected: String = (1..=lines).map(|n| format!("p{k}-{n:0pad$}\n")).collect();
    let mut tally = Tally { producer: k, ..Tally::default() };
    let context = ndjson::context(server, common::TOKEN).await;
    let body = json!({"code": code, "context_id": context});
    let mut answer = ndjson::execute_body(server, common::TOKEN, body, Some("keep")).await;
    assert_eq!(answer.status, 200, "p{k}: {}", answer.error);
    let mut got = Received::default();
    loop {
        let cut_after = (tally.cuts < cuts).then(|| 1 + rng.below(lines / (cuts - tally.cuts + 1) / 4 + 1));
        let mut read = 0;
        while cut_after.is_none_or(|n| read < n) && !got.ended {
            let (value, raw) =
                answer.lines.next().await.unwrap_or_else(|| panic!("p{k}: ended without end_of_execution"));
            got.take(&value, &raw);
            read += 1;
        }
        if got.ended {
            break;
        }
        drop(answer);
        tally.cuts += 1;
        if rng.below(4) == 0 && !got.lines.is_empty() {
            got.rewind(1 + rng.below(got.lines.len() as u64) as usize);
        }
        answer =
            ndjson::attach(server, common::TOKEN, &got.execution.clone(), Some(&got.cursor()), rng.below(2) == 0).await;
        assert_eq!(answer.status, 200, "p{k}: {}", answer.error);
    }
    assert!(got.gaps.is_empty(), "p{k}: nothing lost under the budget: {:?}", got.gaps);
    let stdout = got.stdout();
    assert!(stdout == expected, "p{k}: every byte once ({} of {} bytes)", stdout.len(), expected.len());
    tally.bytes = stdout.len() as u64;
    tally
}

/// Reads a process stream: stdout until `limit` bytes or the end;
/// `Some(end)` once it ended (the end event, or the `data_loss` error).
async fn frames_until(frames: &mut Frames, limit: Option<u64>, out: &mut Vec<u8>) -> Option<Value> {
    let decode = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).expect("b64");
    while limit.is_none_or(|n| (out.len() as u64) < n) {
        let (flags, message) = frames.next().await.expect("a frame");
        if flags == 2 {
            return Some(message);
        }
        out.extend(decode(&message["event"]["data"]["stdout"]));
        if let Some(end) = message["event"].get("end") {
            return Some(json!({"end": end}));
        }
    }
    None
}

/// Bytes per line of the envd producers, without the newline.
const WIDTH: usize = 16;

/// The error that ended a process stream, if it did.
fn lost_marker(end: &Option<Value>) -> Option<&Value> {
    end.as_ref().and_then(|e| e.get("error"))
}

/// One envd producer: `Start`, cut at random points, `Connect` again.
/// A `Connect` replays from the first byte still held: the client checks
/// each replay against the pattern and keeps the longest.
async fn envd_producer(server: &TestServer, k: u64, cuts: u64, rng: &mut Rng, overflow: bool) -> Tally {
    let lines = if overflow { 400_000 } else { 2000 + rng.below(40_000) };
    let (command, expected) = pattern(k, lines, WIDTH);
    let mut tally = Tally { producer: k, ..Tally::default() };
    let body = json!({"process": {"cmd": "/bin/sh", "args": ["-c", command]}, "tag": format!("chaos-{k}")});
    let (status, _, mut frames) = Frames::open(server, "process.Process/Start", body, &[]).await;
    assert_eq!(status, 200);
    let mut best = 0usize;
    loop {
        let mut out = Vec::new();
        // Each connection replays from the first byte held: cut before half of the output.
        let limit = (tally.cuts < cuts).then(|| 1 + rng.below(expected.len() as u64 / 2));
        let end = frames_until(&mut frames, limit, &mut out).await;
        // A `Connect` replays from the first byte still held: where that is in
        // the pattern, from the number of the first whole line received.
        let whole = out.iter().position(|b| *b == b'\n').map(|i| i + 1).filter(|i| i + WIDTH < out.len());
        let from = match whole {
            Some(at) => {
                let line = std::str::from_utf8(&out[at..at + WIDTH]).expect("text");
                let n: usize = line.rsplit('-').next().and_then(|n| n.parse().ok()).expect("a line number");
                ((n - 1) * (WIDTH + 1)).checked_sub(at).expect("a replay starts within the output")
            }
            None => {
                assert!(end.is_none() || lost_marker(&end).is_none(), "p{k}: a loss leaves the held tail to replay");
                0
            }
        };
        assert!(out[..] == expected.as_bytes()[from..from + out.len()], "p{k}: a replay is the output, in order");
        let lost = match lost_marker(&end) {
            Some(error) => {
                assert_eq!(error["code"], "data_loss", "p{k}: {error}");
                let message = error["message"].as_str().expect("message");
                let lost = message.split(' ').next().and_then(|n| n.parse::<usize>().ok()).expect("a byte count");
                assert_eq!(lost, from, "p{k}: the loss is counted exactly: {message}");
                (tally.gaps, tally.gap_bytes) = (tally.gaps + 1, tally.gap_bytes + lost as u64);
                lost
            }
            None => {
                assert!(end.is_none() || from == 0, "p{k}: a clean end after a replay from byte {from}");
                from
            }
        };
        best = best.max(lost + out.len());
        if let Some(end) = end {
            assert_eq!(lost + out.len(), expected.len(), "p{k}: the end comes after every byte: {end}");
            break;
        }
        drop(frames);
        tally.cuts += 1;
        if overflow && tally.cuts == 1 {
            // Whether a quick reconnect finds the buffer moved on depends on the
            // machine's pace: after the first cut, the overflowing producer
            // reconnects only once its process has written everything, so its
            // replay surely starts past what it lost.
            exited(server, &format!("chaos-{k}")).await;
        }
        let selector = json!({"process": {"tag": format!("chaos-{k}")}});
        let (status, _, again) = Frames::open(server, "process.Process/Connect", selector, &[]).await;
        assert_eq!(status, 200);
        frames = again;
    }
    assert_eq!(best, expected.len(), "p{k}");
    tally.bytes = best as u64;
    tally
}

/// One envd `WatchDir` producer: empty files `p<k>-<n>` created one by one
/// (on a thread, so this single-threaded client does not pace them) while
/// the client reads, cuts at random points and resumes with
/// `abx-watch-resume`, from the last event or (one time in four) an older
/// one. The watch holds more than the producer makes, so a resume never
/// loses anything: the client must end with each file's `CREATE` and
/// `CHMOD`, once each, in order.
async fn watch_producer(server: &TestServer, k: u64, cuts: u64, rng: &mut Rng) -> Tally {
    const WATCH: &str = "filesystem.Filesystem/WatchDir";
    let files = 100 + rng.below(300);
    let dir = format!("w{k}");
    std::fs::create_dir(server.base.join(&dir)).expect("mkdir");
    let expected: Vec<(String, String)> = (0..files)
        .flat_map(|n| ["CREATE", "CHMOD"].map(|t| (format!("p{k}-{n:05}"), format!("EVENT_TYPE_{t}"))))
        .collect();
    let mut tally = Tally { producer: k, ..Tally::default() };
    let (status, _, mut frames) = Frames::open(server, WATCH, json!({ "path": dir }), &[]).await;
    assert_eq!((status, frames.next().await), (200, Some((0, json!({"start": {}})))), "p{k}");
    let watch = frames.headers.get("abx-watch-id").and_then(|v| v.to_str().ok()).expect("a watch id").to_string();
    let base = server.base.join(&dir);
    let writer = std::thread::spawn(move || {
        for n in 0..files {
            std::fs::write(base.join(format!("p{k}-{n:05}")), b"").expect("write");
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
    });
    let mut got: Vec<(String, String)> = Vec::new();
    loop {
        let remaining = (expected.len() - got.len()) as u64;
        let window = (remaining / (cuts - tally.cuts.min(cuts) + 1)).max(1);
        let cut_after = (tally.cuts < cuts).then(|| 1 + rng.below(window));
        let mut read = 0;
        while got.len() < expected.len() && cut_after.is_none_or(|n| read < n) {
            let (flags, message) = frames.next().await.expect("a frame");
            assert_eq!(flags, 0, "p{k}: the watch ended: {message}");
            if let Some(event) = message.get("filesystem") {
                let text = |key: &str| event[key].as_str().unwrap_or_default().to_string();
                got.push((text("name"), text("type")));
                read += 1;
            }
        }
        if got.len() >= expected.len() {
            break;
        }
        drop(frames);
        tally.cuts += 1;
        if !got.is_empty() && rng.below(4) == 0 {
            got.truncate(rng.below(got.len() as u64) as usize);
        }
        let cursor = format!("{watch}:{}", got.len());
        let (status, _, mut again) =
            Frames::open(server, WATCH, json!({ "path": dir }), &[("abx-watch-resume", &cursor)]).await;
        assert_eq!((status, again.next().await), (200, Some((0, json!({"start": {}})))), "p{k}");
        let lost = again.headers.get("abx-watch-lost").and_then(|v| v.to_str().ok());
        assert_eq!(lost, Some("0"), "p{k}: the ring holds every event of this producer");
        frames = again;
    }
    writer.join().expect("writer");
    assert!(got == expected, "p{k}: every file event once, in order ({} of {})", got.len(), expected.len());
    tally.events = got.len() as u64;
    tally
}

/// Waits until no running envd process has `tag` (`List` shows running ones only).
async fn exited(server: &TestServer, tag: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, body) = call(server, "process.Process/List", json!({}), None).await;
        assert_eq!(status, 200, "{body}");
        let processes = body["processes"].as_array().cloned().unwrap_or_default();
        if !processes.iter().any(|p| p["tag"] == tag) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{tag} still runs after 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn producers_cut_at_random_lose_nothing_and_count_every_gap() {
    let seed = env_or("CHAOS_SEED", 0x5eed_1234);
    let producers = env_or("CHAOS_PRODUCERS", 6).max(2);
    let cuts = env_or("CHAOS_CUTS", 24);
    let server = common::server().token(None).start();
    let started = std::time::Instant::now();
    let runs = (0..producers).map(|k| {
        let server = &server;
        async move {
            let mut rng = Rng(seed ^ (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let share = cuts / producers + u64::from(k < cuts % producers);
            // Producers 0 and 1 overflow their buffers on purpose; the default 6 has every kind.
            match k % 5 {
                0 => mcp::mcp_producer(server, k, share, &mut rng, k == 0).await,
                1 => envd_producer(server, k, share, &mut rng, k == 1).await,
                2 => code_producer(server, k, share, &mut rng).await,
                3 => watch_producer(server, k, share, &mut rng).await,
                _ => shell_producer(server, k, share, &mut rng).await,
            }
        }
    });
    // At most `CHAOS_PARALLEL` at once: this client is one thread, and a resume must come within the 5 s grace.
    let parallel = env_or("CHAOS_PARALLEL", 8).max(1) as usize;
    let tallies: Vec<Tally> = futures_util::StreamExt::collect(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter(runs),
        parallel,
    ))
    .await;
    let total = |f: fn(&Tally) -> u64| tallies.iter().map(f).sum::<u64>();
    eprintln!(
        "chaos seed {seed:#x}: {producers} producers ({parallel} at once), {} cuts, {} bytes, {} file events and {} MCP progress messages checked, {} gaps ({} bytes, each counted exactly) in {:?}",
        total(|t| t.cuts),
        total(|t| t.bytes),
        total(|t| t.events),
        total(|t| t.messages),
        total(|t| t.gaps),
        total(|t| t.gap_bytes),
        started.elapsed()
    );
    for t in tallies.iter().filter(|t| t.gaps > 0) {
        eprintln!("  producer {}: {} gaps, {} bytes", t.producer, t.gaps, t.gap_bytes);
    }
    assert_eq!(total(|t| t.cuts), cuts, "every planned cut happened");
    let overflowing = tallies.iter().find(|t| t.producer == 1).expect("producer 1");
    assert!(overflowing.gaps > 0 || overflowing.cuts == 0, "the overflowing producer's late replay reports its loss");
}

//! The three pipes of a running interpreter, read as one ordered stream.
//!
//! Events come from descriptor 4; output written to descriptors 1 and 2
//! directly (subprocesses, C code, bash) comes from the stdout and stderr
//! pipes. Before an event is handed out, output already sitting in those
//! pipes is handed out first: it was written before the event was.

use std::collections::VecDeque;

use abx_wire::codec::utf8::Utf8Decoder;

use super::pipe::{PipeReader, PipeWriter};
use super::protocol::{parse_event, Event, FrameSplitter, Stream};
use super::spawn::{Process, Spawned};

const CHUNK: usize = 32 * 1024;

/// One item of an interpreter's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An event from the driver.
    Event(Event),
    /// Text written to descriptor 1 or 2.
    Output(Stream, String),
    /// The event pipe closed: the driver is gone.
    Closed,
    /// The driver broke the protocol.
    Broken(String),
}

/// The interpreter's pipes.
#[derive(Debug)]
pub struct KernelIo {
    events: PipeReader,
    stdout: PipeReader,
    stderr: PipeReader,
    splitter: FrameSplitter,
    queued: VecDeque<Event>,
    out_text: Utf8Decoder,
    err_text: Utf8Decoder,
    event_buf: Vec<u8>,
    out_buf: Vec<u8>,
    err_buf: Vec<u8>,
    closed: bool,
}

impl KernelIo {
    /// Splits a child started with channels into its process, its pipes and its command pipe.
    pub fn split(spawned: Spawned) -> Option<(Process, KernelIo, PipeWriter)> {
        let Spawned { process, stdout, stderr, channels } = spawned;
        let channels = channels?;
        let io = KernelIo {
            events: channels.events,
            stdout,
            stderr,
            splitter: FrameSplitter::default(),
            queued: VecDeque::new(),
            out_text: Utf8Decoder::default(),
            err_text: Utf8Decoder::default(),
            event_buf: vec![0; CHUNK],
            out_buf: vec![0; CHUNK],
            err_buf: vec![0; CHUNK],
            closed: false,
        };
        Some((process, io, channels.control))
    }

    /// The next item, waiting until there is one. Cancel-safe.
    pub async fn next(&mut self) -> Item {
        loop {
            if !self.queued.is_empty() {
                if let Some(item) = self.output_now() {
                    return item;
                }
                if let Some(event) = self.queued.pop_front() {
                    return Item::Event(event);
                }
            }
            if self.closed {
                return self.output_now().unwrap_or(Item::Closed);
            }
            let KernelIo { events, stdout, stderr, event_buf, out_buf, err_buf, .. } = self;
            let out_open = !stdout.is_eof();
            let err_open = !stderr.is_eof();
            tokio::select! {
                read = events.read(event_buf) => match read {
                    Ok(0) | Err(_) => self.closed = true,
                    Ok(n) => {
                        let chunk = self.event_buf[..n].to_vec();
                        if let Err(e) = self.push_frames(&chunk) {
                            return Item::Broken(e);
                        }
                    }
                },
                read = stdout.read(out_buf), if out_open => {
                    if let Some(item) = self.output(Stream::Stdout, read) {
                        return item;
                    }
                },
                read = stderr.read(err_buf), if err_open => {
                    if let Some(item) = self.output(Stream::Stderr, read) {
                        return item;
                    }
                },
            }
        }
    }

    /// Everything that can be read right now, without waiting (used when the interpreter has died).
    pub fn drain_now(&mut self) -> Vec<Item> {
        let mut items = Vec::new();
        while let Some(item) = self.output_now() {
            items.push(item);
        }
        while !self.closed {
            match self.events.read_now(&mut self.event_buf) {
                Ok(Some(n)) if n > 0 => {
                    let chunk = self.event_buf[..n].to_vec();
                    if self.push_frames(&chunk).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
        items.extend(self.queued.drain(..).map(Item::Event));
        while let Some(item) = self.output_now() {
            items.push(item);
        }
        items
    }

    /// Output already in the stdout or stderr pipe, if any.
    pub fn output_now(&mut self) -> Option<Item> {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let (pipe, buf) = match stream {
                Stream::Stdout => (&mut self.stdout, &mut self.out_buf),
                Stream::Stderr => (&mut self.stderr, &mut self.err_buf),
            };
            if pipe.is_eof() {
                continue;
            }
            let read = match pipe.read_now(buf) {
                Ok(None) => continue,
                Ok(Some(n)) => Ok(n),
                Err(e) => Err(e),
            };
            if let Some(item) = self.output(stream, read) {
                return Some(item);
            }
        }
        None
    }

    fn output(&mut self, stream: Stream, read: std::io::Result<usize>) -> Option<Item> {
        let (buf, decoder) = match stream {
            Stream::Stdout => (&self.out_buf, &mut self.out_text),
            Stream::Stderr => (&self.err_buf, &mut self.err_text),
        };
        let text = match read {
            Ok(0) | Err(_) => decoder.finish(),
            Ok(n) => decoder.decode(&buf[..n]),
        };
        (!text.is_empty()).then_some(Item::Output(stream, text))
    }

    fn push_frames(&mut self, chunk: &[u8]) -> Result<(), String> {
        let frames = self.splitter.push(chunk).map_err(|e| e.to_string())?;
        self.queued.extend(frames.iter().filter_map(|f| parse_event(f)));
        Ok(())
    }
}

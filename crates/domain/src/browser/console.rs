//! The page's console messages, bounded: at most [`MAX_ENTRIES`] entries
//! (the reference's limit) of at most [`MAX_TEXT_BYTES`] each, so a page
//! that prints without end keeps the daemon's memory flat. Reading clears.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use super::protocol::ConsoleCalled;

/// Entries kept until read; later ones are counted and dropped.
pub const MAX_ENTRIES: usize = 1000;
/// Longest text kept per entry; longer text is cut at a character boundary.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// One console message.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleEntry {
    /// `log`, `info`, `warning`, `error`, `debug`, ...
    pub kind: String,
    /// The arguments' text, space-separated.
    pub text: String,
    /// Seconds since the epoch.
    pub timestamp: f64,
}

/// The collected messages.
#[derive(Debug, Default)]
pub struct Console {
    entries: Mutex<VecDeque<ConsoleEntry>>,
}

impl Console {
    /// Records one call of the console API, unless the buffer is full.
    pub fn push(&self, call: &ConsoleCalled) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            return;
        }
        let mut text = String::new();
        for arg in &call.args {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&arg.text());
            if text.len() > MAX_TEXT_BYTES {
                break;
            }
        }
        truncate(&mut text, MAX_TEXT_BYTES);
        let timestamp = if call.timestamp > 0.0 {
            call.timestamp / 1000.0
        } else {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
        };
        entries.push_back(ConsoleEntry { kind: call.kind.clone(), text, timestamp });
    }

    /// Every entry, oldest first, emptying the buffer.
    pub fn take(&self) -> Vec<ConsoleEntry> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect()
    }
}

fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::protocol::RemoteObject;

    fn call(args: Vec<RemoteObject>) -> ConsoleCalled {
        ConsoleCalled { kind: "log".into(), args, timestamp: 1_700_000_000_000.0 }
    }

    fn string(s: &str) -> RemoteObject {
        RemoteObject { kind: "string".into(), value: Some(s.into()), ..RemoteObject::default() }
    }

    #[test]
    fn entries_join_their_arguments_and_reading_clears() {
        let console = Console::default();
        let number = RemoteObject { kind: "number".into(), value: Some(1.into()), ..RemoteObject::default() };
        let object =
            RemoteObject { kind: "object".into(), description: Some("Object".into()), ..RemoteObject::default() };
        console.push(&call(vec![string("hi"), number, object]));
        let entries = console.take();
        assert_eq!(
            entries,
            [ConsoleEntry { kind: "log".into(), text: "hi 1 Object".into(), timestamp: 1_700_000_000.0 }]
        );
        assert!(console.take().is_empty());
    }

    #[test]
    fn the_buffer_and_each_text_are_bounded() {
        let console = Console::default();
        for _ in 0..MAX_ENTRIES + 50 {
            console.push(&call(vec![string("x")]));
        }
        console.push(&call(vec![string(&"é".repeat(MAX_TEXT_BYTES))]));
        assert_eq!(console.take().len(), MAX_ENTRIES);
        console.push(&call(vec![string(&"é".repeat(MAX_TEXT_BYTES))]));
        let entry = console.take().pop().expect("entry");
        assert!(entry.text.len() <= MAX_TEXT_BYTES && entry.text.len() > MAX_TEXT_BYTES - 2);
    }
}

//! A terminal's output history: a bounded byte ring addressed by absolute
//! offsets. Readers decode what they read with [`abx_wire::codec::utf8`],
//! which never splits a character.
//!
//! Every byte the terminal ever wrote has an offset (0, 1, 2, ...). The ring
//! keeps the newest `capacity` of them; a reader remembers the offset it
//! reached and learns how many bytes it missed when the ring moved past it.

use std::collections::VecDeque;

/// The newest `capacity` bytes of a stream, by absolute offset.
#[derive(Debug)]
pub struct Scrollback {
    buf: VecDeque<u8>,
    capacity: usize,
    end: u64,
}

/// Bytes read from a [`Scrollback`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Bytes between the requested offset and the oldest byte kept (lost to the reader).
    pub skipped: u64,
    /// The bytes read.
    pub bytes: Vec<u8>,
    /// The offset after the last byte read.
    pub next: u64,
}

impl Scrollback {
    /// An empty ring keeping at most `capacity` bytes (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Scrollback { buf: VecDeque::with_capacity(capacity.min(64 * 1024)), capacity, end: 0 }
    }

    /// How many bytes the ring keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Offset of the oldest byte kept.
    pub fn start(&self) -> u64 {
        self.end - self.buf.len() as u64
    }

    /// Offset after the newest byte: the number of bytes ever written.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Appends `data`, forgetting the oldest bytes beyond the capacity.
    pub fn push(&mut self, data: &[u8]) {
        self.end += data.len() as u64;
        let data = &data[data.len().saturating_sub(self.capacity)..];
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.capacity);
        self.buf.drain(..overflow);
        self.buf.extend(data);
    }

    /// At most `max` bytes from offset `from` on (from the oldest kept byte
    /// when `from` is older than that).
    pub fn read(&self, from: u64, max: usize) -> Chunk {
        let start = self.start();
        let from = from.min(self.end);
        let (skipped, from) = if from < start { (start - from, start) } else { (0, from) };
        let index = usize::try_from(from - start).unwrap_or(usize::MAX);
        let count = self.buf.len().saturating_sub(index).min(max);
        let bytes: Vec<u8> = self.buf.range(index..index + count).copied().collect();
        Chunk { skipped, next: from + count as u64, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_bytes_by_offset() {
        let mut ring = Scrollback::new(4);
        ring.push(b"ab");
        assert_eq!(ring.read(0, 10), Chunk { skipped: 0, bytes: b"ab".to_vec(), next: 2 });
        ring.push(b"cdef");
        assert_eq!((ring.start(), ring.end()), (2, 6));
        assert_eq!(ring.read(0, 10), Chunk { skipped: 2, bytes: b"cdef".to_vec(), next: 6 });
        assert_eq!(ring.read(3, 2), Chunk { skipped: 0, bytes: b"de".to_vec(), next: 5 });
        assert_eq!(ring.read(6, 10), Chunk { skipped: 0, bytes: Vec::new(), next: 6 });
        ring.push(b"0123456789");
        assert_eq!(ring.read(6, 10), Chunk { skipped: 6, bytes: b"6789".to_vec(), next: 16 });
    }
}

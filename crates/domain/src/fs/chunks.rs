//! A file's bytes as a stream of chunks, for response bodies.
//!
//! Each chunk is read on the runtime first with `preadv2(RWF_NOWAIT)`,
//! which copies what the page cache holds and never waits for the disk;
//! whatever it could not copy is read on the blocking pool. A cached file
//! thus streams with no thread hand-off per chunk, and an uncached one
//! never blocks the runtime. Chunk buffers come from a small pool owned by
//! the stream and return to it when the response drops them, so a download
//! of any size reuses a few buffers (zeroed once) and memory stays flat. A
//! slow client simply stops polling the stream.

use std::fs::File;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use rustix::io::{Errno, ReadWriteFlags};
use tokio::task::JoinHandle;

/// Buffers a stream keeps for reuse.
const POOL: usize = 4;

type Pool = Arc<Mutex<Vec<Vec<u8>>>>;

/// The bytes `offset .. offset + len` of a file, `chunk` bytes at a time.
pub struct Chunks {
    file: Arc<File>,
    position: u64,
    end: u64,
    chunk: usize,
    pool: Pool,
    pending: Option<JoinHandle<io::Result<Vec<u8>>>>,
    nowait: bool,
    failed: bool,
}

impl Chunks {
    /// Streams `len` bytes of `file` from `offset`, in chunks of `chunk` bytes (the last may be shorter).
    pub fn new(file: File, offset: u64, len: u64, chunk: usize) -> Self {
        Chunks {
            file: Arc::new(file),
            position: offset,
            end: offset.saturating_add(len),
            chunk: chunk.max(1),
            pool: Pool::default(),
            pending: None,
            nowait: true,
            failed: false,
        }
    }

    /// A buffer of `chunk` bytes, from the pool when one is free.
    fn buffer(&self) -> Vec<u8> {
        let reused = self.pool.lock().ok().and_then(|mut pool| pool.pop());
        reused.unwrap_or_else(|| vec![0; self.chunk])
    }

    /// Copies what the page cache holds of `buffer`'s range without waiting; returns the bytes copied.
    fn read_cached(&mut self, buffer: &mut [u8]) -> usize {
        if !self.nowait {
            return 0;
        }
        match rustix::io::preadv2(&*self.file, &mut [IoSliceMut::new(buffer)], self.position, ReadWriteFlags::NOWAIT) {
            Ok(n) => n,
            Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                self.nowait = false;
                0
            }
            Err(_) => 0,
        }
    }

    fn deliver(&mut self, read: io::Result<Vec<u8>>, len: usize) -> io::Result<Bytes> {
        match read {
            Ok(buffer) => {
                self.position += len as u64;
                Ok(Bytes::from_owner(Pooled { buffer, len, pool: Arc::clone(&self.pool) }))
            }
            Err(e) => {
                self.failed = true;
                Err(io::Error::new(e.kind(), format!("the file changed while it was being sent: {e}")))
            }
        }
    }

    fn want(&self) -> usize {
        usize::try_from(self.end - self.position).map_or(self.chunk, |left| left.min(self.chunk))
    }
}

impl Stream for Chunks {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(pending) = this.pending.as_mut() {
            let joined = ready!(Pin::new(pending).poll(cx));
            this.pending = None;
            let read = joined.unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
            let want = this.want();
            return Poll::Ready(Some(this.deliver(read, want)));
        }
        if this.failed || this.position >= this.end {
            return Poll::Ready(None);
        }
        let want = this.want();
        let mut buffer = this.buffer();
        let cached = this.read_cached(&mut buffer[..want]);
        if cached == want {
            return Poll::Ready(Some(this.deliver(Ok(buffer), want)));
        }
        let (file, position) = (Arc::clone(&this.file), this.position);
        let mut pending = tokio::task::spawn_blocking(move || {
            file.read_exact_at(&mut buffer[cached..want], position + cached as u64).map(|()| buffer)
        });
        match Pin::new(&mut pending).poll(cx) {
            Poll::Ready(joined) => {
                let read = joined.unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
                Poll::Ready(Some(this.deliver(read, want)))
            }
            Poll::Pending => {
                this.pending = Some(pending);
                Poll::Pending
            }
        }
    }
}

/// A chunk's buffer; it goes back to its stream's pool when the chunk is dropped.
struct Pooled {
    buffer: Vec<u8>,
    len: usize,
    pool: Pool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Ok(mut pool) = self.pool.lock() {
            if pool.len() < POOL {
                pool.push(std::mem::take(&mut self.buffer));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn file_of(data: &[u8]) -> File {
        let mut file = tempfile::tempfile().expect("tempfile");
        std::io::Write::write_all(&mut file, data).expect("write");
        file
    }

    #[tokio::test]
    async fn ranges_arrive_whole_in_chunks_and_buffers_are_reused() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut stream = Chunks::new(file_of(&data), 10, 99_980, 4096);
        let mut got = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("chunk");
            assert!(chunk.len() <= 4096);
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got, &data[10..99_990]);
        let pooled = stream.pool.lock().expect("pool").len();
        assert!((1..=POOL).contains(&pooled), "{pooled} buffers kept");
    }

    #[tokio::test]
    async fn a_file_that_shrank_is_an_error_not_short_data() {
        let file = file_of(&[7u8; 10_000]);
        let mut stream = Chunks::new(file.try_clone().expect("clone"), 0, 10_000, 4096);
        let first = stream.next().await.expect("first").expect("data");
        assert_eq!(first.len(), 4096);
        file.set_len(5000).expect("truncate");
        let err = stream.next().await.expect("second").expect_err("short read");
        assert!(err.to_string().contains("changed while it was being sent"), "{err}");
        assert!(stream.next().await.is_none(), "the stream ends after an error");
    }
}

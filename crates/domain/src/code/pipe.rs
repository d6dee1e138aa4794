//! Non-blocking pipe ends for the tokio runtime (output read from them is
//! decoded by the one incremental UTF-8 decoder, [`abx_wire::codec::utf8`]).
//!
//! [`PipeReader::read_now`] reads straight from the descriptor without
//! waiting for the reactor: the kernel runner uses it to drain output that
//! is already in a pipe before it forwards a later event, which keeps
//! output and results in the order the interpreter produced them.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use tokio::net::unix::pipe::{Receiver, Sender};

/// The read end of a pipe, registered with the runtime.
#[derive(Debug)]
pub struct PipeReader {
    pipe: Receiver,
    eof: bool,
}

impl PipeReader {
    /// Wraps a pipe's read end (made non-blocking here).
    ///
    /// # Errors
    /// The descriptor is not a pipe, or cannot be registered.
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        Ok(PipeReader { pipe: Receiver::from_owned_fd(fd)?, eof: false })
    }

    /// Whether every writer has closed the pipe.
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    /// Reads what is available, waiting until something is; `Ok(0)` at end of file.
    ///
    /// Cancel-safe: nothing is read unless the future completes.
    ///
    /// # Errors
    /// I/O errors of the descriptor.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        loop {
            self.pipe.readable().await?;
            match self.pipe.try_read(buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(0);
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what is in the pipe right now, without waiting for the runtime
    /// to notice it: `Ok(None)` when it is empty.
    ///
    /// # Errors
    /// I/O errors of the descriptor.
    pub fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.eof {
            return Ok(Some(0));
        }
        loop {
            match nix::unistd::read(self.pipe.as_fd(), buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(Some(0));
                }
                Ok(n) => return Ok(Some(n)),
                Err(Errno::EAGAIN) => return Ok(None),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The write end of a pipe, registered with the runtime.
#[derive(Debug)]
pub struct PipeWriter {
    pipe: Sender,
}

impl PipeWriter {
    /// Wraps a pipe's write end (made non-blocking here).
    ///
    /// # Errors
    /// The descriptor is not a pipe, or cannot be registered.
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        Ok(PipeWriter { pipe: Sender::from_owned_fd(fd)? })
    }

    /// Writes all of `data`, waiting while the pipe is full. Not cancel-safe.
    ///
    /// # Errors
    /// `BrokenPipe` once the reader is gone, and other I/O errors.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            self.pipe.writable().await?;
            match self.pipe.try_write(data) {
                Ok(n) => data = &data[n..],
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn read_now_sees_data_before_the_reactor_does() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let mut reader = PipeReader::new(r).expect("reader");
        let mut buf = [0u8; 16];
        assert_eq!(reader.read_now(&mut buf).expect("read"), None);
        nix::unistd::write(&w, b"abc").expect("write");
        assert_eq!(reader.read_now(&mut buf).expect("read"), Some(3));
        drop(w);
        assert_eq!(reader.read(&mut buf).await.expect("read"), 0);
        assert!(reader.is_eof());
    }
}

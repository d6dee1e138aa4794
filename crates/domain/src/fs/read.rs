//! Reads: opening a file for download, byte ranges, and streaming its bytes
//! (raw, or base64 inside a JSON document) with bounded memory, through
//! [`Chunks`].

use std::fs::File;
use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::b64;
use super::chunks::Chunks;
use super::meta::{Kind, Stat};
use super::safe::{self, Resolved};
use super::FsError;
use crate::policy::{Op, PathGuard};

/// Raw bytes per chunk.
pub const CHUNK: usize = 512 * 1024;

/// A regular file opened for reading.
#[derive(Debug)]
pub struct OpenFile {
    /// The open file.
    pub file: File,
    /// Its metadata at open time.
    pub stat: Stat,
    /// Its resolved path.
    pub path: PathBuf,
}

/// Opens the regular file `target` for reading; `raw` is the caller's spelling, for messages.
///
/// # Errors
/// 404 when missing or not a regular file; [`FsError::TooLarge`] over `max_bytes`.
pub fn open(guard: &PathGuard, target: &Resolved, raw: &str, max_bytes: Option<u64>) -> Result<OpenFile, FsError> {
    let not_found = || FsError::NotFound(format!("File not found: {raw}"));
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK;
    let fd = match safe::open(guard, target, flags, Mode::empty(), Op::Read) {
        Ok(fd) => fd,
        Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => return Err(not_found()),
        Err(e) => return Err(e),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| FsError::io(&target.path, e))?;
    let stat = Stat::from_metadata(&meta);
    if stat.kind != Kind::File || !meta.file_type().is_file() {
        return Err(not_found());
    }
    if let Some(limit) = max_bytes.filter(|limit| stat.size > *limit) {
        return Err(FsError::TooLarge { size: Some(stat.size), limit });
    }
    Ok(OpenFile { file, stat, path: target.path.clone() })
}

/// The byte range a `Range` header asks of a file of `size` bytes:
/// `Ok(None)` for the whole file (no header, or one this server serves whole,
/// like several ranges), else the inclusive `(first, last)` byte.
///
/// # Errors
/// [`FsError::RangeNotSatisfiable`] when the range starts past the end.
pub fn parse_range(header: Option<&str>, size: u64) -> Result<Option<(u64, u64)>, FsError> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((start, end)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let unsatisfiable = FsError::RangeNotSatisfiable { size };
    let (start, end) = (start.trim(), end.trim());
    let range = if start.is_empty() {
        let Ok(suffix) = end.parse::<u64>() else { return Ok(None) };
        if suffix == 0 || size == 0 {
            return Err(unsatisfiable);
        }
        (size.saturating_sub(suffix), size - 1)
    } else {
        let Ok(first) = start.parse::<u64>() else { return Ok(None) };
        let last = if end.is_empty() {
            size.saturating_sub(1)
        } else {
            match end.parse::<u64>() {
                Ok(last) if last >= first => last.min(size.saturating_sub(1)),
                _ => return Ok(None),
            }
        };
        if first >= size {
            return Err(unsatisfiable);
        }
        (first, last)
    };
    Ok(Some(range))
}

/// The bytes `offset .. offset + len` of `file`, as a stream of chunks.
pub fn stream(file: File, offset: u64, len: u64) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    Chunks::new(file, offset, len, CHUNK)
}

/// A JSON document `prefix + base64(file) + suffix`, streamed, with its exact length.
///
/// `prefix` must end inside an open JSON string and `suffix` close it.
pub fn base64_document(
    file: File,
    len: u64,
    prefix: String,
    suffix: String,
) -> (u64, impl Stream<Item = io::Result<Bytes>> + Send + 'static) {
    let total = prefix.len() as u64 + len.div_ceil(3) * 4 + suffix.len() as u64;
    let head = futures_util::stream::once(async move { Ok(Bytes::from(prefix)) });
    // A multiple of 3 bytes encodes without padding, so chunks concatenate.
    let body = Chunks::new(file, 0, len, CHUNK / 3 * 3).map(|raw| raw.map(|raw| b64::encode(&raw)));
    let tail = futures_util::stream::once(async move { Ok(Bytes::from(suffix)) });
    (total, head.chain(body).chain(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_rfc_9110() {
        assert_eq!(parse_range(None, 10).ok(), Some(None));
        assert_eq!(parse_range(Some("bytes=0-4"), 10).ok(), Some(Some((0, 4))));
        assert_eq!(parse_range(Some("bytes=5-"), 10).ok(), Some(Some((5, 9))));
        assert_eq!(parse_range(Some("bytes=-3"), 10).ok(), Some(Some((7, 9))));
        assert_eq!(parse_range(Some("bytes=-30"), 10).ok(), Some(Some((0, 9))));
        assert_eq!(parse_range(Some("bytes=8-100"), 10).ok(), Some(Some((8, 9))));
        assert_eq!(parse_range(Some("bytes=0-1,4-5"), 10).ok(), Some(None));
        assert_eq!(parse_range(Some("items=0-1"), 10).ok(), Some(None));
        assert_eq!(parse_range(Some("bytes=5-2"), 10).ok(), Some(None));
        assert!(matches!(parse_range(Some("bytes=10-"), 10), Err(FsError::RangeNotSatisfiable { size: 10 })));
        assert!(matches!(parse_range(Some("bytes=-0"), 10), Err(FsError::RangeNotSatisfiable { .. })));
    }

    #[tokio::test]
    async fn base64_documents_have_the_announced_length() {
        let mut file = tempfile::tempfile().expect("tempfile");
        let data: Vec<u8> = (0..CHUNK * 2 + 7).map(|i| (i % 251) as u8).collect();
        std::io::Write::write_all(&mut file, &data).expect("write");
        let (len, stream) = base64_document(file, data.len() as u64, "{\"c\": \"".into(), "\"}".into());
        let parts: Vec<_> = stream.collect().await;
        let text: Vec<u8> = parts.into_iter().flat_map(|p| p.expect("chunk").to_vec()).collect();
        assert_eq!(text.len() as u64, len);
        let doc: serde_json::Value = serde_json::from_slice(&text).expect("json");
        use base64::Engine;
        assert_eq!(abx_wire::codec::base64::BASE64.decode(doc["c"].as_str().expect("c")).expect("base64"), data);
    }
}

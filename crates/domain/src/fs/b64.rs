//! Base64 for the JSON transfers: downloads encoded with SIMD, and the
//! JSON upload's use case: [`Base64Upload::begin`] resolves the caller's
//! path through the policy's guard and opens the [`AtomicFile`] in one
//! blocking step, then the text is decoded piece by piece and written as it
//! arrives ([`Base64Upload::write`] does all of it for text in hand).
//!
//! Decoding tries `base64-simd` (AVX2, SSE4.1 or NEON, chosen at run time)
//! and falls back, for the pieces it refuses, to the tolerant scalar engine
//! [`BASE64`], which accepts what Python's decoder accepts (non-zero
//! trailing bits) and gives the error messages: every input SIMD accepts,
//! the scalar engine accepts with the same output. Text is decoded in
//! pieces of [`PIECE`] characters counted from its start, so the first
//! error, and its message, are those of decoding the whole text in order.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use abx_wire::codec::base64::BASE64;
use base64::Engine;
use bytes::Bytes;

use super::safe::{self, Resolved};
use super::upload::{spawn_writer, Feeder, Files, Writer};
use super::write::{AtomicFile, Committed, WritePolicy};
use super::FsError;
use crate::policy::{Op, PathGuard};

/// Characters of base64 text decoded at a time, unless a caller chooses
/// another multiple of 4 (tests choose small pieces, so that small bodies
/// cross piece boundaries).
pub const PIECE: usize = 256 * 1024;

/// `raw` in standard base64 with padding.
pub fn encode(raw: &[u8]) -> Bytes {
    Bytes::from(base64_simd::STANDARD.encode_to_string(raw))
}

/// The bytes `piece` encodes.
///
/// # Errors
/// [`FsError::Invalid`] with the scalar engine's message.
pub fn decode(piece: &[u8]) -> Result<Vec<u8>, FsError> {
    if let Ok(decoded) = base64_simd::STANDARD.decode_to_vec(piece) {
        return Ok(decoded);
    }
    let mut out = vec![0; piece.len() / 4 * 3 + 3];
    let n = BASE64.decode_slice(piece, &mut out).map_err(|e| FsError::Invalid(format!("Invalid base64: {e}")))?;
    out.truncate(n);
    Ok(out)
}

/// A file being written from base64 text, one piece at a time.
///
/// Problems are kept and reported by [`Base64Upload::finish`] in the order
/// a whole-text upload meets them: padding, size, creating the file, the
/// first undecodable piece, writing. Dropping it abandons the write.
pub struct Base64Upload {
    writer: Result<(Feeder, Writer<Committed>), FsError>,
    max_bytes: Option<u64>,
    text_len: u64,
    last: [u8; 2],
    decoded: u64,
    invalid: Option<FsError>,
    rejected: bool,
    writing: bool,
}

impl Base64Upload {
    /// Starts writing the file `raw` names, as the caller spelled it: the
    /// path is resolved for writing by `guard` and its extension checked
    /// against `policy` (errors now), then the file is opened (its errors
    /// wait for [`Base64Upload::finish`], where a whole-text upload meets
    /// them).
    ///
    /// # Errors
    /// Path refusals and `extension_not_allowed`.
    pub async fn begin(
        files: &Arc<Files>,
        guard: &PathGuard,
        raw: &str,
        policy: &WritePolicy,
    ) -> Result<(Resolved, Self), FsError> {
        let (guard, raw, files, opening) = (guard.clone(), raw.to_string(), Arc::clone(files), policy.clone());
        let (target, file) = super::blocking(move || {
            let target = safe::resolve(&guard, &raw, Op::Write, "")?;
            opening.check_extension(&target.path)?;
            let file = AtomicFile::create_with(&guard, &target, &opening, files.writes());
            Ok((target, file))
        })
        .await?;
        Ok((target, Self::new(file, policy)))
    }

    /// Writes the base64 `text` (a slice of a request body) to the file
    /// `raw` names, atomically, decoding it in pieces of `piece` characters
    /// (a multiple of 4; [`PIECE`] unless the caller streams in others).
    ///
    /// # Errors
    /// Those of [`Base64Upload::begin`] and [`Base64Upload::finish`].
    pub async fn write(
        files: &Arc<Files>,
        guard: &PathGuard,
        raw: &str,
        policy: &WritePolicy,
        text: Bytes,
        piece: usize,
    ) -> Result<(Resolved, Committed), FsError> {
        let (target, mut upload) = Self::begin(files, guard, raw, policy).await?;
        for piece in text.chunks((piece / 4 * 4).max(4)) {
            if !upload.piece(piece).await {
                break;
            }
        }
        Ok((target, upload.finish().await?))
    }

    /// Starts writing to `file` (or remembers why it could not be created), within `policy`'s size.
    fn new(file: Result<AtomicFile, FsError>, policy: &WritePolicy) -> Self {
        let overwrite = policy.overwrite;
        let writer = file.map(|file| {
            spawn_writer(file, Arc::new(AtomicU64::new(0)), move |file, outcome| match outcome? {
                true => file.commit(overwrite),
                false => Err(FsError::Interrupted),
            })
        });
        let writing = writer.is_ok();
        Base64Upload {
            writer,
            max_bytes: policy.max_bytes,
            text_len: 0,
            last: [0; 2],
            decoded: 0,
            invalid: None,
            rejected: false,
            writing,
        }
    }

    /// Decodes the next piece of text (of the caller's piece size, a
    /// multiple of 4, fewer for the last) and writes it; `false` when it is
    /// not valid base64.
    pub async fn piece(&mut self, text: &[u8]) -> bool {
        self.text_len += text.len() as u64;
        match text {
            [.., a, b] => self.last = [*a, *b],
            [b] => self.last = [self.last[1], *b],
            [] => {}
        }
        let decoded = match decode(text) {
            Ok(decoded) => decoded,
            Err(e) => {
                self.rejected = true;
                if self.writing {
                    self.invalid = Some(e);
                    self.writing = false;
                }
                return false;
            }
        };
        self.decoded += decoded.len() as u64;
        if self.max_bytes.is_some_and(|limit| self.decoded > limit) {
            // Over the limit: finish() reports it; nothing more goes to the disk.
            self.writing = false;
        }
        if self.writing && !decoded.is_empty() {
            if let Ok((feeder, _)) = &mut self.writer {
                self.writing = feeder.write_ahead(Bytes::from(decoded)).await;
            }
        }
        true
    }

    /// Whether every piece so far was valid base64.
    pub fn valid(&self) -> bool {
        !self.rejected
    }

    /// Checks the whole text's padding and size, then puts the file in place.
    ///
    /// # Errors
    /// [`FsError::Invalid`] for malformed base64, [`FsError::TooLarge`], the
    /// errors of creating and writing the file; the target is untouched on error.
    pub async fn finish(self) -> Result<Committed, FsError> {
        if self.text_len % 4 != 0 {
            return Err(FsError::Invalid("Invalid base64: Incorrect padding".into()));
        }
        let padding = self.last.iter().filter(|b| **b == b'=').count() as u64;
        let size = (self.text_len / 4 * 3).saturating_sub(padding);
        if let Some(limit) = self.max_bytes.filter(|limit| size > *limit) {
            return Err(FsError::TooLarge { size: Some(size), limit });
        }
        let (feeder, writer) = self.writer?;
        if let Some(invalid) = self.invalid {
            return Err(invalid);
        }
        feeder.end().await;
        drop(feeder);
        writer.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_accepts_what_python_accepts_and_names_errors() {
        assert_eq!(decode(b"aGVsbG8=").expect("valid"), b"hello");
        assert_eq!(decode(b"QR==").expect("trailing bits are ignored"), b"A");
        assert_eq!(decode(b"").expect("empty"), b"");
        let err = decode(b"a!==").expect_err("invalid").to_string();
        assert!(err.starts_with("Invalid base64: "), "{err}");
        let long: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 256) as u8).collect();
        assert_eq!(decode(&encode(&long)).expect("round trip"), long);
    }
}

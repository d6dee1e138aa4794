//! Bounded inflation of gzip-encoded upload bodies.
//!
//! A few kilobytes of gzip can stand for gigabytes (a "gzip bomb"), so the
//! body is inflated in small steps: each step feeds at most [`STEP`]
//! compressed bytes to the decoder and hands what came out downstream
//! before the next one, so memory holds at most one step's output (deflate
//! expands at most about 1032:1, so about 1 MiB) whatever the body says.
//! Downstream, the upload writes the inflated bytes to disk as they come and
//! applies its size limit (`max_bytes`) and the disk's own limits to the
//! inflated size. On top, [`Limits::max_ratio`] refuses a body whose
//! inflated size passes that many times its compressed size (once past
//! [`RATIO_FLOOR`], so small, very regular files stay fine).

use std::io::Write;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

/// Compressed bytes fed to the decoder at once.
pub const STEP: usize = 1024;
/// Inflated bytes always allowed, whatever the ratio.
pub const RATIO_FLOOR: u64 = 8 * 1024 * 1024;
/// Default of [`Limits::max_ratio`].
pub const DEFAULT_MAX_RATIO: u64 = 100;

/// What inflating a body may produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest inflated size as a multiple of the compressed size read so far
    /// (checked past [`RATIO_FLOOR`]); `None` for no limit.
    pub max_ratio: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_ratio: Some(DEFAULT_MAX_RATIO) }
    }
}

/// Why a gzip body could not be inflated.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// The body itself failed (the client went away).
    #[error("the request body failed: {0}")]
    Body(String),
    /// The bytes are not gzip.
    #[error("invalid gzip body: {0}")]
    Corrupt(std::io::Error),
    /// The body inflates past the ratio limit.
    #[error("the gzip body inflates to more than {ratio} times its compressed size")]
    Ratio {
        /// The limit.
        ratio: u64,
    },
}

impl InflateError {
    /// The inflate error behind `error`, when one is: looked for along the
    /// source chain and inside I/O errors (streams carry it as one).
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a InflateError> {
        let mut next = Some(error);
        while let Some(current) = next {
            if let Some(found) = current.downcast_ref::<InflateError>() {
                return Some(found);
            }
            let inner = current.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
            if let Some(found) = inner.and_then(|e| e.downcast_ref::<InflateError>()) {
                return Some(found);
            }
            next = current.source();
        }
        None
    }
}

struct State<S> {
    body: S,
    decoder: flate2::write::GzDecoder<Vec<u8>>,
    pending: Bytes,
    read: u64,
    inflated: u64,
    limits: Limits,
}

impl<S> State<S> {
    /// Feeds the decoder one step of `pending`; the inflated bytes, if any.
    fn step(&mut self) -> Result<Option<Bytes>, InflateError> {
        let take = self.pending.len().min(STEP);
        let piece = self.pending.split_to(take);
        self.read += piece.len() as u64;
        self.decoder.write_all(&piece).map_err(InflateError::Corrupt)?;
        self.take_output()
    }

    fn take_output(&mut self) -> Result<Option<Bytes>, InflateError> {
        let out = std::mem::take(self.decoder.get_mut());
        self.inflated += out.len() as u64;
        if let Some(ratio) = self.limits.max_ratio {
            if self.inflated > RATIO_FLOOR && self.inflated > ratio.saturating_mul(self.read) {
                return Err(InflateError::Ratio { ratio });
            }
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

/// `body`, a gzip stream, inflated step by step within `limits`.
pub fn gunzip<S, E>(body: S, limits: Limits) -> impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display,
{
    let state = State {
        body,
        decoder: flate2::write::GzDecoder::new(Vec::new()),
        pending: Bytes::new(),
        read: 0,
        inflated: 0,
        limits,
    };
    let failed = |e: InflateError| Some((Err(std::io::Error::other(e)), None));
    Box::pin(futures_util::stream::unfold(Some(state), move |state| async move {
        let mut state = state?;
        loop {
            while !state.pending.is_empty() {
                match state.step() {
                    Ok(Some(out)) => return Some((Ok(out), Some(state))),
                    Ok(None) => {}
                    Err(e) => return failed(e),
                }
            }
            match state.body.next().await {
                Some(Ok(chunk)) => state.pending = chunk,
                Some(Err(e)) => return failed(InflateError::Body(e.to_string())),
                None => {
                    if let Err(e) = state.decoder.try_finish() {
                        return failed(InflateError::Corrupt(e));
                    }
                    return match state.take_output() {
                        Ok(Some(rest)) => Some((Ok(rest), None)),
                        Ok(None) => None,
                        Err(e) => failed(e),
                    };
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(data).expect("compress");
        encoder.finish().expect("finish")
    }

    async fn inflate(body: Vec<u8>, limits: Limits) -> (Vec<usize>, Result<Vec<u8>, String>) {
        let chunks = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(body))]);
        let mut stream = gunzip(chunks, limits);
        let (mut sizes, mut out) = (Vec::new(), Vec::new());
        while let Some(item) = stream.next().await {
            match item {
                Ok(bytes) => {
                    sizes.push(bytes.len());
                    out.extend_from_slice(&bytes);
                }
                Err(e) => {
                    let found = InflateError::find(&e).map(ToString::to_string);
                    return (sizes, Err(found.unwrap_or_else(|| format!("not an inflate error: {e}"))));
                }
            }
        }
        (sizes, Ok(out))
    }

    #[tokio::test]
    async fn output_comes_in_bounded_steps_and_round_trips() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (sizes, out) = inflate(gzip(&data), Limits { max_ratio: None }).await;
        assert_eq!(out.expect("inflates"), data);
        assert!(sizes.iter().all(|&n| n <= STEP * 1100), "one step's output at most: {:?}", sizes.iter().max());
    }

    #[tokio::test]
    async fn a_bomb_is_refused_past_the_ratio_and_never_held_whole() {
        let bomb = gzip(&vec![0u8; 64 * 1024 * 1024]);
        let (sizes, out) = inflate(bomb.clone(), Limits { max_ratio: Some(100) }).await;
        assert_eq!(out, Err("the gzip body inflates to more than 100 times its compressed size".into()));
        let inflated: usize = sizes.iter().sum();
        assert!(inflated as u64 <= RATIO_FLOOR + 2 * 1024 * 1024, "stopped soon after the floor: {inflated}");
        let (_, out) = inflate(bomb, Limits { max_ratio: None }).await;
        assert_eq!(out.map(|o| o.len()), Ok(64 * 1024 * 1024), "no ratio: the size limits decide");
    }

    #[tokio::test]
    async fn corrupt_or_truncated_bodies_are_named() {
        let (_, out) = inflate(b"not gzip at all".to_vec(), Limits::default()).await;
        assert!(out.expect_err("corrupt").starts_with("invalid gzip body"));
        let mut cut = gzip(b"hello world");
        cut.truncate(cut.len() - 4);
        let (_, out) = inflate(cut, Limits::default()).await;
        assert!(out.expect_err("truncated").starts_with("invalid gzip body"));
    }
}

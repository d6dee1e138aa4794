//! Pacing of server streams: keepalive messages after each quiet interval
//! (`Keepalive-Ping-Interval`) and the call's deadline (`Connect-Timeout-Ms`).

use futures_util::{Stream, StreamExt};

use super::connect::{deadline_exceeded, CallOptions, ConnectError, StreamItem};

/// What a stream's source yields to [`paced`].
#[derive(Debug)]
pub enum Paced<T> {
    /// A message to send.
    Message(T),
    /// The last message: send it, then end the stream.
    Last(T),
    /// End the stream with this error.
    Fail(ConnectError),
}

/// Paces a stream: `keepalive()` after each quiet `options.keepalive`, and
/// `deadline_exceeded` once `options.timeout` has passed since `started`
/// (also in place of a message that arrives after it). The stream ends
/// after a [`Paced::Last`] or [`Paced::Fail`], or when `source` ends.
pub fn paced<T, S>(
    source: S,
    options: CallOptions,
    started: tokio::time::Instant,
    keepalive: fn() -> T,
) -> impl Stream<Item = StreamItem<T>> + Send + 'static
where
    T: Send + 'static,
    S: Stream<Item = Paced<T>> + Send + 'static,
{
    let deadline = options.timeout.map(|t| started + t);
    let state = (Box::pin(source), false);
    futures_util::stream::unfold(state, move |(mut source, done)| async move {
        if done {
            return None;
        }
        let expired = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            biased;
            () = expired => return Some((Err(deadline_exceeded()), (source, true))),
            next = source.next() => next,
            () = tokio::time::sleep(options.keepalive) => return Some((Ok(keepalive()), (source, false))),
        };
        if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return Some((Err(deadline_exceeded()), (source, true)));
        }
        match next {
            Some(Paced::Message(message)) => Some((Ok(message), (source, false))),
            Some(Paced::Last(message)) => Some((Ok(message), (source, true))),
            Some(Paced::Fail(error)) => Some((Err(error), (source, true))),
            None => None,
        }
    })
}

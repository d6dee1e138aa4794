//! Files: the domain behind the `file_ops` endpoints. No HTTP here.
//!
//! Every operation starts from a path the policy's [`PathGuard`](crate::policy::PathGuard) resolved
//! and authorised, then touches the file system only through descriptors
//! opened beneath the allowed root without following symlinks
//! ([`safe`]), so a symlink swapped in between the check and the use cannot
//! lead outside. Blocking work runs on the blocking pool; the async
//! functions here never block the runtime.
//!
//! - [`safe`]: race-safe opening (`openat2` with `RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS`, or a component-by-component `O_NOFOLLOW` walk),
//!   re-verified through `/proc/self/fd`.
//! - [`meta`]: stat results as the wire shows them (ISO 8601 times, octal
//!   permissions, ETags).
//! - [`walk`]: a bounded, descriptor-based directory walk shared by list,
//!   search, archive and the tree checks.
//! - [`list`], [`ops`], [`search`]: listing and stat; mkdir, delete, move;
//!   name and content search.
//! - [`write`](mod@write): atomic writes (unnamed temp file, optional sync, link or rename into
//!   place) and the upload rules a grant sets ([`WritePolicy`]); [`upload`]: streamed and
//!   resumable uploads ([`Files`]) and the blocking writer a body feeds;
//!   [`b64`]: base64 of the JSON transfers, SIMD, and the JSON upload's use
//!   case: resolve, open, decode as the text arrives, put in place.
//! - [`inflate`]: gzip upload bodies inflated in bounded steps, within a ratio.
//! - [`read`]: streamed reads, ranges, and the base64 JSON body;
//!   [`chunks`]: a file as a stream of pooled chunks, read from the page
//!   cache on the runtime when it can be.
//! - [`archive`]: tar.gz and zip archives built in a temp file.
//! - [`watch`]: inotify-driven change events; [`inotify`]: the daemon's one
//!   inotify instance, shared by every watch, with bounds; [`watch_runs`]:
//!   `files_watch` streams a client resumes by event id.

pub mod archive;
pub mod b64;
pub mod chunks;
mod error;
pub mod inflate;
pub mod inotify;
pub mod list;
pub mod meta;
pub mod ops;
pub mod read;
pub mod safe;
pub mod search;
pub mod text;
pub mod upload;
pub mod walk;
pub mod watch;
pub mod watch_runs;
pub mod write;

use std::path::Path;

pub use self::error::FsError;
pub use self::upload::{Files, Progress};
pub use self::write::WritePolicy;

/// Prefix of the temp files an atomic write may briefly name in the target
/// directory; they are hidden from list, search, archive and watch.
pub const TEMP_PREFIX: &str = ".abx-upload-";

/// Whether `name` is one of this server's temp files.
pub fn is_temp_name(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// Runs blocking file-system work on the blocking pool: [`crate::blocking::run`]
/// with the error type fixed, so a closure's `?` needs no annotation.
///
/// # Errors
/// The work's own error, or an internal error if the task panicked.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, FsError> {
    crate::blocking::run(work).await
}

/// The final component of `path` as text (empty for `/`).
pub fn file_name(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    // The bytes after the last `/` where they are a name (the usual case),
    // without parsing the path into components.
    let bytes = path.as_os_str().as_bytes();
    let name = match bytes.iter().rposition(|&b| b == b'/') {
        Some(slash) if !matches!(&bytes[slash + 1..], b"" | b"." | b"..") => {
            Some(std::ffi::OsStr::from_bytes(&bytes[slash + 1..]))
        }
        _ => path.file_name(),
    };
    name.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

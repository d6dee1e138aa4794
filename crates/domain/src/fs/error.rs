//! `FsError`: why a file operation failed, each variant a stable wire code.

use std::io;
use std::path::{Path, PathBuf};

use abx_wire::api::Fault;

use crate::policy::Denial;

/// A file operation's failure. Each variant is a row of the error table
/// ([`FsError::fault`]), which every port renders.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The policy refused the path (outside the roots, denied, read-only, symlink).
    #[error(transparent)]
    Denied(#[from] Denial),
    /// The path does not exist (or is not the kind the operation needs).
    #[error("{0}")]
    NotFound(String),
    /// An upload would replace a file and overwriting is off.
    #[error("File already exists")]
    Exists,
    /// A directory is in the way of a file operation.
    #[error("Is a directory: {}", .0.display())]
    IsADirectory(PathBuf),
    /// A file is in the way of a directory operation.
    #[error("Not a directory: {}", .0.display())]
    NotADirectory(PathBuf),
    /// A request value is malformed.
    #[error("{0}")]
    Invalid(String),
    /// A file or archive is larger than the `max_bytes` limit.
    #[error("{}", match .size { Some(size) => format!("File size {size} exceeds limit {limit}"), None => format!("File exceeds limit {limit}") })]
    TooLarge {
        /// Size seen, when known.
        size: Option<u64>,
        /// The limit in bytes.
        limit: u64,
    },
    /// An archive grew past the `max_bytes` limit.
    #[error("Archive exceeds limit {limit}")]
    ArchiveTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// A compressed body inflates past the ratio limit; nothing was written.
    #[error("The gzip body inflates to more than {ratio} times its compressed size; nothing was written")]
    Inflated {
        /// The limit.
        ratio: u64,
    },
    /// A bound on watches is reached (or the system's inotify resources are).
    #[error("{0}")]
    TooManyWatches(String),
    /// The disk (or the quota) is full; nothing was written.
    #[error("No space left on the device while writing {}; nothing was written", .0.display())]
    NoSpace(PathBuf),
    /// No resumable upload is in progress for this path.
    #[error("No upload in progress for {}", .0.display())]
    UploadNotFound(PathBuf),
    /// A resumable upload continued from the wrong offset.
    #[error("Upload offset mismatch: {received} bytes have been received, not {requested}")]
    OffsetMismatch {
        /// Bytes the server holds.
        received: u64,
        /// Offset the client sent.
        requested: u64,
    },
    /// Another request is writing to the same resumable upload.
    #[error("Another request is writing this upload; retry when it ends")]
    UploadBusy,
    /// The request body ended before its declared length (the client went away).
    #[error("The upload was interrupted before its end; nothing was written")]
    Interrupted,
    /// A range the file cannot satisfy.
    #[error("Range not satisfiable (file size {size})")]
    RangeNotSatisfiable {
        /// The file's size.
        size: u64,
    },
    /// An unexpected I/O error; the details go to the log, not the client.
    #[error("{context}: {source}")]
    Internal {
        /// What was being done.
        context: String,
        /// The cause.
        source: io::Error,
    },
}

impl FsError {
    /// The error's row of the error table; every port renders it from there.
    pub fn fault(&self) -> Fault {
        match self {
            FsError::Denied(denial) => denial.fault(),
            FsError::NotFound(_) => Fault::FileNotFound,
            FsError::Exists => Fault::FileExists,
            FsError::IsADirectory(_) => Fault::IsADirectory,
            FsError::NotADirectory(_) => Fault::NotADirectory,
            FsError::Invalid(_) => Fault::BadRequest,
            FsError::TooLarge { .. } | FsError::ArchiveTooLarge { .. } | FsError::Inflated { .. } => {
                Fault::PayloadTooLarge
            }
            FsError::TooManyWatches(_) => Fault::WatchLimit,
            FsError::NoSpace(_) => Fault::InsufficientStorage,
            FsError::UploadNotFound(_) => Fault::UploadNotFound,
            FsError::OffsetMismatch { .. } => Fault::OffsetMismatch,
            FsError::UploadBusy => Fault::UploadBusy,
            FsError::Interrupted => Fault::UploadInterrupted,
            FsError::RangeNotSatisfiable { .. } => Fault::RangeNotSatisfiable,
            FsError::Internal { .. } => Fault::Internal,
        }
    }

    /// The limit in bytes a size refusal reports (the body's `limit`).
    pub fn limit(&self) -> Option<u64> {
        match self {
            FsError::TooLarge { limit, .. } | FsError::ArchiveTooLarge { limit } => Some(*limit),
            FsError::Denied(Denial::PayloadTooLarge { limit, .. }) => Some(*limit),
            _ => None,
        }
    }
}

/// A blocking file-system task that panicked or was cancelled.
impl From<tokio::task::JoinError> for FsError {
    fn from(e: tokio::task::JoinError) -> Self {
        FsError::internal("a file-system task failed", io::Error::other(e.to_string()))
    }
}

impl FsError {
    /// What a failed request body means for an upload: a refused or corrupt
    /// compressed body says so; anything else is a body that ended early.
    pub fn from_body(error: &(dyn std::error::Error + 'static)) -> Self {
        use super::inflate::InflateError;
        match InflateError::find(error) {
            Some(InflateError::Ratio { ratio }) => FsError::Inflated { ratio: *ratio },
            Some(corrupt @ InflateError::Corrupt(_)) => FsError::Invalid(corrupt.to_string()),
            Some(InflateError::Body(_)) | None => FsError::Interrupted,
        }
    }

    /// An unexpected error while doing `context`.
    pub fn internal(context: impl Into<String>, source: io::Error) -> Self {
        FsError::Internal { context: context.into(), source }
    }

    /// Maps an I/O error on `path` to the variant a caller can act on.
    pub fn io(path: &Path, err: io::Error) -> Self {
        match err.raw_os_error().map(nix::errno::Errno::from_raw) {
            Some(nix::errno::Errno::ENOSPC | nix::errno::Errno::EDQUOT | nix::errno::Errno::EFBIG) => {
                FsError::NoSpace(path.to_path_buf())
            }
            Some(nix::errno::Errno::ENOENT) => FsError::NotFound(format!("Path not found: {}", path.display())),
            Some(nix::errno::Errno::EISDIR) => FsError::IsADirectory(path.to_path_buf()),
            Some(nix::errno::Errno::ENOTDIR) => FsError::NotADirectory(path.to_path_buf()),
            Some(nix::errno::Errno::EEXIST | nix::errno::Errno::ENOTEMPTY) => FsError::Exists,
            Some(nix::errno::Errno::ELOOP) => FsError::Denied(Denial::SymlinkDenied { field: String::new() }),
            Some(nix::errno::Errno::EXDEV) => FsError::Denied(Denial::PathNotAllowed { field: String::new() }),
            Some(nix::errno::Errno::ENAMETOOLONG) => {
                FsError::Denied(Denial::InvalidPath { field: String::new(), reason: "Path too long" })
            }
            Some(nix::errno::Errno::EACCES | nix::errno::Errno::EPERM | nix::errno::Errno::EROFS) => {
                FsError::Denied(Denial::new(Fault::PermissionDenied, format!("Permission denied: {}", path.display())))
            }
            _ => FsError::internal(format!("I/O error on {}", path.display()), err),
        }
    }

    /// [`FsError::io`] for a nix errno.
    pub fn errno(path: &Path, errno: nix::errno::Errno) -> Self {
        FsError::io(path, io::Error::from(errno))
    }
}

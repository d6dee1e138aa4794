//! User metadata of files, as envd keeps it: extended attributes in the
//! `user.e2b.` namespace, set from an upload's `X-Metadata-<key>` headers
//! and reported (prefix stripped) on every `EntryInfo`.
//!
//! An upload replaces the whole set: the new file is a new inode (writes are
//! atomic), so keys of an earlier upload never linger. The attributes are
//! set on the unnamed new file before it is put in place. A file system
//! without user attributes keeps no metadata (as envd: the upload succeeds
//! and the answer reports none); there is no sidecar. Attributes written by
//! other tools under `user.e2b.` show too; values that are not UTF-8 are
//! left out.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::EnvdError;
use crate::fs::safe::Resolved;

/// The attribute namespace of envd's metadata.
pub const PREFIX: &str = "user.e2b.";
/// The request-header prefix of metadata on an upload.
pub const HEADER_PREFIX: &str = "x-metadata-";
/// Longest key (the kernel's 255-byte attribute name, less the prefix).
pub const MAX_KEY: usize = 255 - PREFIX.len();
/// Most bytes of names and values on one file (an ext4 inode's attribute block).
pub const MAX_TOTAL: usize = 4096;
/// Largest attribute list read back (the kernel's `XATTR_LIST_MAX`).
const MAX_LIST: usize = 65_536;

/// The metadata of an upload from its headers (`(name, value)`, names in
/// any case): each `X-Metadata-<key>` header, the key lowercased; the
/// first of repeated headers wins; an empty key is ignored (as envd).
///
/// # Errors
/// [`EnvdError::Invalid`] for a key or value that is not printable
/// US-ASCII, a key over [`MAX_KEY`] bytes, or more than [`MAX_TOTAL`] in all.
pub fn from_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<BTreeMap<String, String>, EnvdError> {
    let mut metadata = BTreeMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let Some(key) = lower.strip_prefix(HEADER_PREFIX).filter(|k| !k.is_empty()) else { continue };
        if metadata.contains_key(key) {
            continue;
        }
        let value = printable("value", value)?;
        metadata.insert(key.to_string(), value);
    }
    validate(&metadata)?;
    Ok(metadata)
}

fn printable(what: &str, bytes: &[u8]) -> Result<String, EnvdError> {
    match bytes.iter().position(|b| !(0x20..=0x7e).contains(b)) {
        Some(at) => Err(EnvdError::Invalid(format!(
            "invalid metadata: the {what} has a byte 0x{:02x} at offset {at} that is not printable US-ASCII",
            bytes[at]
        ))),
        None => Ok(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// Checks a metadata set against envd's bounds.
///
/// # Errors
/// As [`from_headers`].
pub fn validate(metadata: &BTreeMap<String, String>) -> Result<(), EnvdError> {
    let mut total = 0;
    for (key, value) in metadata {
        printable("key", key.as_bytes())?;
        printable("value", value.as_bytes())?;
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(EnvdError::Invalid(format!("invalid metadata: a key must have 1 to {MAX_KEY} bytes")));
        }
        total += PREFIX.len() + key.len() + value.len();
    }
    if total > MAX_TOTAL {
        return Err(EnvdError::Invalid(format!("invalid metadata: {total} bytes in all, at most {MAX_TOTAL}")));
    }
    Ok(())
}

/// The attributes (`user.e2b.<key>`, value) that store `metadata`.
pub fn attributes(metadata: &BTreeMap<String, String>) -> Vec<(String, Vec<u8>)> {
    metadata.iter().map(|(key, value)| (format!("{PREFIX}{key}"), value.as_bytes().to_vec())).collect()
}

/// The metadata stored on the object `fd` refers to (an `O_PATH`
/// descriptor will do); empty when there is none, when the object is a
/// symlink (which keeps no user attributes), or when the file system keeps
/// no user attributes. Blocking.
///
/// The attributes are read through the descriptor's `/proc/self/fd` link,
/// which names the opened object itself: a path swapped after the policy's
/// check cannot make this read another file's attributes (`fgetxattr` does
/// not take `O_PATH` descriptors, and `getxattrat` is too new to rely on).
/// Without `/proc`, no metadata is reported.
pub fn read(fd: BorrowedFd<'_>) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::new();
    match rustix::fs::fstat(fd) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Symlink => {}
        _ => return metadata,
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let mut small = [0u8; 1024];
    let names: Vec<u8> = match rustix::fs::listxattr(link.as_str(), &mut small[..]) {
        Ok(0) => return metadata,
        Ok(len) => small[..len].to_vec(),
        Err(rustix::io::Errno::RANGE) => {
            let mut large = vec![0u8; MAX_LIST];
            match rustix::fs::listxattr(link.as_str(), &mut large[..]) {
                Ok(len) => {
                    large.truncate(len);
                    large
                }
                Err(_) => return metadata,
            }
        }
        Err(_) => return metadata,
    };
    for name in names.split(|b| *b == 0).filter(|n| n.starts_with(PREFIX.as_bytes())) {
        let Ok(key) = std::str::from_utf8(&name[PREFIX.len()..]) else { continue };
        let mut value = vec![0u8; MAX_TOTAL];
        let Ok(len) = rustix::fs::getxattr(link.as_str(), name, &mut value[..]) else { continue };
        value.truncate(len);
        if let (false, Ok(value)) = (key.is_empty(), String::from_utf8(value)) {
            metadata.insert(key.to_string(), value);
        }
    }
    metadata
}

/// The metadata of `name` in the directory `dir` (not following a symlink);
/// empty when it cannot be opened. Blocking.
pub fn read_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> BTreeMap<String, String> {
    let flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC;
    match nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => read(fd.as_fd()),
        Err(_) => BTreeMap::new(),
    }
}

/// The metadata of `target`, opened beneath its root without following a
/// symlink; empty when it cannot be opened. Blocking.
pub fn read_target(target: &Resolved) -> BTreeMap<String, String> {
    let flags = nix::fcntl::OFlag::O_PATH;
    match crate::fs::safe::open_beneath(&target.root, target.relative(), flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => read(fd.as_fd()),
        Err(_) => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_become_lowercased_keys_and_bad_ones_are_refused() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("X-Metadata-Author", b"mish"),
            ("x-metadata-author", b"second"),
            ("X-Metadata-", b"ignored"),
            ("Content-Type", b"text/plain"),
        ];
        assert_eq!(from_headers(headers).expect("valid"), BTreeMap::from([("author".into(), "mish".into())]));
        for (name, value) in [("X-Metadata-K", &b"bad\nvalue"[..]), ("X-Metadata-K", "é".as_bytes())] {
            assert!(matches!(from_headers([(name, value)]), Err(EnvdError::Invalid(_))), "{value:?}");
        }
        let long = format!("X-Metadata-{}", "k".repeat(MAX_KEY + 1));
        assert!(from_headers([(long.as_str(), &b"v"[..])]).is_err());
        let big: BTreeMap<String, String> = (0..10).map(|i| (format!("k{i}"), "v".repeat(500))).collect();
        assert!(validate(&big).is_err(), "over the inode's budget");
    }

    #[test]
    fn attributes_under_the_namespace_are_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        let fd = std::fs::File::open(&file).expect("open");
        assert!(read(fd.as_fd()).is_empty());
        let flags = rustix::fs::XattrFlags::empty();
        if rustix::fs::fsetxattr(&fd, "user.e2b.author", b"mish", flags).is_err() {
            return; // this file system keeps no user attributes
        }
        rustix::fs::fsetxattr(&fd, "user.other", b"x", flags).expect("set");
        rustix::fs::fsetxattr(&fd, "user.e2b.bin", &[0xff, 0xfe], flags).expect("set");
        assert_eq!(read(fd.as_fd()), BTreeMap::from([("author".into(), "mish".into())]));
        let dir_fd = std::fs::File::open(dir.path()).expect("open dir");
        assert_eq!(read_at(dir_fd.as_fd(), "f".as_ref()), BTreeMap::from([("author".into(), "mish".into())]));
        std::os::unix::fs::symlink("f", dir.path().join("l")).expect("symlink");
        assert!(read_at(dir_fd.as_fd(), "l".as_ref()).is_empty(), "a symlink keeps none of its own");
    }
}

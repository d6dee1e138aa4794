//! Append-only JSON-lines files: how the agents group keeps its state under
//! `ABX_AGENTS_STATE_DIR` across restarts.
//!
//! One record is one line, written with a single `write` on a file opened
//! for appending, so a crash can only leave a torn last line, which replay
//! drops. [`rewrite`] replaces a file atomically (temporary file, `fsync`,
//! rename) to compact it. The records are small (a turn with its items, a
//! metadata change): they are written to the page cache inline, without a
//! blocking task; nothing here calls `fsync` on the hot path.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// An append-only JSON-lines file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    /// Opens (creating, mode 0600) `path` for appending.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        Ok(Journal { path: path.to_path_buf(), file })
    }

    /// Appends one record as one line.
    ///
    /// # Errors
    /// The record cannot be serialised or written.
    pub fn append<T: Serialize>(&mut self, record: &T) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Every record of `path` that parses, in order; a missing file is empty.
/// Lines that do not parse (a torn last line after a crash) are skipped.
///
/// # Errors
/// The file exists but cannot be read.
pub fn replay<T: DeserializeOwned>(path: &Path) -> io::Result<Vec<T>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut records = Vec::new();
    let mut skipped = 0usize;
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice(&line) {
            Ok(record) => records.push(record),
            Err(_) => skipped += 1,
        }
    }
    if skipped > 0 {
        tracing::warn!(path = %path.display(), skipped, "agents: journal lines that do not parse were skipped");
    }
    Ok(records)
}

/// Replaces `path` with exactly `records`, atomically.
///
/// # Errors
/// The temporary file cannot be written or renamed.
pub fn rewrite<T: Serialize>(path: &Path, records: &[T]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&tmp)?;
        let mut buf = Vec::new();
        for record in records {
            serde_json::to_writer(&mut buf, record).map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        file.write_all(&buf)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes `dir` (and its parents), mode 0700.
///
/// # Errors
/// It cannot be created.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("j.jsonl");
        let mut journal = Journal::open(&path).expect("open");
        journal.append(&serde_json::json!({"n": 1})).expect("append");
        journal.append(&serde_json::json!({"n": 2})).expect("append");
        drop(journal);
        let mut file = OpenOptions::new().append(true).open(&path).expect("reopen");
        file.write_all(b"{\"n\": 3").expect("torn");
        let back: Vec<serde_json::Value> = replay(&path).expect("replay");
        assert_eq!(back, [serde_json::json!({"n": 1}), serde_json::json!({"n": 2})]);
        rewrite(&path, &[serde_json::json!({"n": 9})]).expect("rewrite");
        let back: Vec<serde_json::Value> = replay(&path).expect("replay");
        assert_eq!(back, [serde_json::json!({"n": 9})]);
        assert!(replay::<serde_json::Value>(&dir.path().join("missing")).expect("empty").is_empty());
    }
}

//! `files_search`: file names by glob, optionally contents by regular
//! expression, bounded by depth, result count and a deadline.

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use abx_wire::api::files::{LineMatch, SearchHit, SearchResponse};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::list::visible;
use super::meta::Kind;
use super::safe::{self, dir_flags, Resolved};
use super::walk::{walk, Flow};
use super::FsError;
use crate::policy::{Op, PathGuard};

/// Longest line kept in a content match.
const MATCH_TEXT: usize = 512;
/// Matching lines reported per file.
const MATCHES_PER_FILE: usize = 20;
/// Lines are scanned in pieces of at most this many bytes.
const LINE_LIMIT: usize = 64 * 1024;

/// What to look for.
#[derive(Debug, Clone)]
pub struct Query {
    /// Glob on names (`*.rs`), as Python's `fnmatch`.
    pub name: globset::GlobMatcher,
    /// Regular expression the content must match, if any.
    pub content: Option<regex::bytes::Regex>,
    /// Deepest level searched: 1 is the directory's own files.
    pub max_depth: usize,
    /// Most results.
    pub max_results: usize,
    /// When to give up with `timed_out`.
    pub deadline: Instant,
}

impl Query {
    /// Compiles the name glob and the content expression.
    ///
    /// # Errors
    /// [`FsError::Invalid`] for a malformed glob or expression.
    pub fn compile(
        pattern: &str,
        content: Option<&str>,
        max_depth: usize,
        max_results: usize,
        deadline: Instant,
    ) -> Result<Query, FsError> {
        let name = globset::GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| FsError::Invalid(format!("Invalid 'pattern': {e}")))?
            .compile_matcher();
        let content = content
            .map(|c| regex::bytes::RegexBuilder::new(c).size_limit(1 << 20).build())
            .transpose()
            .map_err(|e| FsError::Invalid(format!("Invalid 'content' expression: {e}")))?;
        Ok(Query { name, content, max_depth, max_results, deadline })
    }
}

/// Searches the directory `target`; `raw` is the caller's spelling. Setting
/// `cancel` stops the walk (the caller went away).
///
/// # Errors
/// 404 when the directory is missing.
pub fn search(
    guard: &PathGuard,
    target: &Resolved,
    raw: &str,
    query: &Query,
    cancel: &Arc<AtomicBool>,
) -> Result<SearchResponse, FsError> {
    let dir = match safe::open(guard, target, dir_flags(), Mode::empty(), Op::Read) {
        Ok(dir) => dir,
        Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => {
            return Err(FsError::NotFound(format!("Directory not found: {raw}")))
        }
        Err(e) => return Err(e),
    };
    let mut response = SearchResponse::default();
    if query.max_results == 0 || query.max_depth == 0 {
        return Ok(response);
    }
    walk(dir, &target.path, &mut |entry| {
        if Instant::now() >= query.deadline || cancel.load(Ordering::Relaxed) {
            response.timed_out = true;
            return Flow::Stop;
        }
        if !visible(guard, entry) {
            return Flow::Skip;
        }
        if entry.stat.is_dir() {
            return if entry.depth < query.max_depth { Flow::Descend } else { Flow::Skip };
        }
        if !query.name.is_match(entry.name) {
            return Flow::Skip;
        }
        let matches = match &query.content {
            None => None,
            Some(_) if entry.stat.kind != Kind::File => return Flow::Skip,
            Some(re) => match grep(entry.dir, entry.name, re, query.deadline) {
                Some(found) if !found.is_empty() => Some(found),
                _ => return Flow::Skip,
            },
        };
        response.results.push(SearchHit {
            name: entry.name.to_string_lossy().into_owned(),
            path: entry.path.display().to_string(),
            matches,
        });
        if response.results.len() >= query.max_results {
            Flow::Stop
        } else {
            Flow::Skip
        }
    })
    .map_err(|e| FsError::errno(&target.path, e))?;
    Ok(response)
}

/// The lines of `name` in `dir` that match `re`; `None` for unreadable or binary files.
fn grep(dir: impl AsFd, name: &std::ffi::OsStr, re: &regex::bytes::Regex, deadline: Instant) -> Option<Vec<LineMatch>> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty()).ok()?;
    let mut reader = BufReader::with_capacity(64 * 1024, std::fs::File::from(fd));
    if reader.fill_buf().ok()?.iter().take(8192).any(|b| *b == 0) {
        return None;
    }
    let mut found = Vec::new();
    let mut line = Vec::with_capacity(1024);
    let mut number = 0u64;
    let mut at_line_start = true;
    loop {
        line.clear();
        let n = std::io::Read::take(&mut reader, LINE_LIMIT as u64).read_until(b'\n', &mut line).ok()?;
        if n == 0 || Instant::now() >= deadline {
            break;
        }
        if at_line_start {
            number += 1;
        }
        at_line_start = line.last() == Some(&b'\n');
        if re.is_match(&line) {
            let text = String::from_utf8_lossy(&line[..line.len().min(MATCH_TEXT)]);
            found.push(LineMatch { line: number, text: text.trim_end_matches(['\n', '\r']).to_string() });
            if found.len() >= MATCHES_PER_FILE {
                break;
            }
        }
    }
    Some(found)
}

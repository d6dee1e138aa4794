//! `GET /git/status` and `GET /git/diff`: git run in a directory the path
//! policy allowed, its output parsed into the reference's shapes.
//!
//! Status is read with `-z`, so paths with spaces or non-ASCII characters
//! come back as they are rather than C-quoted; the diff is taken without
//! colour or external diff programs and cut at 1 MiB.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use abx_wire::api::code::{GitDiff, GitDiffStats, GitFileStatus, GitStatus};
use abx_wire::api::Fault;

use super::language::find_program;
use super::oneshot::{collect, Collected};
use crate::syscalls::RunAs;

/// How long one git command may run.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest diff returned.
pub const MAX_DIFF_BYTES: u64 = 1024 * 1024;
const MAX_STATUS_BYTES: u64 = 64 * 1024 * 1024;

/// Why a git request failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git reported an error (not a repository, bad revision, ...).
    #[error("{0}")]
    Failed(String),
    /// git is not installed.
    #[error("git is not installed")]
    NotInstalled,
    /// git ran past its timeout.
    #[error("git {0} timed out")]
    TimedOut(&'static str),
    /// git could not be started.
    #[error("cannot start git")]
    Spawn(#[source] std::io::Error),
}

impl GitError {
    /// The error's row of the error table.
    pub fn fault(&self) -> Fault {
        match self {
            GitError::Failed(_) => Fault::GitFailed,
            GitError::NotInstalled => Fault::RuntimeNotFound,
            GitError::TimedOut(_) => Fault::RunTimeout,
            GitError::Spawn(_) => Fault::Internal,
        }
    }
}

async fn git(
    verb: &'static str,
    dir: &Path,
    args: &[&str],
    env: &BTreeMap<String, String>,
    limit: u64,
    run_as: Option<&RunAs>,
) -> Result<Collected, GitError> {
    let program = find_program("git", env.get("PATH").map(String::as_str)).ok_or(GitError::NotInstalled)?;
    let mut env = env.clone();
    env.insert("GIT_OPTIONAL_LOCKS".into(), "0".into());
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
    let mut argv = vec![OsString::from("-C"), dir.as_os_str().to_owned()];
    argv.extend(args.iter().map(OsString::from));
    let collected = collect(&program, &argv, dir, &env, (GIT_TIMEOUT, limit), run_as.cloned())
        .await
        .map_err(
            |e| if e.kind() == std::io::ErrorKind::NotFound { GitError::NotInstalled } else { GitError::Spawn(e) },
        )?
        .ok_or(GitError::TimedOut(verb))?;
    if collected.exit.code() != 0 {
        let message = collected.stderr.trim();
        return Err(GitError::Failed(if message.is_empty() { format!("git {verb} failed") } else { message.into() }));
    }
    Ok(collected)
}

/// Branch and changed files of the repository at `dir`, git running as
/// `run_as` when given (a repository's configuration can make git run programs).
///
/// # Errors
/// [`GitError`].
pub async fn status(dir: &Path, env: &BTreeMap<String, String>, run_as: Option<&RunAs>) -> Result<GitStatus, GitError> {
    let args = ["status", "--porcelain", "-b", "-z"];
    let collected = git("status", dir, &args, env, MAX_STATUS_BYTES, run_as).await?;
    Ok(parse_status(&collected.stdout))
}

/// The diff of the repository at `dir`: the working tree, or the index with
/// `staged`; git runs as `run_as` when given.
///
/// # Errors
/// [`GitError`].
pub async fn diff(
    dir: &Path,
    staged: bool,
    file: Option<&str>,
    env: &BTreeMap<String, String>,
    run_as: Option<&RunAs>,
) -> Result<GitDiff, GitError> {
    let mut args = vec!["diff", "--no-color", "--no-ext-diff"];
    if staged {
        args.push("--staged");
    }
    let mut stat_args = args.clone();
    stat_args.push("--shortstat");
    if let Some(file) = file {
        args.extend(["--", file]);
        stat_args.extend(["--", file]);
    }
    let collected = git("diff", dir, &args, env, MAX_DIFF_BYTES, run_as).await?;
    let stats = git("diff", dir, &stat_args, env, 64 * 1024, run_as).await?;
    let mut diff = collected.stdout;
    if collected.truncated {
        diff.push_str("\n... (truncated at 1 MiB)");
    }
    Ok(GitDiff { diff, stats: parse_shortstat(&stats.stdout) })
}

fn label(code: char) -> String {
    match code {
        'M' => "modified",
        'A' => "added",
        'D' => "deleted",
        'R' => "renamed",
        '?' => "untracked",
        'C' => "copied",
        'U' => "unmerged",
        other => return other.to_string(),
    }
    .to_string()
}

/// Parses `git status --porcelain -b -z`.
pub fn parse_status(output: &str) -> GitStatus {
    let mut branch = String::new();
    let mut files = Vec::new();
    let mut fields = output.split('\0').filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        if let Some(header) = entry.strip_prefix("## ") {
            let name = header.split("...").next().unwrap_or(header);
            let name = name.strip_prefix("No commits yet on ").or_else(|| name.strip_prefix("Initial commit on "));
            branch = name.unwrap_or_else(|| header.split("...").next().unwrap_or(header)).to_string();
            continue;
        }
        let mut chars = entry.chars();
        let (Some(x), Some(y)) = (chars.next(), chars.next()) else { continue };
        let Some(path) = entry.get(3..) else { continue };
        let path = if matches!(x, 'R' | 'C') || matches!(y, 'R' | 'C') {
            match fields.next() {
                Some(from) => format!("{from} -> {path}"),
                None => path.to_string(),
            }
        } else {
            path.to_string()
        };
        files.push(GitFileStatus { path, status: label(if x != ' ' { x } else { y }) });
    }
    GitStatus { branch, clean: files.is_empty(), files }
}

/// Parses `git diff --shortstat`.
pub fn parse_shortstat(output: &str) -> GitDiffStats {
    let mut stats = GitDiffStats::default();
    for part in output.trim().split(',') {
        let mut words = part.split_whitespace();
        let (Some(number), Some(what)) = (words.next(), words.next()) else { continue };
        let Ok(n) = number.parse::<u64>() else { continue };
        if what.starts_with("file") {
            stats.files_changed = n;
        } else if what.starts_with("insertion") {
            stats.insertions = n;
        } else if what.starts_with("deletion") {
            stats.deletions = n;
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_entries_and_branch() {
        let out = "## main...origin/main [ahead 1]\0 M a b.txt\0R  new.rs\0old.rs\0?? é.txt\0A  x\0";
        let status = parse_status(out);
        assert_eq!(status.branch, "main");
        assert!(!status.clean);
        let files: Vec<_> = status.files.iter().map(|f| (f.path.as_str(), f.status.as_str())).collect();
        assert_eq!(
            files,
            [("a b.txt", "modified"), ("old.rs -> new.rs", "renamed"), ("é.txt", "untracked"), ("x", "added")]
        );
        let fresh = parse_status("## No commits yet on trunk\0");
        assert_eq!((fresh.branch.as_str(), fresh.clean), ("trunk", true));
        assert_eq!(parse_status("## HEAD (no branch)\0").branch, "HEAD (no branch)");
    }

    #[test]
    fn shortstat_counts() {
        let stats = parse_shortstat(" 3 files changed, 10 insertions(+), 1 deletion(-)\n");
        assert_eq!(stats, GitDiffStats { files_changed: 3, insertions: 10, deletions: 1 });
        assert_eq!(parse_shortstat(" 1 file changed, 2 deletions(-)").deletions, 2);
        assert_eq!(parse_shortstat(""), GitDiffStats::default());
    }
}

//! The daemon's own paths: state, configuration and secret files that no
//! caller may read or write through any port.
//!
//! The agents state directory holds other identities' webhook secrets,
//! environment values and session journals; the configuration and policy
//! files and the token files say who may do what. In the shipped layout
//! (`HOME` is the base directory) some of them lie inside the file API's
//! root, so every compiled path rule denies them beside `/proc`, `/sys` and
//! `/dev` ([`super::paths::SYSTEM_DENY`]): no rule, preset or port lifts the
//! deny. Each is denied as written and as it resolves now, so a symlinked
//! home does not open a second way in. `check-config` warns about every one
//! that lies under a root (L10).

use std::path::{Path, PathBuf};

use super::lexical::{beneath, normalize};
use super::paths::realpath;

/// The label of the agents group's state directory, which `check-config`
/// reports only while the group is on (the deny holds either way).
pub const AGENTS_STATE: &str = "agents state directory";

/// One of the daemon's own paths, and what it is (for the warning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonPath {
    /// The path as configured, absolute.
    pub path: PathBuf,
    /// What it holds (`agents state directory`).
    pub what: &'static str,
}

impl DaemonPath {
    /// `path` (made absolute against the current directory) labelled `what`.
    pub fn new(path: impl Into<PathBuf>, what: &'static str) -> Self {
        let path = path.into();
        let path = std::path::absolute(&path).unwrap_or(path);
        DaemonPath { path: normalize(&path), what }
    }
}

/// The file a `NAME_FILE` variable names, for each of `names` that has one.
pub fn secret_files<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<DaemonPath> {
    names
        .into_iter()
        .filter_map(|name| std::env::var_os(format!("{name}{}", super::secret::FILE_SUFFIX)))
        .filter(|file| !file.is_empty())
        .map(|file| DaemonPath::new(PathBuf::from(file), "token file"))
        .collect()
}

/// Every prefix the deny list needs for `paths`: each as written and as it
/// resolves, without duplicates, never `/` itself.
pub fn deny_prefixes(paths: &[DaemonPath]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        for candidate in [p.path.clone(), realpath(&p.path)] {
            if candidate != Path::new("/") && !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// The first of `roots` that contains `path` or lies inside it.
pub fn overlapping_root<'a>(path: &Path, roots: impl IntoIterator<Item = &'a Path>) -> Option<&'a Path> {
    roots.into_iter().find(|root| beneath(path, root) || beneath(root, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_denied_as_written_and_as_resolved() {
        let dir = tempfile::tempdir().expect("tmp");
        let real = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(real.join("home")).expect("mkdir");
        std::os::unix::fs::symlink(real.join("home"), real.join("link")).expect("symlink");
        let paths = [DaemonPath::new(real.join("link/./state"), "state"), DaemonPath::new("/", "root")];
        assert_eq!(deny_prefixes(&paths), [real.join("link/state"), real.join("home/state")]);
    }

    #[test]
    fn a_root_overlaps_a_path_inside_it_or_around_it() {
        let roots = [Path::new("/srv"), Path::new("/home/user")];
        assert_eq!(overlapping_root(Path::new("/home/user/.agent-sandbox/agents"), roots), Some(roots[1]));
        assert_eq!(overlapping_root(Path::new("/home"), roots), Some(roots[1]));
        assert_eq!(overlapping_root(Path::new("/var/lib/abx"), roots), None);
    }
}

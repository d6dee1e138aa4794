//! Deny patterns of a `paths` rule, compiled once and matched with the
//! reference's (`fnmatch`) semantics:
//!
//! - no `/` in the pattern: it matches any one component (`*.pem`, `.env`);
//! - absolute: a directory prefix, globs allowed (`/home/*/.ssh`);
//! - otherwise: the tail of the path or of an ancestor (`**/.env`,
//!   `secrets/*.key`), where `*` and `?` also match `/`.
//!
//! A backslash is an ordinary character and a pattern that is not a valid
//! glob (an unclosed `[`) matches itself literally. The common shapes (a
//! literal, `*suffix`, `prefix*`, `*infix*`, alone or after `**/`) are matched
//! against components by comparing bytes; only the other patterns run globs.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use super::lexical::{beneath, normalize};

/// A component pattern whose only wildcards are `*` at its ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Simple {
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Contains(Vec<u8>),
}

impl Simple {
    /// `pattern` as a simple component pattern, if it is one.
    fn parse(pattern: &str) -> Option<Simple> {
        let inner = pattern.trim_start_matches('*').trim_end_matches('*');
        if inner.is_empty() || inner.contains(['*', '?', '[', '/']) {
            return None;
        }
        let bytes = inner.as_bytes().to_vec();
        Some(match (pattern.starts_with('*'), pattern.ends_with('*')) {
            (false, false) => Simple::Exact(bytes),
            (false, true) => Simple::Prefix(bytes),
            (true, false) => Simple::Suffix(bytes),
            (true, true) => Simple::Contains(bytes),
        })
    }

    fn matches(&self, part: &[u8]) -> bool {
        match self {
            Simple::Exact(b) => part == b.as_slice(),
            Simple::Prefix(b) => part.starts_with(b),
            Simple::Suffix(b) => part.ends_with(b),
            Simple::Contains(b) => part.windows(b.len()).any(|w| w == b.as_slice()),
        }
    }
}

/// A compiled list of deny patterns.
#[derive(Debug, Default)]
pub struct DenyList {
    /// Absolute patterns without wildcards: directory prefixes.
    prefixes: Vec<PathBuf>,
    /// Component patterns matched by comparing bytes.
    simple: Vec<Simple>,
    /// Other component patterns.
    components: Option<GlobSet>,
    /// Patterns matched against the path and each ancestor.
    paths: Option<GlobSet>,
}

impl DenyList {
    /// Compiles `patterns`, plus the directory prefixes `always` (`/proc`...).
    pub fn compile<'a>(patterns: impl IntoIterator<Item = &'a str>, always: &[&str]) -> Self {
        let mut list =
            DenyList { prefixes: always.iter().map(|p| normalize(Path::new(p))).collect(), ..DenyList::default() };
        let (mut components, mut paths) = (Vec::new(), Vec::new());
        for pattern in patterns {
            let stripped = pattern.trim_end_matches('/');
            let absolute = pattern.starts_with('/');
            // `**/x` and `x` name the same components when `x` has no `/`: a
            // tail `*/x` can only match across `/` where a component already does.
            let tail = stripped.strip_prefix("**/").unwrap_or(stripped);
            let component = if absolute {
                None
            } else if !pattern.contains('/') {
                Some(pattern)
            } else {
                (!tail.contains('/') && Simple::parse(tail).is_some()).then_some(tail)
            };
            if let Some(component) = component {
                match Simple::parse(component) {
                    Some(simple) => list.simple.push(simple),
                    None => components.extend(fnmatch_glob(component)),
                }
            } else if absolute && !pattern.contains(['*', '?', '[']) {
                list.prefixes.push(normalize(Path::new(stripped)));
            } else if absolute {
                paths.extend(fnmatch_glob(stripped));
            } else {
                paths.extend(fnmatch_glob(&format!("*/{tail}")));
                paths.extend(fnmatch_glob(tail));
            }
        }
        list.components = build(components);
        list.paths = build(paths);
        list
    }

    /// This list, also denying everything beneath each of `prefixes`
    /// (absolute, normalised).
    pub fn with_prefixes(mut self, prefixes: &[PathBuf]) -> Self {
        self.prefixes.extend(prefixes.iter().cloned());
        self
    }

    /// Whether some pattern could deny a path strictly beneath `root` while
    /// allowing `root` itself: any component or glob pattern, or a prefix
    /// inside `root`. When not, every path beneath an allowed `root` is
    /// decided alike, whatever its name.
    pub fn may_deny_beneath(&self, root: &Path) -> bool {
        !self.simple.is_empty()
            || self.components.is_some()
            || self.paths.is_some()
            || self.prefixes.iter().any(|p| p.as_os_str() != root.as_os_str() && beneath(p, root))
    }

    /// Whether `path` (absolute, normalised) or one of its ancestors is denied.
    pub fn matches(&self, path: &Path) -> bool {
        if self.prefixes.iter().any(|p| beneath(path, p)) {
            return true;
        }
        if !self.simple.is_empty() || self.components.is_some() {
            let denied = |part: &OsStr| {
                self.simple.iter().any(|s| s.matches(part.as_bytes()))
                    || self.components.as_ref().is_some_and(|set| set.is_match(part))
            };
            let mut parts = path.components().filter_map(|c| match c {
                Component::Normal(part) => Some(part),
                _ => None,
            });
            if parts.any(denied) {
                return true;
            }
        }
        self.paths
            .as_ref()
            .is_some_and(|set| path.ancestors().take_while(|a| *a != Path::new("/")).any(|a| set.is_match(a)))
    }
}

fn build(globs: Vec<Glob>) -> Option<GlobSet> {
    if globs.is_empty() {
        return None;
    }
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        builder.add(glob);
    }
    builder.build().ok()
}

/// A glob with `fnmatch` semantics; an invalid one matches itself literally.
fn fnmatch_glob(pattern: &str) -> Option<Glob> {
    let build = |p: &str| GlobBuilder::new(p).literal_separator(false).backslash_escape(false).build();
    build(pattern).or_else(|_| build(&globset::escape(pattern))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denies(patterns: &[&str], path: &str) -> bool {
        DenyList::compile(patterns.iter().copied(), &[]).matches(Path::new(path))
    }

    #[test]
    fn only_patterns_that_can_tell_paths_beneath_a_root_apart_make_it_non_uniform() {
        let system = ["/proc", "/sys", "/dev"];
        let list = |patterns: &[&str]| DenyList::compile(patterns.iter().copied(), &system);
        let work = Path::new("/work");
        assert!(!list(&[]).may_deny_beneath(work));
        assert!(!list(&["/other/secret", "/work"]).may_deny_beneath(work), "outside it, or the root itself");
        assert!(list(&[]).may_deny_beneath(Path::new("/")), "/proc lies beneath /");
        assert!(list(&["/work/secret"]).may_deny_beneath(work));
        assert!(list(&["*.pem"]).may_deny_beneath(work));
        assert!(list(&["**/.ssh"]).may_deny_beneath(work));
        assert!(list(&["/w*/x"]).may_deny_beneath(work));
    }

    #[test]
    fn simple_shapes_are_recognised() {
        assert_eq!(Simple::parse(".env"), Some(Simple::Exact(b".env".to_vec())));
        assert_eq!(Simple::parse("*.pem"), Some(Simple::Suffix(b".pem".to_vec())));
        assert_eq!(Simple::parse("id_rsa*"), Some(Simple::Prefix(b"id_rsa".to_vec())));
        assert_eq!(Simple::parse("*secret*"), Some(Simple::Contains(b"secret".to_vec())));
        for other in ["*", "a*b", "a?", "[ab]", "a/b", "**"] {
            assert_eq!(Simple::parse(other), None, "{other}");
        }
    }

    #[test]
    fn component_patterns_match_one_component() {
        assert!(denies(&["*.pem"], "/srv/keys/a.pem"));
        assert!(denies(&["*.pem"], "/srv/a.pem/inner"), "a denied directory denies what is inside");
        assert!(!denies(&["*.pem"], "/srv/a.pem.bak"));
        assert!(denies(&["a*b"], "/x/axxb/y"));
        assert!(!denies(&["a*b"], "/a/b"), "a component pattern never spans '/'");
        assert!(denies(&["[x"], "/d/[x"), "an invalid glob matches itself");
        assert!(denies(&["a?c"], "/abc"));
    }

    #[test]
    fn tail_patterns_span_separators_like_fnmatch() {
        for pattern in ["**/.ssh", ".ssh/", "**/id_rsa*", "**/*.pem", "**/*env*"] {
            let fast = DenyList::compile([pattern], &[]);
            assert!(!fast.simple.is_empty() && fast.paths.is_none(), "{pattern} is matched by components");
        }
        assert!(denies(&["**/.ssh"], "/home/u/.ssh/id"));
        assert!(denies(&["**/id_rsa*"], "/home/id_rsa_backup/key"));
        assert!(denies(&["**/secrets/*.key"], "/app/secrets/x.key"));
        assert!(denies(&["**/secrets/*.key"], "/app/secrets/deep/x.key"), "`*` spans '/'");
        assert!(!denies(&["**/secrets/*.key"], "/app/secrets/x.txt"));
        assert!(denies(&["**/a*b"], "/a/b"), "a tail's `*` spans '/', as the reference's");
        assert!(denies(&["logs/a\\b"], "/var/logs/a\\b"), "a backslash is an ordinary character");
    }

    #[test]
    fn absolute_patterns_are_directory_prefixes() {
        assert!(denies(&["/srv/private/"], "/srv/private/x"));
        assert!(denies(&["/srv/private"], "/srv/private"));
        assert!(!denies(&["/srv/private"], "/srv/privatex"));
        assert!(denies(&["/home/*/.ssh"], "/home/u/.ssh/id"));
        assert!(!denies(&["/home/*/.ssh"], "/home/u/ssh"));
        assert!(DenyList::compile([], &["/proc"]).matches(Path::new("/proc/self/environ")));
    }
}

//! Path scoping: resolve a caller's path and check it against a rule's
//! `paths` section (allowed roots, deny patterns, read-only, symlinks).
//!
//! [`PathGuard::resolve`] returns the fully resolved path that the operation
//! must then use, so a path is resolved once. Checks run before any existence
//! check, so a denial never tells whether a path exists. Domain code that
//! opens files narrows the remaining check-to-use window itself (for example
//! with `O_NOFOLLOW` and a re-check of the opened descriptor).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::deny::DenyList;
pub use super::lexical::{below, beneath, is_normal, normalize};
use super::rules::{EffectiveRule, SymlinkMode};
use super::Denial;

/// Longest path accepted, in bytes.
pub const MAX_PATH_LENGTH: usize = 4096;

/// Directories no rule can reach, whatever its roots; the daemon's own
/// paths ([`super::daemon`]) are denied beside them.
pub const SYSTEM_DENY: [&str; 3] = ["/proc", "/sys", "/dev"];

/// How a path is about to be used; `read_only` refuses writes and deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Reading.
    Read,
    /// Creating or changing.
    Write,
    /// Removing.
    Delete,
    /// Running a program in it.
    Exec,
}

impl Op {
    /// Parses `read`, `write`, `delete` or `exec`.
    pub fn from_name(name: &str) -> Option<Op> {
        match name {
            "read" => Some(Op::Read),
            "write" => Some(Op::Write),
            "delete" => Some(Op::Delete),
            "exec" => Some(Op::Exec),
            _ => None,
        }
    }

    /// The operation class an endpoint performs on its paths by default.
    pub fn default_for(endpoint: &str) -> Op {
        match endpoint {
            "files_mkdir" | "files_upload_stream" | "files_content_write" | "files_upload_cancel" => Op::Write,
            "files_delete" | "files_move" => Op::Delete,
            "shell" | "shell_stream" | "process_start" => Op::Exec,
            _ => Op::Read,
        }
    }
}

/// The compiled `paths` section of one rule: roots, deny matchers and modes.
///
/// Built once per endpoint when the policy is compiled. A root's real path is
/// resolved once, when it first exists: re-pointing a root symlink later does
/// not move the boundary, and a root created after the server started is
/// found when it appears.
#[derive(Debug)]
pub struct PathRules {
    /// Lexically normalised roots; the first resolves relative paths.
    roots: Vec<Root>,
    /// Every root's `(lexical, real)`, once all of them exist: what each
    /// guard shares rather than copies.
    resolved: OnceLock<Arc<[(PathBuf, PathBuf)]>>,
    deny: DenyList,
    read_only: bool,
    symlinks: SymlinkMode,
}

impl PathRules {
    /// Compiles `rule`'s path section, with `base_dir` as the root when the rule allows none.
    pub fn compile(base_dir: &Path, rule: &EffectiveRule) -> Self {
        PathRules::compile_with(base_dir, rule, &[])
    }

    /// [`PathRules::compile`], with `daemon` (the daemon's own paths, see
    /// [`super::daemon::deny_prefixes`]) denied beside [`SYSTEM_DENY`]: no
    /// rule can lift either.
    pub fn compile_with(base_dir: &Path, rule: &EffectiveRule, daemon: &[PathBuf]) -> Self {
        let raw_roots: Vec<&Path> =
            if rule.allow.is_empty() { vec![base_dir] } else { rule.allow.iter().map(PathBuf::as_path).collect() };
        PathRules {
            roots: raw_roots.into_iter().map(|r| Root { lexical: normalize(r), real: OnceLock::new() }).collect(),
            resolved: OnceLock::new(),
            deny: DenyList::compile(rule.deny.iter().map(String::as_str), &SYSTEM_DENY).with_prefixes(daemon),
            read_only: rule.read_only,
            symlinks: rule.symlinks,
        }
    }
}

/// An allowed root directory.
#[derive(Debug)]
struct Root {
    lexical: PathBuf,
    /// Its real path, once it exists.
    real: OnceLock<PathBuf>,
}

impl Root {
    /// `(lexical, real)`; resolving only until the root exists.
    fn resolve(&self) -> (PathBuf, PathBuf) {
        let real = match self.real.get() {
            Some(real) => real.clone(),
            None => {
                let (real, exists) = resolve_from(PathBuf::from("/"), &self.lexical);
                if exists {
                    let _ = self.real.set(real.clone());
                }
                real
            }
        };
        (self.lexical.clone(), real)
    }
}

/// Most paths an audit line lists, and their longest length in bytes.
const MAX_AUDITED_PATHS: usize = 8;
const MAX_AUDITED_PATH_LEN: usize = 512;

/// The paths one request's guards authorised, for its audit line (at most
/// 8, each cut to 512 bytes).
#[derive(Debug, Default)]
pub struct Touched(Mutex<Vec<String>>);

impl Touched {
    /// Records `path`, unless it is the one recorded last.
    pub fn record(&self, path: &Path) {
        let mut touched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = path.to_string_lossy();
        if touched.len() >= MAX_AUDITED_PATHS || touched.last().is_some_and(|last| *last == text) {
            return;
        }
        if text.len() > MAX_AUDITED_PATH_LEN {
            let mut end = MAX_AUDITED_PATH_LEN;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.to_mut().truncate(end);
        }
        touched.push(text.into_owned());
    }

    /// The paths recorded so far.
    pub fn list(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// The path rules of one endpoint, ready to check paths.
#[derive(Debug, Clone)]
pub struct PathGuard {
    /// `(lexical root, resolved root)` pairs; the first resolves relative paths.
    roots: Arc<[(PathBuf, PathBuf)]>,
    rules: Arc<PathRules>,
    /// Where the paths this guard authorises are recorded, if anywhere.
    touched: Option<Arc<Touched>>,
}

impl PathGuard {
    /// The guard for `rule`, with `base_dir` as the root when the rule allows none.
    pub fn new(base_dir: &Path, rule: &EffectiveRule) -> Self {
        PathGuard::from_rules(Arc::new(PathRules::compile(base_dir, rule)))
    }

    /// A guard confining paths to `root` alone, with no symlink on the way
    /// (`symlinks: never`) and the system trees denied: for paths a program
    /// reported inside a workspace, which no policy rule governs.
    pub fn confined(root: &Path) -> Self {
        let rules = PathRules {
            roots: vec![Root { lexical: normalize(root), real: OnceLock::new() }],
            resolved: OnceLock::new(),
            deny: DenyList::compile(std::iter::empty(), &SYSTEM_DENY),
            read_only: false,
            symlinks: SymlinkMode::Never,
        };
        PathGuard::from_rules(Arc::new(rules))
    }

    /// A guard from compiled rules.
    pub fn from_rules(rules: Arc<PathRules>) -> Self {
        let roots = match rules.resolved.get() {
            Some(roots) => Arc::clone(roots),
            None => {
                let roots: Arc<[(PathBuf, PathBuf)]> = rules.roots.iter().map(Root::resolve).collect();
                if rules.roots.iter().all(|r| r.real.get().is_some()) {
                    let _ = rules.resolved.set(Arc::clone(&roots));
                }
                roots
            }
        };
        PathGuard { roots, rules, touched: None }
    }

    /// This guard, recording every path it authorises into `touched` (a
    /// request's grant does, for its audit line).
    pub fn recording(mut self, touched: Arc<Touched>) -> Self {
        self.touched = Some(touched);
        self
    }

    /// Records `path` as authorised, where this guard records: for a path
    /// whose authorisation the caller completed itself (the premise of
    /// [`PathGuard::plain`], proven by opening it).
    pub fn record(&self, path: &Path) {
        if let Some(touched) = &self.touched {
            touched.record(path);
        }
    }

    /// The directory relative paths resolve against.
    pub fn primary_root(&self) -> &Path {
        self.roots.first().map_or(Path::new("/"), |(_, real)| real.as_path())
    }

    /// The allowed roots, resolved.
    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.roots.iter().map(|(_, real)| real.as_path())
    }

    /// The resolved root that contains `resolved`, the one [`PathGuard::resolve`] authorised it under.
    pub fn root_of(&self, resolved: &Path) -> Option<&Path> {
        self.roots.iter().map(|(_, real)| real.as_path()).find(|real| beneath(resolved, real))
    }

    /// Whether `resolved` is an allowed root itself (which no operation may remove or move).
    pub fn is_root(&self, resolved: &Path) -> bool {
        self.roots.iter().any(|(_, real)| real == resolved)
    }

    /// Resolves `raw` and authorises `op` on it; `field` labels messages (`cwd`).
    ///
    /// # Errors
    /// `invalid_path` for malformed input, `path_not_allowed`, `symlink_denied`,
    /// `path_denied` or `read_only` when the rule refuses it.
    pub fn resolve(&self, raw: &str, op: Op, field: &str) -> Result<PathBuf, Denial> {
        let label = if field.is_empty() { String::new() } else { format!("{field}: ") };
        if raw.is_empty() {
            return Err(Denial::InvalidPath { field: label, reason: "Missing or invalid path" });
        }
        check_spelling(raw, field)?;
        let lexical = normalize(&self.primary_root().join(raw));
        // Below a root, only the components under it need resolving: the root was resolved just now.
        let resolved = match self.roots.iter().find_map(|(_, real)| Some((real, lexical.strip_prefix(real).ok()?))) {
            Some((real, rest)) => resolve_from(real.clone(), rest).0,
            None => realpath(&lexical),
        };
        self.authorise(&lexical, &resolved, op, &label)?;
        self.record(&resolved);
        Ok(resolved)
    }

    /// The lexical path of `raw` and its root, when `raw` is well spelled,
    /// lies below a root and is authorised for `op` *if it holds no
    /// symlink*: what [`PathGuard::resolve`] would return for it then, with
    /// no file system access. The caller must prove that premise before
    /// using the path, by opening it beneath the root without following
    /// any symlink (`fs::safe::open_plain`), and then [`PathGuard::record`]s
    /// it; on any doubt it calls [`PathGuard::resolve`] instead.
    pub fn plain(&self, raw: &str, op: Op) -> Option<(PathBuf, &Path)> {
        if raw.is_empty() || check_spelling(raw, "").is_err() {
            return None;
        }
        let lexical = normalize(&self.primary_root().join(raw));
        let root = self.root_of(&lexical)?;
        self.authorise(&lexical, &lexical, op, "").ok()?;
        Some((lexical, root))
    }

    /// Whether every path beneath `root` (an allowed, resolved root) is
    /// authorised exactly as `root` is: no deny pattern can tell them apart.
    pub fn uniform_beneath(&self, root: &Path) -> bool {
        !self.rules.deny.may_deny_beneath(root)
    }

    /// Authorises an already resolved path (for example one read back from an open descriptor).
    ///
    /// # Errors
    /// As [`PathGuard::resolve`].
    pub fn check_resolved(&self, resolved: &Path, op: Op) -> Result<(), Denial> {
        self.authorise(resolved, resolved, op, "")?;
        self.record(resolved);
        Ok(())
    }

    /// Whether `resolved` lies inside an allowed root and outside every deny
    /// pattern (a filter, say of a listing's entries: nothing is recorded).
    pub fn permits_resolved(&self, resolved: &Path) -> bool {
        self.authorise(resolved, resolved, Op::Read, "").is_ok()
    }

    fn authorise(&self, lexical: &Path, resolved: &Path, op: Op, label: &str) -> Result<(), Denial> {
        let Some(root) = self.roots.iter().find(|(_, real)| beneath(resolved, real)) else {
            return Err(Denial::PathNotAllowed { field: label.to_string() });
        };
        if self.rules.symlinks == SymlinkMode::Never && !lexically_inside(lexical, root, resolved) {
            return Err(Denial::SymlinkDenied { field: label.to_string() });
        }
        if self.denied(resolved) || (lexical != resolved && self.denied(lexical)) {
            return Err(Denial::PathDenied { field: label.to_string() });
        }
        if self.rules.read_only && matches!(op, Op::Write | Op::Delete) {
            return Err(Denial::ReadOnly { field: label.to_string() });
        }
        Ok(())
    }

    fn denied(&self, path: &Path) -> bool {
        self.rules.deny.matches(path)
    }
}

/// Refuses a path no file system can name: one with a NUL byte, or longer
/// than [`MAX_PATH_LENGTH`]. Every path a caller gives, on every port, passes
/// here before anything is touched (`field` labels the message).
///
/// # Errors
/// `invalid_path` (400).
pub fn check_spelling(raw: &str, field: &str) -> Result<(), Denial> {
    let reason = if raw.contains('\0') {
        "Path contains a NUL byte"
    } else if raw.len() > MAX_PATH_LENGTH {
        "Path too long"
    } else {
        return Ok(());
    };
    let field = if field.is_empty() { String::new() } else { format!("{field}: ") };
    Err(Denial::InvalidPath { field, reason })
}

/// For `symlinks: never`: the lexical path must map onto the resolved one below the root.
fn lexically_inside(lexical: &Path, (lex_root, real_root): &(PathBuf, PathBuf), resolved: &Path) -> bool {
    let rel = lexical.strip_prefix(real_root).or_else(|_| lexical.strip_prefix(lex_root));
    rel.is_ok_and(|rel| real_root.join(rel) == resolved || (rel.as_os_str().is_empty() && resolved == real_root))
}

/// Resolves every symlink of an absolute, normalised path, as far as the path
/// exists; the missing tail is appended lexically (like Python's `realpath`).
pub fn realpath(path: &Path) -> PathBuf {
    resolve_from(PathBuf::from("/"), path).0
}

/// [`realpath`] of `start` joined with `rest`, where `start` is already
/// resolved, and whether the whole path exists.
fn resolve_from(start: PathBuf, rest: &Path) -> (PathBuf, bool) {
    let mut resolved = start;
    let mut pending: Vec<PathBuf> = rest.components().rev().filter_map(component_part).collect();
    let mut hops = 0;
    let mut exists = true;
    while let Some(part) = pending.pop() {
        if part.as_os_str() == OsStr::from_bytes(b"..") {
            resolved.pop();
            continue;
        }
        resolved.push(&part);
        if !exists {
            continue;
        }
        // One readlink per component: it tells a symlink (and its target), an
        // existing non-link (EINVAL) and a missing path apart in a single call.
        match std::fs::read_link(&resolved) {
            Ok(target) if hops < 40 => {
                hops += 1;
                resolved.pop();
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                pending.extend(target.components().rev().filter_map(component_part));
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {}
            Err(_) => exists = false,
        }
    }
    (resolved, exists)
}

fn component_part(component: Component<'_>) -> Option<PathBuf> {
    match component {
        Component::Normal(part) => Some(PathBuf::from(part)),
        Component::ParentDir => Some(PathBuf::from("..")),
        _ => None,
    }
}

/// For unit tests: a fresh temporary directory, its canonical path, and a
/// guard whose default rules allow everything under it.
#[cfg(test)]
pub(crate) fn scratch() -> (tempfile::TempDir, PathGuard, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().canonicalize().expect("canonical");
    let guard = PathGuard::new(&real, &super::rules::compile(&[], true).expect("rules")[0]);
    (dir, guard, real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::rules::{compile, EffectiveRule};
    use std::os::unix::fs::symlink;

    fn rule(configure: impl FnOnce(&mut EffectiveRule)) -> EffectiveRule {
        let mut rules = compile(&[], true).expect("compiles");
        let mut r = rules.swap_remove(rules.iter().position(|r| r.endpoint.id == "files_stat").expect("files_stat"));
        configure(&mut r);
        r
    }

    fn base() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().canonicalize().expect("canonical");
        (dir, real)
    }

    #[test]
    fn relative_paths_resolve_against_the_base_dir() {
        let (_dir, root) = base();
        let guard = PathGuard::new(&root, &rule(|_| {}));
        assert_eq!(guard.resolve("a/b.txt", Op::Read, ""), Ok(root.join("a/b.txt")));
        assert_eq!(guard.resolve("./a/../c", Op::Read, ""), Ok(root.join("c")));
    }

    #[test]
    fn traversal_out_of_the_base_dir_is_refused() {
        let (_dir, root) = base();
        let guard = PathGuard::new(&root, &rule(|_| {}));
        for raw in ["../x", "/etc/passwd", "a/../../x", "/", "../../../../../../etc"] {
            let err = guard.resolve(raw, Op::Read, "").expect_err(raw);
            assert_eq!(err.code(), "path_not_allowed", "{raw}");
        }
    }

    #[test]
    fn malformed_paths_are_invalid() {
        let (_dir, root) = base();
        let guard = PathGuard::new(&root, &rule(|_| {}));
        assert_eq!(guard.resolve("", Op::Read, "").map_err(|e| e.code()), Err("invalid_path"));
        assert_eq!(guard.resolve("a\0b", Op::Read, "").map_err(|e| e.code()), Err("invalid_path"));
        let long = "a/".repeat(MAX_PATH_LENGTH);
        assert_eq!(guard.resolve(&long, Op::Read, "").map_err(|e| e.code()), Err("invalid_path"));
    }

    #[test]
    fn symlinks_pointing_outside_are_refused() {
        let (_dir, root) = base();
        symlink("/etc", root.join("out")).expect("symlink");
        std::fs::create_dir(root.join("in")).expect("mkdir");
        symlink(root.join("in"), root.join("inside")).expect("symlink");
        let guard = PathGuard::new(&root, &rule(|_| {}));
        assert_eq!(guard.resolve("out/passwd", Op::Read, "").map_err(|e| e.code()), Err("path_not_allowed"));
        assert_eq!(guard.resolve("inside/x", Op::Read, ""), Ok(root.join("in/x")));
        let never = PathGuard::new(&root, &rule(|r| r.symlinks = SymlinkMode::Never));
        assert_eq!(never.resolve("inside/x", Op::Read, "").map_err(|e| e.code()), Err("symlink_denied"));
        assert_eq!(never.resolve("in/x", Op::Read, ""), Ok(root.join("in/x")));
    }

    #[test]
    fn deny_patterns_and_read_only() {
        let (_dir, root) = base();
        let guard = PathGuard::new(
            &root,
            &rule(|r| {
                r.deny = vec!["*.pem".into(), "**/.ssh".into(), format!("{}/secret", root.display())];
                r.read_only = true;
            }),
        );
        for raw in ["key.pem", "a/b/key.pem", ".ssh/id", "x/.ssh", "secret", "secret/inner"] {
            assert_eq!(guard.resolve(raw, Op::Read, "").map_err(|e| e.code()), Err("path_denied"), "{raw}");
        }
        assert!(guard.resolve("notes.txt", Op::Read, "").is_ok());
        assert_eq!(guard.resolve("notes.txt", Op::Write, "").map_err(|e| e.code()), Err("read_only"));
        assert!(guard.resolve("notes.txt", Op::Exec, "").is_ok());
    }

    #[test]
    fn each_operation_is_checked_against_read_only() {
        let (_dir, root) = base();
        let writable = PathGuard::new(&root, &rule(|_| {}));
        let read_only = PathGuard::new(&root, &rule(|r| r.read_only = true));
        for (op, refused) in [(Op::Read, false), (Op::Write, true), (Op::Delete, true), (Op::Exec, false)] {
            assert!(writable.resolve("f", op, "").is_ok(), "{op:?}");
            let outcome = read_only.resolve("f", op, "").map_err(|e| e.code());
            assert_eq!(outcome.is_err(), refused, "{op:?}: {outcome:?}");
            assert_eq!(read_only.resolve("/etc/x", op, "").map_err(|e| e.code()), Err("path_not_allowed"), "{op:?}");
        }
        assert_eq!(read_only.check_resolved(&root.join("f"), Op::Delete).map_err(|e| e.code()), Err("read_only"));
    }

    #[test]
    fn endpoints_have_the_reference_default_operations() {
        let expected = [
            ("files_stat", Op::Read),
            ("files_download_stream", Op::Read),
            ("files_mkdir", Op::Write),
            ("files_upload_stream", Op::Write),
            ("files_delete", Op::Delete),
            ("files_move", Op::Delete),
            ("shell", Op::Exec),
            ("shell_stream", Op::Exec),
            ("process_start", Op::Exec),
        ];
        for (endpoint, op) in expected {
            assert_eq!(Op::default_for(endpoint), op, "{endpoint}");
        }
    }

    #[test]
    fn compiled_rules_are_shared_by_guards() {
        let (_dir, root) = base();
        let rules = Arc::new(PathRules::compile(&root, &rule(|r| r.deny = vec!["*.pem".into()])));
        let (a, b) = (PathGuard::from_rules(Arc::clone(&rules)), PathGuard::from_rules(Arc::clone(&rules)));
        assert_eq!(Arc::strong_count(&rules), 3);
        assert_eq!(a.resolve("k.pem", Op::Read, "").map_err(|e| e.code()), Err("path_denied"));
        assert!(b.resolve("k.txt", Op::Read, "").is_ok());
    }

    #[test]
    fn resolving_below_a_root_follows_symlinks_like_realpath() {
        let (_dir, root) = base();
        std::fs::create_dir_all(root.join("real/sub")).expect("mkdir");
        symlink("real/sub", root.join("link")).expect("symlink");
        symlink("../../..", root.join("real/sub/up")).expect("symlink");
        let guard = PathGuard::new(&root, &rule(|_| {}));
        assert_eq!(guard.resolve("link/f", Op::Read, ""), Ok(root.join("real/sub/f")));
        assert_eq!(guard.resolve("link/up/x", Op::Read, "").map_err(|e| e.code()), Err("path_not_allowed"));
        assert_eq!(
            guard.resolve(&root.join("link/f").display().to_string(), Op::Read, ""),
            Ok(root.join("real/sub/f"))
        );
    }

    #[test]
    fn roots_are_resolved_once_they_exist() {
        let (_dir, root) = base();
        std::fs::create_dir(root.join("a")).expect("mkdir");
        std::fs::create_dir(root.join("b")).expect("mkdir");
        let link = root.join("work");
        let rules = Arc::new(PathRules::compile(&link, &rule(|_| {})));
        // Missing at first: resolved on every use until it appears.
        assert_eq!(PathGuard::from_rules(Arc::clone(&rules)).primary_root(), link);
        symlink(root.join("a"), &link).expect("symlink");
        assert_eq!(PathGuard::from_rules(Arc::clone(&rules)).primary_root(), root.join("a"));
        // Re-pointing it later does not move the boundary.
        std::fs::remove_file(&link).expect("unlink");
        symlink(root.join("b"), &link).expect("symlink");
        let guard = PathGuard::from_rules(rules);
        assert_eq!(guard.primary_root(), root.join("a"));
        assert_eq!(guard.resolve("x", Op::Read, ""), Ok(root.join("a/x")));
        assert_eq!(
            guard.resolve(&link.join("x").display().to_string(), Op::Read, "").map_err(|e| e.code()),
            Err("path_not_allowed")
        );
    }

    #[test]
    fn allow_roots_replace_the_base_dir() {
        let (_dir, root) = base();
        std::fs::create_dir(root.join("out")).expect("mkdir");
        let guard = PathGuard::new(&root, &rule(|r| r.allow = vec![root.join("out")]));
        assert_eq!(guard.resolve("f", Op::Read, ""), Ok(root.join("out/f")));
        assert_eq!(
            guard.resolve(&root.join("g").display().to_string(), Op::Read, "").map_err(|e| e.code()),
            Err("path_not_allowed")
        );
    }

    #[test]
    fn realpath_resolves_chains_and_keeps_missing_tails() {
        let (_dir, root) = base();
        std::fs::create_dir(root.join("d")).expect("mkdir");
        symlink("d", root.join("l1")).expect("symlink");
        symlink("l1/../d", root.join("l2")).expect("symlink");
        assert_eq!(realpath(&root.join("l2/missing/x")), root.join("d/missing/x"));
        symlink("loop", root.join("loop")).expect("symlink");
        let _ = realpath(&root.join("loop/x"));
    }

    #[test]
    fn system_directories_are_always_denied() {
        let guard = PathGuard::new(Path::new("/"), &rule(|_| {}));
        assert_eq!(guard.resolve("/proc/self/environ", Op::Read, "").map_err(|e| e.code()), Err("path_denied"));
    }

    #[test]
    fn field_labels_reach_the_message() {
        let (_dir, root) = base();
        let guard = PathGuard::new(&root, &rule(|_| {}));
        let err = guard.resolve("/etc", Op::Exec, "cwd").expect_err("outside");
        assert_eq!(err.to_string(), "cwd: Path is outside the allowed directories");
    }
}

//! Lexical operations on absolute paths: [`normalize`], and for normalised
//! paths, containment ([`beneath`]) and the rest below a base ([`below`]).
//!
//! Every path check of every file operation compares a path with roots and
//! deny prefixes several times; `Path::starts_with` parses both sides into
//! components each time. Normalised paths (see [`is_normal`]) compare as
//! bytes with the same answer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Lexically normalises an absolute path: removes `.`, resolves `..`, never above `/`.
pub fn normalize(path: &Path) -> PathBuf {
    if is_normal(path) {
        return path.to_path_buf();
    }
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Whether `path` is what [`normalize`] makes of it: absolute, with no
/// empty, `.` or `..` component and no trailing `/` (but `/` itself).
pub fn is_normal(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    bytes == b"/"
        || bytes.strip_prefix(b"/").is_some_and(|rest| {
            rest.split(|&b| b == b'/').all(|part| !part.is_empty() && part != b"." && part != b"..")
        })
}

/// Whether `path` is `base` or lies beneath it; both normalised (see
/// [`is_normal`]). For such paths this is `Path::starts_with`, as a
/// comparison of bytes rather than of parsed components: every path check
/// of every file operation makes a few.
pub fn beneath(path: &Path, base: &Path) -> bool {
    debug_assert!(is_normal(path) && is_normal(base), "{} or {} is not normalised", path.display(), base.display());
    let (path, base) = (path.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    path.starts_with(base) && (path.len() == base.len() || base == b"/" || path[base.len()] == b'/')
}

/// `path` relative to `base` when it is `base` or lies beneath it; both
/// normalised. `Path::strip_prefix` for such paths, by bytes (see [`beneath`]).
pub fn below<'a>(path: &'a Path, base: &Path) -> Option<&'a Path> {
    if !beneath(path, base) {
        return None;
    }
    let (bytes, base_len) = (path.as_os_str().as_bytes(), base.as_os_str().len());
    // Past the base and the `/` after it (`/` itself ends in one).
    let skip = if base_len == 1 { 1 } else { base_len + 1 };
    Some(Path::new(OsStr::from_bytes(bytes.get(skip..).unwrap_or_default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATHS: [&str; 14] = [
        "/", "/a", "/ab", "/a/b", "/a/bc", "/a/b/c", "/b", "/a/b/", "//a", "/a/./b", "/a/../b", "/a//b", "/.", "/a/..",
    ];

    #[test]
    fn normalising_keeps_normal_paths_and_fixes_the_rest() {
        for raw in PATHS {
            let normal = normalize(Path::new(raw));
            assert!(is_normal(&normal), "{raw} -> {}", normal.display());
            assert_eq!(normalize(&normal), normal, "{raw}");
        }
        assert_eq!(normalize(Path::new("/a/./b/../c//d/")), Path::new("/a/c/d"));
        assert_eq!(normalize(Path::new("/../..")), Path::new("/"));
        for odd in ["/a/", "//a", "/a/./b", "/a/../b", "/a//b", "/.", "/a/..", "a", ""] {
            assert!(!is_normal(Path::new(odd)), "{odd}");
        }
    }

    #[test]
    fn beneath_and_below_agree_with_the_standard_library_on_normal_paths() {
        let normal: Vec<PathBuf> = PATHS.iter().map(|p| normalize(Path::new(p))).collect();
        for path in &normal {
            for base in &normal {
                assert_eq!(beneath(path, base), path.starts_with(base), "{} under {}", path.display(), base.display());
                assert_eq!(
                    below(path, base),
                    path.strip_prefix(base).ok(),
                    "{} under {}",
                    path.display(),
                    base.display()
                );
            }
        }
        assert_eq!(below(Path::new("/a/b/c"), Path::new("/a")), Some(Path::new("b/c")));
        assert_eq!(below(Path::new("/a"), Path::new("/")), Some(Path::new("a")));
        assert_eq!(below(Path::new("/a"), Path::new("/a")), Some(Path::new("")));
        assert!(!beneath(Path::new("/ab"), Path::new("/a")));
    }
}

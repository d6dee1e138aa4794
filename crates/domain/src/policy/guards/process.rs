//! Process hardening: an executable must not resolve under `/proc`, `/sys`
//! or `/dev` (as given, or through symlinks), and only the reference's
//! signals may be sent to a process.

use std::path::{Path, PathBuf};

use abx_wire::api::Fault;
use abx_wire::endpoints::Param;

use super::super::paths::{normalize, realpath};
use super::super::{Denial, Grant, ParamValue};

const DENIED_ROOTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Signals `process_signal` accepts at all: SIGINT, SIGKILL, SIGTERM, SIGCONT, SIGTSTP.
pub const ALLOWED_SIGNALS: [i64; 5] = [2, 9, 15, 18, 20];

fn under_denied_root(path: &Path) -> bool {
    DENIED_ROOTS.iter().any(|root| path.starts_with(root))
}

/// Where a program name resolves: itself when it holds a `/`, else the first
/// executable file of that name on `path` (the child's `PATH`).
pub fn which(program: &str, path: Option<&str>, cwd: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return if program.starts_with('/') { PathBuf::from(program) } else { cwd.join(program) };
    }
    for dir in path.unwrap_or("/usr/local/bin:/usr/bin:/bin").split(':') {
        let candidate = if dir.is_empty() { cwd.join(program) } else { Path::new(dir).join(program) };
        let executable =
            std::fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return candidate;
        }
    }
    PathBuf::from(program)
}

/// Refuses an argv whose executable resolves under a system tree; returns
/// where the executable was looked up ([`which`]).
///
/// # Errors
/// `process_invalid` (400) for an empty executable, `process_denied` (403).
pub fn check_process(argv: &[String], path: Option<&str>, cwd: &Path) -> Result<PathBuf, Denial> {
    let Some(exe) = argv.first().filter(|e| !e.is_empty() && !e.contains('\0')) else {
        return Err(Denial::new(Fault::ProcessInvalid, "Empty executable"));
    };
    let looked_up = which(exe, path, cwd);
    let lexical = normalize(&looked_up);
    if under_denied_root(&lexical) || under_denied_root(&realpath(&lexical)) {
        return Err(Denial::new(
            Fault::ProcessDenied,
            format!("Executable '{exe}' resolves under a protected directory"),
        ));
    }
    Ok(looked_up)
}

/// Admits signal `signal` under the policy's `allowed_signals` for the endpoint of `grant`.
///
/// Signals outside [`ALLOWED_SIGNALS`] are the caller's to refuse first (a
/// 400 `ValueError` without a code, in the reference).
///
/// # Errors
/// `signal_not_allowed` (403).
pub fn check_signal(grant: &Grant, signal: i64) -> Result<(), Denial> {
    if let Some(ParamValue::Ints(allowed)) = grant.param(Param::AllowedSignals) {
        if !allowed.contains(&signal) {
            return Err(Denial::new(Fault::SignalNotAllowed, format!("Signal {signal} is not permitted by policy")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(exe: &str) -> Vec<String> {
        vec![exe.to_string()]
    }

    #[test]
    fn system_trees_are_refused_directly_and_through_symlinks() {
        let cwd = Path::new("/");
        let err = check_process(&argv("/proc/self/exe"), None, cwd).expect_err("proc");
        assert_eq!((err.code(), err.status()), ("process_denied", 403));
        assert_eq!(err.to_string(), "Executable '/proc/self/exe' resolves under a protected directory");
        assert!(check_process(&argv("/dev/../dev/null"), None, cwd).is_err());
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink("/dev/null", dir.path().join("null")).expect("symlink");
        assert!(check_process(&argv("./null"), None, dir.path()).is_err());
        assert!(check_process(&argv("sh"), Some("/usr/bin:/bin"), cwd).is_ok());
        assert_eq!(check_process(&argv(""), None, cwd).map_err(|d| d.code()), Err("process_invalid"));
    }

    #[test]
    fn which_searches_the_childs_path() {
        let found = which("sh", Some("/nonexistent:/bin"), Path::new("/"));
        assert_eq!(found, PathBuf::from("/bin/sh"));
        assert_eq!(which("no-such-program-x", Some("/bin"), Path::new("/")), PathBuf::from("no-such-program-x"));
    }
}

//! The command guard: an endpoint's `allow_commands` / `deny_commands` applied to an argv.
//!
//! As the reference: a pattern of one token (not `...`, not `{...}`)
//! constrains the executable only (matched against `argv[0]` and its
//! basename, with `fnmatch` globs); a pattern of several tokens constrains
//! the whole argv, one token per element: a literal, a glob (which never
//! matches an element containing `/` or `..` or starting with `-` unless the
//! token does), `...` (any number of elements), `{int}`, `{word}`, or
//! `{path}` (resolved through the endpoint's path scope). Deny patterns are
//! checked first, against the argv with grouped short flags expanded
//! (`-lR` → `-l -R`); then, if there is an allow-list, one must match.

use std::collections::HashMap;

use abx_wire::api::Fault;
use abx_wire::codec::shlex::split;
use abx_wire::endpoints::Param;

use super::super::{Denial, Grant, Op, ParamValue, PathGuard};

/// Most argv elements accepted.
pub const MAX_ARGV: usize = 256;
/// Longest argv element accepted.
pub const MAX_ARG_LENGTH: usize = 4096;
/// Longest argv element the kernel takes (`MAX_ARG_STRLEN`, 32 pages, with its NUL).
pub const KERNEL_MAX_ARG_LENGTH: usize = 32 * 4096 - 1;
const MAX_ELLIPSES: usize = 3;
const DENIED: Fault = Fault::CommandNotAllowed;

fn invalid(message: &str) -> Denial {
    Denial::new(Fault::CommandInvalid, message)
}

/// A malformed command pattern in the policy; answered as a 400 `ValueError`, as the reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid command pattern '{pattern}': {reason}")]
pub struct PatternError {
    /// The pattern.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

fn tokens(pattern: &str) -> Result<Vec<String>, PatternError> {
    let err = |reason: &str| PatternError { pattern: pattern.to_string(), reason: reason.to_string() };
    let tokens = split(pattern).map_err(|e| err(&e.to_string()))?;
    if tokens.is_empty() {
        return Err(err("empty command pattern"));
    }
    if tokens.iter().filter(|t| *t == "...").count() > MAX_ELLIPSES {
        return Err(err("at most 3 '...' per command pattern"));
    }
    Ok(tokens)
}

fn fnmatch(name: &str, pattern: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(false)
        .build()
        .map(|g| g.compile_matcher().is_match(name))
        .unwrap_or(false)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn exe_matches(argv0: &str, token: &str) -> bool {
    fnmatch(argv0, token) || fnmatch(basename(argv0), token)
}

fn arg_matches(arg: &str, token: &str) -> bool {
    if !token.contains(['*', '?', '[']) {
        return arg == token;
    }
    if (arg.contains('/') && !token.contains('/'))
        || (arg.contains("..") && !token.contains(".."))
        || (arg.starts_with('-') && !token.starts_with('-'))
    {
        return false;
    }
    fnmatch(arg, token)
}

fn is_int(arg: &str) -> bool {
    (1..=9).contains(&arg.len()) && arg.bytes().all(|b| b.is_ascii_digit())
}

fn is_word(arg: &str) -> bool {
    let mut bytes = arg.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_.@:+=,-".contains(&b))
}

/// `["ls", "-lR"]` → `["ls", "-l", "-R"]`, for matching only.
pub fn expand_short_flags(argv: &[String]) -> Vec<String> {
    let mut out: Vec<String> = argv.iter().take(1).cloned().collect();
    for arg in argv.iter().skip(1) {
        let grouped = arg.len() > 2 && arg.starts_with('-') && arg[1..].bytes().all(|b| b.is_ascii_alphabetic());
        if grouped {
            out.extend(arg[1..].chars().map(|c| format!("-{c}")));
        } else {
            out.push(arg.clone());
        }
    }
    out
}

/// Deny and allow patterns, ready to check argvs.
#[derive(Debug, Clone)]
pub struct CommandGuard {
    allow: Vec<Vec<String>>,
    deny: Vec<Vec<String>>,
    path_guard: Option<PathGuard>,
    limits: ArgvLimits,
}

/// How large an argv the guard admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgvLimits {
    /// The reference's: [`MAX_ARGV`] elements of [`MAX_ARG_LENGTH`] bytes (the API port).
    Reference,
    /// What the kernel's `execve` takes: [`KERNEL_MAX_ARG_LENGTH`] bytes per
    /// element and `ARG_MAX` in all (the envd port, as envd).
    Kernel,
}

impl ArgvLimits {
    /// Why `argv` is refused under these limits, if it is.
    fn refuse(self, argv: &[String]) -> Option<String> {
        if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
            return Some(format!("argv[{i}] contains a NUL byte"));
        }
        match self {
            ArgvLimits::Reference => (argv.len() > MAX_ARGV || argv.iter().any(|a| a.len() > MAX_ARG_LENGTH))
                .then(|| "argv is too long or contains a NUL byte".to_string()),
            ArgvLimits::Kernel => {
                if let Some((i, a)) = argv.iter().enumerate().find(|(_, a)| a.len() > KERNEL_MAX_ARG_LENGTH) {
                    return Some(format!(
                        "argv[{i}] is {} bytes; the kernel takes at most {KERNEL_MAX_ARG_LENGTH} bytes per argument",
                        a.len()
                    ));
                }
                let total: usize = argv.iter().map(|a| a.len() + 1 + std::mem::size_of::<usize>()).sum();
                let max = arg_max();
                (total > max).then(|| format!("argv is {total} bytes; the kernel takes at most {max} (ARG_MAX) in all"))
            }
        }
    }
}

/// The kernel's bound on arguments and environment together (`sysconf(ARG_MAX)`).
fn arg_max() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::ARG_MAX)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(2 * 1024 * 1024)
}

impl CommandGuard {
    /// A guard over `allow` and `deny` patterns.
    ///
    /// # Errors
    /// A pattern that cannot be split, is empty, or has too many `...`.
    pub fn new(allow: &[String], deny: &[String], path_guard: Option<PathGuard>) -> Result<Self, PatternError> {
        Ok(CommandGuard {
            allow: allow.iter().map(|p| tokens(p)).collect::<Result<_, _>>()?,
            deny: deny.iter().map(|p| tokens(p)).collect::<Result<_, _>>()?,
            path_guard,
            limits: ArgvLimits::Reference,
        })
    }

    /// The same guard, admitting argvs up to `limits`.
    pub fn with_limits(mut self, limits: ArgvLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Whether the guard constrains anything.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The argv indexes bound to `{path}` tokens, or `None` when `tokens` does not match.
    fn matches(&self, tokens: &[String], argv: &[String]) -> Option<Vec<usize>> {
        if tokens.len() == 1 && tokens[0] != "..." && !tokens[0].starts_with('{') {
            return exe_matches(&argv[0], &tokens[0]).then(Vec::new);
        }
        let mut memo = HashMap::new();
        self.go(tokens, argv, 0, 0, &mut memo)
    }

    fn go(
        &self,
        tokens: &[String],
        argv: &[String],
        i: usize,
        j: usize,
        memo: &mut HashMap<(usize, usize), Option<Vec<usize>>>,
    ) -> Option<Vec<usize>> {
        if let Some(known) = memo.get(&(i, j)) {
            return known.clone();
        }
        let result = if i == tokens.len() {
            (j == argv.len()).then(Vec::new)
        } else if tokens[i] == "..." {
            (j..=argv.len()).find_map(|k| self.go(tokens, argv, i + 1, k, memo))
        } else if j < argv.len() && self.token_matches(&tokens[i], &argv[j], j == 0) {
            self.go(tokens, argv, i + 1, j + 1, memo).map(|mut rest| {
                if tokens[i] == "{path}" {
                    rest.insert(0, j);
                }
                rest
            })
        } else {
            None
        };
        memo.insert((i, j), result.clone());
        result
    }

    fn token_matches(&self, token: &str, arg: &str, first: bool) -> bool {
        if first {
            return exe_matches(arg, token);
        }
        match token {
            "{path}" => !arg.is_empty() && !arg.starts_with('-') && self.path_guard.is_some(),
            "{int}" => is_int(arg),
            "{word}" => is_word(arg),
            _ => arg_matches(arg, token),
        }
    }

    /// The admitted argv (`{path}` arguments resolved), or the refusal.
    ///
    /// # Errors
    /// `command_invalid` (400) for a malformed argv, `shell_not_allowed` when a
    /// shell is asked for under command rules, `command_not_allowed` (403) on
    /// a deny match or an allow-list miss, and path refusals for `{path}`.
    pub fn check(&self, argv: &[String], shell: bool) -> Result<Vec<String>, Denial> {
        if argv.is_empty() {
            return Err(invalid("argv must be a non-empty list of strings"));
        }
        if let Some(reason) = self.limits.refuse(argv) {
            return Err(invalid(&reason));
        }
        if argv[0].is_empty() {
            return Err(invalid("Empty executable"));
        }
        if shell && !self.is_empty() {
            return Err(Denial::new(Fault::ShellNotAllowed, "A shell is not permitted here"));
        }
        let expanded = expand_short_flags(argv);
        if self.deny.iter().any(|tokens| self.matches(tokens, &expanded).is_some()) {
            return Err(Denial::new(DENIED, format!("Command '{}' is denied by policy", argv[0])));
        }
        if self.allow.is_empty() {
            return Ok(argv.to_vec());
        }
        for tokens in &self.allow {
            let Some(paths) = self.matches(tokens, &expanded) else { continue };
            if paths.is_empty() {
                return Ok(argv.to_vec());
            }
            return self.canonicalise(argv, &expanded, &paths);
        }
        Err(Denial::new(DENIED, format!("Command '{}' is not in the allow-list", argv[0])))
    }

    fn canonicalise(&self, argv: &[String], expanded: &[String], paths: &[usize]) -> Result<Vec<String>, Denial> {
        let Some(guard) = &self.path_guard else {
            return Err(Denial::new(DENIED, "Command pattern needs a path scope"));
        };
        if expanded != argv {
            return Err(Denial::new(DENIED, "Grouped short flags cannot be combined with {path}"));
        }
        let mut out = argv.to_vec();
        for &index in paths {
            out[index] = guard.resolve(&argv[index], Op::Exec, "argv")?.display().to_string();
        }
        Ok(out)
    }
}

fn strings(value: Option<&ParamValue>) -> Vec<String> {
    match value {
        Some(ParamValue::Strings(list)) => list.clone(),
        _ => Vec::new(),
    }
}

/// The endpoint's command rules as a guard.
///
/// # Errors
/// A malformed pattern in the policy.
pub fn command_guard(grant: &Grant) -> Result<CommandGuard, PatternError> {
    let allow = strings(grant.param(Param::AllowCommands));
    let deny = strings(grant.param(Param::DenyCommands));
    let path_guard = grant.endpoint().paths.then(|| grant.guard());
    let limits = match grant.endpoint().port {
        abx_wire::endpoints::Port::Envd => ArgvLimits::Kernel,
        _ => ArgvLimits::Reference,
    };
    Ok(CommandGuard::new(&allow, &deny, path_guard)?.with_limits(limits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        split(line).expect("splits")
    }

    fn guard(allow: &[&str], deny: &[&str]) -> CommandGuard {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        CommandGuard::new(&own(allow), &own(deny), None).expect("valid patterns")
    }

    fn code(result: Result<Vec<String>, Denial>) -> Result<Vec<String>, &'static str> {
        result.map_err(|d| d.code())
    }

    #[test]
    fn no_rules_admit_everything_but_malformed_argvs() {
        let g = guard(&[], &[]);
        assert_eq!(code(g.check(&argv("ls -la"), false)), Ok(argv("ls -la")));
        assert_eq!(code(g.check(&argv("ls -la"), true)), Ok(argv("ls -la")), "a shell is fine without rules");
        assert_eq!(code(g.check(&[], false)), Err("command_invalid"));
        assert_eq!(code(g.check(&["a\0b".into()], false)), Err("command_invalid"));
        assert_eq!(code(g.check(&vec!["x".to_string(); MAX_ARGV + 1], false)), Err("command_invalid"));
        assert_eq!(code(g.check(&["x".into(), "a".repeat(MAX_ARG_LENGTH + 1)], false)), Err("command_invalid"));
    }

    #[test]
    fn the_kernel_limits_take_what_execve_takes() {
        let g = guard(&[], &[]).with_limits(ArgvLimits::Kernel);
        let long = vec!["printf".to_string(), "a".repeat(KERNEL_MAX_ARG_LENGTH)];
        assert_eq!(code(g.check(&long, false)), Ok(long.clone()), "one argument up to 128 KiB");
        assert_eq!(code(g.check(&vec!["x".to_string(); MAX_ARGV + 1], false)).map(|a| a.len()), Ok(MAX_ARGV + 1));
        let too_long = g.check(&["x".into(), "a".repeat(KERNEL_MAX_ARG_LENGTH + 1)], false).expect_err("refused");
        assert!(too_long.to_string().contains("at most 131071 bytes per argument"), "{too_long}");
        let many = vec!["a".repeat(100_000); 64];
        let too_much = g.check(&many, false).expect_err("refused");
        assert!(too_much.to_string().contains("ARG_MAX"), "{too_much}");
        assert_eq!(code(g.check(&["a\0b".into()], false)), Err("command_invalid"));
    }

    #[test]
    fn executable_patterns_match_the_path_and_the_basename() {
        let g = guard(&["ls", "py*"], &[]);
        assert!(g.check(&argv("/bin/ls -la"), false).is_ok());
        assert!(g.check(&argv("python3 x.py"), false).is_ok());
        let err = g.check(&argv("rm -rf /"), false).expect_err("not allowed");
        assert_eq!((err.code(), err.status()), ("command_not_allowed", 403));
        assert_eq!(err.to_string(), "Command 'rm' is not in the allow-list");
        assert_eq!(code(g.check(&argv("ls"), true)), Err("shell_not_allowed"));
    }

    #[test]
    fn deny_wins_and_sees_expanded_flags() {
        let g = guard(&["rm ..."], &["rm -r ...", "rm ... -f"]);
        assert!(g.check(&argv("rm a.txt"), false).is_ok());
        assert_eq!(code(g.check(&argv("rm -rf x"), false)), Err("command_not_allowed"));
        assert_eq!(code(g.check(&argv("rm x -f"), false)), Err("command_not_allowed"));
        let err = g.check(&argv("rm -r x"), false).expect_err("denied");
        assert_eq!(err.to_string(), "Command 'rm' is denied by policy");
    }

    #[test]
    fn argument_tokens() {
        let g = guard(&["git log -n {int}", "echo {word} ...", "cat *.txt"], &[]);
        assert!(g.check(&argv("git log -n 5"), false).is_ok());
        assert!(g.check(&argv("git log -n five"), false).is_err());
        assert!(g.check(&argv("echo user@host a b"), false).is_ok());
        assert!(g.check(&argv("echo -n x"), false).is_err(), "{{word}} never starts with '-'");
        assert!(g.check(&argv("cat a.txt"), false).is_ok());
        assert!(g.check(&argv("cat ../a.txt"), false).is_err(), "a glob never matches a path");
        assert!(g.check(&argv("cat -.txt"), false).is_err(), "nor a flag");
        assert!(g.check(&argv("git log -n 5 extra"), false).is_err());
    }

    #[test]
    fn malformed_patterns_are_reported() {
        let err = CommandGuard::new(&["echo 'x".into()], &[], None).expect_err("unclosed quote");
        assert_eq!(err.to_string(), "invalid command pattern 'echo 'x': No closing quotation");
        assert!(CommandGuard::new(&[], &["a ... ... ... ...".into()], None).is_err());
    }

    #[test]
    fn short_flags_expand_for_matching() {
        assert_eq!(expand_short_flags(&argv("ls -lR -x --all -1")), argv("ls -l -R -x --all -1"));
    }
}

//! Languages, their interpreters, and the driver programs the binary carries.
//!
//! A context's interpreter is started with its driver's source on the
//! command line (`python3 -c`, `node -e`, `bash -c`); the drivers are
//! embedded at build time, so nothing has to be installed beside the daemon.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::CodeError;

/// The Python driver.
pub const PYTHON_DRIVER: &str = include_str!("drivers/python.py");
/// The Node.js driver.
pub const NODE_DRIVER: &str = include_str!("drivers/node.js");
/// The bash driver.
pub const BASH_DRIVER: &str = include_str!("drivers/bash.sh");

/// A language code contexts can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// Python 3.
    Python,
    /// JavaScript on Node.js.
    JavaScript,
    /// GNU bash.
    Bash,
}

/// The languages, as listed in messages.
pub const SUPPORTED: &str = "python, javascript, bash";

impl Language {
    /// Every language.
    pub const ALL: [Language; 3] = [Language::Python, Language::JavaScript, Language::Bash];

    /// Parses a language name (case and surrounding blanks ignored; none is Python).
    ///
    /// # Errors
    /// [`CodeError::UnsupportedLanguage`] for any other name.
    pub fn parse(name: Option<&str>) -> Result<Language, CodeError> {
        let Some(raw) = name else { return Ok(Language::Python) };
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "python" | "python3" | "py" => Ok(Language::Python),
            "javascript" | "js" | "node" | "nodejs" => Ok(Language::JavaScript),
            "bash" => Ok(Language::Bash),
            _ => Err(CodeError::UnsupportedLanguage(raw.to_string())),
        }
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::Bash => "bash",
        }
    }

    /// The interpreter's arguments that run this language's driver.
    pub fn driver_args(self) -> Vec<OsString> {
        let (flag, source) = match self {
            Language::Python => ("-c", PYTHON_DRIVER),
            Language::JavaScript => ("-e", NODE_DRIVER),
            Language::Bash => ("-c", BASH_DRIVER),
        };
        let mut args = vec![OsString::from(flag), OsString::from(source)];
        if self == Language::Bash {
            args.push(OsString::from("bash"));
        }
        args
    }
}

/// The interpreter programs, as configured (a name looked up on PATH, or a path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreters {
    /// Python (`python3`).
    pub python: String,
    /// Node.js (`node`).
    pub node: String,
    /// bash (`bash`).
    pub bash: String,
}

impl Default for Interpreters {
    fn default() -> Self {
        Interpreters { python: "python3".into(), node: "node".into(), bash: "bash".into() }
    }
}

impl Interpreters {
    /// The configured program of `language`.
    pub fn program(&self, language: Language) -> &str {
        match language {
            Language::Python => &self.python,
            Language::JavaScript => &self.node,
            Language::Bash => &self.bash,
        }
    }

    /// Finds `language`'s interpreter on `path` (a PATH value).
    ///
    /// # Errors
    /// [`CodeError::RuntimeMissing`] when it is not there.
    pub fn resolve(&self, language: Language, path: Option<&str>) -> Result<PathBuf, CodeError> {
        let program = self.program(language);
        find_program(program, path)
            .ok_or_else(|| CodeError::RuntimeMissing { language: language.as_str(), program: program.to_string() })
    }
}

/// Finds an executable: a name with a slash as it is, otherwise on `path`.
pub fn find_program(program: &str, path: Option<&str>) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let candidate = PathBuf::from(program);
        return is_executable(&candidate).then_some(candidate);
    }
    path.unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        assert_eq!(Language::parse(None).ok(), Some(Language::Python));
        assert_eq!(Language::parse(Some(" JS ")).ok(), Some(Language::JavaScript));
        assert_eq!(Language::parse(Some("Bash")).ok(), Some(Language::Bash));
        let err = Language::parse(Some("cobol")).expect_err("unknown");
        assert_eq!(err.to_string(), "Unsupported language 'cobol'; supported: python, javascript, bash");
    }

    #[test]
    fn programs_are_found_on_path_or_refused() {
        assert!(find_program("sh", Some("/nonexistent:/bin:/usr/bin")).is_some());
        assert_eq!(find_program("sh", Some("/nonexistent")), None);
        assert_eq!(find_program("/nonexistent/node", None), None);
        let interpreters = Interpreters { node: "definitely-not-node".into(), ..Interpreters::default() };
        let err = interpreters.resolve(Language::JavaScript, Some("/usr/bin:/bin")).expect_err("missing");
        assert!(err.to_string().contains("'definitely-not-node'"), "{err}");
    }

    #[test]
    fn drivers_are_embedded() {
        assert!(PYTHON_DRIVER.contains("def main"));
        assert!(NODE_DRIVER.contains("runInThisContext"));
        assert!(BASH_DRIVER.contains("read"));
        assert_eq!(Language::Bash.driver_args().len(), 3);
    }
}

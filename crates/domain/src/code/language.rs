//! Languages, their interpreters, and the driver programs the binary carries.
//!
//! A context's interpreter is started with its driver's source on the
//! command line (`python3 -c`, `node -e`, `bash -c`), or, for interpreters
//! that only run files (`Rscript`, `java`), with the driver written once
//! into a private directory ([`driver_file`]). The drivers are embedded at
//! build time, so nothing has to be installed beside the daemon but the
//! interpreters themselves.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::protocol::MAX_RESULT_BYTES;
use super::CodeError;

/// The Python driver.
pub const PYTHON_DRIVER: &str = include_str!("drivers/python.py");
/// The Python driver's display module (rich results).
pub const PYTHON_DISPLAY: &str = include_str!("drivers/python_display.py");
/// The Python driver's chart extractor (compiled on first use).
pub const PYTHON_CHARTS: &str = include_str!("drivers/python_charts.py");
/// The Node.js driver (JavaScript and TypeScript), its cell rewriter first, in one block.
pub const NODE_DRIVER: &str =
    concat!("{\n", include_str!("drivers/node_cells.js"), include_str!("drivers/node.js"), "}\n");
/// The bash driver.
pub const BASH_DRIVER: &str = include_str!("drivers/bash.sh");
/// The R driver.
pub const R_DRIVER: &str = include_str!("drivers/r.R");
/// The Java driver (a JShell host).
pub const JAVA_DRIVER: &str = include_str!("drivers/Driver.java");

/// A language code contexts can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// Python 3.
    Python,
    /// JavaScript on Node.js.
    JavaScript,
    /// TypeScript on Node.js (types stripped).
    TypeScript,
    /// GNU bash.
    Bash,
    /// R.
    R,
    /// Java, through JShell.
    Java,
}

/// The languages, as listed in messages.
pub const SUPPORTED: &str = "python, javascript, typescript, bash, r, java";

impl Language {
    /// Every language.
    pub const ALL: [Language; 6] =
        [Language::Python, Language::JavaScript, Language::TypeScript, Language::Bash, Language::R, Language::Java];

    /// Parses a language name (case and surrounding blanks ignored; none is Python).
    ///
    /// # Errors
    /// [`CodeError::UnsupportedLanguage`] for any other name.
    pub fn parse(name: Option<&str>) -> Result<Language, CodeError> {
        let Some(raw) = name else { return Ok(Language::Python) };
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "python" | "python3" | "py" => Ok(Language::Python),
            "javascript" | "js" | "node" | "nodejs" => Ok(Language::JavaScript),
            "typescript" | "ts" => Ok(Language::TypeScript),
            "bash" => Ok(Language::Bash),
            "r" => Ok(Language::R),
            "java" => Ok(Language::Java),
            _ => Err(CodeError::UnsupportedLanguage(raw.to_string())),
        }
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Bash => "bash",
            Language::R => "r",
            Language::Java => "java",
        }
    }

    /// The interpreter's arguments that run this language's driver.
    ///
    /// # Errors
    /// The driver file of R or Java cannot be written.
    pub fn driver_args(self) -> io::Result<Vec<OsString>> {
        let args: Vec<OsString> = match self {
            Language::Python => {
                let limit = MAX_RESULT_BYTES.to_string();
                ["-c", PYTHON_DRIVER, &limit, PYTHON_DISPLAY, PYTHON_CHARTS].map(OsString::from).into()
            }
            Language::JavaScript => ["-e", NODE_DRIVER, "javascript"].map(OsString::from).into(),
            Language::TypeScript => ["-e", NODE_DRIVER, "typescript"].map(OsString::from).into(),
            Language::Bash => ["-c", BASH_DRIVER, "bash"].map(OsString::from).into(),
            Language::R => {
                static FILE: OnceLock<PathBuf> = OnceLock::new();
                let path = cached(&FILE, "driver.R", R_DRIVER)?;
                vec!["--vanilla".into(), path.into_os_string()]
            }
            Language::Java => {
                static FILE: OnceLock<PathBuf> = OnceLock::new();
                let path = cached(&FILE, "Driver.java", JAVA_DRIVER)?;
                // JShell runs the cells in this JVM (the source launcher compiles the
                // driver); a small collector and C1 only keep memory and start-up low.
                vec!["-XX:+UseSerialGC".into(), "-XX:TieredStopAtLevel=1".into(), path.into_os_string()]
            }
        };
        Ok(args)
    }
}

fn cached(cell: &OnceLock<PathBuf>, name: &str, source: &str) -> io::Result<PathBuf> {
    if let Some(path) = cell.get() {
        if path.is_file() {
            return Ok(path.clone());
        }
    }
    let path = driver_file(&std::env::temp_dir(), name, source)?;
    Ok(cell.get_or_init(|| path).clone())
}

/// Writes `source` as `<dir>/agent-sandbox-drivers-<uid>/<hash>-<name>` (once;
/// the directory is this user's and only it may write there, while others
/// may read, as interpreters of identities with their own user must) and
/// returns its path.
///
/// # Errors
/// The directory exists but is not this user's or others may write to it, or a write fails.
pub fn driver_file(base: &Path, name: &str, source: &str) -> io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};

    let uid = nix::unistd::geteuid().as_raw();
    let dir = base.join(format!("agent-sandbox-drivers-{uid}"));
    match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(io::Error::other(format!("{} is not a directory only this user may write", dir.display())));
    }
    if meta.permissions().mode() & 0o555 != 0o555 {
        // Written private by an older version: open it for reading.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut hasher);
    let path = dir.join(format!("{:016x}-{name}", hasher.finish()));
    if std::fs::read(&path).is_ok_and(|bytes| bytes == source.as_bytes()) {
        return Ok(path);
    }
    let staging = dir.join(format!(".{}-{name}", super::new_id()));
    std::fs::write(&staging, source)?;
    std::fs::rename(&staging, &path)?;
    Ok(path)
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
    /// R (`Rscript`).
    pub r: String,
    /// Java (`java`, of a JDK: JShell is part of it).
    pub java: String,
}

impl Default for Interpreters {
    fn default() -> Self {
        Interpreters {
            python: "python3".into(),
            node: "node".into(),
            bash: "bash".into(),
            r: "Rscript".into(),
            java: "java".into(),
        }
    }
}

impl Interpreters {
    /// The configured program of `language`.
    pub fn program(&self, language: Language) -> &str {
        match language {
            Language::Python => &self.python,
            Language::JavaScript | Language::TypeScript => &self.node,
            Language::Bash => &self.bash,
            Language::R => &self.r,
            Language::Java => &self.java,
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
        assert_eq!(Language::parse(Some("TS")).ok(), Some(Language::TypeScript));
        assert_eq!(Language::parse(Some("r")).ok(), Some(Language::R));
        assert_eq!(Language::parse(Some("Java")).ok(), Some(Language::Java));
        assert_eq!(
            err.to_string(),
            "Unsupported language 'cobol'; supported: python, javascript, typescript, bash, r, java"
        );
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
        assert_eq!(Language::Bash.driver_args().expect("args").len(), 3);
        assert_eq!(Language::Python.driver_args().expect("args")[2], OsString::from(MAX_RESULT_BYTES.to_string()));
    }

    #[test]
    fn driver_files_are_written_once_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("abx-driver-test-{}", crate::code::new_id()));
        std::fs::create_dir(&base).expect("base");
        let first = driver_file(&base, "x.R", "cat(1)").expect("write");
        assert_eq!(std::fs::read_to_string(&first).expect("read"), "cat(1)");
        assert_eq!(driver_file(&base, "x.R", "cat(1)").expect("again"), first);
        assert_ne!(driver_file(&base, "x.R", "cat(2)").expect("other"), first);
        let dir = first.parent().expect("dir");
        assert_eq!(std::fs::metadata(dir).expect("meta").permissions().mode() & 0o777, 0o755);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(driver_file(&base, "x.R", "cat(3)").is_err(), "a shared directory is refused");
        std::fs::remove_dir_all(&base).expect("cleanup");
    }
}

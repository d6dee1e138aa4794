//! Installed packages, as the package managers themselves list them.
//!
//! `pip` (through the `python3` children would run), `npm` (the project in
//! the base directory, as the reference lists its working directory) and
//! `dpkg`. Each listing is one bounded program run (see [`super::run`]); a
//! manager that is not installed lists nothing, as in the reference.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use abx_wire::api::PackageInfo;

use super::run::{run, RunError};

/// How long a listing may take (the reference's limit).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Largest listing read (a few thousand packages take well under 1 MiB).
pub const MAX_OUTPUT: usize = 8 * 1024 * 1024;

/// A package manager `GET /packages` can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// Python packages of `python3`.
    Pip,
    /// Node packages of the project in the base directory.
    Npm,
    /// Debian packages.
    Dpkg,
}

impl Manager {
    /// Every manager, in the order the error message names them.
    pub const ALL: [Manager; 3] = [Manager::Pip, Manager::Npm, Manager::Dpkg];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Manager::Pip => "pip",
            Manager::Npm => "npm",
            Manager::Dpkg => "dpkg",
        }
    }

    /// Parses a wire name.
    pub fn from_name(name: &str) -> Option<Manager> {
        Manager::ALL.into_iter().find(|m| m.as_str() == name)
    }

    fn command(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Manager::Pip => ("python3", &["-m", "pip", "list", "--format", "json", "--disable-pip-version-check"]),
            Manager::Npm => ("npm", &["list", "--json", "--depth=0"]),
            Manager::Dpkg => ("dpkg-query", &["-W", "--showformat=${db:Status-Abbrev}\\t${Package}\\t${Version}\\n"]),
        }
    }

    /// The packages in a listing's output; what cannot be read is left out.
    pub fn parse(self, output: &[u8]) -> Vec<PackageInfo> {
        match self {
            Manager::Pip => parse_pip(output),
            Manager::Npm => parse_npm(output),
            Manager::Dpkg => parse_dpkg(output),
        }
    }

    /// Lists the installed packages, running the manager with `env` in `cwd`.
    ///
    /// # Errors
    /// [`RunError::Timeout`], [`RunError::TooMuchOutput`] and [`RunError::Io`];
    /// a manager that is not installed lists nothing. A manager that exits
    /// non-zero but prints a listing (npm with missing dependencies) is read.
    pub async fn list(self, env: &BTreeMap<String, String>, cwd: &Path) -> Result<Vec<PackageInfo>, RunError> {
        let (program, args) = self.command();
        match run(program, args, env, cwd, TIMEOUT, MAX_OUTPUT).await {
            Ok(ran) => Ok(self.parse(&ran.stdout)),
            Err(e) if e.is_not_installed() => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

fn parse_pip(output: &[u8]) -> Vec<PackageInfo> {
    #[derive(serde::Deserialize)]
    struct Entry {
        name: String,
        #[serde(default)]
        version: String,
    }
    serde_json::from_slice::<Vec<Entry>>(output)
        .map(|entries| entries.into_iter().map(|e| PackageInfo { name: e.name, version: e.version }).collect())
        .unwrap_or_default()
}

fn parse_npm(output: &[u8]) -> Vec<PackageInfo> {
    let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice(output) else {
        return Vec::new();
    };
    let Some(serde_json::Value::Object(deps)) = doc.get("dependencies") else {
        return Vec::new();
    };
    deps.iter()
        .map(|(name, info)| {
            let version = match info {
                serde_json::Value::Object(o) => o.get("version").and_then(|v| v.as_str()).unwrap_or_default().into(),
                serde_json::Value::String(s) => s.clone(),
                _ => String::new(),
            };
            PackageInfo { name: name.clone(), version }
        })
        .collect()
}

/// `<status>\t<name>\t<version>` lines; only installed packages (status `?i`) count.
fn parse_dpkg(output: &[u8]) -> Vec<PackageInfo> {
    String::from_utf8_lossy(output)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let status = fields.next()?;
            let (name, version) = (fields.next()?, fields.next()?);
            (status.as_bytes().get(1) == Some(&b'i') && !name.is_empty())
                .then(|| PackageInfo { name: name.into(), version: version.into() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[PackageInfo]) -> Vec<(&str, &str)> {
        list.iter().map(|p| (p.name.as_str(), p.version.as_str())).collect()
    }

    #[test]
    fn pip_json_lists_names_and_versions() {
        let out = br#"[{"name": "anyio", "version": "4.6.0"}, {"name": "pip", "version": "24.2", "editable_project_location": "/x"}]"#;
        assert_eq!(names(&Manager::Pip.parse(out)), [("anyio", "4.6.0"), ("pip", "24.2")]);
        assert!(Manager::Pip.parse(b"/usr/bin/python3: No module named pip").is_empty());
    }

    #[test]
    fn npm_lists_direct_dependencies() {
        let out = br#"{"name": "app", "dependencies": {"left-pad": {"version": "1.3.0"}, "odd": "2.0.0", "missing": {"missing": true}}}"#;
        assert_eq!(names(&Manager::Npm.parse(out)), [("left-pad", "1.3.0"), ("odd", "2.0.0"), ("missing", "")]);
        assert!(Manager::Npm.parse(b"{}").is_empty());
    }

    #[test]
    fn dpkg_keeps_installed_packages_only() {
        let out = b"ii \tadduser\t3.134\nrc \told-thing\t1.0\nhi \theld\t2:1.2-3\ngarbage\n";
        assert_eq!(names(&Manager::Dpkg.parse(out)), [("adduser", "3.134"), ("held", "2:1.2-3")]);
    }

    #[test]
    fn managers_have_wire_names() {
        assert_eq!(Manager::from_name("dpkg"), Some(Manager::Dpkg));
        assert_eq!(Manager::from_name("apt"), None);
    }
}

//! Where each runtime's CLI is on the children's `PATH` and the version it
//! prints, probed through the supervisor and cached 30 s per runtime (what
//! `runtimes.rs` reports).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::adapters::Descriptor;
use crate::process::ExecSpec;

const CACHE_FOR: Duration = Duration::from_secs(30);
const VERSION_TIMEOUT: f64 = 10.0;

/// When a runtime was probed, where its CLI is and its version.
type Probe = (Instant, Option<PathBuf>, Option<String>);

/// Probes per runtime.
#[derive(Debug, Default)]
pub struct RuntimeCache {
    probes: Mutex<HashMap<&'static str, Probe>>,
}

impl RuntimeCache {
    /// Where runtime `d`'s CLI is on `path_var` and its version (`env`: the
    /// environment it is asked in), from the cache while it is fresh.
    pub async fn probe(
        &self,
        d: &'static Descriptor,
        path_var: &str,
        env: BTreeMap<String, String>,
    ) -> (Option<PathBuf>, Option<String>) {
        if let Some((at, path, version)) = self.probes.lock().unwrap_or_else(PoisonError::into_inner).get(d.name) {
            if at.elapsed() < CACHE_FOR {
                return (path.clone(), version.clone());
            }
        }
        let path = d.binary.and_then(|b| super::procenv::which(b, path_var));
        let version = match (&path, d.binary) {
            (Some(program), Some(binary)) => version_of(program.clone(), binary, env).await,
            _ => None,
        };
        self.probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(d.name, (Instant::now(), path.clone(), version.clone()));
        (path, version)
    }
}

/// The first line `program --version` prints (stdout, else stderr), at most 200 characters.
async fn version_of(program: PathBuf, binary: &str, env: BTreeMap<String, String>) -> Option<String> {
    let exec = ExecSpec {
        command: format!("{binary} --version"),
        argv: vec![binary.to_string(), "--version".into()],
        program: Some(program),
        cwd: None,
        env,
        timeout: Some(VERSION_TIMEOUT),
        credentials: None,
    };
    let result = crate::process::shell::run(exec, Some(4096)).await.ok()?;
    let text = if result.stdout.trim().is_empty() { result.stderr } else { result.stdout };
    let line = text.trim().lines().next()?.to_string();
    Some(line.chars().take(200).collect())
}

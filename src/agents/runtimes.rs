//! What `GET /v1/agents/runtimes` reports per declared runtime: whether this
//! server implements it, whether its CLI is on the children's `PATH`, and
//! the version it prints (probed through the supervisor, cached 30 s).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::adapters::{Capabilities, Descriptor};
use super::runtime::Agents;
use crate::process::ExecSpec;

const CACHE_FOR: Duration = Duration::from_secs(30);
const VERSION_TIMEOUT: f64 = 10.0;

/// One runtime's report.
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    /// Its fixed facts.
    pub descriptor: &'static Descriptor,
    /// Where its CLI is.
    pub path: Option<PathBuf>,
    /// Whether it can run (its CLI is found, or it needs none).
    pub installed: bool,
    /// The first line its `--version` printed.
    pub version: Option<String>,
    /// Whether a conventional credential variable is set for it.
    pub auth_env_present: bool,
    /// Whether a request that names no runtime gets this one.
    pub default: bool,
}

impl RuntimeInfo {
    /// What it supports.
    pub fn capabilities(&self) -> Capabilities {
        self.descriptor.capabilities
    }
}

/// When a runtime was probed, where its CLI is and its version.
type Probe = (Instant, Option<PathBuf>, Option<String>);

/// Probes per runtime.
#[derive(Debug, Default)]
pub struct RuntimeCache {
    probes: Mutex<HashMap<&'static str, Probe>>,
}

impl Agents {
    /// Every declared runtime, in the reference's order.
    pub async fn runtimes(&self) -> Vec<RuntimeInfo> {
        let env = super::procenv::base_env(&self.child_env(), &self.config.passthrough_env);
        let path_var = env.get("PATH").cloned().unwrap_or_default();
        let source = &self.child_env();
        let default = self.default_runtime();
        let probes = self.adapters.ordered().into_iter().map(|d| {
            let env = env.clone();
            let path_var = path_var.clone();
            async move {
                let (path, version) = self.probe(d, &path_var, env).await;
                let auth_env_present =
                    d.credential_env.iter().chain(d.passthrough_env).any(|n| source.contains_key(*n));
                RuntimeInfo {
                    descriptor: d,
                    installed: path.is_some() || d.binary.is_none(),
                    path,
                    version,
                    auth_env_present,
                    default: default == Some(d.name),
                }
            }
        });
        futures_util::future::join_all(probes).await
    }

    async fn probe(
        &self,
        d: &'static Descriptor,
        path_var: &str,
        env: std::collections::BTreeMap<String, String>,
    ) -> (Option<PathBuf>, Option<String>) {
        if let Some((at, path, version)) =
            self.runtimes.probes.lock().unwrap_or_else(PoisonError::into_inner).get(d.name)
        {
            if at.elapsed() < CACHE_FOR {
                return (path.clone(), version.clone());
            }
        }
        let path = d.binary.and_then(|b| super::procenv::which(b, path_var));
        let version = match (&path, d.binary) {
            (Some(program), Some(binary)) => version_of(program.clone(), binary, env).await,
            _ => None,
        };
        self.runtimes
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(d.name, (Instant::now(), path.clone(), version.clone()));
        (path, version)
    }
}

/// The first line `program --version` prints (stdout, else stderr), at most 200 characters.
async fn version_of(program: PathBuf, binary: &str, env: std::collections::BTreeMap<String, String>) -> Option<String> {
    let exec = ExecSpec {
        command: format!("{binary} --version"),
        argv: vec![binary.to_string(), "--version".into()],
        program: Some(program),
        cwd: None,
        env,
        timeout: Some(VERSION_TIMEOUT),
        credentials: None,
    };
    let result = crate::process::run::run(exec, Some(4096)).await.ok()?;
    let text = if result.stdout.trim().is_empty() { result.stderr } else { result.stdout };
    let line = text.trim().lines().next()?.to_string();
    Some(line.chars().take(200).collect())
}

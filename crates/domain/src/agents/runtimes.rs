//! What `GET /v1/agents/runtimes` reports per declared runtime: whether this
//! server implements it, whether its CLI is on the children's `PATH`, and
//! the version it prints (probed by `runtime_probes.rs`).

use std::path::PathBuf;

use super::adapters::{Capabilities, Descriptor};
use super::runtime::Agents;

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
                let (path, version) = self.runtimes.probe(d, &path_var, env).await;
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
}

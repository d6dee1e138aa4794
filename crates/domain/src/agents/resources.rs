//! The stored resources a session or response can name: agent definitions,
//! environments (a bound workspace directory with its env and files),
//! environment templates and file blobs (`POST /v1/files`). Each kind is a
//! [`Registry`] journaled under `state_dir/resources/`; bytes (blobs and
//! template files) are files beside it, never held whole in memory.
//!
//! Secret values are never written to disk: an MCP header value of a
//! definition lives in memory only (its name is kept), so after a restart
//! such a definition is refused until its tools are sent again
//! ([`Definition::lost_secrets`]).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::error::AgentError;
use super::journal;
use super::records::{Quota, Registry, Stored};
use super::settings::Quotas;
use super::spec::{CommandSpec, McpServer};

/// Bytes a caller may keep as blobs at most (the reference's figure).
pub const MAX_OWNER_BLOB_BYTES: u64 = 256 * 1024 * 1024;

/// An MCP tool of a definition: the server handed to the CLI and the vault
/// credential it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DefinitionTool {
    /// Label, URL and headers (header values memory only).
    pub server: McpServer,
    /// `credential_id`.
    pub credential_id: Option<String>,
}

/// An agent definition (`agent_<24 hex>`): what a session or response
/// copies when it names the definition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// The canonical runtime (it never changes).
    pub adapter: String,
    /// The model handed to the CLI.
    pub model: String,
    /// `name`.
    pub name: Option<String>,
    /// `instructions`.
    pub instructions: Option<String>,
    /// `metadata`.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// Codex's reasoning effort.
    pub reasoning_effort: Option<String>,
    /// MCP tools.
    #[serde(default)]
    pub tools: Vec<DefinitionTool>,
    /// Ours: the `command` runtime's program.
    pub command: Option<CommandSpec>,
}

impl Definition {
    /// Whether a header value was lost with a restart (values are memory only).
    pub fn lost_secrets(&self) -> bool {
        self.tools.iter().any(|t| t.server.headers.values().any(String::is_empty))
    }
}

/// One file an environment or template installs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedFile {
    /// Path relative to the workspace directory.
    pub rel: String,
    /// Its bytes' size.
    pub size: u64,
    /// The blob it came from (`type: file_id`), else inline.
    pub file_id: Option<String>,
    /// Where its bytes are kept ([`Resources::content_path`]).
    pub content: String,
}

/// An environment (`env_<24 hex>`): a workspace directory binding.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// As the caller sent it.
    pub workspace_directory: String,
    /// Its real path.
    pub root: PathBuf,
    /// The files installed at creation, as listed on the wire.
    pub files: Vec<Value>,
    /// Vaults its sessions use.
    #[serde(default)]
    pub vault_ids: Vec<String>,
    /// An empty `openai_hosted` request that became `self_hosted`.
    #[serde(default)]
    pub converted: bool,
    /// Variables of its sessions' CLIs (never returned).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A reduced environment template (`envtmpl_<24 hex>`): name, env and files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Template {
    /// `name`.
    pub name: Option<String>,
    /// Variables (never returned).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files (bodies never returned).
    #[serde(default)]
    pub files: Vec<PlannedFile>,
}

/// A stored blob (`file-<24 hex>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blob {
    /// `filename`.
    pub filename: String,
    /// Its size.
    pub bytes: u64,
}

/// The registries and byte stores; see the module documentation.
#[derive(Debug)]
pub struct Resources {
    /// Agent definitions.
    pub definitions: Registry<Definition>,
    /// Environments.
    pub environments: Registry<Environment>,
    /// Environment templates.
    pub templates: Registry<Template>,
    /// File blobs.
    pub blobs: Registry<Blob>,
    dir: PathBuf,
    /// Held while template contents are kept or swept, so a sweep never
    /// removes bytes a template being created is about to name.
    contents: Mutex<()>,
    /// Largest file accepted (blob, inline or environment file).
    pub max_file_bytes: u64,
}

impl Resources {
    /// The resources under `dir`: journaled there when `persist`, else in
    /// memory (bytes still go to files under `dir`). Blocks: run at start.
    pub fn open(dir: &Path, persist: bool, max_file_bytes: u64) -> Self {
        if let Err(e) =
            journal::private_dir(&dir.join("files")).and_then(|()| journal::private_dir(&dir.join("content")))
        {
            tracing::warn!(dir = %dir.display(), error = %e, "agents: the resources directory cannot be created");
        }
        // Uploads a dropped connection left half written.
        for entry in std::fs::read_dir(dir.join("files")).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(".upload-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Resources {
            definitions: registry(persist, "agent_", &dir.join("definitions.jsonl")),
            environments: registry(persist, "env_", &dir.join("environments.jsonl")),
            templates: registry(persist, "envtmpl_", &dir.join("templates.jsonl")),
            blobs: registry(persist, "file-", &dir.join("files.jsonl")),
            dir: dir.to_path_buf(),
            contents: Mutex::new(()),
            max_file_bytes,
        }
    }

    /// These resources, bounding what each caller keeps by `quotas`.
    pub fn with_quotas(self, quotas: &Quotas) -> Self {
        fn count<T>(name: &'static str, limit: usize, what: &'static str) -> Quota<T> {
            Quota { count: Some((name, limit, what)), bytes: None }
        }
        let weigh: fn(&Template) -> u64 = |t| t.files.iter().map(|f| f.size).sum();
        Resources {
            definitions: self.definitions.with_quota(count(
                "agents_max_definitions",
                quotas.definitions,
                "definitions",
            )),
            environments: self.environments.with_quota(count(
                "agents_max_environments",
                quotas.environments,
                "environments",
            )),
            templates: self.templates.with_quota(Quota {
                count: Some(("agents_max_templates", quotas.templates, "templates")),
                bytes: Some(("agents_max_template_bytes", quotas.template_bytes, weigh)),
            }),
            ..self
        }
    }

    /// Where blob `id`'s bytes are.
    pub fn blob_path(&self, id: &str) -> PathBuf {
        self.dir.join("files").join(id)
    }

    /// A new temporary file for a blob being uploaded (renamed by [`Resources::commit_blob`]).
    pub fn upload_path(&self) -> PathBuf {
        self.dir.join("files").join(format!(".upload-{}", crate::ids::random_hex(8)))
    }

    /// Bytes `owner`'s blobs hold.
    pub fn blob_bytes(&self, owner: &str) -> u64 {
        self.blobs.list(owner).iter().map(|b| b.data.bytes).sum()
    }

    /// Records the uploaded file at `upload` as a blob of `owner`.
    ///
    /// # Errors
    /// `agents.limit_exceeded` past the owner's quota; the file cannot be
    /// moved or recorded (the upload is removed either way on failure).
    pub fn commit_blob(&self, owner: &str, upload: &Path, blob: Blob) -> Result<Arc<Stored<Blob>>, AgentError> {
        if self.blob_bytes(owner) + blob.bytes > MAX_OWNER_BLOB_BYTES {
            let _ = std::fs::remove_file(upload);
            return Err(AgentError::invalid_code("blob storage is full", Some("data"), "agents.limit_exceeded"));
        }
        let id = self.blobs.mint();
        if let Err(e) = std::fs::rename(upload, self.blob_path(&id)) {
            let _ = std::fs::remove_file(upload);
            return Err(AgentError::internal("cannot store a file", e));
        }
        self.blobs.create_with_id(owner, id.clone(), blob).inspect_err(|_| {
            let _ = std::fs::remove_file(self.blob_path(&id));
        })
    }

    /// Where content `key`'s bytes are.
    pub fn content_path(&self, key: &str) -> PathBuf {
        self.dir.join("content").join(key)
    }

    /// Runs `change` (which keeps contents and changes templates) with the
    /// contents held, then removes those of `swept(outcome)` that no
    /// template names any more: the bytes of a deleted or replaced file do
    /// not outlive the last template that installs them.
    pub(crate) fn with_contents<R>(
        &self,
        change: impl FnOnce() -> Result<R, AgentError>,
        swept: impl FnOnce(&R) -> Vec<String>,
    ) -> Result<R, AgentError> {
        let _held = self.contents.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = change()?;
        for key in swept(&outcome) {
            if !self.templates.any(|t| t.files.iter().any(|f| f.content == key)) {
                let _ = std::fs::remove_file(self.content_path(&key));
            }
        }
        Ok(outcome)
    }

    /// Keeps `bytes` as content (named by their SHA-256), returning its key.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn put_content(&self, bytes: &[u8]) -> Result<String, AgentError> {
        let key = crate::ids::hex(&Sha256::digest(bytes));
        let path = self.content_path(&key);
        if !path.exists() {
            write_atomic(&path, bytes).map_err(|e| AgentError::internal("cannot store file content", e))?;
        }
        Ok(key)
    }

    /// Keeps blob `id`'s bytes as content, returning its key.
    ///
    /// # Errors
    /// The blob cannot be read or copied.
    pub fn content_of_blob(&self, id: &str) -> Result<String, AgentError> {
        let source = self.blob_path(id);
        let mut hasher = Sha256::new();
        let mut file = std::fs::File::open(&source).map_err(|e| AgentError::internal("cannot read a file", e))?;
        io::copy(&mut file, &mut hasher).map_err(|e| AgentError::internal("cannot read a file", e))?;
        let key = crate::ids::hex(&hasher.finalize());
        let path = self.content_path(&key);
        if !path.exists() {
            let tmp = path.with_extension(format!("tmp.{}", crate::ids::random_hex(4)));
            std::fs::copy(&source, &tmp)
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|e| AgentError::internal("cannot store file content", e))?;
        }
        Ok(key)
    }
}

fn registry<T: Clone + Serialize + serde::de::DeserializeOwned>(
    persist: bool,
    prefix: &str,
    path: &Path,
) -> Registry<T> {
    if persist {
        Registry::load(prefix, path)
    } else {
        Registry::in_memory(prefix)
    }
}

/// Writes `path` atomically (temporary file, then rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", crate::ids::random_hex(4)));
    std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_stay_in_memory_and_are_missed_after_a_reload() {
        let dir = tempfile::tempdir().expect("tmp");
        let resources = Resources::open(dir.path(), true, 1024);
        let server = McpServer::remote("docs", "https://d/mcp", BTreeMap::from([("X-Key".into(), "s3cret".into())]));
        let definition = Definition {
            adapter: "codex".into(),
            model: "gpt-5".into(),
            tools: vec![DefinitionTool { server, credential_id: None }],
            ..Definition::default()
        };
        let stored = resources.definitions.create("o", definition).expect("create");
        assert!(!stored.data.lost_secrets());
        drop(resources);
        let text = std::fs::read_to_string(dir.path().join("definitions.jsonl")).expect("journal");
        assert!(!text.contains("s3cret"), "{text}");
        let back = Resources::open(dir.path(), true, 1024);
        let again = back.definitions.get("o", &stored.id).expect("kept");
        assert_eq!(again.data.model, "gpt-5");
        assert!(again.data.lost_secrets());
    }

    #[test]
    fn content_is_kept_once_by_digest() {
        let dir = tempfile::tempdir().expect("tmp");
        let resources = Resources::open(dir.path(), false, 1024);
        let a = resources.put_content(b"abc").expect("a");
        assert_eq!(a, resources.put_content(b"abc").expect("again"));
        assert_eq!(std::fs::read(resources.content_path(&a)).expect("read"), b"abc");
    }
}

//! Environments, templates and their files as domain operations on
//! [`Resources`]: an environment binds a workspace directory (created when
//! missing), applies a template's and its own `env` and files, and is never
//! provisioned; files are written once and never overwritten.
//!
//! Creating is two-phase so that the caller can admit every path under its
//! policy in between: `prepare_*` validates and resolves (no writes but the
//! workspace directory), `commit_*` writes the files and the record. All of
//! it blocks; callers run it off the runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

use super::error::AgentError;
use super::records::Stored;
use super::resources::{Environment, PlannedFile, Resources, Template};
use super::workspace_files::{self, check_workspace_root, Source};
use crate::policy::PathGuard;

const WORKSPACE_FIELD: &str = "environment.workspace_directory";

/// Where a requested file's bytes come from.
#[derive(Debug, Clone, PartialEq)]
pub enum FileSource {
    /// Decoded `data`.
    Inline(Vec<u8>),
    /// A blob of `POST /v1/files`.
    Blob(String),
}

/// One file of a request: where it goes and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRequest {
    /// Path relative to the workspace directory.
    pub rel: String,
    /// Its bytes.
    pub source: FileSource,
    /// The request field that named it (`environment.files[0]`, `file`).
    pub field: String,
}

/// `POST /v1/agents/environments`, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewEnvironment {
    /// `workspace_directory` as sent (default `/workspace`).
    pub workspace_directory: String,
    /// Its own `env` (over the template's).
    pub env: BTreeMap<String, String>,
    /// Its own files (after the template's).
    pub files: Vec<FileRequest>,
    /// `vault_ids` (already checked to exist).
    pub vault_ids: Vec<String>,
    /// `environment_template_id`.
    pub template_id: Option<String>,
    /// An empty `openai_hosted` request.
    pub converted: bool,
}

/// Where a file about to be installed takes its bytes from.
#[derive(Debug, Clone)]
enum Origin {
    /// A template's stored content (its key).
    Content(String),
    /// Bytes of the request.
    Inline(Vec<u8>),
    /// A blob (its id).
    Blob(String),
}

/// A file about to be installed: written once, its bytes kept nowhere else.
#[derive(Debug, Clone)]
pub struct Install {
    /// Path relative to the workspace directory.
    pub rel: String,
    /// Its size.
    pub size: u64,
    origin: Origin,
}

/// An environment ready to be written: its directory and every file.
#[derive(Debug, Clone)]
pub struct PreparedEnvironment {
    /// The record to store.
    pub environment: Environment,
    /// Files to install, in order.
    pub files: Vec<Install>,
}

impl PreparedEnvironment {
    /// The absolute paths it will write, under the directory as given (for the caller's policy).
    pub fn targets(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| self.environment.root.join(&f.rel)).collect()
    }
}

/// The wire listing of an installed file (its id: 20 hex digits of the
/// SHA-256 of its path; the reference takes SHA-1's).
pub fn file_listing(file: &Install) -> Value {
    use sha2::Digest;
    let digest = crate::ids::hex(&sha2::Sha256::digest(file.rel.as_bytes())[..10]);
    json!({"id": format!("envfile_{digest}"), "type": "inline", "path": format!("/workspace/{}", file.rel), "size_bytes": file.size})
}

impl Resources {
    fn too_large(&self, field: &str) -> AgentError {
        let message = format!("{field}: larger than {} bytes", self.max_file_bytes);
        AgentError::invalid_code(message, Some(field), "agents.file_too_large")
    }

    /// The requested files as they will be installed once (blobs resolved for `owner`).
    ///
    /// # Errors
    /// `agents.file_not_found` for a blob this server did not mint for the
    /// caller; `agents.file_too_large`.
    fn installs(&self, owner: &str, files: &[FileRequest]) -> Result<Vec<Install>, AgentError> {
        let install = |f: &FileRequest| match &f.source {
            FileSource::Inline(bytes) if bytes.len() as u64 > self.max_file_bytes => {
                Err(self.too_large(&format!("{}.data", f.field)))
            }
            FileSource::Inline(bytes) => {
                Ok(Install { rel: f.rel.clone(), size: bytes.len() as u64, origin: Origin::Inline(bytes.clone()) })
            }
            FileSource::Blob(id) => {
                let blob = self.blob_of(owner, id, &f.field)?;
                Ok(Install { rel: f.rel.clone(), size: blob.data.bytes, origin: Origin::Blob(id.clone()) })
            }
        };
        files.iter().map(install).collect()
    }

    fn blob_of(&self, owner: &str, id: &str, field: &str) -> Result<Arc<Stored<super::resources::Blob>>, AgentError> {
        self.blobs.get(owner, id).ok_or_else(|| {
            let param = format!("{field}.file_id");
            let message = format!(
                "{param}: this server did not mint that file id; upload it with POST /v1/files and purpose=user_data"
            );
            AgentError::invalid_code(message, Some(&param), "agents.file_not_found")
        })
    }

    fn write_install(&self, guard: &PathGuard, root: &std::path::Path, file: &Install) -> Result<bool, AgentError> {
        let (content, blob);
        let source = match &file.origin {
            Origin::Inline(bytes) => Source::Bytes(bytes),
            Origin::Content(key) => {
                content = self.content_path(key);
                Source::File(&content, file.size)
            }
            Origin::Blob(id) => {
                blob = self.blob_path(id);
                Source::File(&blob, file.size)
            }
        };
        workspace_files::write_new_file(guard, root, &file.rel, &source)
    }

    /// Stores each requested file's bytes as template content (blobs resolved for `owner`).
    ///
    /// # Errors
    /// `agents.file_not_found` for a blob this server did not mint for the
    /// caller; `agents.file_too_large`; content that cannot be stored.
    fn template_files(&self, owner: &str, files: &[FileRequest]) -> Result<Vec<PlannedFile>, AgentError> {
        files
            .iter()
            .map(|f| match &f.source {
                FileSource::Inline(bytes) => {
                    if bytes.len() as u64 > self.max_file_bytes {
                        return Err(self.too_large(&format!("{}.data", f.field)));
                    }
                    let content = self.put_content(bytes)?;
                    Ok(PlannedFile { rel: f.rel.clone(), size: bytes.len() as u64, file_id: None, content })
                }
                FileSource::Blob(id) => {
                    let blob = self.blob_of(owner, id, &f.field)?;
                    let content = self.content_of_blob(id)?;
                    Ok(PlannedFile { rel: f.rel.clone(), size: blob.data.bytes, file_id: Some(id.clone()), content })
                }
            })
            .collect()
    }

    /// Validates `new` for `owner`: the template, the workspace directory
    /// (created), the files' bytes.
    ///
    /// # Errors
    /// 404 for an unknown template; 400s of the directory and the files.
    pub fn prepare_environment(&self, owner: &str, new: NewEnvironment) -> Result<PreparedEnvironment, AgentError> {
        let template = match &new.template_id {
            None => None,
            Some(id) => Some(self.templates.get(owner, id).ok_or_else(|| {
                AgentError::not_found("environment template", id, "environment.environment_template_id")
            })?),
        };
        let root = PathBuf::from(new.workspace_directory.trim());
        workspace_files::check_workspace_spelling(new.workspace_directory.trim(), WORKSPACE_FIELD)?;
        let mut env = template.as_ref().map(|t| t.data.env.clone()).unwrap_or_default();
        env.extend(new.env);
        let mut files: Vec<Install> = template
            .iter()
            .flat_map(|t| t.data.files.iter())
            .map(|f| Install { rel: f.rel.clone(), size: f.size, origin: Origin::Content(f.content.clone()) })
            .collect();
        files.extend(self.installs(owner, &new.files)?);
        let environment = Environment {
            workspace_directory: new.workspace_directory.trim().to_string(),
            root,
            files: files.iter().map(file_listing).collect(),
            vault_ids: new.vault_ids,
            converted: new.converted,
            env,
        };
        Ok(PreparedEnvironment { environment, files })
    }

    /// Creates the directory (when missing) and installs the prepared files
    /// through `guard`, the governing endpoint's path rules (removing the
    /// files it created if one fails), and stores the environment.
    ///
    /// # Errors
    /// The refusals of [`check_workspace_root`] and of [`workspace_files::write_new_file`].
    pub fn commit_environment(
        &self,
        owner: &str,
        mut prepared: PreparedEnvironment,
        guard: &PathGuard,
    ) -> Result<Arc<Stored<Environment>>, AgentError> {
        let root = check_workspace_root(guard, &prepared.environment.workspace_directory, WORKSPACE_FIELD)?;
        prepared.environment.root.clone_from(&root);
        // The template's contents stay while they are copied.
        self.with_contents(
            || {
                let mut created = Vec::new();
                for file in &prepared.files {
                    match self.write_install(guard, &root, file) {
                        Ok(true) => created.push(root.join(&file.rel)),
                        Ok(false) => {}
                        Err(e) => {
                            for path in created {
                                let _ = std::fs::remove_file(path);
                            }
                            return Err(e);
                        }
                    }
                }
                Ok(())
            },
            |()| Vec::new(),
        )?;
        self.environments.create(owner, prepared.environment)
    }

    /// Writes one more file into environment `environment`'s directory, through `guard`.
    ///
    /// # Errors
    /// The refusals of `Resources::installs` and of writing it.
    pub fn add_environment_file(
        &self,
        owner: &str,
        environment: &Stored<Environment>,
        file: &FileRequest,
        guard: &PathGuard,
    ) -> Result<Install, AgentError> {
        let install = self.installs(owner, std::slice::from_ref(file))?.remove(0);
        self.write_install(guard, &environment.data.root, &install)?;
        Ok(install)
    }

    /// Stores a new template of `owner`.
    ///
    /// # Errors
    /// The refusals of `Resources::template_files`; a journal that cannot be written.
    pub fn create_template(
        &self,
        owner: &str,
        name: Option<String>,
        env: BTreeMap<String, String>,
        files: &[FileRequest],
    ) -> Result<Arc<Stored<Template>>, AgentError> {
        self.with_contents(
            || {
                let files = self.template_files(owner, files)?;
                self.templates.create(owner, Template { name, env, files })
            },
            |_| Vec::new(),
        )
    }

    /// Changes template `id` of `owner`: the fields given replace its own.
    ///
    /// # Errors
    /// 404 for an unknown id; the refusals of `Resources::template_files`.
    pub fn update_template(
        &self,
        owner: &str,
        id: &str,
        name: Option<Option<String>>,
        env: Option<BTreeMap<String, String>>,
        files: Option<&[FileRequest]>,
    ) -> Result<Arc<Stored<Template>>, AgentError> {
        let (updated, _) = self.with_contents(
            || {
                let files = files.map(|f| self.template_files(owner, f)).transpose()?;
                // What no template may name afterwards: the files replaced, or the new
                // ones when there is no such template (their bytes were just kept).
                let replaced = match (&files, self.templates.get(owner, id)) {
                    (Some(_), Some(old)) => contents_of(&old.data),
                    (Some(new), None) => new.iter().map(|f| f.content.clone()).collect(),
                    (None, _) => Vec::new(),
                };
                let updated = self.templates.update(owner, id, |t| {
                    if let Some(name) = name {
                        t.name = name;
                    }
                    if let Some(env) = env {
                        t.env = env;
                    }
                    if let Some(files) = files {
                        t.files = files;
                    }
                    Ok(())
                })?;
                Ok((updated, replaced))
            },
            |(_, replaced)| replaced.clone(),
        )?;
        updated.ok_or_else(|| AgentError::not_found("environment template", id, "environment_template_id"))
    }

    /// Deletes template `id` of `owner` and the bytes of its files that no
    /// other template installs; `None` for an unknown id.
    ///
    /// # Errors
    /// The journal cannot be written.
    pub fn delete_template(&self, owner: &str, id: &str) -> Result<Option<Arc<Stored<Template>>>, AgentError> {
        self.with_contents(
            || self.templates.delete(owner, id),
            |deleted| deleted.as_ref().map(|t| contents_of(&t.data)).unwrap_or_default(),
        )
    }
}

/// The content keys of `template`'s files.
fn contents_of(template: &Template) -> Vec<String> {
    template.files.iter().map(|f| f.content.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_templates_bytes_go_with_the_last_template_that_installs_them() {
        let state = tempfile::tempdir().expect("state");
        let resources = Resources::open(state.path(), true, 1024);
        let inline = |bytes: &[u8]| FileRequest {
            rel: "f.txt".into(),
            source: FileSource::Inline(bytes.to_vec()),
            field: "files[0]".into(),
        };
        let kept = |t: &Stored<Template>| resources.content_path(&t.data.files[0].content).exists();
        let a = resources.create_template("o", None, BTreeMap::new(), &[inline(b"shared")]).expect("a");
        let b = resources.create_template("p", None, BTreeMap::new(), &[inline(b"shared")]).expect("b");
        assert!(kept(&a) && a.data.files[0].content == b.data.files[0].content, "one copy of equal bytes");
        assert!(resources.delete_template("o", &a.id).expect("delete a").is_some());
        assert!(kept(&b), "another owner's template still installs them");
        assert!(resources.delete_template("o", &b.id).expect("foreign").is_none(), "not o's to delete");
        assert!(resources.delete_template("p", &b.id).expect("delete b").is_some());
        assert!(!kept(&b), "gone with the last template");

        let c = resources.create_template("o", None, BTreeMap::new(), &[inline(b"old")]).expect("c");
        let renamed = resources.update_template("o", &c.id, Some(Some("n".into())), None, None).expect("rename");
        assert!(kept(&renamed), "a change that keeps the files keeps their bytes");
        let replaced = resources.update_template("o", &c.id, None, None, Some(&[inline(b"new")])).expect("replace");
        assert!(!kept(&c), "the replaced file's bytes are gone");
        assert!(kept(&replaced));

        let unknown = resources.update_template("o", "envtmpl_missing", None, None, Some(&[inline(b"stray")]));
        assert!(unknown.is_err(), "no such template");
        let left: Vec<_> = std::fs::read_dir(state.path().join("content"))
            .expect("content")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let expected = std::ffi::OsString::from(&replaced.data.files[0].content);
        assert_eq!(left, [expected], "the bytes kept for a template that is not there are not left behind");
    }

    #[test]
    fn an_environment_installs_its_template_and_its_own_files() {
        let state = tempfile::tempdir().expect("state");
        let (work, guard, _) = crate::policy::paths::scratch();
        let resources = Resources::open(state.path(), false, 1024);
        let inline = |rel: &str, bytes: &[u8]| FileRequest {
            rel: rel.into(),
            source: FileSource::Inline(bytes.to_vec()),
            field: "files[0]".into(),
        };
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let template = resources.create_template("o", Some("t".into()), env, &[inline("t.txt", b"tt")]).expect("tmpl");
        let new = NewEnvironment {
            workspace_directory: work.path().join("ws").to_string_lossy().into_owned(),
            files: vec![inline("d/own.txt", b"own")],
            template_id: Some(template.id.clone()),
            ..NewEnvironment::default()
        };
        let prepared = resources.prepare_environment("o", new).expect("prepare");
        assert_eq!(prepared.targets().len(), 2);
        let stored = resources.commit_environment("o", prepared, &guard).expect("commit");
        assert_eq!(std::fs::read(stored.data.root.join("t.txt")).expect("t"), b"tt");
        assert_eq!(std::fs::read(stored.data.root.join("d/own.txt")).expect("own"), b"own");
        assert_eq!(stored.data.env["A"], "1");
        assert_eq!(stored.data.files[1]["path"], "/workspace/d/own.txt");
        let missing = FileRequest { source: FileSource::Blob("file-x".into()), ..inline("x", b"") };
        let err = resources.installs("o", &[missing]).expect_err("unknown blob");
        assert!(matches!(err, AgentError::Invalid { code: "agents.file_not_found", .. }));
        let big = inline("big", &[0u8; 2048]);
        assert!(matches!(
            resources.installs("o", &[big]),
            Err(AgentError::Invalid { code: "agents.file_too_large", .. })
        ));
    }
}

//! The webhook endpoints of every owner, kept in `state_dir/webhooks.jsonl`
//! (a [`Journal`]: one line per change, compacted atomically when loaded),
//! or in memory when nothing persists. The file holds the signing secrets:
//! it is created mode 0600 in the state directory (0700).
//!
//! Records are owned: a foreign id and an unknown id read the same.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

use crate::agents::journal::{self, Journal};

/// One registered endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    /// `we_<24 hex>`.
    pub id: String,
    /// The caller that registered it.
    pub owner: String,
    /// When it was registered (seconds).
    pub created_at: i64,
    /// When it last changed (seconds).
    pub updated_at: i64,
    /// Where events go, as sent.
    pub url: String,
    /// The event types it receives (no duplicates, in the order sent).
    pub event_types: Vec<String>,
    /// Its name (empty when none).
    pub name: String,
    /// The `whsec_` signing secret (never on the wire after create and rotate).
    pub secret: String,
}

/// What a create or update sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointFields {
    /// A new URL.
    pub url: Option<String>,
    /// New event types.
    pub event_types: Option<Vec<String>>,
    /// A new name.
    pub name: Option<String>,
}

/// One line of the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Change {
    Put { endpoint: WebhookEndpoint },
    Delete { id: String },
}

#[derive(Debug, Default)]
struct Rows {
    /// Oldest first.
    endpoints: Vec<WebhookEndpoint>,
    journal: Option<Journal>,
}

/// The registry; see the module documentation.
#[derive(Debug, Default)]
pub struct Registry {
    rows: Mutex<Rows>,
}

/// The file under a state directory.
pub fn file_in(state_dir: &Path) -> PathBuf {
    state_dir.join("webhooks.jsonl")
}

impl Registry {
    /// The endpoints kept in `path` (created when missing); `None` keeps
    /// them in memory. A file that cannot be used is logged, and the
    /// registry works in memory.
    pub fn load(path: Option<&Path>) -> Self {
        let mut rows = Rows::default();
        if let Some(path) = path {
            match Self::replay(path) {
                Ok((endpoints, journal)) => rows = Rows { endpoints, journal: Some(journal) },
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "agents: webhook endpoints cannot be kept on disk");
                }
            }
        }
        Registry { rows: Mutex::new(rows) }
    }

    fn replay(path: &Path) -> std::io::Result<(Vec<WebhookEndpoint>, Journal)> {
        if let Some(dir) = path.parent() {
            journal::private_dir(dir)?;
        }
        let mut endpoints: Vec<WebhookEndpoint> = Vec::new();
        for change in journal::replay::<Change>(path)? {
            match change {
                Change::Put { endpoint } => match endpoints.iter_mut().find(|e| e.id == endpoint.id) {
                    Some(existing) => *existing = endpoint,
                    None => endpoints.push(endpoint),
                },
                Change::Delete { id } => endpoints.retain(|e| e.id != id),
            }
        }
        let compacted: Vec<Change> = endpoints.iter().map(|e| Change::Put { endpoint: e.clone() }).collect();
        journal::rewrite(path, &compacted)?;
        Ok((endpoints, Journal::open(path)?))
    }

    fn lock(&self) -> MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a change (a write failure is logged: the change holds in memory).
    fn write(rows: &mut Rows, change: &Change) {
        if let Some(journal) = rows.journal.as_mut() {
            if let Err(e) = journal.append(change) {
                tracing::warn!(path = %journal.path().display(), error = %e, "agents: a webhook change was not written");
            }
        }
    }

    /// Registers an endpoint (`fields` unset are empty), unless `owner`
    /// already has `limit`; `None` then.
    pub fn create(&self, owner: &str, fields: EndpointFields, secret: String, limit: usize) -> Option<WebhookEndpoint> {
        let now = now();
        let endpoint = WebhookEndpoint {
            id: format!("we_{}", crate::ids::random_hex(12)),
            owner: owner.to_string(),
            created_at: now,
            updated_at: now,
            url: fields.url.unwrap_or_default(),
            event_types: fields.event_types.unwrap_or_default(),
            name: fields.name.unwrap_or_default(),
            secret,
        };
        let mut rows = self.lock();
        if rows.endpoints.iter().filter(|e| e.owner == owner).count() >= limit {
            return None;
        }
        Self::write(&mut rows, &Change::Put { endpoint: endpoint.clone() });
        rows.endpoints.push(endpoint.clone());
        Some(endpoint)
    }

    /// Endpoint `id` of `owner`.
    pub fn get(&self, owner: &str, id: &str) -> Option<WebhookEndpoint> {
        self.lock().endpoints.iter().find(|e| e.id == id && e.owner == owner).cloned()
    }

    /// `owner`'s endpoints, oldest first.
    pub fn list(&self, owner: &str) -> Vec<WebhookEndpoint> {
        self.lock().endpoints.iter().filter(|e| e.owner == owner).cloned().collect()
    }

    /// Whether `owner` has any endpoint.
    pub fn any(&self, owner: &str) -> bool {
        self.lock().endpoints.iter().any(|e| e.owner == owner)
    }

    /// Applies `fields` (and a new `secret`) to endpoint `id` of `owner`.
    pub fn update(
        &self,
        owner: &str,
        id: &str,
        fields: EndpointFields,
        secret: Option<String>,
    ) -> Option<WebhookEndpoint> {
        let mut rows = self.lock();
        let endpoint = rows.endpoints.iter_mut().find(|e| e.id == id && e.owner == owner)?;
        if let Some(url) = fields.url {
            endpoint.url = url;
        }
        if let Some(types) = fields.event_types {
            endpoint.event_types = types;
        }
        if let Some(name) = fields.name {
            endpoint.name = name;
        }
        if let Some(secret) = secret {
            endpoint.secret = secret;
        }
        endpoint.updated_at = now().max(endpoint.updated_at);
        let endpoint = endpoint.clone();
        Self::write(&mut rows, &Change::Put { endpoint: endpoint.clone() });
        Some(endpoint)
    }

    /// Removes endpoint `id` of `owner`.
    pub fn delete(&self, owner: &str, id: &str) -> Option<WebhookEndpoint> {
        let mut rows = self.lock();
        let position = rows.endpoints.iter().position(|e| e.id == id && e.owner == owner)?;
        let endpoint = rows.endpoints.remove(position);
        Self::write(&mut rows, &Change::Delete { id: endpoint.id.clone() });
        Some(endpoint)
    }
}

fn now() -> i64 {
    crate::agents::turn::now() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_survive_a_reload_compacted_and_owners_are_apart() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = file_in(dir.path());
        let registry = Registry::load(Some(&path));
        let fields = |url: &str| EndpointFields {
            url: Some(url.into()),
            event_types: Some(vec!["agent.session.idle".into()]),
            name: None,
        };
        let kept = registry.create("a", fields("https://x.test/h"), "whsec_1".into(), 2).expect("under the quota");
        let gone = registry.create("a", fields("https://y.test/h"), "whsec_2".into(), 2).expect("under the quota");
        let fields = EndpointFields { name: Some("renamed".into()), ..EndpointFields::default() };
        registry.update("a", &kept.id, fields, Some("whsec_3".into())).expect("updated");
        assert!(registry.update("b", &kept.id, EndpointFields::default(), None).is_none(), "foreign");
        assert!(registry.delete("b", &gone.id).is_none(), "foreign");
        registry.delete("a", &gone.id).expect("deleted");
        drop(registry);
        let back = Registry::load(Some(&path));
        let listed = back.list("a");
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].name.as_str(), listed[0].secret.as_str()), ("renamed", "whsec_3"));
        assert!(back.list("b").is_empty() && !back.any("b") && back.any("a"));
        let lines = std::fs::read_to_string(&path).expect("read");
        assert_eq!(lines.lines().count(), 1, "compacted at load");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
    }
}

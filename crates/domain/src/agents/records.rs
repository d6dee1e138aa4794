//! Owner-scoped records of the agents group's resources (definitions,
//! environments, templates, file blobs): a [`Registry`] per kind, kept in
//! memory and, when the group persists, journaled to one JSON-lines file
//! under the state directory (compacted when it is loaded).
//!
//! A foreign id and an unknown id read the same. Lists are oldest first
//! (creation time, then creation order). What a record must not write to
//! disk (secret values) is its type's business: `data` is serialised as is.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::AgentError;
use super::journal::{self, Journal};

/// One owned record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored<T> {
    /// `<prefix><sep><24 hex>`.
    pub id: String,
    /// The policy identity that created it.
    pub owner: String,
    /// When it was created (whole seconds).
    pub created_at: i64,
    /// When it last changed (whole seconds).
    pub updated_at: i64,
    /// The kind's own fields.
    pub data: T,
}

/// One line of a registry's journal, as written ([`Line`] reads it back).
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum LineRef<'a, T> {
    Put(&'a Stored<T>),
    Delete { id: &'a str },
}

/// One line of a registry's journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Line<T> {
    /// The record as it now is.
    Put(Stored<T>),
    /// The record was removed.
    Delete {
        /// Its id.
        id: String,
    },
}

#[derive(Debug)]
struct Rows<T> {
    map: HashMap<String, (u64, Arc<Stored<T>>)>,
    next: u64,
    journal: Option<Journal>,
}

/// The records of one kind; see the module documentation.
#[derive(Debug)]
pub struct Registry<T> {
    prefix: String,
    rows: Mutex<Rows<T>>,
    quota: Quota<T>,
}

/// What one owner may keep of a kind: a count and, for kinds whose
/// records weigh bytes, a total. Checked under the registry's lock, so
/// concurrent creates cannot pass it together.
#[derive(Debug, Clone, Copy)]
pub struct Quota<T> {
    /// The option naming the count (`agents_max_definitions`, ...), its value, and what it counts.
    pub count: Option<(&'static str, usize, &'static str)>,
    /// The option naming the byte total, its value, and a record's weight.
    pub bytes: Option<(&'static str, u64, Weigh<T>)>,
}

/// How many bytes a record holds (its files, for templates).
pub type Weigh<T> = fn(&T) -> u64;

impl<T> Default for Quota<T> {
    fn default() -> Self {
        Quota { count: None, bytes: None }
    }
}

impl<T> Quota<T> {
    /// Whether `owner`, holding `rows`, may hold `next` in place of `replaced` (an update) or beside them.
    fn admit(&self, rows: &Rows<T>, owner: &str, next: &T, replaced: Option<&str>) -> Result<(), AgentError> {
        let own = || rows.map.values().filter(|(_, r)| r.owner == owner && Some(r.id.as_str()) != replaced);
        if let Some((quota, limit, what)) = self.count.filter(|_| replaced.is_none()) {
            if own().count() >= limit {
                return Err(AgentError::QuotaExceeded { quota, limit: limit as u64, what });
            }
        }
        if let Some((quota, limit, weigh)) = self.bytes {
            let held: u64 = own().map(|(_, r)| weigh(&r.data)).sum();
            if held.saturating_add(weigh(next)) > limit {
                return Err(AgentError::QuotaExceeded { quota, limit, what: "bytes" });
            }
        }
        Ok(())
    }
}

fn now_secs() -> i64 {
    super::turn::now() as i64
}

impl<T: Clone + Serialize + DeserializeOwned> Registry<T> {
    /// An empty registry minting ids `prefix` + 24 hex digits, kept in memory.
    pub fn in_memory(prefix: &str) -> Self {
        Registry {
            prefix: prefix.to_string(),
            rows: Mutex::new(Rows { map: HashMap::new(), next: 0, journal: None }),
            quota: Quota::default(),
        }
    }

    /// This registry, bounding what each owner keeps by `quota`.
    pub fn with_quota(mut self, quota: Quota<T>) -> Self {
        self.quota = quota;
        self
    }

    /// The registry journaled at `path`: its records are replayed, the file
    /// compacted and kept open for appending. A file that cannot be used
    /// is logged and the registry lives in memory.
    pub fn load(prefix: &str, path: &Path) -> Self {
        let registry = Registry::in_memory(prefix);
        let lines: Vec<Line<T>> = match journal::replay(path) {
            Ok(lines) => lines,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "agents: records cannot be read; kept in memory");
                return registry;
            }
        };
        {
            let mut rows = registry.lock();
            for line in lines {
                match line {
                    Line::Put(record) => {
                        let seq = rows.map.get(&record.id).map_or(rows.next, |(seq, _)| *seq);
                        rows.next += 1;
                        rows.map.insert(record.id.clone(), (seq, Arc::new(record)));
                    }
                    Line::Delete { id } => {
                        rows.map.remove(&id);
                    }
                }
            }
            let mut kept: Vec<&(u64, Arc<Stored<T>>)> = rows.map.values().collect();
            kept.sort_by_key(|(seq, _)| *seq);
            let lines: Vec<Line<T>> = kept.into_iter().map(|(_, r)| Line::Put(Stored::clone(r))).collect();
            match journal::rewrite(path, &lines).and_then(|()| Journal::open(path)) {
                Ok(journal) => rows.journal = Some(journal),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "agents: records cannot be written; kept in memory")
                }
            }
        }
        registry
    }

    fn lock(&self) -> MutexGuard<'_, Rows<T>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(rows: &mut Rows<T>, line: &LineRef<'_, T>) -> Result<(), AgentError> {
        match rows.journal.as_mut() {
            Some(journal) => journal.append(line).map_err(|e| AgentError::internal("cannot write a record", e)),
            None => Ok(()),
        }
    }

    /// A fresh id of this kind.
    pub fn mint(&self) -> String {
        format!("{}{}", self.prefix, crate::ids::random_hex(12))
    }

    /// Stores a new record of `owner` under `id` (see [`Registry::mint`]).
    ///
    /// # Errors
    /// [`AgentError::QuotaExceeded`] past the owner's quota; the journal cannot be written.
    pub fn create_with_id(&self, owner: &str, id: String, data: T) -> Result<Arc<Stored<T>>, AgentError> {
        let now = now_secs();
        let record = Arc::new(Stored { id, owner: owner.to_string(), created_at: now, updated_at: now, data });
        let mut rows = self.lock();
        self.quota.admit(&rows, owner, &record.data, None)?;
        Self::write(&mut rows, &LineRef::Put(&record))?;
        let seq = rows.next;
        rows.next += 1;
        rows.map.insert(record.id.clone(), (seq, Arc::clone(&record)));
        Ok(record)
    }

    /// Stores a new record of `owner` under a fresh id.
    ///
    /// # Errors
    /// The journal cannot be written.
    pub fn create(&self, owner: &str, data: T) -> Result<Arc<Stored<T>>, AgentError> {
        self.create_with_id(owner, self.mint(), data)
    }

    /// The record `id` when it belongs to `owner`.
    pub fn get(&self, owner: &str, id: &str) -> Option<Arc<Stored<T>>> {
        self.lock().map.get(id).filter(|(_, r)| r.owner == owner).map(|(_, r)| Arc::clone(r))
    }

    /// Whether any record, whoever owns it, satisfies `test`.
    pub fn any(&self, test: impl Fn(&T) -> bool) -> bool {
        self.lock().map.values().any(|(_, r)| test(&r.data))
    }

    /// `owner`'s records, oldest first (shared, not copied).
    pub fn list(&self, owner: &str) -> Vec<Arc<Stored<T>>> {
        let rows = self.lock();
        let mut out: Vec<&(u64, Arc<Stored<T>>)> = rows.map.values().filter(|(_, r)| r.owner == owner).collect();
        out.sort_by_key(|(seq, r)| (r.created_at, *seq));
        out.into_iter().map(|(_, r)| Arc::clone(r)).collect()
    }

    /// Changes record `id` of `owner` with `change` (which may refuse),
    /// advancing `updated_at`; `None` when there is no such record.
    ///
    /// # Errors
    /// What `change` returns, [`AgentError::QuotaExceeded`] when the
    /// changed record passes the owner's byte quota, or a journal that
    /// cannot be written (the record is then left as it was).
    pub fn update(
        &self,
        owner: &str,
        id: &str,
        change: impl FnOnce(&mut T) -> Result<(), AgentError>,
    ) -> Result<Option<Arc<Stored<T>>>, AgentError> {
        let mut rows = self.lock();
        let Some((_, current)) = rows.map.get(id).filter(|(_, r)| r.owner == owner) else { return Ok(None) };
        let mut next = Stored::clone(current);
        change(&mut next.data)?;
        self.quota.admit(&rows, owner, &next.data, Some(id))?;
        next.updated_at = now_secs().max(next.updated_at);
        Self::write(&mut rows, &LineRef::Put(&next))?;
        let next = Arc::new(next);
        if let Some((_, slot)) = rows.map.get_mut(id) {
            *slot = Arc::clone(&next);
        }
        Ok(Some(next))
    }

    /// Removes record `id` of `owner` and returns it.
    ///
    /// # Errors
    /// The journal cannot be written (the record stays).
    pub fn delete(&self, owner: &str, id: &str) -> Result<Option<Arc<Stored<T>>>, AgentError> {
        let mut rows = self.lock();
        if rows.map.get(id).is_none_or(|(_, r)| r.owner != owner) {
            return Ok(None);
        }
        Self::write(&mut rows, &LineRef::Delete { id })?;
        Ok(rows.map.remove(id).map(|(_, r)| r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_owned_ordered_and_survive_a_reload() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("r.jsonl");
        let reg: Registry<String> = Registry::load("x_", &path);
        let a = reg.create("alice", "one".into()).expect("a");
        let b = reg.create("alice", "two".into()).expect("b");
        let c = reg.create("bob", "three".into()).expect("c");
        assert!(a.id.starts_with("x_") && a.id.len() == 26);
        assert_eq!(reg.get("bob", &a.id), None, "a foreign id reads as unknown");
        reg.update("alice", &a.id, |d| {
            d.push('!');
            Ok(())
        })
        .expect("update");
        assert!(reg.update("bob", &a.id, |_| Ok(())).expect("no error").is_none());
        assert!(reg.delete("alice", &b.id).expect("delete").is_some());
        drop(reg);
        let back: Registry<String> = Registry::load("x_", &path);
        let ids: Vec<(String, String)> = back.list("alice").iter().map(|r| (r.id.clone(), r.data.clone())).collect();
        assert_eq!(ids, [(a.id.clone(), "one!".to_string())]);
        assert_eq!(back.get("bob", &c.id).map(|r| r.data.clone()).as_deref(), Some("three"));
        let lines = std::fs::read_to_string(&path).expect("read");
        assert_eq!(lines.lines().count(), 2, "compacted at load");
    }
}

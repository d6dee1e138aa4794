//! Loading the persisted sessions at start: each session directory under
//! `state_dir/sessions` holds `journal.jsonl` (the session, its metadata,
//! turns with their items, subagents, artifacts), `events.jsonl` (its event
//! log) and `artifacts/`. Turns that were running when the daemon stopped
//! become failed turns, with the events a subscriber would have seen. Each
//! journal is compacted (rewritten atomically with only its latest records)
//! as it is loaded.

use std::path::Path;

use super::error::Failure;
use super::journal::{self, Journal};
use super::log::{EventKind, EventLog};
use super::session::{Record, Session, SessionHeader};
use super::turn::{now, TurnStatus};

/// Every session that can be read under `dir`; a directory that cannot is
/// logged and left alone.
pub fn load_all(dir: &Path) -> Vec<Session> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut sessions = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        match load(&path) {
            Ok(Some(session)) => sessions.push(session),
            Ok(None) => {}
            Err(e) => tracing::warn!(dir = %path.display(), error = %e, "agents: a persisted session cannot be loaded"),
        }
    }
    sessions
}

/// One session from its directory (`None`: not a session directory).
fn load(dir: &Path) -> std::io::Result<Option<Session>> {
    let journal_path = dir.join("journal.jsonl");
    let records: Vec<Record> = journal::replay(&journal_path)?;
    let mut records = records.into_iter();
    let Some(Record::Session(header)) = records.next() else { return Ok(None) };
    if dir.file_name().is_none_or(|n| n != header.id.as_str()) {
        return Ok(None);
    }
    let log = EventLog::on_disk(&dir.join("events.jsonl"))?;
    let session = Session::new(&header, log, None, dir.to_path_buf());
    let interrupted = {
        let mut state = session.lock();
        for record in records {
            match record {
                Record::Session(_) => {}
                Record::Metadata { metadata } => state.metadata = metadata,
                Record::Native { id } => state.native_session_id = Some(id),
                Record::Turn { turn } => match state.turn_mut(&turn.id) {
                    Some(existing) => *existing = *turn,
                    None => state.turns.push(*turn),
                },
                Record::Subagent { subagent } => match state.subagents.iter_mut().find(|s| s.id == subagent.id) {
                    Some(existing) => *existing = subagent,
                    None => state.subagents.push(subagent),
                },
                Record::Artifact { artifact } => state.artifacts.push(artifact),
                Record::ArtifactDeleted { id } => state.artifacts.retain(|a| a.id != id),
            }
        }
        let mut interrupted = Vec::new();
        for turn in state.turns.iter_mut().filter(|t| !t.status.is_terminal()) {
            turn.status = TurnStatus::Failed;
            turn.completed_at = Some(now());
            turn.error = Some(Failure::new("internal_error", "server restarted while the turn was running"));
            interrupted.push(turn.summary());
        }
        (interrupted, state.usage())
    };
    let (interrupted, usage) = interrupted;
    if !interrupted.is_empty() {
        for turn in interrupted {
            let id = turn.id.clone();
            session.log.append(Some(&id), EventKind::TurnEnded { turn });
        }
        session.log.append(None, EventKind::SessionIdle { usage });
        session.log.flush();
    }
    journal::rewrite(&journal_path, &compacted(&session, header))?;
    session.set_journal(Journal::open(&journal_path)?);
    Ok(Some(session))
}

/// The records that rebuild `session` as it now is.
fn compacted(session: &Session, mut header: Box<SessionHeader>) -> Vec<Record> {
    let state = session.lock();
    header.metadata = state.metadata.clone();
    let mut out = vec![Record::Session(header)];
    if let Some(id) = &state.native_session_id {
        out.push(Record::Native { id: id.clone() });
    }
    out.extend(state.turns.iter().map(|turn| Record::Turn { turn: Box::new(turn.clone()) }));
    out.extend(state.subagents.iter().map(|subagent| Record::Subagent { subagent: subagent.clone() }));
    out.extend(state.artifacts.iter().map(|artifact| Record::Artifact { artifact: artifact.clone() }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::session::SessionMeta;
    use crate::agents::spec::AgentSpec;
    use crate::agents::turn::TurnRecord;

    fn turn(id: &str, status: TurnStatus) -> TurnRecord {
        TurnRecord { status, ..TurnRecord::queued(id.into(), "agsess_1", "p".into()) }
    }

    #[test]
    fn a_session_comes_back_with_its_turns_and_interrupted_ones_fail() {
        let root = tempfile::tempdir().expect("tmp");
        let dir = root.path().join("agsess_1");
        journal::private_dir(&dir).expect("dir");
        let header = SessionHeader {
            id: "agsess_1".into(),
            created_at: 1.0,
            spec: AgentSpec { runtime: "codex".into(), workspace: "/w".into(), ..AgentSpec::default() },
            meta: SessionMeta { owner: "o".into(), ..SessionMeta::default() },
            metadata: serde_json::Map::new(),
        };
        let mut j = Journal::open(&dir.join("journal.jsonl")).expect("journal");
        j.append(&Record::Session(Box::new(header))).expect("append");
        j.append(&Record::Turn { turn: Box::new(turn("turn_a", TurnStatus::Queued)) }).expect("append");
        j.append(&Record::Turn { turn: Box::new(turn("turn_a", TurnStatus::Completed)) }).expect("append");
        j.append(&Record::Turn { turn: Box::new(turn("turn_b", TurnStatus::InProgress)) }).expect("append");
        let mut metadata = serde_json::Map::new();
        metadata.insert("k".into(), "v".into());
        j.append(&Record::Metadata { metadata }).expect("append");
        drop(j);
        let sessions = load_all(root.path());
        assert_eq!(sessions.len(), 1);
        let turns = sessions[0].turns();
        assert_eq!(
            turns.iter().map(|t| (t.id.as_str(), t.status)).collect::<Vec<_>>(),
            [("turn_a", TurnStatus::Completed), ("turn_b", TurnStatus::Failed)]
        );
        assert_eq!(sessions[0].view().metadata["k"], "v");
        assert_eq!(sessions[0].log.last_seq(), 2, "turn.ended and session.idle were logged");
        let lines = std::fs::read_to_string(dir.join("journal.jsonl")).expect("read");
        assert_eq!(lines.lines().count(), 3, "compacted: session, two turns");
    }
}

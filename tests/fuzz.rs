//! The fuzz targets' smoke run on the stable toolchain: every input of the
//! committed corpora (`fuzz/corpus/<target>/`), then random mutations of
//! them (proptest: byte edits, splices, the bytes parsers care about).
//! `scripts/fuzz` runs the same targets under libFuzzer for as long as asked.
//!
//! `ABX_FUZZ_CASES` sets the mutations per target (default 400).

use std::path::PathBuf;

use agent_sandbox_server::fuzz::TARGETS;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The committed corpus of `target`, sorted by name.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.map(|e| e.expect("corpus entry").path()).collect(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    files.sort();
    files.iter().map(|f| std::fs::read(f).expect("corpus file")).collect()
}

/// Bytes parsers branch on: quotes, escapes, brackets, separators, controls, UTF-8 leads.
const INTERESTING: &[u8] = b"\"\\{}[]:,-=/.\n\r\0\x02\x80\xc3\xff 0123456789";

#[derive(Debug, Clone)]
enum Edit {
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Replace(prop::sample::Index, u8),
    Duplicate(prop::sample::Index, prop::sample::Index),
    Splice(prop::sample::Index, prop::sample::Index, prop::sample::Index),
    Truncate(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![prop::sample::select(INTERESTING), any::<u8>()];
    let at = any::<prop::sample::Index>;
    prop_oneof![
        3 => (at(), byte.clone()).prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => at().prop_map(Edit::Remove),
        3 => (at(), byte).prop_map(|(i, b)| Edit::Replace(i, b)),
        1 => (at(), at()).prop_map(|(i, j)| Edit::Duplicate(i, j)),
        1 => (at(), at(), at()).prop_map(|(s, i, j)| Edit::Splice(s, i, j)),
        1 => at().prop_map(Edit::Truncate),
    ]
}

fn mutate(seeds: &[Vec<u8>], seed: usize, edits: &[Edit]) -> Vec<u8> {
    let mut data = seeds.get(seed).cloned().unwrap_or_default();
    for edit in edits {
        let len = data.len();
        match edit {
            Edit::Insert(at, byte) => data.insert(at.index(len + 1), *byte),
            Edit::Remove(at) if len > 0 => drop(data.remove(at.index(len))),
            Edit::Replace(at, byte) if len > 0 => data[at.index(len)] = *byte,
            Edit::Duplicate(from, to) if len > 0 => {
                let (a, b) = (from.index(len), to.index(len));
                let piece = data[a.min(b)..=a.max(b)].to_vec();
                let at = b.min(len);
                data.splice(at..at, piece);
            }
            Edit::Splice(other, from, at) if !seeds.is_empty() => {
                let other = &seeds[other.index(seeds.len())];
                if !other.is_empty() {
                    let piece = &other[from.index(other.len())..];
                    let at = at.index(len + 1);
                    data.truncate(at);
                    data.extend_from_slice(piece);
                }
            }
            Edit::Truncate(at) => data.truncate(at.index(len + 1)),
            _ => {}
        }
    }
    data
}

fn smoke(name: &str) {
    let target = TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).expect("a target by that name");
    let seeds = corpus(name);
    assert!(!seeds.is_empty(), "the {name} corpus is empty");
    for input in &seeds {
        target(input);
    }
    let cases = std::env::var("ABX_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let strategy = (0..seeds.len() + 1, prop::collection::vec(edit(), 0..12));
    TestRunner::new(config)
        .run(&strategy, |(seed, edits)| {
            target(&mutate(&seeds, seed, &edits));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[test]
fn every_target_has_a_smoke_test() {
    let tested = [
        "path_confinement",
        "upload_scanner",
        "connect_envelopes",
        "policy_document",
        "pty_message",
        "multipart",
        "range",
    ];
    let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, tested);
}

#[test]
fn path_confinement() {
    smoke("path_confinement");
}

#[test]
fn upload_scanner() {
    smoke("upload_scanner");
}

#[test]
fn connect_envelopes() {
    smoke("connect_envelopes");
}

#[test]
fn policy_document() {
    smoke("policy_document");
}

#[test]
fn pty_message() {
    smoke("pty_message");
}

#[test]
fn multipart() {
    smoke("multipart");
}

#[test]
fn range() {
    smoke("range");
}

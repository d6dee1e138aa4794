//! The examples under `examples/`, run against the real binary: each
//! example's `run` is compiled into this test and driven as its `main` would.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

#[allow(dead_code)]
#[path = "../examples/chart.rs"]
mod chart;
#[allow(dead_code)]
#[path = "../examples/run_tests.rs"]
mod run_tests;
#[allow(dead_code)]
#[path = "../examples/watch.rs"]
mod watch;

use std::path::{Path, PathBuf};
use std::process::Command;

use abx_wire::api::code::ContextInfo;

fn write(root: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

const PROJECT: &[(&str, &str)] = &[
    ("calc/__init__.py", ""),
    ("calc/ops.py", "def add(a, b):\n    return a + b\n"),
    (
        "tests/test_ops.py",
        "import unittest\nfrom calc.ops import add\n\n\
         class Ops(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    ),
    ("tests/__init__.py", ""),
];

#[tokio::test]
async fn run_tests_uploads_a_project_and_streams_its_tests() {
    let server = common::start();
    let client = server.client();
    let local = tempfile::tempdir().expect("tempdir");
    write(local.path(), PROJECT);
    let mut out = Vec::new();
    let code = run_tests::run(&client, local.path(), "project", "python3 -m unittest -v", &mut out)
        .await
        .expect("the example runs");
    let out = String::from_utf8(out).expect("utf-8");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("uploaded 4 files to project\n"), "{out}");
    assert!(out.contains("test_add (tests.test_ops.Ops") && out.contains("... ok"), "{out}");
    assert!(out.trim_end().ends_with("OK"), "{out}");
    assert_eq!(std::fs::read_to_string(server.base.join("project/calc/ops.py")).expect("uploaded"), PROJECT[1].1);

    write(local.path(), &[("calc/ops.py", "def add(a, b):\n    return a - b\n")]);
    let mut out = Vec::new();
    let code = run_tests::run(&client, local.path(), "project", "python3 -m unittest", &mut out).await.expect("runs");
    let out = String::from_utf8(out).expect("utf-8");
    assert_eq!(code, 1, "a failing test fails the step: {out}");
    assert!(out.contains("AssertionError: -1 != 5"), "{out}");
}

/// The interpreter code contexts run: `ABX_TEST_VENV`'s (scripts/test makes
/// it, with matplotlib), else `python3`.
fn python() -> String {
    let venv = std::env::var("ABX_TEST_VENV").unwrap_or_else(|_| ".venv-conformance".into());
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(venv).join("bin/python");
    if venv.is_file() {
        venv.display().to_string()
    } else {
        "python3".into()
    }
}

#[tokio::test]
async fn chart_runs_code_in_a_context_and_saves_its_chart() {
    let python = python();
    let has_matplotlib = Command::new(&python).args(["-c", "import matplotlib"]).status().is_ok_and(|s| s.success());
    assert!(has_matplotlib, "{python} has no matplotlib: run scripts/test once (it makes .venv-conformance)");
    let server = common::server().args(["--code-python", &python]).start();
    let url = server.listeners.iter().find(|(name, _)| name == "code").map(|(_, url)| url.clone()).expect("code port");
    let code = server.client().code_interpreter(&url);
    let ids = |contexts: Vec<ContextInfo>| contexts.into_iter().map(|c| c.id).collect::<Vec<_>>();
    let before = ids(code.list_contexts().await.expect("list"));
    let out: PathBuf = server.dir().join("chart.png");
    let size = chart::run(&code, &out).await.expect("the example runs");
    let png = std::fs::read(&out).expect("saved");
    assert_eq!(png.len(), size);
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG image");
    assert!(size > 5_000, "a real chart, not an empty image ({size} bytes)");
    assert_eq!(ids(code.list_contexts().await.expect("list")), before, "the example removes its context");
}

#[tokio::test]
async fn watch_sees_a_job_write_its_results_until_done() {
    let server = common::start();
    let client = server.client();
    let mut out = Vec::new();
    let seen = watch::run(&client, "jobs/42", &mut out).await.expect("the example runs");
    let out = String::from_utf8(out).expect("utf-8");
    let root = server.base.canonicalize().expect("base").join("jobs/42");
    let created: Vec<&str> = seen.iter().filter(|e| e.kind == "created").map(|e| e.path.as_str()).collect();
    for part in ["out/part-1.txt", "out/part-2.txt", "out/part-3.txt"] {
        let path = root.join(part).display().to_string();
        assert!(created.contains(&path.as_str()), "{path} in {created:?}\n{out}");
    }
    assert_eq!(seen.last().map(|e| e.path.clone()), Some(root.join("done").display().to_string()), "{out}");
    assert!(out.starts_with("job ") && out.contains("created"), "{out}");
}

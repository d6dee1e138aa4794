//! Micro-benchmark of the policy decision: what one request costs the engine
//! with no policy and with a full one (token identities, group, glob and exact
//! rules, deny patterns, rate and concurrency limits).
//!
//! `cargo bench --bench policy` prints nanoseconds per step: authenticate,
//! admit, resolve a path through the endpoint's guard, and the three together.
//! The end-to-end cost of a request is measured by `bench/policy.py`; this
//! isolates the engine's share of it. Not a test: numbers depend on the machine.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abx_domain::policy::{document, Credentials, Op, PolicyEngine, PolicyInputs};
use serde_json::json;

const TOKEN: &str = "bench-token";
const BATCH: u32 = 20_000;
const BATCHES: usize = 15;

fn full_policy() -> serde_json::Value {
    let digest = |s: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let high = 1_000_000_000u64;
    json!({
        "auth": {"tokens": [
            {"id": "ops", "scopes": ["*"], "token_sha256": digest("ops-token")},
            {"id": "reader", "scopes": ["files:read"], "token_sha256": digest("reader-token")},
            {"id": "bench", "scopes": ["files:*", "process:run"], "token_sha256": digest(TOKEN)},
        ]},
        "groups": {"terminal": false, "dev_tools": true},
        "defaults": {"audit": "deny", "limits": {"max_request_bytes": "1MiB"}},
        "endpoints": {
            "files_*": {
                "paths": {"deny": ["/proc", "/sys", "/dev", "**/.ssh", "**/.env", "**/.env.*", "**/*.pem",
                                   "**/id_rsa*", "**/id_ed25519*", "**/secrets", "*.key", "/srv/private"]},
                "limits": {"rate_per_minute": high, "max_concurrency": high},
            },
            "files_stat": {"scopes": ["files:read"]},
            "group:system": {"audit": "all"},
        },
    })
}

/// Median nanoseconds per call of `f` over `BATCHES` batches of `BATCH` calls.
fn time(mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[BATCHES / 2]
}

fn run(name: &str, engine: &Arc<PolicyEngine>, authorization: &str) -> f64 {
    let endpoint = abx_wire::endpoints::find("files_stat").expect("files_stat");
    let credentials = || Credentials { authorization: vec![authorization], access_tokens: vec![] };
    let identity = engine.authenticate(&credentials()).expect("authenticated");
    let auth = time(|| {
        black_box(engine.authenticate(black_box(&credentials())).ok());
    });
    let admit = time(|| {
        black_box(engine.admit(endpoint, Arc::clone(&identity)).ok());
    });
    let resolve = time(|| {
        black_box(engine.path_guard(endpoint).resolve(black_box("project/src/main.rs"), Op::Read, "").ok());
    });
    let total = time(|| {
        let identity = engine.authenticate(&credentials()).expect("authenticated");
        let (grant, permit) = engine.admit(endpoint, identity).expect("admitted");
        black_box(grant.resolve_path("project/src/main.rs").ok());
        drop(permit);
    });
    println!(
        "{name:5}  authenticate {auth:7.0} ns   admit {admit:7.0} ns   resolve path {resolve:7.0} ns   \
         all three {total:7.0} ns"
    );
    total
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("project/src")).expect("mkdir");
    std::fs::write(dir.path().join("project/src/main.rs"), "fn main() {}\n").expect("write");
    let base = dir.path().canonicalize().expect("canonical");
    let engine = |document| {
        let inputs =
            PolicyInputs { base_dir: base.clone(), base_dir_explicit: true, document, ..PolicyInputs::default() };
        Arc::new(PolicyEngine::new(inputs).expect("valid policy"))
    };
    let none = engine(None);
    let full = engine(Some(document::parse(&full_policy()).expect("valid policy")));
    // Warm the file system caches and the allocator.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        black_box(none.path_guard(abx_wire::endpoints::find("files_stat").expect("id")));
    }
    let without = run("none", &none, "");
    let with = run("full", &full, &format!("Bearer {TOKEN}"));
    println!("full policy minus none: {:.0} ns per request", with - without);
}

//! The workspace's crate graph is its layer diagram (docs/architecture.md):
//! the wire crate depends on nothing of ours, the domain and the companion
//! client on the wire crate alone, `abx` on the wire crate and the client,
//! and none of them on the daemon or its HTTP server stack. The compiler enforces whatever a manifest allows;
//! this test keeps the manifests from allowing more.

use std::collections::BTreeSet;
use std::path::Path;

/// Every dependency a member's manifest names (normal, dev and build).
fn dependencies(member: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(member).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manifest: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names = BTreeSet::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(table) = manifest.get(section).and_then(toml::Value::as_table) {
            names.extend(table.keys().cloned());
        }
    }
    names
}

/// The workspace's own crates.
const OURS: [&str; 5] = ["agent-sandbox-server", "abx-wire", "abx-domain", "abx-client", "abx"];
/// The daemon's HTTP server stack: no crate under it may carry it.
const SERVER_STACK: [&str; 5] = ["axum", "hyper", "hyper-util", "tower", "tower-http"];

fn ours_in(deps: &BTreeSet<String>) -> Vec<&str> {
    OURS.into_iter().filter(|c| deps.contains(*c)).collect()
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let cases = [
        ("crates/wire", vec![]),
        ("crates/domain", vec!["abx-wire"]),
        ("crates/client", vec!["abx-wire"]),
        ("crates/abx", vec!["abx-wire", "abx-client"]),
    ];
    for (member, allowed) in cases {
        let deps = dependencies(member);
        let mut ours = ours_in(&deps);
        ours.sort_unstable();
        let mut allowed = allowed;
        allowed.sort_unstable();
        assert_eq!(ours, allowed, "{member} may depend on {allowed:?} of ours, and names {ours:?}");
        let stack: Vec<_> = SERVER_STACK.into_iter().filter(|c| deps.contains(*c)).collect();
        assert!(stack.is_empty(), "{member} must not depend on the server stack: {stack:?}");
    }
}

#[test]
fn the_daemon_stands_on_the_wire_crate_the_domain_and_the_client() {
    let deps = dependencies(".");
    assert!(deps.contains("abx-wire") && deps.contains("abx-domain") && deps.contains("abx-client"), "{deps:?}");
    assert!(!deps.contains("abx"), "the daemon does not depend on the command line");
}

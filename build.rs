//! Two things of the daemon's build: its OpenAPI document gzip-compressed,
//! and how its static release build is linked (below; the packed
//! relocations and code folding are commented where they are asked for).
//!
//! `docs/openapi.json` is written gzip-compressed (best level) to
//! `$OUT_DIR/openapi.json.gz`; the daemon embeds that (18 KB instead
//! of 253 KB, see `src/openapi/mod.rs`).
//!
//! Link order: the functions run at start, on one `/health` and at idle go
//! first in the text, together.
//!
//! The kernel maps 64 KB around every page a process touches, so code run
//! at start that is spread over the whole text made most of it resident
//! (idle RSS 9.5 MiB, 8 of it the binary's pages). `link/startup-<arch>.order`
//! lists those functions (mangled, written by `scripts/link-order`); a
//! static (musl) release build of the daemon links with the toolchain's
//! lld and `--symbol-ordering-file` of that list. Any other build (debug,
//! glibc, no list for the arch, no lld in the toolchain) is linked as
//! before. A stale list (another toolchain or dependency versions) only
//! orders fewer functions; it never fails the link.

// A build script has no reaper to spawn through; waiting on `rustc --print sysroot` is fine.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    compress_openapi(Path::new(&var("CARGO_MANIFEST_DIR")), Path::new(&var("OUT_DIR")));
    let arch = var("CARGO_CFG_TARGET_ARCH");
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("link").join(format!("startup-{arch}.order"));
    println!("cargo:rerun-if-changed={}", order.display());
    let wanted = var("PROFILE") == "release" && var("CARGO_CFG_TARGET_ENV") == "musl" && order.is_file();
    if !wanted {
        return;
    }
    let Some(lld) = toolchain_lld(&var("RUSTC"), &var("HOST")) else {
        println!("cargo:warning=no lld in the toolchain: the daemon is linked without its startup order");
        return;
    };
    let bin = "agent-sandbox-server";
    println!("cargo:rustc-link-arg-bin={bin}=-B{}", lld.display());
    println!("cargo:rustc-link-arg-bin={bin}=-fuse-ld=lld");
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={}", order.display());
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-warn-symbol-ordering");
    // Relative relocations packed (DT_RELR, musl 1.2.4+): the static PIE's
    // .rela.dyn was 553 KB of 24-byte entries, one per pointer in
    // .data.rel.ro; as RELR bitmaps it is 7 KB. Still position independent
    // (ASLR as before), and fewer bytes for the start-up code to read.
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,-z,pack-relative-relocs");
    // Identical code folding: functions whose machine code and relocations
    // are the same (monomorphised copies LLVM's function merging left) are
    // linked once. Code only: read-only data keeps distinct addresses.
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--icf=all");
}

/// `docs/openapi.json` gzip-compressed to `out/openapi.json.gz`.
fn compress_openapi(manifest: &Path, out: &Path) {
    use std::io::Write;
    let source = manifest.join("docs").join("openapi.json");
    println!("cargo:rerun-if-changed={}", source.display());
    let document = std::fs::read(&source).expect("docs/openapi.json");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&document).expect("gzip");
    std::fs::write(out.join("openapi.json.gz"), encoder.finish().expect("gzip")).expect("write openapi.json.gz");
}

/// The directory of the toolchain's `ld.lld` wrapper for `cc -fuse-ld=lld` (rustup ships it).
fn toolchain_lld(rustc: &str, host: &str) -> Option<PathBuf> {
    let out = Command::new(rustc).args(["--print", "sysroot"]).output().ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let dir = Path::new(sysroot.trim()).join("lib/rustlib").join(host).join("bin/gcc-ld");
    dir.join("ld.lld").is_file().then_some(dir)
}

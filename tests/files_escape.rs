//! Property test: thousands of hostile paths over random symlink layouts,
//! resolved by the policy's guard and opened the race-safe way, never reach
//! anything outside the root, even when a directory on the way is swapped
//! for a symlink to the outside between the check and the open.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use abx_domain::fs::safe;
use abx_domain::policy::rules::compile;
use abx_domain::policy::{Op, PathGuard};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use proptest::prelude::*;

const COMPONENTS: &[&str] = &[
    "..", ".", "a", "b", "f", "l0", "l1", "l2", "l3", "outside", "secret", "", "%2e%2e", "...", "a/..", "root", "a/f",
    "a/b",
];
const TARGETS: &[&str] = &[
    "/",
    "..",
    "../..",
    "../outside",
    "../../outside/secret",
    "@outside",
    "@outside/secret",
    "@root/a",
    "a",
    "b",
    ".",
    "l0",
    "l1/..",
    "/proc/self/root",
    "/etc",
    "f",
    "../root/a/../..",
];
const HOMES: &[&str] = &["", "a", "a/b"];

#[derive(Debug, Clone)]
struct Layout {
    links: Vec<(usize, usize, usize)>,
    paths: Vec<(u8, Vec<usize>)>,
    swap: bool,
}

fn layout() -> impl Strategy<Value = Layout> {
    let link = (0..HOMES.len(), 0..4usize, 0..TARGETS.len());
    let path = (0u8..4, prop::collection::vec(0..COMPONENTS.len(), 1..8));
    (prop::collection::vec(link, 0..6), prop::collection::vec(path, 1..8), any::<bool>())
        .prop_map(|(links, paths, swap)| Layout { links, paths, swap })
}

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    forbidden: Vec<(u64, u64)>,
}

fn build(layout: &Layout) -> World {
    // Not under /dev/shm: /dev is denied to every rule, which would make the test vacuous.
    let dir = tempfile::tempdir().expect("tempdir");
    let top = dir.path().canonicalize().expect("canonical");
    let (root, outside) = (top.join("root"), top.join("outside"));
    std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
    std::fs::write(root.join("a/f"), b"inside").expect("write");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(outside.join("secret"), b"secret").expect("write");
    // The same names as inside, so a swapped directory would lead somewhere.
    std::fs::create_dir_all(outside.join("b")).expect("mkdir");
    std::fs::write(outside.join("f"), b"outside").expect("write");
    for (home, name, target) in &layout.links {
        let target = TARGETS[*target]
            .replace("@outside", outside.to_str().expect("utf-8"))
            .replace("@root", root.to_str().expect("utf-8"));
        let _ = symlink(target, root.join(HOMES[*home]).join(format!("l{name}")));
    }
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).expect("stat");
    let forbidden =
        ["", "secret", "b", "f"].iter().map(|n| id(&outside.join(n))).chain([id(&top), id(Path::new("/"))]).collect();
    World { _dir: dir, root, outside, forbidden }
}

fn spell(world: &World, (prefix, parts): &(u8, Vec<usize>)) -> String {
    let joined = parts.iter().map(|i| COMPONENTS[*i]).collect::<Vec<_>>().join(if *prefix == 3 { "//" } else { "/" });
    match prefix {
        1 => format!("/{joined}"),
        2 => format!("{}/{joined}", world.root.display()),
        _ => joined,
    }
}

/// Replaces `root/a` with a symlink to the outside, as an attacker racing the server would.
fn swap_in_symlink(world: &World) {
    let a = world.root.join("a");
    std::fs::rename(&a, world.root.join("a.moved")).expect("move a away");
    symlink(&world.outside, &a).expect("symlink a");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn nothing_outside_the_root_is_ever_opened(layout in layout()) {
        let world = build(&layout);
        let rules = compile(&[], true).expect("rules");
        let rule = rules.iter().find(|r| r.endpoint.id == "files_stat").expect("files_stat");
        let guard = PathGuard::new(&world.root, rule);
        prop_assert!(safe::resolve(&guard, "a/f", Op::Read, "").is_ok(), "the layout is usable");
        let mut resolved = Vec::new();
        for spec in &layout.paths {
            let raw = spell(&world, spec);
            let Ok(target) = safe::resolve(&guard, &raw, Op::Read, "") else { continue };
            prop_assert!(target.path.starts_with(&world.root), "{raw} resolved to {}", target.path.display());
            resolved.push((raw, target));
        }
        // Between the check and the use, an attacker swaps a directory for a symlink to the outside.
        if layout.swap {
            swap_in_symlink(&world);
        }
        for (raw, target) in &resolved {
            for flags in [OFlag::O_PATH, OFlag::O_RDONLY | OFlag::O_NONBLOCK] {
                let Ok(fd) = safe::open(&guard, target, flags, Mode::empty(), Op::Read) else { continue };
                let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("proc fd");
                prop_assert!(real.starts_with(&world.root), "{raw} opened {}", real.display());
                let st = nix::sys::stat::fstat(&fd).expect("fstat");
                prop_assert!(!world.forbidden.contains(&(st.st_dev, st.st_ino)), "{raw} opened a forbidden inode");
            }
        }
    }

    /// `safe::open_plain` (the stat fast path, no blocking thread) opens
    /// exactly what `resolve` then `open` would, and nothing outside, even
    /// when a directory is swapped for a symlink under it.
    #[test]
    fn the_fast_path_agrees_with_resolve_and_stays_inside(layout in layout()) {
        let world = build(&layout);
        let rules = compile(&[], true).expect("rules");
        let rule = rules.iter().find(|r| r.endpoint.id == "files_stat").expect("files_stat");
        let guard = PathGuard::new(&world.root, rule);
        // The ordinary path learns that the root is on a local file system.
        let usable = safe::resolve(&guard, "a/f", Op::Read, "")
            .is_ok_and(|t| safe::open(&guard, &t, OFlag::O_PATH, Mode::empty(), Op::Read).is_ok());
        prop_assert!(usable, "the layout is usable");
        prop_assert!(safe::open_plain(&guard, "a/f", Op::Read).is_some(), "the fast path applies here");
        for spec in &layout.paths {
            let raw = spell(&world, spec);
            let Some((target, fd)) = safe::open_plain(&guard, &raw, Op::Read) else { continue };
            let slow = safe::resolve(&guard, &raw, Op::Read, "");
            prop_assert_eq!(slow.as_ref().ok(), Some(&target), "{}", raw);
            let st = nix::sys::stat::fstat(&fd).expect("fstat");
            let again = safe::open(&guard, &target, OFlag::O_PATH, Mode::empty(), Op::Read).expect("slow open");
            let st2 = nix::sys::stat::fstat(&again).expect("fstat");
            prop_assert_eq!((st.st_dev, st.st_ino), (st2.st_dev, st2.st_ino), "{}", raw);
        }
        if layout.swap {
            swap_in_symlink(&world);
        }
        for spec in &layout.paths {
            let raw = spell(&world, spec);
            let Some((target, fd)) = safe::open_plain(&guard, &raw, Op::Read) else { continue };
            let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("proc fd");
            prop_assert!(real.starts_with(&world.root), "{} opened {}", raw, real.display());
            prop_assert!(target.path.starts_with(&world.root), "{} named {}", raw, target.path.display());
            let st = nix::sys::stat::fstat(&fd).expect("fstat");
            prop_assert!(!world.forbidden.contains(&(st.st_dev, st.st_ino)), "{} opened a forbidden inode", raw);
        }
    }
}

/// The descriptor the fast path keeps of a root serves only while the root's
/// path still names that directory: a root renamed away (and made again, or
/// not) is never answered from.
#[test]
fn the_fast_path_follows_a_root_replaced_under_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let top = dir.path().canonicalize().expect("canonical");
    let root = top.join("root");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("f"), b"old").expect("write");
    let rules = compile(&[], true).expect("rules");
    let rule = rules.iter().find(|r| r.endpoint.id == "files_stat").expect("files_stat");
    let guard = PathGuard::new(&root, rule);
    let size = |fd: &std::os::fd::OwnedFd| nix::sys::stat::fstat(fd).expect("fstat").st_size;
    let slow = |raw: &str| {
        let target = safe::resolve(&guard, raw, Op::Read, "").expect("resolve");
        safe::open(&guard, &target, OFlag::O_PATH, Mode::empty(), Op::Read)
    };
    // The ordinary path learns the root; the fast path then answers.
    assert_eq!(size(&slow("f").expect("open")), 3);
    let (_, fd) = safe::open_plain(&guard, "f", Op::Read).expect("the fast path applies");
    assert_eq!(size(&fd), 3);

    std::fs::rename(&root, top.join("moved")).expect("rename");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("f"), b"newer").expect("write");
    if let Some((_, fd)) = safe::open_plain(&guard, "f", Op::Read) {
        assert_eq!(size(&fd), 5, "answered from the root renamed away");
    }
    assert_eq!(size(&slow("f").expect("open")), 5);
    let (_, fd) = safe::open_plain(&guard, "f", Op::Read).expect("the new root is learnt");
    assert_eq!(size(&fd), 5);

    std::fs::rename(&root, top.join("moved again")).expect("rename");
    assert!(safe::open_plain(&guard, "f", Op::Read).is_none(), "answered from the root renamed away");
    assert!(slow("f").is_err());
}

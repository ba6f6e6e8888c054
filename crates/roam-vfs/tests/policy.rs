//! The eviction policy hook: with an extension of the policy kind installed, the cache evicts
//! the victim it picks among the oldest copies (here `hotlist` keeps a named file); an
//! extension whose answer fails validation costs only its advice (plain LRU).

use std::path::{Path, PathBuf};
use std::time::Duration;

use roam_drivers::http::HttpConfig;
use roam_ext::{Extension, Limits, Technology};
use roam_vfs::{Consistency, EvictionPolicy, TRead, Vfs, VfsConfig};

const MIB: usize = 1 << 20;

/// A cache of 3.5 MiB over four 1 MiB files /w/a../w/d.
fn vfs(root: &Path) -> Vfs {
    std::fs::create_dir_all(root.join("srv")).unwrap();
    for name in ["a", "b", "c", "d"] {
        std::fs::write(root.join("srv").join(name), vec![b'x'; MIB]).unwrap();
    }
    let cfg = VfsConfig {
        cache_dir: root.join("cache"),
        consistency: Consistency::new(TRead::Fixed(Duration::from_secs(30)), vec![]),
        mounts: vec![(
            "/w".into(),
            format!("file+cache://{}", root.join("srv").display()),
        )],
        max_cache_bytes: 7 * MIB as u64 / 2,
        http: HttpConfig::default(),
        tls: vec![],
        extensions: None,
        adopt_orphans: true,
        t_write: Duration::ZERO,
    };
    Vfs::new(&cfg).unwrap()
}

/// Opens a, b, c, d in that order (the fourth goes over the limit); which copies remain?
fn survivors(v: &Vfs) -> Vec<&'static str> {
    for name in ["a", "b", "c", "d"] {
        let node = v.lookup(&format!("/w/{name}")).unwrap().unwrap();
        v.open_path(&node).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    ["a", "b", "c", "d"]
        .into_iter()
        .filter(|n| v.copy_path(&format!("/w/{n}")).is_file())
        .collect()
}

fn root(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("roam-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    root
}

fn policy(name: &str, args: &[&str]) -> EvictionPolicy {
    let ext = Extension::load(
        &roam_testkit::ext::extensions(),
        name,
        Technology::Wasm,
        Limits::default(),
    )
    .unwrap();
    EvictionPolicy {
        ext,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn lru_without_a_policy_evicts_the_oldest() {
    let root = root("lru");
    assert_eq!(survivors(&vfs(&root)), ["b", "c", "d"]);
}

#[test]
fn hotlist_policy_keeps_the_hot_file() {
    let root = root("hot");
    let mut v = vfs(&root);
    v.set_eviction_policy(policy("hotlist", &["/w/a"]));
    assert_eq!(survivors(&v), ["a", "c", "d"]);
}

#[test]
fn a_lying_policy_falls_back_to_lru() {
    let root = root("lying");
    let mut v = vfs(&root);
    // `faults` answers a victim that was not offered: rejected, LRU decides.
    v.set_eviction_policy(policy("faults", &[]));
    assert_eq!(survivors(&v), ["b", "c", "d"]);
}

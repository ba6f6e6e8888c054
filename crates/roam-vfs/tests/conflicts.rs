//! The write path against a local directory served through the cache (`file+cache`): the
//! conflict hook (a change that meets a remote version changed meanwhile is offered to the
//! resolver; by default both versions are kept, a merging resolver replaces the remote one
//! with its merge), resolver extensions (`merge3` merges, declines overlapping changes, and a
//! lying resolver's patch is refused: both versions kept), the listings roam patches with
//! its own changes, and an unlink that meets the file's upload under way.

use std::path::Path;
use std::time::Duration;

use roam_drivers::http::HttpConfig;
use roam_vfs::{
    Conflict, ConflictResolver, Consistency, ExtResolvers, Flushed, Resolution, TRead, Vfs,
    VfsConfig,
};

fn vfs(root: &Path) -> Vfs {
    let cfg = VfsConfig {
        cache_dir: root.join("cache"),
        consistency: Consistency::new(TRead::Fixed(Duration::from_secs(30)), vec![]),
        mounts: vec![(
            "/w".into(),
            format!("file+cache://{}", root.join("srv").display()),
        )],
        max_cache_bytes: 1 << 30,
        http: HttpConfig::default(),
        tls: vec![],
        extensions: None,
        adopt_orphans: true,
        t_write: Duration::ZERO,
    };
    Vfs::new(&cfg).unwrap()
}

/// Appends the remote version's lines after the local ones (a stand-in for a real merge).
struct Concatenate(std::path::PathBuf);

impl ConflictResolver for Concatenate {
    fn resolve(&self, c: &Conflict) -> Resolution {
        let mut merged = std::fs::read(c.local).unwrap();
        merged.extend(std::fs::read(self.0.join("srv/f")).unwrap());
        let out = self.0.join("merged");
        std::fs::write(&out, merged).unwrap();
        Resolution::Merged(out)
    }
}

/// Changes /w/f locally while another client rewrites it; returns what the flush said.
fn conflicting_change(v: &Vfs, root: &Path) -> Flushed {
    let node = v.lookup("/w/f").unwrap().unwrap();
    let copy = v
        .open_for_write(&node, libc::O_WRONLY | libc::O_APPEND, 0o644)
        .unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&copy)
        .unwrap();
    std::fs::write(&copy, b"base\nmine\n").unwrap();
    std::fs::write(root.join("srv/f"), b"theirs\n").unwrap();
    v.flush("/w/f", &|| false).unwrap()
}

fn setup(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("roam-conflicts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("srv")).unwrap();
    std::fs::write(root.join("srv/f"), b"base\n").unwrap();
    root
}

#[test]
fn by_default_both_versions_are_kept() {
    let root = setup("keep");
    let v = vfs(&root);
    assert!(matches!(
        conflicting_change(&v, &root),
        Flushed::Conflict(_)
    ));
    assert_eq!(
        std::fs::read_to_string(root.join("srv/f")).unwrap(),
        "theirs\n"
    );
    let beside: Vec<_> = std::fs::read_dir(root.join("srv"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("roam-conflict"))
        .collect();
    assert_eq!(
        std::fs::read_to_string(beside[0].path()).unwrap(),
        "base\nmine\n"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_resolver_can_merge_the_two_versions() {
    let root = setup("merge");
    let mut v = vfs(&root);
    v.set_resolver(Box::new(Concatenate(root.clone())));
    assert_eq!(conflicting_change(&v, &root), Flushed::Uploaded);
    assert_eq!(
        std::fs::read_to_string(root.join("srv/f")).unwrap(),
        "base\nmine\ntheirs\n"
    );
    assert_eq!(
        std::fs::read_dir(root.join("srv")).unwrap().count(),
        1,
        "nothing kept beside"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn own_changes_patch_the_listing_instead_of_dropping_it() {
    let root = setup("patch");
    std::fs::write(root.join("srv/h"), b"hh\n").unwrap();
    let v = vfs(&root);
    let f = v.lookup("/w/f").unwrap().unwrap();
    assert_eq!(v.stat(&f).unwrap().size, Some(5), "listed /w");
    let g = v.lookup("/w/g").unwrap().unwrap();
    let copy = v
        .open_for_write(&g, libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    std::fs::write(&copy, b"new!!!\n").unwrap();
    v.flush("/w/g", &|| false).unwrap();
    v.remove_file(&f).unwrap();
    // Another client changes a name meanwhile. Within T_read roam answers from its
    // listing, patched with its own two changes rather than fetched again. (A name the
    // listing lacks is asked again here: a local directory's stat costs nothing.)
    std::fs::write(root.join("srv/h"), b"theirs\n").unwrap();
    assert_eq!(v.stat(&g).unwrap().size, Some(7));
    assert_eq!(v.stat(&f).unwrap_err().errno(), libc::ENOENT);
    let h = v.lookup("/w/h").unwrap().unwrap();
    assert_eq!(
        v.stat(&h).unwrap().size,
        Some(3),
        "the listing was fetched again"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A vfs over `root/srv` whose `*.txt` conflicts go to the resolver extension `ext` (wasm).
fn vfs_resolving(root: &Path, ext: &str) -> Vfs {
    let mut v = vfs(root);
    let ext = roam_ext::Extension::load(
        &roam_testkit::ext::extensions(),
        ext,
        roam_ext::Technology::Wasm,
        roam_ext::Limits::default(),
    )
    .unwrap();
    v.set_resolver(Box::new(ExtResolvers::new(vec![("*.txt".into(), ext)])));
    v
}

/// Rewrites /w/f.txt (from `base`) as `mine` while another client writes `theirs`; returns
/// what the flush said, after checking the base was kept while the change was pending.
fn text_conflict(v: &Vfs, root: &Path, base: &str, mine: &str, theirs: &str) -> Flushed {
    std::fs::write(root.join("srv/f.txt"), base).unwrap();
    let node = v.lookup("/w/f.txt").unwrap().unwrap();
    let copy = v
        .open_for_write(&node, libc::O_WRONLY | libc::O_TRUNC, 0o644)
        .unwrap();
    let kept = kept_base(root, "w/f.txt");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), base, "base kept");
    std::fs::write(&copy, mine).unwrap();
    std::fs::write(root.join("srv/f.txt"), theirs).unwrap();
    let flushed = v.flush("/w/f.txt", &|| false).unwrap();
    assert!(!kept.exists(), "the base goes with the change");
    flushed
}

/// Where the roam process working on the cache keeps the base of the change of `rel`.
fn kept_base(root: &Path, rel: &str) -> std::path::PathBuf {
    let work = std::fs::read_dir(root.join("cache/work")).unwrap();
    let dirs: Vec<_> = work.flatten().map(|e| e.path()).collect();
    assert_eq!(dirs.len(), 1, "one roam process works on this cache");
    dirs[0].join("base").join(rel)
}

/// The files beside f.txt on the server: (name, contents).
fn beside(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("srv"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "f.txt")
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect()
}

#[test]
fn merge3_merges_changes_to_different_lines() {
    let root = setup("merge3");
    let v = vfs_resolving(&root, "merge3");
    let flushed = text_conflict(
        &v,
        &root,
        "one\ntwo\nthree\n",
        "ONE\ntwo\nthree\n",
        "one\ntwo\nthree\nfour\n",
    );
    assert_eq!(flushed, Flushed::Uploaded);
    let merged = "ONE\ntwo\nthree\nfour\n";
    assert_eq!(
        std::fs::read_to_string(root.join("srv/f.txt")).unwrap(),
        merged
    );
    assert_eq!(
        beside(&root),
        ["base\n"],
        "no conflict copy (only the other file)"
    );
    assert_eq!(
        std::fs::read_to_string(v.copy_path("/w/f.txt")).unwrap(),
        merged,
        "the copy is the merge"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn overlapping_changes_keep_both_versions() {
    let root = setup("overlap");
    let v = vfs_resolving(&root, "merge3");
    let flushed = text_conflict(&v, &root, "one\ntwo\n", "ONE\ntwo\n", "uno\ntwo\nthree\n");
    assert!(matches!(flushed, Flushed::Conflict(_)), "{flushed:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("srv/f.txt")).unwrap(),
        "uno\ntwo\nthree\n"
    );
    let mut kept = beside(&root);
    kept.sort();
    assert_eq!(kept, ["ONE\ntwo\n", "base\n"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_patch_past_the_end_is_refused_and_both_versions_kept() {
    let root = setup("evil");
    let v = vfs_resolving(&root, "faults");
    let flushed = text_conflict(&v, &root, "a\n", "mine\n", "theirs!\n");
    assert!(matches!(flushed, Flushed::Conflict(_)), "{flushed:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("srv/f.txt")).unwrap(),
        "theirs!\n"
    );
    let mut kept = beside(&root);
    kept.sort();
    assert_eq!(kept, ["base\n", "mine\n"], "nothing lost");
    std::fs::remove_dir_all(&root).unwrap();
}

/// An unlink of a file while its upload runs (a T_write delivery, on another thread) waits
/// for it and then removes the uploaded file: it must not remove the copy under the upload,
/// which would then leave the file on the server after `rm` said it was gone.
#[test]
fn an_unlink_waits_for_the_upload_under_way() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let root = setup("unlink-upload");
    let v = vfs(&root);
    let node = v.lookup("/w/new").unwrap().unwrap();
    let copy = v
        .open_for_write(&node, libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    std::fs::write(&copy, b"object file\n").unwrap();
    let (uploading, flushed) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            // Asked after the upload, with the file's lock held: time for the unlink to come.
            let still_written = || {
                uploading.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(300));
                false
            };
            assert_eq!(
                v.flush("/w/new", &still_written).unwrap(),
                Flushed::Uploaded
            );
            flushed.store(true, Ordering::SeqCst);
        });
        while !uploading.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        v.remove_file(&node).unwrap();
        assert!(flushed.load(Ordering::SeqCst), "the unlink did not wait");
    });
    assert!(!root.join("srv/new").exists());
    assert_eq!(v.stat(&node).unwrap_err().errno(), libc::ENOENT);
    assert!(v.dirty().is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

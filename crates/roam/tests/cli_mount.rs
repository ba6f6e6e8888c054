//! `roam mount`'s options through real FUSE mounts: a directory that holds files or is a
//! mount point already is refused (exit status 1) unless `--nonempty`, `--read-only` fails every change
//! with EROFS while reads work, and `--cache-dir` puts roam's cache where it says.

mod common;

use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::process::Output;

use common::fuse::{is_mounted, FuseMount, UnmountOnDrop};
use common::{stderr, Roam};
use roam_testkit::Scratch;

/// `roam mount ARGS` (in the background unless ARGS say otherwise).
fn mount(roam: &Roam, args: &[&str], dir: &Path) -> Output {
    let mut cmd = roam.command();
    cmd.arg("mount").args(args).arg(dir).arg("mem:");
    cmd.output().expect("running roam mount")
}

#[test]
fn a_directory_with_files_is_refused_unless_nonempty() {
    let roam = Roam::new();
    let scratch = Scratch::new("nonempty");
    let dir = scratch.join("mnt");
    roam_testkit::write_file(&dir.join("mine.txt"), b"keep", 0o644);
    let _guard = UnmountOnDrop(dir.clone());

    let o = mount(&roam, &[], &dir);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--nonempty"),
        "says how: {}",
        stderr(&o)
    );
    assert!(!is_mounted(&dir));

    let o = mount(&roam, &["--nonempty"], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(is_mounted(&dir));
    assert!(
        !dir.join("mine.txt").exists(),
        "the mount hides what was there"
    );
}

#[test]
fn a_mount_point_is_refused_unless_nonempty() {
    let roam = Roam::new();
    let first = FuseMount::start(Roam::new(), Some("mem:"), &[]);
    let o = mount(&roam, &[], &first.dir);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("already a mount point"),
        "{}",
        stderr(&o)
    );

    // Over it on purpose: the new mount is the one seen, and `umount` uncovers the first.
    fs::write(first.dir.join("below"), b"1").unwrap();
    let o = mount(&roam, &["--nonempty"], &first.dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !first.dir.join("below").exists(),
        "the second mount is on top"
    );
    let o = roam
        .command()
        .arg("umount")
        .arg(&first.dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(first.dir.join("below")).unwrap(), b"1");
}

#[test]
fn read_only_serves_reads_and_fails_changes_with_erofs() {
    let scratch = Scratch::new("ro");
    let tree = scratch.join("tree");
    roam_testkit::write_file(&tree.join("f.txt"), b"hello\n", 0o644);
    let url = format!("file://{}", tree.display());
    let m = FuseMount::start(Roam::new(), Some(&url), &["--read-only"]);
    assert_eq!(fs::read(m.dir.join("f.txt")).unwrap(), b"hello\n");
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs(fs::write(m.dir.join("f.txt"), b"x"), "overwrite");
    erofs(fs::write(m.dir.join("new"), b"x"), "create");
    erofs(fs::create_dir(m.dir.join("d")), "mkdir");
    erofs(fs::remove_file(m.dir.join("f.txt")), "unlink");
    erofs(
        fs::rename(m.dir.join("f.txt"), m.dir.join("g.txt")),
        "rename",
    );
    assert_eq!(
        fs::read(tree.join("f.txt")).unwrap(),
        b"hello\n",
        "the remote is untouched"
    );
    assert_eq!(
        fs::metadata(tree.join("new")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

/// `--cache-dir` wins over `$ROAM_CACHE_DIR` (which the fixture sets): the background
/// mount's log, the first file roam writes into its cache, is there and not in the other.
#[test]
fn cache_dir_puts_the_cache_where_it_says() {
    let roam = Roam::new();
    let scratch = Scratch::new("cachedir");
    let dir = scratch.join("mnt");
    let cache = scratch.join("my-cache");
    roam_testkit::mkdir(&dir);
    let _guard = UnmountOnDrop(dir.clone());
    let o = mount(&roam, &["--cache-dir", cache.to_str().unwrap()], &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    fs::write(dir.join("f"), b"data").unwrap();
    assert!(cache.join("mount.log").is_file(), "no log in --cache-dir");
    let o = roam.command().arg("umount").arg(&dir).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !roam.cache.join("c").join("mount.log").exists(),
        "$ROAM_CACHE_DIR was used despite --cache-dir"
    );
}

//! Names through local symlinks (Ufo §5.1): a local link that points into roam's namespace
//! leads there for every call that follows it, and only for those; calls that act on the
//! link itself (lstat, readlink, rm) still see the local link.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use common::{fixture, stderr, stdout, Roam};
use roam_testkit::Scratch;

/// Links in `dir`: `data` to `base/dir`, `hello` to `base/hello.txt`, and `deep`, a relative
/// link through `data` (a chain of two links).
fn make_links(dir: &Path, base: &str) {
    roam_testkit::mkdir(dir);
    symlink(format!("{base}/dir"), dir.join("data")).unwrap();
    symlink(format!("{base}/hello.txt"), dir.join("hello")).unwrap();
    symlink("data/sub", dir.join("deep")).unwrap();
}

#[test]
fn local_links_into_roam_reach_the_remote_files() {
    let fx = fixture();
    let scratch = Scratch::new("links");
    let (native_dir, roam_dir) = (scratch.join("native"), scratch.join("roam"));
    make_links(&native_dir, &fx.www.to_string_lossy());
    make_links(&roam_dir, &fx.remote());
    let script = "cd {} && cat hello data/sub/deep.txt && ls data data/sub deep \
                  && cat deep/other.txt && (cd data && cat 'a b.txt' && cd sub && cat deep.txt) \
                  && stat -L -c '%F %s' hello data deep/deep.txt && stat -c %F hello data \
                  && test -d data/ && test -f deep/other.txt && grep -r needle data | sort";
    let run = |dir: &Path, roam: bool| {
        let s = script.replace("{}", &dir.to_string_lossy());
        let out = if roam {
            Roam::new().sh(&[], &s)
        } else {
            Command::new("sh").args(["-c", &s]).output().unwrap()
        };
        assert!(out.status.success(), "{s}: {}", stderr(&out));
        stdout(&out).replace(&dir.to_string_lossy().into_owned(), "{}")
    };
    let native = run(&native_dir, false);
    assert!(native.contains("deep down"), "{native}");
    assert_eq!(run(&roam_dir, true), native);
}

#[test]
fn calls_on_the_link_itself_stay_local() {
    let fx = fixture();
    let scratch = Scratch::new("links");
    let dir = scratch.join("l");
    make_links(&dir, &fx.remote());
    let d = dir.to_string_lossy();
    let out = Roam::new().sh(
        &[],
        &format!("readlink {d}/data && stat -c %F {d}/hello && rm {d}/hello {d}/data && ls {d}"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("{}/dir\nsymbolic link\ndeep\n", fx.remote())
    );
    assert!(
        fx.www.join("hello.txt").exists() && fx.www.join("dir").is_dir(),
        "rm of a link must never reach what it points to"
    );
}

#[test]
fn a_link_into_a_writable_mount_creates_files_there() {
    let scratch = Scratch::new("links");
    let srv = scratch.join("srv");
    roam_testkit::mkdir(&srv.join("out"));
    let home = scratch.join("home");
    roam_testkit::mkdir(&home);
    symlink("/w/out", home.join("out")).unwrap();
    let mount = format!("/w=file+cache://{}", srv.display());
    let out = Roam::new().sh(
        &["-m", &mount],
        &format!(
            "cd {h} && echo made > out/new.txt && mkdir out/d && mv out/new.txt out/d/ \
             && cat {h}/out/d/new.txt && ls out/nope 2>&1; true",
            h = home.display()
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("made\n"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
    assert_eq!(
        std::fs::read_to_string(srv.join("out/d/new.txt")).unwrap(),
        "made\n"
    );
}

#[test]
fn a_link_loop_is_eloop_not_a_hang() {
    let scratch = Scratch::new("links");
    let dir = scratch.join("l");
    roam_testkit::mkdir(&dir);
    symlink("b", dir.join("a")).unwrap();
    symlink("a", dir.join("b")).unwrap();
    let out = Roam::new().sh(&[], &format!("cat {}/a/x", dir.display()));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Too many levels of symbolic links"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn relative_links_inside_a_remote_tree_resolve_there() {
    let script = "cd {} && cat link dirlink/deep.txt sub/up && ls dirlink && readlink link sub/up \
                  && ls -l --time-style=+%Y-%m-%dT%H:%M:%S . sub | awk '{print $1, $5, $6, $7, $8, $9}'";
    for scheme in ["file+cache", "sftp"] {
        let backend = common::Backend::serving(scheme, |dir| {
            roam_testkit::write_file(&dir.join("sub/deep.txt"), b"deep\n", 0o644);
            symlink("sub/deep.txt", dir.join("link")).unwrap();
            symlink("sub", dir.join("dirlink")).unwrap();
            symlink("../link", dir.join("sub/up")).unwrap();
        });
        let srv = backend.backend("");
        let native = Command::new("sh")
            .args(["-c", &script.replace("{}", &srv.to_string_lossy())])
            .output()
            .unwrap();
        assert!(native.status.success(), "{}", stderr(&native));
        let out = backend.sh(&script.replace("{}", "/w"));
        assert!(out.status.success(), "{scheme}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            stdout(&native),
            "{scheme}: kinds, sizes, times, targets"
        );
    }
}

/// roam remembers local names it found native for a moment (no `lstat` of its own when
/// asked again); a traced program that then turns such a name into a link into roam
/// (`ln -s`, or `rm -r` of a directory and `ln -s` in its place) reaches roam through it
/// at once.
#[test]
fn a_name_just_turned_into_a_link_leads_into_roam_at_once() {
    let fx = fixture();
    let scratch = Scratch::new("links");
    let script = "cd {d} && ! test -e {d}/hello && ln -s {r}/hello.txt hello && cat {d}/hello \
                  && mkdir -p data/sub && ! test -e {d}/data/sub/deep.txt && test -d {d}/data/sub \
                  && rm -r data && ln -s {r}/dir data && cat {d}/data/sub/deep.txt";
    let run = |dir: &Path, base: &str, roam: bool| {
        roam_testkit::mkdir(dir);
        let d = dir.to_string_lossy();
        let s = script.replace("{d}", &d).replace("{r}", base);
        let out = if roam {
            Roam::new().sh(&[], &s)
        } else {
            Command::new("sh").args(["-c", &s]).output().unwrap()
        };
        assert!(out.status.success(), "{s}: {}", stderr(&out));
        stdout(&out)
    };
    let native = run(&scratch.join("native"), &fx.www.to_string_lossy(), false);
    assert!(native.contains("deep down"), "{native}");
    assert_eq!(run(&scratch.join("roam"), &fx.remote(), true), native);
}

//! Nothing a server sends leads a program to a local file: symbolic links on an SFTP
//! server and in a remote archive, absolute or climbing with `..`, last in a name or in
//! its middle, are followed inside their mount (its root as `/`, as `openat2`'s
//! `RESOLVE_IN_ROOT`), through both frontends. Each mount has its own `etc/passwd`
//! ("inside"), which is what every such link reaches; the local `/etc/passwd` never shows.

mod common;

use std::os::unix::fs::symlink;

use common::Frontend::{self, Fuse, RunFuse, Trap};
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::archive::{write, Item};
use roam_testkit::write_file;

const INSIDE: &[u8] = b"inside\n";

fn server_links(frontend: Frontend) {
    let b = Backend::serving("sftp", |srv| {
        write_file(&srv.join("etc/passwd"), INSIDE, 0o644);
        symlink("/etc/passwd", srv.join("abs")).unwrap();
        symlink("../../../../../../../../etc/passwd", srv.join("climb")).unwrap();
        symlink("/etc", srv.join("absdir")).unwrap();
        symlink("../../../../../../../../etc", srv.join("climbdir")).unwrap();
    })
    .through(frontend);
    let o = b.sh("cat /w/abs /w/climb /w/absdir/passwd /w/climbdir/passwd");
    assert!(o.status.success(), "{frontend:?}: {}", stderr(&o));
    assert_eq!(stdout(&o), "inside\n".repeat(4), "{frontend:?}");
    // Under `roam run` a link's own text is the server's, for programs that ask (`ls -l`,
    // `readlink`); a mount's kernel follows whatever the text says, so there it is where
    // the link leads, inside the mount.
    let o = b.sh("readlink /w/abs /w/climbdir");
    let text = match frontend {
        Trap => "/etc/passwd\n../../../../../../../../etc\n",
        Fuse | RunFuse => "etc/passwd\netc\n",
    };
    assert_eq!(stdout(&o), text, "{frontend:?}: {}", stderr(&o));
}

#[test]
fn sftp_links_stay_in_their_mount_under_run() {
    server_links(Trap);
}

#[test]
fn sftp_links_stay_in_their_mount_on_a_mount() {
    server_links(Fuse);
}

fn archive_links(frontend: Frontend) {
    let b = Backend::serving("http", |srv| {
        let members = [
            Item::File("etc/passwd", INSIDE),
            Item::Symlink("abs", "/etc/passwd"),
            Item::Symlink("climb", "../../../../../../etc/passwd"),
            Item::Symlink("sub/climb", "../../../../../../../etc/passwd"),
        ];
        write(&srv.join("links.tar"), "tar", &members);
    })
    .through(frontend);
    let roam = Roam::new().env("ROAM_EXT_DIR", roam_testkit::ext::extensions());
    let o = b.sh_with(
        roam,
        "cd '/w/links.tar#' && for f in abs climb sub/climb; do cat $f || echo \"$f: failed\"; done",
    );
    let out = stdout(&o);
    assert!(!out.contains("root:"), "{frontend:?}: a local file: {out}");
    assert_eq!(out, "inside\n".repeat(3), "{frontend:?}: {}", stderr(&o));
}

#[test]
fn archive_links_stay_in_their_archive_under_run() {
    archive_links(Trap);
}

#[test]
fn archive_links_stay_in_their_archive_on_a_mount() {
    archive_links(Fuse);
}

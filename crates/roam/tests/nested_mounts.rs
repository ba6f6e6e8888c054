//! Mounts inside mounts (`-m /proj=A -m /proj/m=B`): the longest prefix always wins, even
//! after the outer directory was listed (its listing, which does not have `m` or has
//! something else there, never answers for the inner mount's root), and the outer listing
//! shows the inner mount point as a directory, once. Both frontends, the outer mount
//! served through the cache (listings answer lookups there).

mod common;

use std::fs;

use common::{stderr, stdout, Roam};
use roam_testkit::Scratch;

/// What the script prints: the outer listing, the inner file, the inner listing, and the
/// kind of the mount point (after the outer listing, and from a second lookup).
const EXPECTED: &str = "m\ntop.txt\nouter\ninner\ninner.txt\ndirectory\ndirectory\n";

fn nested(fuse: bool) {
    let scratch = Scratch::new("nested");
    let (outer, inner) = (scratch.join("outer"), scratch.join("inner"));
    roam_testkit::write_file(&outer.join("top.txt"), b"outer\n", 0o644);
    // The outer server has its own `m`, a file: the inner mount shadows it.
    roam_testkit::write_file(&outer.join("m"), b"the outer m\n", 0o644);
    roam_testkit::write_file(&inner.join("inner.txt"), b"inner\n", 0o644);
    let mounts = [
        format!("/proj=file+cache://{}", outer.display()),
        format!("/proj/m=file+cache://{}", inner.display()),
    ];
    let mut args = vec!["-m", &mounts[0], "-m", &mounts[1]];
    if fuse {
        args.insert(0, "--fuse");
    }
    let script = "ls /proj && cat /proj/top.txt && cat /proj/m/inner.txt && ls /proj/m \
                  && stat -c %F /proj/m && cd /proj && stat -c %F m";
    let o = Roam::new().sh(&args, script);
    assert!(o.status.success(), "fuse {fuse}: {}", stderr(&o));
    assert_eq!(stdout(&o), EXPECTED, "fuse {fuse}: {}", stderr(&o));
    // Neither server was changed by the other's mount.
    assert_eq!(fs::read(outer.join("m")).unwrap(), b"the outer m\n");
}

#[test]
fn the_inner_mount_wins_after_the_outer_listing_under_roam_run() {
    nested(false);
}

#[test]
fn the_inner_mount_wins_after_the_outer_listing_under_roam_run_fuse() {
    nested(true);
}

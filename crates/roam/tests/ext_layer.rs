//! Layer extensions as mounts (`ext:NAME:URL`): the wasm `rot13` extension stacked over a
//! real WebDAV server gives the same names and bytes as the native `rot13:` layer, both
//! ways, under `roam run` and through `roam mount`; a lying extension is EIO naming it; a
//! missing one is refused at start.

mod common;

use std::path::Path;
use std::process::Output;

use common::fuse::FuseMount;
use common::{stderr, stdout, Roam};
use roam_testkit::backend::{serve, Served};
use roam_testkit::{noise, write_file, Scratch};

fn roam() -> Roam {
    Roam::new().env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\nstdout: {}",
        stderr(o),
        stdout(o)
    );
    stdout(o)
}

/// A WebDAV server over a tree stored rotated (as a `rot13:` layer writes it).
fn dav(scratch: &Scratch) -> Served {
    let srv = scratch.join("srv");
    let f = |rel: &str, data: &[u8]| write_file(&srv.join(rel), data, 0o644);
    f("Uryyb.gkg", b"Uryyb, Jbeyq!\n");
    f("fho/Qrrc Svyr.gkg", b"Gur dhvpx oebja sbk\n");
    f("fho/abvfr.ova", &noise(300 << 10, 7));
    serve("dav", &srv, &scratch.join("run"))
}

/// Every file under `root`, with its md5, names sorted (as the program sees them).
const SUMS: &str = "(cd $R && find . -type f | LC_ALL=C sort | xargs -d '\\n' md5sum)";

#[test]
fn wasm_rot13_is_the_native_rot13_under_roam_run() {
    let scratch = Scratch::new("ext-layer");
    let served = dav(&scratch);
    // Written first (each mount keeps its own listings for T_read), by `cp`, whose `close`
    // uploads (a shell's `>` dup2s over the fd: the upload would wait for its exit).
    let local = scratch.join("w.txt");
    std::fs::write(&local, "Written by Wasm\n").unwrap();
    let script = format!(
        "set -e; cp {l} /e/Wasm.txt; {n}; {e}; cat /n/Wasm.txt",
        l = local.display(),
        n = SUMS.replace("$R", "/n"),
        e = SUMS.replace("$R", "/e"),
    );
    let out = ok(&roam().sh(
        &[
            "-m",
            &format!("/n=rot13:{}", served.url),
            "-m",
            &format!("/e=ext:rot13:{}", served.url),
        ],
        &script,
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4 + 4 + 1, "{out}");
    assert_eq!(lines[..4], lines[4..8], "the same names and bytes");
    assert!(lines[0].ends_with("./Hello.txt"), "{out}");
    assert!(lines[1].ends_with("./Wasm.txt"), "{out}");
    assert_eq!(lines[8], "Written by Wasm");
    assert_eq!(
        std::fs::read(scratch.join("srv/Jnfz.gkg")).unwrap(),
        b"Jevggra ol Jnfz\n",
        "stored rotated, as the native layer stores it"
    );
}

fn tree_through_mount(url: &str) -> (FuseMount, String) {
    let m = FuseMount::start(roam(), Some(url), &[]);
    let sums = ok(&m.sh(&SUMS.replace("$R", "/w"), &[]));
    (m, sums)
}

#[test]
fn wasm_rot13_is_the_native_rot13_through_roam_mount() {
    let scratch = Scratch::new("ext-layer");
    let served = dav(&scratch);
    let (_native, n) = tree_through_mount(&format!("rot13:{}", served.url));
    let (wasm, e) = tree_through_mount(&format!("ext:rot13:{}", served.url));
    assert_eq!(n, e);
    assert_eq!(n.lines().count(), 3, "{n}");
    assert_eq!(
        ok(&wasm.sh("cat '/w/sub/Deep File.txt'", &[])),
        "The quick brown fox\n"
    );
}

#[test]
fn a_lying_layer_is_eio_naming_it() {
    let scratch = Scratch::new("ext-layer");
    let served = dav(&scratch);
    let o = roam().sh(
        &["-m", &format!("/f=ext:faults:{}", served.url)],
        "ls /f/Hello.txt",
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("Input/output error"), "{err}");
    assert!(
        err.contains("ext:faults layer: extension `faults` (wasm): returned an invalid result"),
        "{err}"
    );
}

#[test]
fn a_missing_layer_extension_is_refused_at_start() {
    let o = roam().sh(&["-m", "/x=ext:nosuch:mem:"], "true");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("ext:nosuch:mem:") && err.contains("nosuch.wasm"),
        "{err}"
    );
    assert!(!Path::new("/x").exists());
}

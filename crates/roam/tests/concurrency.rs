//! roam processes sharing remote files, checked against the model of what may be observed:
//! - writers racing: two roam processes (each with its own cache, or sharing one) open the
//!   same file, both from the same server version, and close it at the same moment. Neither
//!   version may vanish: the name ends up holding one of them and a `NAME.roam-conflict-TIME`
//!   file beside it the other, on every writable backend (S3: see `races!`), whichever of
//!   the two uploads reaches the server first (the late one is refused by the protocol's
//!   precondition, or seen changed before);
//! - readers during writes: while one roam replaces a file with whole versions, readers in
//!   other roam processes (their own caches, and one shared cache) only ever read one of
//!   those versions whole, never a mix or a part.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{noise, write_file, Scratch};

/// Rounds per backend: each one a fresh file and a fresh race.
const ROUNDS: usize = 3;
/// Each writer's version (large enough that uploads overlap on the server).
const LEN: usize = 2 << 20;

/// One writer of `/w/NAME` under its own `roam run`: opens it (truncating), waits until the
/// other writer has it open too, writes its version, waits for the other again and closes,
/// so both changes start from the same server version and are delivered together.
fn writer(b: &Backend, cache: &Path, sync: &Path, name: &str, me: &str, other: &str) -> Child {
    let wait = |what: &str| {
        format!(
            "while [ ! -e {}/{other}.{what} ]; do sleep 0.01; done",
            sync.display()
        )
    };
    let script = format!(
        "exec 3>/w/{name} && touch {s}/{me}.open && {} && cat {s}/{me}.data >&3 && touch {s}/{me}.written && {} && exec 3>&-",
        wait("open"),
        wait("written"),
        s = sync.display(),
    );
    in_background(b, Roam::new().env("ROAM_CACHE_DIR", cache), &script)
}

/// `roam run -m /w=URL -- sh -c SCRIPT` on `b`, started in the background.
fn in_background(b: &Backend, roam: Roam, script: &str) -> Child {
    let mut cmd = roam.command();
    for (k, v) in b.env() {
        cmd.env(k, v);
    }
    cmd.args([
        "run",
        "-m",
        &format!("/w={}", b.url),
        "--",
        "sh",
        "-c",
        script,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// sha256 of each file in `/w` whose name starts with `prefix`, read through a fresh roam.
fn server_files(b: &Backend, prefix: &str) -> BTreeMap<String, String> {
    let o = b.sh(&format!("cd /w && sha256sum {prefix}*"));
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| {
            let (sum, name) = l.split_once("  ").unwrap();
            (name.to_owned(), sum.to_owned())
        })
        .collect()
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    stdout(&o).split_whitespace().next().unwrap().to_owned()
}

fn finished(c: Child) -> Output {
    c.wait_with_output().unwrap()
}

/// Races two writers `ROUNDS` times; `shared` puts both in one cache.
fn race(kind: &str, shared: bool) {
    let b = Backend::new(kind);
    let scratch = Scratch::new("race");
    for round in 0..ROUNDS {
        let name = format!("f{round}");
        let sync = scratch.join(&format!("sync{round}"));
        write_file(&sync.join("a.data"), &noise(LEN, 2 * round as u64), 0o644);
        write_file(
            &sync.join("b.data"),
            &noise(LEN, 2 * round as u64 + 1),
            0o644,
        );
        let o = b.sh(&format!("echo original > /w/{name}"));
        assert!(o.status.success(), "{}", stderr(&o));
        let caches = match shared {
            true => [scratch.join("cache"), scratch.join("cache")],
            false => [scratch.join("cache-a"), scratch.join("cache-b")],
        };
        let a = writer(&b, &caches[0], &sync, &name, "a", "b");
        let bw = writer(&b, &caches[1], &sync, &name, "b", "a");
        for o in [finished(a), finished(bw)] {
            assert!(o.status.success(), "{kind} round {round}: {}", stderr(&o));
        }
        let (va, vb) = (sha256(&sync.join("a.data")), sha256(&sync.join("b.data")));
        let files = server_files(&b, &name);
        let kept: Vec<&String> = files.values().collect();
        assert_eq!(files.len(), 2, "{kind} round {round}: {files:?}");
        assert!(
            kept.contains(&&va) && kept.contains(&&vb),
            "{kind} round {round}: a version was lost: {files:?}"
        );
        let beside = files.keys().find(|n| **n != name).unwrap();
        assert!(
            beside.starts_with(&format!("{name}.roam-conflict-")),
            "{kind} round {round}: {files:?}"
        );
    }
}

/// `roam run` of `script` on `b` with `cache` and T_read 0 (every open asks the server).
fn fresh_reader(b: &Backend, cache: &Path, script: &str) -> Child {
    let config = cache.with_extension("toml");
    write_file(&config, b"[cache]\nt_read = 0\n", 0o644);
    let roam = Roam::new()
        .env("ROAM_CACHE_DIR", cache)
        .env("ROAM_CONFIG", &config);
    in_background(b, roam, script)
}

/// Versions written while three readers read: every read is one of them, whole.
fn readers_during_writes(kind: &str) {
    const VERSIONS: u64 = 6;
    let b = Backend::new(kind);
    let scratch = Scratch::new("readers");
    let mut sums = Vec::new();
    for v in 0..VERSIONS {
        let path = scratch.join(&format!("v{v}"));
        write_file(&path, &noise(LEN, 100 + v), 0o644);
        sums.push(sha256(&path));
    }
    let o = b.sh(&format!("cp {} /w/f", scratch.join("v0").display()));
    assert!(o.status.success(), "{}", stderr(&o));
    let writes = (1..VERSIONS)
        .map(|v| format!("cp {} /w/f", scratch.join(&format!("v{v}")).display()))
        .collect::<Vec<_>>()
        .join(" && ");
    let writer = fresh_reader(&b, &scratch.join("writer"), &writes);
    let read_loop = "for i in $(seq 15); do sha256sum < /w/f; done";
    let readers: Vec<Child> = [
        scratch.join("own"),
        scratch.join("shared"),
        scratch.join("shared"),
    ]
    .iter()
    .map(|cache| fresh_reader(&b, cache, read_loop))
    .collect();
    let w = finished(writer);
    assert!(w.status.success(), "{kind}: writer: {}", stderr(&w));
    for (i, r) in readers.into_iter().enumerate() {
        let o = finished(r);
        assert!(o.status.success(), "{kind}: reader {i}: {}", stderr(&o));
        let out = stdout(&o);
        let reads: Vec<&str> = out
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(reads.len(), 15, "{kind}: reader {i}: {}", stderr(&o));
        for sum in reads {
            assert!(
                sums.iter().any(|s| s == sum),
                "{kind}: reader {i} read bytes of no version"
            );
        }
    }
    let last = server_files(&b, "f");
    assert_eq!(last.get("f"), sums.last(), "{kind}: {last:?}");
}

macro_rules! races {
    ($($kind:ident => $name:literal),* $(,)?) => {
        mod separate_caches {
            $(#[test] fn $kind() { super::race($name, false) })*
        }
        mod one_shared_cache {
            $(#[test] fn $kind() { super::race($name, true) })*
        }
    };
}

macro_rules! readers {
    ($($kind:ident => $name:literal),* $(,)?) => {
        mod readers_during_writes {
            $(#[test] fn $kind() { super::readers_during_writes($name) })*
        }
    };
}

// S3 on a moto serving one request at a time: moto checks `If-Match` and then stores, so
// on its threaded server two conditional PUTs can both pass (S3 and MinIO check and store
// in one step).
races! {
    file_cache => "file+cache",
    dav => "dav",
    ftp => "ftp",
    sftp => "sftp",
    s3 => "s3-serial",
    chirp => "chirp",
}

readers! {
    file_cache => "file+cache",
    dav => "dav",
    ftp => "ftp",
    sftp => "sftp",
    s3 => "s3",
    chirp => "chirp",
}

/// A listing made while another roam puts a file in place (its lock on the name, or its
/// temporary, is listed beside) does not decide that a name is absent: listings are not
/// atomic with renames, and the name it lacks may be the one being replaced. Here the
/// file appears behind roam's back after the listing: it is found (asked about), where a
/// listing without such a mark keeps its answer within T_read. (nginx's WebDAV lists no
/// dot names, so it shows no such mark; Chirp's are never listed.)
fn a_listing_during_an_upload_does_not_decide_absence(kind: &str) {
    let b = Backend::serving(kind, |srv| {
        roam_testkit::mkdir(&srv.join("busy/.roam-lock-f"));
        write_file(&srv.join("busy/other"), b"x", 0o644);
        write_file(&srv.join("calm/other"), b"x", 0o644);
    });
    let script = "set -e; ls /w/busy /w/calm > /dev/null; \
        printf new > $B/busy/f; printf new > $B/calm/f; \
        cat /w/busy/f; echo; cat /w/calm/f 2>&1 || true";
    let o = b.sh(script);
    assert!(o.status.success(), "{kind}: {}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("new"), "{kind}: {out}");
    assert!(
        lines.next().is_some_and(|l| l.contains("No such file")),
        "{kind}: a calm listing decides within T_read: {out}"
    );
}

#[test]
fn a_listing_during_an_upload_does_not_decide_absence_ftp() {
    a_listing_during_an_upload_does_not_decide_absence("ftp");
}

#[test]
fn a_listing_during_an_upload_does_not_decide_absence_sftp() {
    a_listing_during_an_upload_does_not_decide_absence("sftp");
}

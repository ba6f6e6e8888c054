//! Resolver extensions end to end: `roam run` with a `roam.toml` whose `[[resolver]]` rules
//! send conflicts of `*.txt` to `merge3` and of `*.mp3` to `id3merge` (both wasm), against a
//! real WebDAV server (nginx). In each test a program opens a file for writing, another client
//! changes it on the server (the script writes the server's own copy, `$B/...`), and the
//! program's change is written back over the conflict: merged when the changes are to
//! different lines or tag fields, kept beside the server's version when they overlap or when
//! the resolver's patch is refused.

mod common;

use std::fs;
use std::process::Output;

use common::Backend;
use common::{stderr, stdout, Roam};

/// `roam run` with the example extensions and resolver rules for `*.txt` and `*.mp3`.
fn resolving(txt: &str) -> Roam {
    let roam = Roam::new();
    let conf = roam.cache.join("roam.toml");
    fs::write(
        &conf,
        format!(
            "[[resolver]]\nglob = \"*.txt\"\next = \"{txt}\"\n\
             [[resolver]]\nglob = \"*.mp3\"\next = \"id3merge\"\n"
        ),
    )
    .unwrap();
    roam.env("ROAM_CONFIG", conf)
        .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
}

/// A WebDAV server holding `name` = `base`.
fn serving(name: &str, base: &[u8]) -> Backend {
    Backend::serving("dav", |srv| {
        roam_testkit::write_file(&srv.join(name), base, 0o644)
    })
}

/// Under roam: opens /w/NAME for writing (roam keeps the base), lets the other client write
/// `theirs` on the server, writes `mine` over the copy, and closes (the upload meets the
/// conflict). The program's copy after the merge is checked by the vfs tests: here the
/// upload may be made by the delivery that `cat`'s exit starts, while the script goes on.
fn conflict(m: &Backend, roam: Roam, name: &str, mine: &[u8], theirs: &[u8]) -> Output {
    fs::write(m.backend("theirs"), theirs).unwrap();
    fs::write(m.backend("mine"), mine).unwrap();
    let script = format!(
        "exec 3<>/w/{name} && cat $B/theirs > $B/{name} && cat $B/mine > /w/{name} && \
         exec 3>&-"
    );
    m.sh_with(roam, &script)
}

/// The conflict copies on the server (`NAME.roam-conflict-TIME`), their contents.
fn conflict_copies(m: &Backend) -> Vec<Vec<u8>> {
    fs::read_dir(m.backend(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".roam-conflict-"))
        .map(|e| fs::read(e.path()).unwrap())
        .collect()
}

#[test]
fn changes_to_different_lines_are_merged() {
    let m = serving("notes.txt", b"one\ntwo\nthree\n");
    let o = conflict(
        &m,
        resolving("merge3"),
        "notes.txt",
        b"ONE\ntwo\nthree\n",
        b"one\ntwo\nthree\nfour\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = "ONE\ntwo\nthree\nfour\n";
    assert_eq!(fs::read_to_string(m.backend("notes.txt")).unwrap(), merged);
    assert!(conflict_copies(&m).is_empty(), "no conflict copy");
    assert!(!stderr(&o).contains("conflict"), "{}", stderr(&o));
}

#[test]
fn overlapping_changes_keep_both_versions() {
    let m = serving("notes.txt", b"one\ntwo\n");
    let o = conflict(
        &m,
        resolving("merge3"),
        "notes.txt",
        b"ONE\ntwo\n",
        b"uno\ntwo\nthree\n",
    );
    let err = stderr(&o);
    assert!(
        err.contains("both sides changed the lines near base line 1"),
        "{err}"
    );
    assert!(err.contains("was saved as"), "the user is told: {err}");
    assert_eq!(
        fs::read_to_string(m.backend("notes.txt")).unwrap(),
        "uno\ntwo\nthree\n"
    );
    assert_eq!(conflict_copies(&m), [b"ONE\ntwo\n".to_vec()]);
}

#[test]
fn a_lying_resolver_s_patch_is_refused_and_nothing_is_lost() {
    let m = serving("notes.txt", b"a\n");
    let o = conflict(
        &m,
        resolving("faults"),
        "notes.txt",
        b"mine\n",
        b"theirs!\n",
    );
    let err = stderr(&o);
    assert!(
        err.contains("extension `faults` (wasm): returned an invalid result: edit 0 deletes 8+1 of a 8-byte file"),
        "one clear line: {err}"
    );
    assert_eq!(
        fs::read_to_string(m.backend("notes.txt")).unwrap(),
        "theirs!\n"
    );
    assert_eq!(conflict_copies(&m), [b"mine\n".to_vec()]);
}

/// An MP3-like file of 3 MB: an ID3v2.3 tag (title, year) of `room` bytes, audio, an ID3v1
/// tail (title).
fn mp3(title: &str, year: &str, room: usize) -> Vec<u8> {
    roam_testkit::mp3::tagged(title, year, room, &roam_testkit::noise(3 << 20, 7))
}

#[test]
fn id3_tags_changed_in_different_fields_are_merged() {
    let m = serving("song.mp3", &mp3("Song", "1999", 512));
    // The program retitles the song; the other client fixes its year (and, with another
    // tagger, gives the tag more room: a version of another size is a conflict even within
    // the second, whose mtime and ETag may not tell).
    let mine = mp3("Better Title", "1999", 512);
    let o = conflict(
        &m,
        resolving("merge3"),
        "song.mp3",
        &mine,
        &mp3("Song", "2001", 1024),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = fs::read(m.backend("song.mp3")).unwrap();
    assert!(
        merged == mp3("Better Title", "2001", 1024),
        "tags merged, audio intact"
    );
    assert!(conflict_copies(&m).is_empty(), "no conflict copy");
}

#[test]
fn a_fuse_mount_merges_too() {
    let m = serving("notes.txt", b"one\ntwo\nthree\n").through(common::Frontend::Fuse);
    fs::write(m.backend("theirs"), "one\ntwo\nthree\nfour\n").unwrap();
    // The program rewrites the first line in place through its descriptor.
    let script = "exec 3<>/w/notes.txt && cat $B/theirs > $B/notes.txt && printf ONE >&3 && \
                  exec 3>&- && cat /w/notes.txt";
    let o = m.sh_with(resolving("merge3"), script);
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = "ONE\ntwo\nthree\nfour\n";
    assert_eq!(fs::read_to_string(m.backend("notes.txt")).unwrap(), merged);
    assert_eq!(stdout(&o), merged);
    assert!(conflict_copies(&m).is_empty(), "no conflict copy");
}

//! `roam find --ext id3` against a real nginx serving 1,000 MP3-like files of 3 MB each
//! (sparse: a tag at the head and/or tail, silence between): the right files are listed and
//! under 1% of their bytes cross the wire (the extension reads tags, not audio).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use roam_testkit::{Scratch, Server};

const FILES: usize = 1000;
const SIZE: u64 = 3 << 20;

fn syncsafe(n: usize) -> [u8; 4] {
    [
        (n >> 21) as u8 & 0x7f,
        (n >> 14) as u8 & 0x7f,
        (n >> 7) as u8 & 0x7f,
        n as u8 & 0x7f,
    ]
}

/// An ID3v2 tag (major version 3 or 4) with Latin-1 text frames and 1 KiB of padding.
fn id3v2(major: u8, frames: &[(&[u8; 4], &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (id, text) in frames {
        let len = text.len() + 1;
        body.extend_from_slice(*id);
        body.extend_from_slice(&if major == 4 {
            syncsafe(len)
        } else {
            (len as u32).to_be_bytes()
        });
        body.extend_from_slice(&[0, 0, 0]);
        body.extend_from_slice(text.as_bytes());
    }
    body.resize(body.len() + 1024, 0);
    let mut tag = vec![b'I', b'D', b'3', major, 0, 0];
    tag.extend_from_slice(&syncsafe(body.len()));
    tag.extend_from_slice(&body);
    tag
}

/// A 128-byte ID3v1 tag.
fn id3v1(title: &str, artist: &str) -> Vec<u8> {
    let mut tag = vec![0u8; 128];
    tag[..3].copy_from_slice(b"TAG");
    tag[3..3 + title.len()].copy_from_slice(title.as_bytes());
    tag[33..33 + artist.len()].copy_from_slice(artist.as_bytes());
    tag
}

/// Writes file `i`; every tenth is by Radiohead, tagged in one of three ways. Returns its
/// relative name when it should match.
fn mp3(dir: &Path, i: usize) -> Option<String> {
    let rel = format!("music/{:02}/track{i:04}.mp3", i / 100);
    let artist = if i.is_multiple_of(10) {
        "Radiohead"
    } else {
        "Portishead"
    };
    let title = format!("Song {i}");
    let (head, tail) = match i % 3 {
        0 => (
            id3v2(3, &[(b"TIT2", &title), (b"TPE1", artist)]),
            id3v1(&title, artist),
        ),
        1 => (
            id3v2(4, &[(b"TPE1", artist), (b"TALB", "Album")]),
            Vec::new(),
        ),
        _ => (Vec::new(), id3v1(&title, artist)),
    };
    let path = dir.join(&rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = File::create(&path).unwrap();
    f.write_all(&head).unwrap();
    f.seek(SeekFrom::Start(SIZE - tail.len() as u64)).unwrap();
    f.write_all(&tail).unwrap();
    f.set_len(SIZE).unwrap();
    i.is_multiple_of(10).then_some(rel)
}

/// Bytes of response bodies nginx sent for `.mp3` files (combined log: status, then bytes).
fn mp3_bytes_sent(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains(".mp3 HTTP"))
        .filter_map(|l| {
            l.split("\" ")
                .nth(1)?
                .split(' ')
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `roam find ARGS` with the example extensions, a cache in `scratch` and `config` (a
/// missing file: none).
fn roam_find(scratch: &Scratch, config: &Path, args: &[OsString]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_roam"))
        .arg("find")
        .args(args)
        .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
        .env("ROAM_CACHE_DIR", scratch.join("cache"))
        .env("ROAM_CONFIG", config)
        .output()
        .unwrap()
}

/// Runs `roam find` for Radiohead under `tech`; it must succeed. Returns the names listed.
fn find(server: &Server, tech: &str, scratch: &Scratch) -> BTreeSet<String> {
    let dir = format!("/http/{}/music", server.authority());
    let out = roam_find(
        scratch,
        &scratch.join("none.toml"),
        &[
            &dir,
            "--ext",
            "id3",
            "--where",
            "artist=Radiohead",
            "--tech",
            tech,
        ]
        .map(OsString::from),
    );
    assert!(
        out.status.success(),
        "roam find --tech {tech} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prefix = format!("/http/{}/", server.authority());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches(&prefix).to_string())
        .collect()
}

#[test]
fn find_by_id3_tag_reads_under_one_percent() {
    let scratch = Scratch::new("find");
    let www = scratch.join("www");
    let expected: BTreeSet<String> = (0..FILES).filter_map(|i| mp3(&www, i)).collect();
    let server = Server::nginx(&www, &scratch.join("run"));
    server.stop_at_exit();

    assert_eq!(find(&server, "wasm", &scratch), expected);
    let sent = mp3_bytes_sent(&server.access_log());
    let total = FILES as u64 * SIZE;
    eprintln!(
        "roam find transferred {sent} of {total} bytes ({:.3}%)",
        sent as f64 * 100.0 / total as f64
    );
    assert!(
        sent > 0 && sent * 100 < total,
        "transferred {sent} of {total} bytes"
    );

    // The same answer from the same extension built natively and run in forked children.
    assert_eq!(find(&server, "fork", &scratch), expected);
}

#[test]
fn find_reports_nothing_matched_with_status_one() {
    let scratch = Scratch::new("find-none");
    let dir = scratch.join("tree");
    mp3(&dir, 1);
    let music = dir.join("music");
    let out = roam_find(
        &scratch,
        &scratch.join("none.toml"),
        &[
            music.into_os_string(),
            "--ext".into(),
            "id3".into(),
            "--where".into(),
            "artist=Nobody".into(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

/// `roam find` sees names as programs do: a mount inside the searched one (`/proj/inner`)
/// is searched too, with its own server, and the names printed are the program's.
#[test]
fn find_searches_mounts_inside_the_searched_one() {
    let scratch = Scratch::new("find-nested");
    let www = scratch.join("www");
    let outer: Vec<String> = (0..20).filter_map(|i| mp3(&www.join("a"), i)).collect();
    let inner: Vec<String> = (20..40).filter_map(|i| mp3(&www.join("b"), i)).collect();
    let server = Server::nginx(&www, &scratch.join("run"));
    server.stop_at_exit();
    let config = scratch.join("roam.toml");
    let url = |dir: &str| format!("http://{}/{dir}/music", server.authority());
    fs::write(
        &config,
        format!(
            "[mounts]\n\"/proj\" = \"{}\"\n\"/proj/inner\" = \"{}\"\n",
            url("a"),
            url("b")
        ),
    )
    .unwrap();
    let out = roam_find(
        &scratch,
        &config,
        &["/proj", "--ext", "id3", "--where", "artist=Radiohead"].map(OsString::from),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "roam find failed: {stderr}");
    let found: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let shown = |prefix: &str, rel: &String| format!("{prefix}/{}", &rel["music/".len()..]);
    let expected: BTreeSet<String> = outer
        .iter()
        .map(|r| shown("/proj", r))
        .chain(inner.iter().map(|r| shown("/proj/inner", r)))
        .collect();
    assert_eq!(found, expected);
}

/// A search that cannot start (no such extension) exits 2 with one line saying why, as
/// errors of `roam find` do (0: matches, 1: none).
#[test]
fn find_with_a_missing_extension_exits_two() {
    let scratch = Scratch::new("find-noext");
    let out = roam_find(
        &scratch,
        &scratch.join("none.toml"),
        &[
            scratch.path.clone().into_os_string(),
            "--ext".into(),
            "nosuch".into(),
            "--where".into(),
            "artist=Nobody".into(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("roam find: ") && err.contains("nosuch"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The server dies before a search: every file it cannot read is an error line, the
/// search ends within the drivers' timeouts with status 2, and nothing is printed as a
/// match (ranges come through the vfs, which fails them with the transfer's errno).
#[test]
fn find_against_a_dead_server_exits_two_in_bounded_time() {
    let scratch = Scratch::new("find-dead");
    let www = scratch.join("www");
    for i in 0..3 {
        mp3(&www, i * 10);
    }
    let mut server = Server::nginx(&www, &scratch.join("run"));
    let dir = format!("/http/{}/music", server.authority());
    server.stop();
    let began = std::time::Instant::now();
    let out = roam_find(
        &scratch,
        &scratch.join("none.toml"),
        &[&dir, "--ext", "id3", "--where", "artist=Radiohead"].map(OsString::from),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "{err}");
    assert!(err.contains("roam find: "), "{err}");
    assert!(
        began.elapsed() < std::time::Duration::from_secs(30),
        "{err}"
    );
}

//! The kinds' front ends with the example extensions, under every isolating technology: the
//! id3 query converses for ranges, hotlist picks an eviction victim, rot13 transforms a layer,
//! merge3 and id3merge merge three versions into a patch, digest hashes a file in pieces,
//! camera (a device source) files photos by day;
//! and each front end rejects the well-formed lies of the `faults` extension.

use roam_ext::abi::{Candidate, LayerOp, SourceFile};
use roam_ext::resolve::{self, Versions};
use roam_ext::{query, Extension, Fault, Limits, Technology};

const ISOLATED: [Technology; 4] = [
    Technology::Wasm,
    Technology::Pulley,
    Technology::Fork,
    Technology::Worker,
];

fn load(name: &str, tech: Technology) -> Extension {
    Extension::load(
        &roam_testkit::ext::extensions(),
        name,
        tech,
        Limits::default(),
    )
    .unwrap()
}

/// A 4 KiB file with an ID3v1 tail by `artist`.
fn tagged(artist: &str) -> Vec<u8> {
    let mut file = vec![0u8; 4096];
    let tail = file.len() - 128;
    file[tail..tail + 3].copy_from_slice(b"TAG");
    file[tail + 33..tail + 33 + artist.len()].copy_from_slice(artist.as_bytes());
    file
}

fn ask(
    ext: &Extension,
    file: &[u8],
    artist: &str,
    asked: &mut Vec<(u64, u32)>,
) -> Result<bool, roam_ext::ExtError> {
    let args = [("artist".to_string(), artist.to_string())];
    let mut fetch = |_f: u8, off: u64, len: u32| {
        asked.push((off, len));
        Ok(file[off as usize..off as usize + len as usize].to_vec())
    };
    query::matches(ext, "a.mp3", &args, file.len() as u64, &mut fetch)
}

#[test]
fn id3_query_fetches_only_the_tag_ranges() {
    let file = tagged("Radiohead");
    for tech in ISOLATED {
        let ext = load("id3", tech);
        let mut asked = Vec::new();
        assert!(ask(&ext, &file, "radiohead", &mut asked).unwrap(), "{tech}");
        assert_eq!(asked, [(0, 10), (4096 - 128, 128)], "{tech}");
        assert!(
            !ask(&ext, &file, "Muse", &mut Vec::new()).unwrap(),
            "{tech}"
        );
    }
}

#[test]
fn hotlist_spares_hot_files() {
    let c = |name: &str, last_use| Candidate {
        name: name.into(),
        size: 1,
        last_use,
    };
    let candidates = [c("/a/lib.so", 1), c("/b/old.txt", 5), c("/c/new.txt", 9)];
    for tech in ISOLATED {
        let ext = load("hotlist", tech);
        assert_eq!(
            roam_ext::policy::choose_victim(&ext, &[".so".into()], &candidates).unwrap(),
            1,
            "{tech}"
        );
        assert_eq!(
            roam_ext::policy::choose_victim(&ext, &[], &candidates).unwrap(),
            0,
            "{tech}"
        );
    }
}

#[test]
fn rot13_layer_round_trips_contents_and_names() {
    for tech in ISOLATED {
        let ext = load("rot13", tech);
        let enc = roam_ext::layer::transform(&ext, LayerOp::Encode, 0, b"Hello, roam!").unwrap();
        assert_eq!(enc, b"Uryyb, ebnz!", "{tech}");
        assert_eq!(
            roam_ext::layer::transform(&ext, LayerOp::Decode, 0, &enc).unwrap(),
            b"Hello, roam!"
        );
        assert_eq!(
            roam_ext::layer::transform(&ext, LayerOp::EncodeName, 0, b"notes.txt").unwrap(),
            b"abgrf.gkg"
        );
    }
}

/// Merges three versions with a resolver extension: the patched remote version, or the
/// error; `asked` collects the ranges fetched, by file.
fn merge(
    ext: &Extension,
    versions: [&[u8]; 3],
    asked: &mut Vec<(u8, u64, u32)>,
) -> Result<Vec<u8>, roam_ext::ExtError> {
    let [base, local, remote] = versions.map(|v| v.len() as u64);
    let sizes = Versions {
        base,
        local,
        remote,
    };
    let mut fetch = |f: u8, off: u64, len: u32| {
        asked.push((f, off, len));
        Ok(versions[usize::from(f)][off as usize..off as usize + len as usize].to_vec())
    };
    let patch = resolve::resolve(ext, "f", sizes, &mut fetch)?;
    let (mut remote, mut out) = (versions[2], Vec::new());
    patch.apply(&mut remote, &mut out).unwrap();
    Ok(out)
}

#[test]
fn merge3_merges_different_lines_and_declines_overlaps() {
    let base = b"one\ntwo\nthree\nfour\n";
    for tech in ISOLATED {
        let ext = load("merge3", tech);
        let mut asked = Vec::new();
        let merged = merge(
            &ext,
            [base, b"ONE\ntwo\nthree\nfour\n", b"one\ntwo\nthree\nFOUR\n"],
            &mut asked,
        );
        assert_eq!(merged.unwrap(), b"ONE\ntwo\nthree\nFOUR\n", "{tech}");
        assert_eq!(
            asked,
            [(0, 0, 19), (1, 0, 19), (2, 0, 19)],
            "{tech}: whole files"
        );
        let overlap = merge(&ext, [base, b"1\ntwo\n", b"uno\ntwo\n"], &mut Vec::new());
        let fault = overlap.unwrap_err().fault;
        assert!(
            matches!(&fault, Fault::Refused(why) if why.contains("line 1")),
            "{tech}: {fault}"
        );
    }
}

/// An MP3-like file: a 1 MiB stretch of audio between an ID3v2.3 tag (title, year) and an
/// ID3v1 tail (title).
fn mp3(title: &str, year: &str) -> Vec<u8> {
    roam_testkit::mp3::tagged(title, year, 512, &vec![0x55; 1 << 20])
}

#[test]
fn id3merge_merges_fields_reading_tags_and_only_its_own_audio() {
    let base = mp3("Song", "1999");
    for tech in ISOLATED {
        let ext = load("id3merge", tech);
        let mut asked = Vec::new();
        let merged = merge(
            &ext,
            [&base, &mp3("Better", "1999"), &mp3("Song", "2001")],
            &mut asked,
        );
        assert_eq!(merged.unwrap(), mp3("Better", "2001"), "{tech}");
        // Of the remote version only its tags are read (the patch is of its tags).
        let remote: u64 = asked
            .iter()
            .filter(|(f, _, _)| *f == resolve::REMOTE)
            .map(|(_, _, len)| u64::from(*len))
            .sum();
        assert_eq!(remote, 10 + 128 + 512, "{tech}");
        let twice = merge(
            &ext,
            [&base, &mp3("A", "1999"), &mp3("B", "1999")],
            &mut Vec::new(),
        );
        assert!(
            matches!(twice.unwrap_err().fault, Fault::Refused(_)),
            "{tech}: title changed on both sides"
        );
    }
}

/// Whether the call failed validation (the reply was well-formed but not acceptable).
fn invalid<T>(r: Result<T, roam_ext::ExtError>) -> bool {
    matches!(r.map(|_| ()).unwrap_err().fault, Fault::Invalid(_))
}

#[test]
fn front_ends_reject_well_formed_lies() {
    let candidates = [Candidate {
        name: "x".into(),
        size: 1,
        last_use: 1,
    }];
    for tech in ISOLATED {
        let ext = load("faults", tech);
        assert!(
            invalid(roam_ext::policy::choose_victim(&ext, &[], &candidates)),
            "{tech}: victim not offered"
        );
        assert!(
            invalid(ask(&ext, &tagged("x"), "x", &mut Vec::new())),
            "{tech}: range past the end"
        );
        assert!(
            invalid(roam_ext::layer::transform(&ext, LayerOp::Decode, 0, b"abc")),
            "{tech}: length changed"
        );
        assert!(
            invalid(roam_ext::layer::transform(
                &ext,
                LayerOp::DecodeName,
                0,
                b"a"
            )),
            "{tech}: `..` name"
        );
        let lie = merge(&ext, [b"a\n", b"b\n", b"c\n"], &mut Vec::new());
        assert!(invalid(lie), "{tech}: patch past the end");
        let mut fetch = |_, _, len: u32| Ok(vec![0; len as usize]);
        assert!(
            invalid(roam_ext::archive::list(&ext, "a.zip", 100, &mut fetch)),
            "{tech}: an extent instead of members"
        );
        let member = roam_ext::archive::Entry {
            kind: roam_ext::abi::MemberKind::File,
            size: 1,
            mode: 0o644,
            mtime: 0,
            target: String::new(),
            at: 0,
            method: 0,
        };
        assert!(
            invalid(roam_ext::archive::extract(
                &ext, "a.zip", 100, &member, &mut fetch
            )),
            "{tech}: member data past the end"
        );
        let mut read = |_, len: u64| Ok(vec![0; len as usize]);
        assert!(
            invalid(roam_ext::digest::digest(&ext, 10, &mut read)),
            "{tech}: digests of the wrong length"
        );
        for first in ["slash.jpg", "dotdot.jpg", "liar.jpg", "past.jpg"] {
            let files = [SourceFile {
                path: first.into(),
                size: 100,
                mtime: 0,
            }];
            let mut fetch = |_, _, len: u32| Ok(vec![0; len as usize]);
            let tree = roam_ext::source::list(&ext, &files, &mut fetch);
            assert!(invalid(tree), "{tech}: a lying tree ({first})");
        }
    }
}

/// The camera source files 100 photos of 3 days by date, reading 4 KiB of each, under
/// every isolating technology.
#[test]
fn camera_source_files_photos_by_day_reading_their_heads() {
    let days = [
        "2024:06:01 10:00:00",
        "2024:06:02 11:00:00",
        "1999:12:31 23:59:59",
    ];
    let photos: Vec<Vec<u8>> = (0..100)
        .map(|i| roam_testkit::jpeg::photo(days[i % 3], 10_000 + i))
        .collect();
    let files: Vec<SourceFile> = (0..100)
        .map(|i| SourceFile {
            path: format!("DCIM/IMG_{i:04}.JPG"),
            size: photos[i].len() as u64,
            mtime: 5,
        })
        .collect();
    for tech in ISOLATED {
        let ext = load("camera", tech);
        let mut asked = Vec::new();
        let mut fetch = |f: u32, off: u64, len: u32| {
            asked.push((f, off, len));
            Ok(photos[f as usize][off as usize..(off + u64::from(len)) as usize].to_vec())
        };
        let tree = roam_ext::source::list(&ext, &files, &mut fetch).unwrap();
        let want: Vec<(u32, u64, u32)> = (0..100).map(|f| (f, 0, 4096)).collect();
        assert_eq!(asked, want, "{tech}: each head once");
        let day: Vec<&str> = tree.index.children("2024-06-02").map(|(n, _)| n).collect();
        assert_eq!(day.len(), 33, "{tech}");
        assert_eq!(day[0], "DCIM_IMG_0001.JPG", "{tech}");
        let e = tree.index.get("1999-12-31/DCIM_IMG_0002.JPG").unwrap();
        assert_eq!(tree.extents[e.at as usize].len, 10_002, "{tech}");
        assert_eq!(tree.index.children("").count(), 3, "{tech}");
    }
}

/// The digest extension gives `md5sum`'s and `sha256sum`'s answers for a file hashed in
/// several pieces, under every isolating technology.
#[test]
fn digest_hashes_a_file_in_pieces() {
    let file: Vec<u8> = (0..9_000_001u32).map(|i| (i % 251) as u8).collect();
    let want = |tool: &str| {
        let dir = std::env::temp_dir().join(format!("roam-digest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, &file).unwrap();
        let o = std::process::Command::new(tool)
            .arg(&path)
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap()[..if tool == "md5sum" { 32 } else { 64 }].to_owned()
    };
    let (md5, sha) = (want("md5sum"), want("sha256sum"));
    for tech in ISOLATED {
        let ext = load("digest", tech);
        let mut calls = 0;
        let mut read = |off: u64, len: u64| {
            calls += 1;
            Ok(file[off as usize..(off + len) as usize].to_vec())
        };
        let sums = roam_ext::digest::digest(&ext, file.len() as u64, &mut read).unwrap();
        assert_eq!(roam_ext::digest::hex(&sums.md5), md5, "{tech}");
        assert_eq!(roam_ext::digest::hex(&sums.sha256), sha, "{tech}");
        assert_eq!(calls, 3, "{tech}: reads of 4 MiB");
    }
}

/// More concurrent calls than the wasm pool has slots (32) all succeed: the extra callers
/// wait for a slot rather than fail.
#[test]
fn more_concurrent_wasm_calls_than_pool_slots_all_succeed() {
    let ext = load("bench", Technology::Wasm);
    std::thread::scope(|s| {
        for _ in 0..48 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(ext.compute("noop", b"").unwrap(), b"");
                }
            });
        }
    });
}

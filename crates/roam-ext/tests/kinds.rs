//! The kinds' front ends with the example extensions, under every isolating technology: the
//! id3 query converses for ranges, hotlist picks an eviction victim, rot13 transforms a layer;
//! and each front end rejects the well-formed lies of the `faults` extension.

use roam_ext::abi::{Candidate, LayerOp};
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
    }
}

//! Directory listings kept across runs: `CACHE/lists/VIRT/.roam-listing` holds a listing and
//! when it was fetched, so a new `roam run` within T_read answers lookups in that directory
//! without asking the server again (Ufo kept its directory cache across runs too).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use roam_drivers::{DirEntry, Kind, Listing, Meta};
use serde::{Deserialize, Serialize};

use crate::cache::unix_secs;

/// The file name of a saved listing inside the `lists/` mirror of its directory.
const FILE: &str = ".roam-listing";

#[derive(Serialize, Deserialize)]
struct Saved {
    fetched_at: u64,
    complete: bool,
    /// Listings saved before the field existed came from drivers whose directories stand alone.
    #[serde(default = "yes")]
    stands_alone: bool,
    entries: Vec<SavedEntry>,
}

#[derive(Serialize, Deserialize)]
struct SavedEntry {
    name: String,
    kind: char,
    size: Option<u64>,
    mtime: Option<u64>,
    mode: Option<u32>,
    etag: Option<String>,
    target: Option<String>,
}

fn yes() -> bool {
    true
}

fn path_of(root: &Path, virt: &str) -> PathBuf {
    root.join("lists")
        .join(virt.trim_start_matches('/'))
        .join(FILE)
}

/// Saves `listing` of directory `virt`, fetched now. Failures only cost a later refetch.
pub fn save(root: &Path, virt: &str, listing: &Listing) {
    let saved = Saved {
        fetched_at: unix_secs(SystemTime::now()),
        complete: listing.complete,
        stands_alone: listing.stands_alone,
        entries: listing.entries.iter().map(to_saved).collect(),
    };
    let p = path_of(root, virt);
    let tmp = p.with_extension(format!("{}", std::process::id()));
    let written = p
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .and_then(|_| {
            std::fs::write(
                &tmp,
                serde_json::to_vec(&saved).expect("listings serialise"),
            )?;
            std::fs::rename(&tmp, &p)
        });
    if let Err(e) = written {
        tracing::debug!("{virt}: listing not saved: {e}");
    }
}

/// The saved listing of `virt` and its age, if there is one.
pub fn load(root: &Path, virt: &str) -> Option<(Listing, Duration)> {
    let saved: Saved = serde_json::from_slice(&std::fs::read(path_of(root, virt)).ok()?).ok()?;
    let age = Duration::from_secs(unix_secs(SystemTime::now()).saturating_sub(saved.fetched_at));
    let entries = saved.entries.into_iter().filter_map(from_saved).collect();
    Some((
        Listing {
            entries,
            complete: saved.complete,
            stands_alone: saved.stands_alone,
        },
        age,
    ))
}

/// Forgets the saved listing of `virt` (its directory changed).
pub fn drop(root: &Path, virt: &str) {
    let _ = std::fs::remove_file(path_of(root, virt));
}

fn to_saved(e: &DirEntry) -> SavedEntry {
    let m = &e.meta;
    let kind = match m.kind {
        Kind::File => 'f',
        Kind::Dir => 'd',
        Kind::Symlink => 'l',
        Kind::Fifo => 'p',
        Kind::Socket => 's',
    };
    SavedEntry {
        name: e.name.clone(),
        kind,
        size: m.size,
        mtime: m.mtime.map(unix_secs),
        mode: m.mode,
        etag: m.etag.clone(),
        target: m.symlink_target.clone(),
    }
}

fn from_saved(s: SavedEntry) -> Option<DirEntry> {
    let kind = match s.kind {
        'f' => Kind::File,
        'd' => Kind::Dir,
        'l' => Kind::Symlink,
        'p' => Kind::Fifo,
        's' => Kind::Socket,
        _ => return None,
    };
    let meta = Meta {
        kind,
        size: s.size,
        mtime: s.mtime.map(|t| UNIX_EPOCH + Duration::from_secs(t)),
        mode: s.mode,
        etag: s.etag,
        symlink_target: s.target,
        // Saved listings are of remote mounts, which keep no link counts.
        nlink: None,
        atime: None,
        fresh_for: None,
    };
    roam_drivers::is_safe_name(&s.name).then_some(DirEntry { name: s.name, meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_listing_comes_back_and_can_be_dropped() {
        let root = std::env::temp_dir().join(format!("roam-lists-{}", std::process::id()));
        let meta = Meta {
            size: Some(3),
            mtime: Some(UNIX_EPOCH + Duration::from_secs(1_000)),
            ..Meta::of_kind(Kind::File)
        };
        let listing = Listing {
            entries: vec![
                DirEntry {
                    name: "a".into(),
                    meta: meta.clone(),
                },
                DirEntry {
                    name: "d".into(),
                    meta: Meta::of_kind(Kind::Dir),
                },
            ],
            complete: true,
            stands_alone: true,
        };
        save(&root, "/http/h/dir", &listing);
        let (back, age) = load(&root, "/http/h/dir").unwrap();
        assert_eq!(back, listing);
        assert!(age < Duration::from_secs(5));
        drop(&root, "/http/h/dir");
        assert!(load(&root, "/http/h/dir").is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }
}

//! Driver calls the test files make alike, through `&dyn Driver`: an upload with a
//! precondition, a whole file's bytes, a listing's names. Not every test file uses each.
#![allow(dead_code)]

use roam_drivers::{Driver, Expect, Fetched, Kind, Meta, Result, Upload};

/// An upload of `data` to `path` that must find `expect` there.
pub fn upload(d: &dyn Driver, path: &str, data: &[u8], expect: &Expect) -> Result<Meta> {
    let how = Upload {
        expect,
        ..Upload::default()
    };
    d.upload(path, &mut &data[..], data.len() as u64, &how)
}

/// The bytes of the file `path`, whose fetch must say their number.
pub fn contents(d: &dyn Driver, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match d.fetch(path, &mut out, None).unwrap() {
        Fetched::Body(meta) => assert_eq!(meta.size, Some(out.len() as u64), "{path}"),
        Fetched::NotModified => panic!("{path}: not modified without a validator"),
    }
    out
}

/// The names in the directory `path` (whose listing must be complete), sorted, with
/// their kinds.
pub fn names(d: &dyn Driver, path: &str) -> Vec<(String, Kind)> {
    let listing = d.list(path).unwrap();
    assert!(listing.complete, "{path}");
    let mut names: Vec<_> = listing
        .entries
        .into_iter()
        .map(|e| (e.name, e.meta.kind))
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names
}

/// `pairs` as [`names`] gives them.
pub fn named(pairs: &[(&str, Kind)]) -> Vec<(String, Kind)> {
    pairs.iter().map(|(n, k)| (n.to_string(), *k)).collect()
}

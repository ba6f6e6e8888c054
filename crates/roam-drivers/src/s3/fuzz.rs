//! Property tests of the S3 reply parsers against hostile bodies: arbitrary text, and
//! `ListBucketResult`, `Error` and `InitiateMultipartUploadResult` documents with hostile
//! keys, sizes, dates and tokens, deep nesting, then mutated. The entries a listing page
//! becomes are always safe names, never both a file and a directory (issue 14).

use std::collections::HashSet;

use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated_text, name, number};

use super::listing::{add_page, drop_shadowed_dirs, Listed};
use super::time::parse_iso8601;
use super::xml;
use crate::{is_safe_name, Kind};

const PREFIX: &str = "d/";

/// A key under the prefix (mostly) with a hostile last part.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => name().prop_map(|n| format!("{PREFIX}{n}")),
        1 => name(),
        1 => Just(PREFIX.to_string()),
        1 => Just(format!("{PREFIX}a/b")),
        1 => Just(format!("{PREFIX}&amp;&lt;&#0;&#x2F;")),
    ]
}

fn date() -> impl Strategy<Value = String> {
    prop_oneof![
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\\.000Z",
        "-?[0-9]{1,20}-[0-9]{1,3}-[0-9]{1,3}T[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}(Z|\\+00:00)",
        "[^<&]{0,24}",
    ]
}

/// Mostly a number below `most`, sometimes any decimal field.
fn small_or(most: u32) -> impl Strategy<Value = String> {
    prop_oneof![3 => (0..=most).prop_map(|n| n.to_string()), 1 => number()]
}

fn contents() -> impl Strategy<Value = String> {
    (key(), number(), date(), "[^<&]{0,12}").prop_map(|(k, size, date, etag)| {
        format!(
            "<Contents><Key>{k}</Key><Size>{size}</Size><LastModified>{date}</LastModified><ETag>{etag}</ETag></Contents>"
        )
    })
}

fn page() -> impl Strategy<Value = String> {
    let prefix =
        key().prop_map(|k| format!("<CommonPrefixes><Prefix>{k}/</Prefix></CommonPrefixes>"));
    let item = prop_oneof![3 => contents(), 1 => prefix];
    let tail = prop_oneof![
        Just(String::new()),
        "<IsTruncated>(true|false)</IsTruncated>(<NextContinuationToken>[^<&]{0,8}</NextContinuationToken>)?",
    ];
    (proptest::collection::vec(item, 0..16), tail, 0usize..400).prop_map(|(items, tail, depth)| {
        let depth = depth.saturating_sub(300);
        format!(
            "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">{}{}{}{tail}</ListBucketResult>",
            "<Contents>".repeat(depth),
            items.concat(),
            "</Contents>".repeat(depth),
        )
    })
}

fn other_document() -> impl Strategy<Value = String> {
    prop_oneof![
        ("[^<&]{0,24}", "[^<&]{0,40}").prop_map(|(c, m)| format!("<Error><Code>{c}</Code><Message>{m}</Message></Error>")),
        "[^<&]{0,24}".prop_map(|id| format!("<InitiateMultipartUploadResult><UploadId>{id}</UploadId></InitiateMultipartUploadResult>")),
    ]
}

/// Parses `text` as each document S3 sends; a listing page becomes safe entries.
fn check(text: &str) {
    bounded(text.len(), || {
        let _ = xml::error(text);
        let _ = xml::upload_id(text);
    });
    let Ok(page) = bounded(text.len(), || xml::list_page(text)) else {
        return;
    };
    let mut listed = Listed::default();
    bounded(text.len(), || {
        add_page(&mut listed, PREFIX, &page);
        drop_shadowed_dirs(&mut listed.entries);
    });
    assert!(listed.children >= listed.entries.len());
    let files: HashSet<_> = listed
        .entries
        .iter()
        .filter(|e| e.meta.kind == Kind::File)
        .map(|e| &e.name)
        .collect();
    for e in &listed.entries {
        assert!(is_safe_name(&e.name), "unsafe name {:?}", e.name);
        assert!(
            e.meta.kind == Kind::File || !files.contains(&e.name),
            "{:?} is a file and a directory",
            e.name
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_parses_safely(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn mutated_pages_parse_safely(text in mutated_text(page())) {
        check(&text);
    }

    #[test]
    fn mutated_errors_and_upload_ids_parse_safely(text in mutated_text(other_document())) {
        check(&text);
    }

    #[test]
    fn dates_parse_safely(y in number(), m in small_or(13), d in small_or(32), hms in prop_oneof![3 => "[01][0-9]:[0-5][0-9]:[0-5][0-9]", 1 => "[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}(\\.[0-9]{0,4})?"], zone in "(Z|\\+00:00|)") {
        bounded(64, || parse_iso8601(&format!("{y}-{m}-{d}T{hms}{zone}")));
    }

    /// Keys with safe names and exact sizes read back as written, escaped or not.
    #[test]
    fn pages_read_back(objects in proptest::collection::btree_map("[a-zA-Z0-9 ._:&<>'\"-]{1,40}", any::<u64>(), 0..16)) {
        let objects: Vec<_> = objects.into_iter().filter(|(n, _)| is_safe_name(n)).collect();
        let body: String = objects.iter().map(|(n, size)| {
            let key = quick_xml::escape::escape(n.as_str());
            format!("<Contents><Key>{PREFIX}{key}</Key><Size>{size}</Size></Contents>")
        }).collect();
        let page = xml::list_page(&format!("<ListBucketResult>{body}</ListBucketResult>")).expect("a well-formed page parses");
        let mut listed = Listed::default();
        add_page(&mut listed, PREFIX, &page);
        prop_assert_eq!(listed.entries.len(), objects.len());
        for (e, (n, size)) in listed.entries.iter().zip(&objects) {
            prop_assert_eq!(&e.name, n);
            prop_assert_eq!(e.meta.size, Some(*size));
        }
    }
}

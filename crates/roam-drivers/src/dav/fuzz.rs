//! Property tests of the WebDAV reply parsers against hostile `207 Multi-Status` bodies:
//! arbitrary text, and multistatus documents with hostile hrefs, statuses, lengths, dates
//! and deep nesting, then mutated; the members taken from them are always safe names
//! (issue 14).

use std::collections::HashSet;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated_text, name, number};

use super::members::members;
use super::multistatus::{parse, Resource};
use crate::{is_safe_name, Kind};

const DIR: &str = "http://h/d/";

/// One `<D:response>` with hostile fields.
fn response() -> impl Strategy<Value = String> {
    let href = prop_oneof![
        name().prop_map(|n| format!("/d/{}", utf8_percent_encode(&n, NON_ALPHANUMERIC))),
        name().prop_map(|n| format!("http://h/d/{n}")),
        Just("/d/".to_string()),
        Just("/d/%2e%2e".to_string()),
        Just("/d/a%2Fb".to_string()),
        Just("/d/a%00".to_string()),
        Just("/other/x".to_string()),
        Just("/d/&amp;&#47;&#x0;".to_string()),
    ];
    let status = prop_oneof!["HTTP/1.1 [0-9]{3} [A-Za-z ]{0,8}", "[^<&]{0,16}"];
    let date = prop_oneof![
        Just("Sun, 22 Nov 2026 06:02:00 GMT".to_string()),
        "[^<&]{0,30}",
    ];
    let body = (href, status, number(), date, "[^<&]{0,12}", any::<bool>());
    body.prop_map(|(href, status, len, date, etag, dir)| {
        let kind = if dir { "<D:collection/>" } else { "" };
        format!(
            "<D:response><D:href>{href}</D:href><D:propstat><D:prop>\
             <D:resourcetype>{kind}</D:resourcetype><D:getcontentlength>{len}</D:getcontentlength>\
             <D:getlastmodified>{date}</D:getlastmodified><D:getetag>{etag}</D:getetag>\
             </D:prop><D:status>{status}</D:status></D:propstat></D:response>"
        )
    })
}

/// A multistatus document, some wrapped in deep nesting of foreign or DAV elements.
fn document() -> impl Strategy<Value = String> {
    let nest = prop_oneof![Just("x:deep"), Just("D:prop"), Just("D:response")];
    (proptest::collection::vec(response(), 0..12), nest, 0usize..2000).prop_map(
        |(responses, tag, depth)| {
            let depth = depth.saturating_sub(1500);
            format!(
                "<?xml version=\"1.0\"?><D:multistatus xmlns:D=\"DAV:\" xmlns:x=\"X:\">{}{}{}</D:multistatus>",
                format!("<{tag}>").repeat(depth),
                responses.concat(),
                format!("</{tag}>").repeat(depth),
            )
        },
    )
}

fn check(xml: &str) -> Option<Vec<Resource>> {
    let resources = bounded(xml.len(), || parse(xml)).ok()?;
    assert!(resources.len() <= xml.matches("response").count());
    let sorted = bounded(xml.len(), || members(DIR, resources.clone()));
    let mut seen = 0;
    for e in &sorted.entries {
        assert!(is_safe_name(&e.name), "unsafe member {:?}", e.name);
        seen += 1;
    }
    assert!(seen <= resources.len());
    Some(resources)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_parses_safely(xml in any::<String>()) {
        check(&xml);
    }

    #[test]
    fn mutated_documents_parse_safely(xml in mutated_text(document())) {
        check(&xml);
    }

    /// Members with safe names and exact sizes read back as the server wrote them.
    #[test]
    fn members_read_back(entries in proptest::collection::btree_map("[a-zA-Z0-9 ._:&<>%-]{1,40}", (any::<bool>(), any::<u64>()), 0..16)) {
        let entries: Vec<_> = entries.into_iter().filter(|(n, _)| is_safe_name(n)).collect();
        let responses: String = entries.iter().map(|(n, (dir, len))| {
            let href = utf8_percent_encode(n, NON_ALPHANUMERIC);
            let kind = if *dir { "<D:collection/>" } else { "" };
            format!("<D:response><D:href>/d/{href}</D:href><D:propstat><D:prop><D:resourcetype>{kind}</D:resourcetype><D:getcontentlength>{len}</D:getcontentlength></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>")
        }).collect();
        let xml = format!("<D:multistatus xmlns:D=\"DAV:\"><D:response><D:href>/d/</D:href></D:response>{responses}</D:multistatus>");
        let resources = check(&xml).expect("a well-formed reply parses");
        let sorted = members(DIR, resources);
        prop_assert!(sorted.own.is_some());
        let names: HashSet<_> = sorted.entries.iter().map(|e| e.name.as_str()).collect();
        prop_assert_eq!(names.len(), entries.len());
        for (e, (n, (dir, len))) in sorted.entries.iter().zip(&entries) {
            prop_assert_eq!(&e.name, n);
            prop_assert_eq!(e.meta.kind == Kind::Dir, *dir);
            prop_assert_eq!(e.meta.size, (!dir).then_some(*len));
        }
    }
}

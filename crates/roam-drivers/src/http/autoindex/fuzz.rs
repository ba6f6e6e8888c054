//! Property tests of the index-page parser against hostile pages: arbitrary text, and pages
//! in the nginx, Apache (`<pre>` and `<table>`) and Python forms whose names, dates and
//! sizes are hostile, then mutated (issue 14).

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated_text, name, number};

use super::*;

const PAGE: &str = "http://h/dir/";

/// One row of a generated page: the name as the link writes it and its detail fields.
#[derive(Clone, Debug)]
struct Row {
    href: String,
    dir: bool,
    date: String,
    time: String,
    size: String,
}

fn row() -> impl Strategy<Value = Row> {
    let date = prop_oneof![
        "[0-3][0-9]-(Jan|Feb|Nov|Dec|xyz)-[0-9]{4}",
        "[0-9]{4}-[0-1][0-9]-[0-3][0-9]",
        "[0-9]{1,6}-[A-Za-z0-9]{0,4}-[0-9]{1,6}",
    ];
    let time = prop_oneof![
        "[0-2][0-9]:[0-5][0-9]",
        "[0-9]{1,4}:[0-9]{1,4}(:[0-9]{1,4})?"
    ];
    let href = prop_oneof![
        name().prop_map(|n| utf8_percent_encode(&n, NON_ALPHANUMERIC).to_string()),
        name(),
        Just("../".to_string()),
        Just("/abs".to_string()),
        Just("http://other/x".to_string()),
        Just("?C=N;O=D".to_string()),
        Just("%2e%2e".to_string()),
        Just("a%2Fb".to_string()),
        Just("%00".to_string()),
        Just("%ff%fe".to_string()),
        Just("&#47;etc".to_string()),
        Just("&#x2e;&#x2e;".to_string()),
    ];
    (href, any::<bool>(), date, time, number()).prop_map(|(href, dir, date, time, size)| Row {
        href,
        dir,
        date,
        time,
        size,
    })
}

fn link(r: &Row) -> String {
    let slash = if r.dir { "/" } else { "" };
    format!("<a href=\"{}{slash}\">{}</a>", r.href, r.href)
}

/// A page in one of the forms real servers write.
fn page() -> impl Strategy<Value = String> {
    (0u8..3, proptest::collection::vec(row(), 0..24)).prop_map(|(form, rows)| {
        let body: String = rows
            .iter()
            .map(|r| match form {
                0 => format!("{} {} {} {}\r\n", link(r), r.date, r.time, r.size),
                1 => format!(
                    "<tr><td>{}</td><td>{} {}</td><td>{}</td></tr>\n",
                    link(r),
                    r.date,
                    r.time,
                    r.size
                ),
                _ => format!("<li>{}</li>\n", link(r)),
            })
            .collect();
        let (open, close) = if form == 1 {
            ("<table>", "</table>")
        } else {
            ("<pre>", "</pre>")
        };
        format!("<html><head><title>Index of /dir/</title></head><body>{open}{body}{close}</body></html>")
    })
}

fn check(html: &str) -> Listing {
    let listing = bounded(html.len(), || parse(html, PAGE));
    let links = html.matches('<').count();
    assert!(listing.entries.len() <= links, "more entries than tags");
    let mut seen = HashSet::new();
    for e in &listing.entries {
        assert!(is_safe_name(&e.name), "unsafe name {:?}", e.name);
        assert!(seen.insert(&e.name), "{:?} listed twice", e.name);
    }
    listing
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_parses_safely(html in any::<String>()) {
        check(&html);
    }

    #[test]
    fn tag_soup_parses_safely(html in "(<a href=|<tr>|</tr>|</a>|<title>|\"|'|=|>|<| |\n|&amp;|&#[0-9x]{0,9};|[a-z0-9./%-]{1,6}){0,64}") {
        check(&html);
    }

    #[test]
    fn mutated_pages_parse_safely(html in mutated_text(page())) {
        check(&html);
    }

    /// nginx's form with safe, distinct names and exact details reads back as written.
    #[test]
    fn nginx_pages_read_back(rows in proptest::collection::btree_map("[a-zA-Z0-9 ._:&<>-]{1,40}", (any::<bool>(), 0u64..=u64::MAX), 0..16)) {
        let rows: Vec<_> = rows.into_iter().filter(|(n, _)| is_safe_name(n) && n != ".." ).collect();
        let page: String = rows.iter().map(|(n, (dir, size))| {
            let href = utf8_percent_encode(n, NON_ALPHANUMERIC);
            let slash = if *dir { "/" } else { "" };
            format!("<a href=\"{href}{slash}\">x</a>   22-Nov-2026 06:02   {size}\r\n")
        }).collect();
        let html = format!("<title>Index of /dir/</title><pre>{page}</pre>");
        let listing = check(&html);
        prop_assert!(listing.complete);
        prop_assert_eq!(listing.entries.len(), rows.len());
        for (e, (n, (dir, size))) in listing.entries.iter().zip(&rows) {
            prop_assert_eq!(&e.name, n);
            prop_assert_eq!(e.meta.kind == Kind::Dir, *dir);
            prop_assert_eq!(e.meta.size, (!dir).then_some(*size));
            prop_assert!(e.meta.mtime.is_some());
        }
    }
}

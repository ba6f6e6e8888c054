//! Property tests of the FTP driver's parsers of what a server or the user's files say:
//! LIST (Unix and DOS) and MLSD listings, MLST replies, and `~/.netrc` (issue 14).

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated, mutated_text, name, number};

use super::listing::{self, Format};
use crate::netrc;
use crate::{is_safe_name, Kind, Listing};

/// 2026-11-22 06:02 UTC: the listings' "now" (a year-less date is within the last year).
fn now() -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_795_327_320)
}

fn parse(data: &[u8], format: Format) -> Listing {
    let listing = bounded(data.len(), || listing::parse(data, format, now(), "fuzz"));
    let lines = data.split(|b| *b == b'\n').count();
    assert!(listing.entries.len() <= lines, "more entries than lines");
    for e in &listing.entries {
        assert!(is_safe_name(&e.name), "unsafe name {:?}", e.name);
    }
    listing
}

/// A Unix `ls -l` line with hostile fields.
fn unix_line() -> impl Strategy<Value = String> {
    let perms = prop_oneof!["[dl-][rwxsStT-]{9}", "[a-z-]{0,12}"];
    let month = prop_oneof!["(Jan|Feb|Nov|Dec)", "[A-Za-z]{0,4}"];
    let time = prop_oneof!["[0-2][0-9]:[0-5][0-9]", "[0-9]{4}", "[0-9:]{0,8}"];
    let owner = "[a-z0-9]{1,8}( [a-z0-9]{1,8}){0,2}";
    (
        perms,
        owner,
        number(),
        month,
        number(),
        time,
        name(),
        name(),
    )
        .prop_map(|(perms, owner, size, month, day, time, name, target)| {
            let link = if perms.starts_with('l') {
                format!(" -> {target}")
            } else {
                String::new()
            };
            format!("{perms} 1 {owner} {size} {month} {day} {time} {name}{link}")
        })
}

/// A DOS (IIS) line with hostile fields.
fn dos_line() -> impl Strategy<Value = String> {
    let date = prop_oneof!["[0-1][0-9]-[0-3][0-9]-[0-9]{2,4}", "[0-9-]{0,12}"];
    let time = prop_oneof!["[0-1][0-9]:[0-5][0-9](AM|PM)", "[0-9:]{0,5}[A-Za-z€é]{0,3}"];
    let size = prop_oneof![Just("<DIR>".to_string()), number()];
    (date, time, size, name()).prop_map(|(d, t, s, n)| format!("{d}  {t}  {s} {n}"))
}

/// An MLSD fact line with hostile facts.
fn fact_line() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        "(file|dir|cdir|pdir)",
        "OS\\.unix=(slink|symlink):[^;\n]{0,12}",
        "[A-Za-z.=:]{0,10}",
    ];
    let modify = prop_oneof!["[0-9]{14}(\\.[0-9]{1,3})?", "[0-9]{0,20}"];
    let mode = prop_oneof!["0?[0-7]{3,4}", "0o[0-7]{3}", "[0-9a-z]{0,12}"];
    (kind, number(), modify, mode, name())
        .prop_map(|(k, s, m, u, n)| format!("type={k};size={s};modify={m};UNIX.mode={u}; {n}"))
}

fn listing_of(line: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(line, 0..32).prop_map(|lines| lines.join("\r\n").into_bytes())
}

/// A `.netrc` with hostile tokens: quotes, escapes, macros, keywords where values belong.
fn netrc_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("machine".to_string()),
        Just("default".to_string()),
        Just("login".to_string()),
        Just("password".to_string()),
        Just("account".to_string()),
        Just("macdef m\nbody\n\n".to_string()),
        Just("macdef".to_string()),
        "\"[^\"]{0,8}\\\\?\"?",
        "[a-z.]{1,8}",
        "[ \t\n]{1,3}",
    ];
    proptest::collection::vec(token, 0..40).prop_map(|t| t.join(" "))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes_parse_safely(data in proptest::collection::vec(any::<u8>(), 0..2048), facts in any::<bool>()) {
        parse(&data, if facts { Format::Facts } else { Format::List });
    }

    #[test]
    fn mutated_unix_listings_parse_safely(data in mutated(listing_of(unix_line()))) {
        parse(&data, Format::List);
    }

    #[test]
    fn mutated_dos_listings_parse_safely(data in mutated(listing_of(dos_line()))) {
        parse(&data, Format::List);
    }

    #[test]
    fn mutated_fact_listings_parse_safely(data in mutated(listing_of(fact_line()))) {
        parse(&data, Format::Facts);
    }

    #[test]
    fn mlst_replies_parse_safely(line in mutated_text(fact_line())) {
        bounded(line.len(), || listing::mlst_meta(&line));
    }

    /// Exact MLSD facts read back as written: name, kind, size, mode.
    #[test]
    fn fact_lines_read_back(entries in proptest::collection::vec(("[a-zA-Z0-9 ._-]{1,40}", any::<bool>(), any::<u64>(), 0u32..0o7777), 0..16)) {
        let text: String = entries.iter().map(|(n, dir, size, mode)| {
            let kind = if *dir { "dir" } else { "file" };
            format!("type={kind};size={size};modify=20261122060200;unix.mode={mode:o}; {n}\r\n")
        }).collect();
        let listing = parse(text.as_bytes(), Format::Facts);
        prop_assert!(listing.complete);
        let kept: Vec<_> = entries.iter().filter(|(n, ..)| is_safe_name(n)).collect();
        prop_assert_eq!(listing.entries.len(), kept.len());
        for (e, (n, dir, size, mode)) in listing.entries.iter().zip(kept) {
            prop_assert_eq!(&e.name, n);
            prop_assert_eq!(e.meta.kind == Kind::Dir, *dir);
            prop_assert_eq!(e.meta.size, Some(*size));
            prop_assert_eq!(e.meta.mode, Some(*mode));
        }
    }

    #[test]
    fn netrc_files_parse_safely(text in mutated_text(netrc_text()), host in "[a-z.]{1,8}", login in proptest::option::of("[a-z]{1,4}")) {
        bounded(text.len(), || netrc::lookup(&text, &host, login.as_deref()));
    }

    /// A machine's quoted login and password read back, whatever they contain.
    #[test]
    fn netrc_quoted_values_read_back(login in "[^\"\\\\]{0,16}", password in "[^\"\\\\]{0,16}") {
        let text = format!("machine h login \"{login}\" password \"{password}\"\n");
        let found = netrc::lookup(&text, "h", None).expect("the machine is found");
        prop_assert_eq!(found.login.as_deref(), Some(login.as_str()));
        prop_assert_eq!(found.password.as_deref(), Some(password.as_str()));
    }
}

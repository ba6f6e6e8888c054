//! Which resources of a `Depth: 1` reply are a directory's members, and their names.
//!
//! A reply names each resource by an href: a percent-encoded absolute path, or a whole URL
//! (RFC 4918 §8.3), a collection with or without its trailing slash, escaped as the server
//! likes (nginx leaves `:` and `&` alone, others escape them). Hrefs are therefore compared
//! decoded and without trailing slashes. A member's name is its href's last segment, decoded
//! only after splitting, so an escaped `/` (`%2F`) stays inside the name and fails
//! [`is_safe_name`] like `..` and NUL do: nothing a server sends can address another path.

use percent_encoding::percent_decode_str;

use super::multistatus::Resource;
use crate::{is_safe_name, DirEntry, Meta};

/// A directory's reply, sorted out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Members {
    /// The directory's own entry, when the server included it (RFC 4918 says it must).
    pub own: Option<Meta>,
    pub entries: Vec<DirEntry>,
}

/// Sorts the reply to a `PROPFIND` of `url` into the directory itself and its members.
/// Resources that are neither, or whose names are unsafe, are dropped with a warning.
pub(super) fn members(url: &str, resources: Vec<Resource>) -> Members {
    let dir = percent_decode_str(trimmed(href_path(url)))
        .decode_utf8_lossy()
        .into_owned();
    let mut members = Members::default();
    for resource in resources {
        let path = trimmed(href_path(&resource.href));
        if decoded(path).as_deref() == Some(dir.as_str()) {
            members.own = Some(resource.meta);
            continue;
        }
        match member_name(path, &dir) {
            Some(name) => members.entries.push(DirEntry {
                name,
                meta: resource.meta,
            }),
            None => tracing::warn!(
                "PROPFIND {url}: skipping {:?}, which is not a safe name in this directory",
                resource.href
            ),
        }
    }
    members
}

/// The decoded last segment of `path`, if `path` is directly inside `dir` and the segment
/// is a safe name.
fn member_name(path: &str, dir: &str) -> Option<String> {
    let (parent, name) = path.rsplit_once('/')?;
    let name = decoded(name)?;
    (decoded(parent)? == dir && is_safe_name(&name)).then_some(name)
}

/// The path of an href, still encoded: a URL loses its scheme and authority.
fn href_path(href: &str) -> &str {
    if href.starts_with('/') {
        return href;
    }
    match href.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |slash| &rest[slash..]),
        None => href,
    }
}

/// `path` without trailing slashes: the root becomes empty, like its members' parent part.
fn trimmed(path: &str) -> &str {
    path.trim_end_matches('/')
}

/// Percent-decoded text; `None` for bytes that are not UTF-8, which no driver path holds.
fn decoded(encoded: &str) -> Option<String> {
    percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    fn resource(href: &str, kind: Kind) -> Resource {
        Resource {
            href: href.to_owned(),
            meta: Meta::of_kind(kind),
        }
    }

    fn names(members: &Members) -> Vec<&str> {
        members.entries.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn the_directory_itself_is_not_a_member() {
        let url = "http://h:1/pre%20fix/d%C3%BCr/";
        for own in [
            "/pre%20fix/d%C3%BCr",
            "/pre fix/dür/",
            "http://h:1/pre%20fix/d%c3%bcr/",
        ] {
            let got = members(
                url,
                vec![
                    resource(own, Kind::Dir),
                    resource("/pre%20fix/d%C3%BCr/a", Kind::File),
                ],
            );
            assert_eq!(got.own, Some(Meta::of_kind(Kind::Dir)), "{own}");
            assert_eq!(names(&got), ["a"], "{own}");
        }
    }

    #[test]
    fn names_are_decoded_after_splitting() {
        let got = members(
            "http://h/dir/",
            vec![
                resource("/dir/a%20b.txt", Kind::File),
                resource("/dir/q%3F%23%25.txt", Kind::File),
                resource("/dir/%C3%BCn%C3%AF.txt", Kind::File),
                resource("/dir/a:b&c;+=.txt", Kind::File),
                resource("http://other:8080/dir/sub/", Kind::Dir),
            ],
        );
        assert_eq!(got.own, None);
        assert_eq!(
            names(&got),
            [
                "a b.txt",
                "q?#%.txt",
                "\u{fc}n\u{ef}.txt",
                "a:b&c;+=.txt",
                "sub"
            ]
        );
        assert_eq!(got.entries[4].meta.kind, Kind::Dir);
    }

    #[test]
    fn members_of_the_root() {
        let got = members(
            "http://h/",
            vec![resource("/", Kind::Dir), resource("/a", Kind::File)],
        );
        assert!(got.own.is_some());
        assert_eq!(names(&got), ["a"]);
    }

    #[test]
    fn hostile_hrefs_are_dropped() {
        let got = members(
            "http://h/dir/",
            vec![
                resource("/dir/..", Kind::Dir),
                resource("/dir/.", Kind::Dir),
                resource("/dir/%2E%2E", Kind::Dir),
                resource("/dir/a%2Fb", Kind::File),
                resource("/dir/nul%00", Kind::File),
                resource("/dir/bad%FF", Kind::File),
                resource("/dir/sub/deeper", Kind::File),
                resource("/elsewhere/x", Kind::File),
                resource("/dir/ok", Kind::File),
            ],
        );
        assert_eq!(names(&got), ["ok"]);
    }
}

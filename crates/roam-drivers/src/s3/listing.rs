//! Directories as prefixes: a `ListObjectsV2` with delimiter `/` under `dir/` names the
//! files of the directory (`Contents`) and its subdirectories (`CommonPrefixes`), page by
//! page. An object named `dir/` itself is the directory's *marker* (what `mkdir` creates,
//! and what S3 consoles create): it makes an empty directory exist, and is no entry.
//!
//! Names come from the server and are checked ([`is_safe_name`]): a key like `dir/../x`
//! or `dir//x` would give `..` or an empty name, and is left out with a warning. A key
//! that is both an object and a prefix (`dir/x` and `dir/x/y`) is listed as the file,
//! as `stat` finds it; what lies under it is then reachable by name only.

use std::collections::HashSet;

use super::client::{Client, Method, Req};
use super::xml::{self, ListPage, Object};
use crate::{is_safe_name, DirEntry, Error, ErrorKind, Kind, Meta, Result};

/// What a prefix holds.
#[derive(Debug, Default)]
pub(super) struct Listed {
    pub entries: Vec<DirEntry>,
    /// Keys and prefixes under the prefix, besides its marker: the entries and the keys
    /// left out of them. A directory with only unsafe names is not empty.
    pub children: usize,
    /// Whether the directory's own marker object exists.
    pub marker: bool,
}

impl Listed {
    /// Whether the prefix holds anything at all: else there is no such directory.
    pub fn exists(&self) -> bool {
        self.marker || self.children > 0
    }
}

/// Every entry under `prefix` (`""` or ending with `/`), all pages of it.
pub(super) fn list_all(client: &Client, prefix: &str) -> Result<Listed> {
    let mut listed = Listed::default();
    let mut token: Option<String> = None;
    loop {
        let page = list_page(client, prefix, token.as_deref(), None)?;
        add_page(&mut listed, prefix, &page);
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    drop_shadowed_dirs(&mut listed.entries);
    Ok(listed)
}

/// The first `max_keys` entries under `prefix`: enough to tell whether a directory exists
/// (1) or is empty (2, as its marker may be one).
pub(super) fn list_first(client: &Client, prefix: &str, max_keys: u32) -> Result<Listed> {
    let mut listed = Listed::default();
    let page = list_page(client, prefix, None, Some(max_keys))?;
    add_page(&mut listed, prefix, &page);
    Ok(listed)
}

fn list_page(
    client: &Client,
    prefix: &str,
    token: Option<&str>,
    max_keys: Option<u32>,
) -> Result<ListPage> {
    let max_keys = max_keys.map(|n| n.to_string());
    let mut req = Req::new(Method::Get, "")
        .query("list-type", "2")
        .query("delimiter", "/")
        .query("prefix", prefix);
    if let Some(token) = token {
        req = req.query("continuation-token", token);
    }
    if let Some(max_keys) = &max_keys {
        req = req.query("max-keys", max_keys);
    }
    let reply = client.send(&req)?;
    let url = reply.url().to_owned();
    let text = reply.document()?;
    xml::list_page(&text).map_err(|why| {
        Error::new(
            ErrorKind::Io,
            format!("GET {url}: unreadable listing: {why}"),
        )
    })
}

/// Adds the entries of one page, keeping only safe names.
pub(super) fn add_page(listed: &mut Listed, prefix: &str, page: &ListPage) {
    for dir in &page.prefixes {
        let name = dir
            .strip_prefix(prefix)
            .map(|n| n.strip_suffix('/').unwrap_or(n));
        add(listed, dir, name, Meta::of_kind(Kind::Dir));
    }
    for object in &page.objects {
        if object.key == prefix {
            listed.marker = true;
        } else {
            add(
                listed,
                &object.key,
                object.key.strip_prefix(prefix),
                file_meta(object),
            );
        }
    }
}

fn add(listed: &mut Listed, key: &str, name: Option<&str>, meta: Meta) {
    listed.children += 1;
    match name {
        Some(name) if is_safe_name(name) => listed.entries.push(DirEntry {
            name: name.to_owned(),
            meta,
        }),
        _ => tracing::warn!("S3: leaving out key {key:?}: not a safe file name"),
    }
}

fn file_meta(object: &Object) -> Meta {
    let mut meta = Meta::of_kind(Kind::File);
    meta.size = object.size;
    meta.mtime = object.mtime;
    meta.etag = object.etag.clone();
    meta
}

/// Drops a directory entry that has a file of the same name (see the module comment).
pub(super) fn drop_shadowed_dirs(entries: &mut Vec<DirEntry>) {
    let files: HashSet<String> = entries
        .iter()
        .filter(|e| e.meta.kind == Kind::File)
        .map(|e| e.name.clone())
        .collect();
    entries.retain(|e| {
        let shadowed = e.meta.kind == Kind::Dir && files.contains(&e.name);
        if shadowed {
            tracing::warn!(
                "S3: {:?} is both a file and a directory; listing the file",
                e.name
            );
        }
        !shadowed
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str) -> Object {
        Object {
            key: key.into(),
            size: Some(1),
            ..Object::default()
        }
    }

    #[test]
    fn pages_become_safe_entries() {
        let page = ListPage {
            objects: ["d/", "d/a b", "d/\u{fc}", "d/..", "other/x"]
                .map(object)
                .to_vec(),
            prefixes: ["d/sub/", "d//", "d/../", "d/x/"]
                .map(String::from)
                .to_vec(),
            next: None,
        };
        let mut listed = Listed::default();
        add_page(&mut listed, "d/", &page);
        assert!(listed.marker);
        assert_eq!(listed.children, 8);
        let names: Vec<(&str, Kind)> = listed
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.meta.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("sub", Kind::Dir),
                ("x", Kind::Dir),
                ("a b", Kind::File),
                ("\u{fc}", Kind::File)
            ]
        );
        assert_eq!(listed.entries[2].meta.size, Some(1));
    }

    #[test]
    fn a_file_shadows_a_directory_of_its_name() {
        let mut entries = vec![
            DirEntry {
                name: "x".into(),
                meta: Meta::of_kind(Kind::Dir),
            },
            DirEntry {
                name: "x".into(),
                meta: Meta::of_kind(Kind::File),
            },
            DirEntry {
                name: "y".into(),
                meta: Meta::of_kind(Kind::Dir),
            },
        ];
        drop_shadowed_dirs(&mut entries);
        let kept: Vec<_> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.meta.kind))
            .collect();
        assert_eq!(kept, [("x", Kind::File), ("y", Kind::Dir)]);
    }

    #[test]
    fn an_empty_prefix_does_not_exist() {
        assert!(!Listed::default().exists());
        let marked = Listed {
            marker: true,
            ..Listed::default()
        };
        assert!(marked.exists());
        let hidden = Listed {
            children: 1,
            ..Listed::default()
        };
        assert!(hidden.exists());
    }
}

//! Lexical path arithmetic on the virtual namespace: normalising `.`/`..`/`//`, joining a
//! relative name to a base, and turning a URL that a program passed as a path
//! (`http://host:8080/f`, `sftp://host/f`: every scheme with an implicit mount) into its
//! namespace name (`/http/host:8080/f`, `/sftp/host/f`).
//!
//! Remote names are resolved lexically, as Ufo and Parrot do: a remote tree has no local
//! symlinks that `..` could cross.

use crate::mounts::IMPLICIT_SCHEMES;

/// Normalises an absolute path: collapses `//`, drops `.`, resolves `..` (never above `/`).
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        "/".to_owned()
    } else {
        let mut out = String::with_capacity(path.len());
        for p in parts {
            out.push('/');
            out.push_str(p);
        }
        out
    }
}

/// Joins `rel` to the absolute `base` (ignoring `base` when `rel` is absolute) and normalises.
pub fn join(base: &str, rel: &str) -> String {
    if rel.starts_with('/') {
        normalize(rel)
    } else {
        normalize(&format!("{base}/{rel}"))
    }
}

/// `SCHEME://host:port/p` → `/SCHEME/host:port/p` for a scheme with an implicit mount;
/// `None` when `s` is not such a URL.
pub fn url_to_virtual(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let known = IMPLICIT_SCHEMES.contains(&scheme);
    (known && !rest.is_empty() && !rest.starts_with('/'))
        .then(|| normalize(&format!("/{scheme}/{rest}")))
}

/// The relative path from the directory `from` to `to` (both normalised and absolute):
/// `../` up to their common ancestor, then down to `to`.
pub fn relative(from: &str, to: &str) -> String {
    let parts = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (a, b) = (parts(from), parts(to));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out: Vec<String> = vec!["..".to_owned(); a.len() - common];
    out.extend(b[common..].iter().cloned());
    if out.is_empty() {
        ".".to_owned()
    } else {
        out.join("/")
    }
}

/// True when `s` starts like a URL that [`url_to_virtual`] understands.
pub fn looks_like_url(s: &[u8]) -> bool {
    IMPLICIT_SCHEMES.iter().any(|scheme| {
        s.strip_prefix(scheme.as_bytes())
            .is_some_and(|rest| rest.starts_with(b"://"))
    })
}

/// The part of `path` below `prefix` (`/a/b` under `/a` is `/b`; `/a` under `/a` is `/`),
/// or `None` when `path` is not `prefix` or below it.
pub fn strip_dir_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    if prefix == "/" {
        return Some(path);
    }
    let rest = path.strip_prefix(prefix)?;
    match rest {
        "" => Some("/"),
        r if r.starts_with('/') => Some(r),
        _ => None,
    }
}

/// The parent directory and final name of a normalised absolute path (`/` has no name).
pub fn split_name(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("//a/./b//c/"), "/a/b/c");
        assert_eq!(normalize("/a/b/../../.."), "/");
        assert_eq!(normalize("/http/h/d/../e"), "/http/h/e");
    }

    #[test]
    fn joins_relative_and_absolute() {
        assert_eq!(join("/http/h/dir", "f.c"), "/http/h/dir/f.c");
        assert_eq!(join("/http/h/dir", "../x"), "/http/h/x");
        assert_eq!(join("/anything", "/etc/passwd"), "/etc/passwd");
    }

    #[test]
    fn urls_become_namespace_names() {
        assert_eq!(
            url_to_virtual("http://127.0.0.1:8080/a/b").unwrap(),
            "/http/127.0.0.1:8080/a/b"
        );
        assert_eq!(url_to_virtual("https://h/").unwrap(), "/https/h");
        assert_eq!(url_to_virtual("http:///x"), None);
        assert_eq!(url_to_virtual("ftp://h/x").unwrap(), "/ftp/h/x");
        assert_eq!(url_to_virtual("ftps://h:2121/x").unwrap(), "/ftps/h:2121/x");
        assert_eq!(url_to_virtual("s3://bucket/k").unwrap(), "/s3/bucket/k");
        assert_eq!(url_to_virtual("sftp://h/a/../b").unwrap(), "/sftp/h/b");
        assert_eq!(url_to_virtual("gopher://h/x"), None);
        assert!(looks_like_url(b"http://h"));
        assert!(looks_like_url(b"dav://h"));
        assert!(!looks_like_url(b"s3:/x"));
        assert!(!looks_like_url(b"/http/h"));
    }

    #[test]
    fn relative_paths_between_names() {
        assert_eq!(relative("/a/b", "/a/c/d"), "../c/d");
        assert_eq!(relative("/a", "/a/x"), "x");
        assert_eq!(relative("/a/b", "/a"), "..");
        assert_eq!(relative("/a", "/a"), ".");
        assert_eq!(relative("/", "/etc/passwd"), "etc/passwd");
    }

    #[test]
    fn strips_and_splits() {
        assert_eq!(strip_dir_prefix("/proj/a/b", "/proj"), Some("/a/b"));
        assert_eq!(strip_dir_prefix("/proj", "/proj"), Some("/"));
        assert_eq!(strip_dir_prefix("/project", "/proj"), None);
        assert_eq!(split_name("/a/b"), ("/a", "b"));
        assert_eq!(split_name("/a"), ("/", "a"));
    }
}

//! Mount URLs of the Chirp driver, `chirp://host[:port][/prefix]`, and how a driver path
//! becomes the path the server sees (`prefix` + driver path) and the URL messages show.

use percent_encoding::percent_decode_str;

use crate::{is_driver_path, Error, ErrorKind, Result};

/// The port `chirp_server` listens on unless told otherwise (`CHIRP_PORT`).
pub(crate) const DEFAULT_PORT: u16 = 9094;

/// Where a Chirp mount points: one server and a directory on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// Host name or address, without the brackets of an IPv6 literal.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `""` for the server's root, else `/a/b` (decoded, normalised).
    prefix: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let invalid = |why: &str| Error::new(ErrorKind::InvalidName, format!("{url}: {why}"));
        let rest = url
            .split_once("://")
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("chirp"))
            .map(|(_, rest)| rest)
            .ok_or_else(|| invalid("not a chirp:// URL"))?;
        if rest.contains(['?', '#', '@']) {
            return Err(invalid(
                "a Chirp URL takes no user, query or fragment (chirp://host[:port][/prefix])",
            ));
        }
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = split_authority(authority).ok_or_else(|| invalid("bad host or port"))?;
        let prefix = percent_decode_str(prefix.trim_end_matches('/'))
            .decode_utf8()
            .map_err(|_| invalid("the path is not UTF-8"))?
            .into_owned();
        if !prefix.is_empty() && !is_driver_path(&prefix) {
            return Err(invalid(
                "the path must be normalised (no empty, `.` or `..` parts)",
            ));
        }
        Ok(Target {
            host: host.to_owned(),
            port,
            prefix,
        })
    }

    /// `host:port`, with brackets around an IPv6 address.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path on the server of the driver path `path`.
    pub(crate) fn remote(&self, path: &str) -> String {
        match (self.prefix.is_empty(), path) {
            (true, _) => path.to_owned(),
            (false, "/") => self.prefix.clone(),
            (false, _) => format!("{}{path}", self.prefix),
        }
    }

    /// `chirp://host:port/remote/path`, for messages.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("chirp://{}{}", self.authority(), self.remote(path))
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults to [`DEFAULT_PORT`].
fn split_authority(authority: &str) -> Option<(&str, u16)> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(digits) => digits.parse().ok().filter(|&p| p != 0)?,
        None => DEFAULT_PORT,
    };
    (!host.is_empty()).then_some((host, port))
}

/// The parent directory of a driver path (`/` for `/a` and for `/`).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_ports_and_prefixes() {
        let t = Target::parse("chirp://example.org").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("example.org", DEFAULT_PORT));
        assert_eq!(t.remote("/"), "/");
        assert_eq!(t.url("/a b"), "chirp://example.org:9094/a b");

        let t = Target::parse("CHIRP://127.0.0.1:1024/data/run%201/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 1024));
        assert_eq!(t.remote("/"), "/data/run 1");
        assert_eq!(t.remote("/x/y"), "/data/run 1/x/y");

        let t = Target::parse("chirp://[::1]:9000/p").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9000));
        assert_eq!(t.authority(), "[::1]:9000");
        assert_eq!(Target::parse("chirp://[::1]").unwrap().port, DEFAULT_PORT);
    }

    #[test]
    fn refuses_what_is_not_a_chirp_mount() {
        for bad in [
            "http://h/",
            "chirp:/h",
            "chirp://",
            "chirp://:9094",
            "chirp://h:0",
            "chirp://h:port",
            "chirp://h:99999",
            "chirp://user@h",
            "chirp://h/a?b",
            "chirp://h/a/../b",
            "chirp://h//a",
            "chirp://[::1/",
        ] {
            let err = Target::parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{bad}");
            assert!(err.message.starts_with(bad), "{}", err.message);
        }
    }

    #[test]
    fn parents() {
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/"), "/");
    }
}

//! Mount URLs of the drivers that log in to a server, `scheme://[userinfo@]host[:port][/prefix]`
//! (FTP and SFTP): the parsing they share, and how a driver path becomes the absolute path
//! the server is asked about. What the userinfo may hold is each driver's business, so it
//! is handed back still percent-encoded; a URL is only ever quoted with it cut out.

use percent_encoding::percent_decode_str;

use crate::{Error, ErrorKind, Result};

/// A mount URL split into its parts.
pub(crate) struct ServerUrl<'a> {
    /// `user[:password]` as written, still percent-encoded.
    pub userinfo: Option<&'a str>,
    /// Host name, alias or address, without the brackets of an IPv6 literal.
    pub host: String,
    /// `None` unless the URL names one.
    pub port: Option<u16>,
    /// Decoded; `""` for the server's root, else an absolute path without a trailing slash.
    pub prefix: String,
}

impl<'a> ServerUrl<'a> {
    /// Parses `url` of the given `scheme` (matched ignoring case). The prefix must pass
    /// `is_path`, the driver's own idea of a safe path.
    pub fn parse(url: &'a str, scheme: &str, is_path: fn(&str) -> bool) -> Result<ServerUrl<'a>> {
        let rest = url
            .split_once("://")
            .filter(|(s, _)| s.eq_ignore_ascii_case(scheme))
            .map(|(_, rest)| rest)
            .ok_or_else(|| invalid(url, &format!("not an {scheme}:// URL")))?;
        if rest.contains(['?', '#']) {
            return Err(invalid(url, "a mount URL takes no query or fragment"));
        }
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (host, port) =
            split_host_port(hostport).ok_or_else(|| invalid(url, "bad host or port"))?;
        let prefix = decode(prefix.trim_end_matches('/'), scheme)?;
        if !(prefix.is_empty() || is_path(&prefix)) {
            return Err(invalid(url, "the path must be normalised"));
        }
        Ok(ServerUrl {
            userinfo,
            host,
            port,
            prefix,
        })
    }
}

/// The error for a bad mount URL, which quotes it without its userinfo.
pub(crate) fn invalid(url: &str, why: &str) -> Error {
    Error::new(ErrorKind::InvalidName, format!("{}: {why}", redact(url)))
}

/// Percent-decodes a part of a `scheme://` URL, which must then be UTF-8.
pub(crate) fn decode(text: &str, scheme: &str) -> Result<String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            Error::new(
                ErrorKind::InvalidName,
                format!("{scheme} URL: a percent-encoded part is not UTF-8"),
            )
        })
}

/// `scheme://[user@]host[:port]`, for messages: brackets around an IPv6 address, and
/// never a password.
pub(crate) fn origin(scheme: &str, user: Option<&str>, host: &str, port: Option<u16>) -> String {
    let user = user.map_or(String::new(), |u| format!("{u}@"));
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_owned(),
    };
    let port = port.map_or(String::new(), |p| format!(":{p}"));
    format!("{scheme}://{user}{host}{port}")
}

/// `host[:port]` of `url`, as a `[tls."..."]` key names it (without credentials).
pub(crate) fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority.rsplit('@').next().unwrap_or(authority)
}

/// The absolute server path of a driver path below `prefix` (`""` for the server's root).
pub(crate) fn remote(prefix: &str, path: &str) -> String {
    match (prefix, path) {
        ("", path) => path.to_owned(),
        (prefix, "/") => prefix.to_owned(),
        (prefix, path) => format!("{prefix}{path}"),
    }
}

/// `host[:port]` or `[v6][:port]`; `None` when empty or the port is not a number.
pub(crate) fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    let port = match port {
        Some(p) => Some(p.parse().ok().filter(|p| *p != 0)?),
        None => None,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// `url` without its userinfo. The authority is taken to run up to the first `/` only, so
/// that a password holding a raw `?` or `#` is still cut out.
fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}{}", &url[..start], &url[start + at + 1..]),
        None => url.to_owned(),
    }
}

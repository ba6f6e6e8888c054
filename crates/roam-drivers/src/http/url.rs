//! URLs of the HTTP driver: which mount URLs are accepted, where the credentials of
//! `http://user:pass@host/` go (an `Authorization` header, never a message), and how a
//! decoded driver path becomes a percent-encoded URL path.

use std::fmt;

use base64::Engine;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::{Error, ErrorKind, Result};

/// Bytes escaped in a path component: all but RFC 3986 "unreserved" characters. Servers
/// decode every escape before they map a path to a file, so escaping more than strictly
/// needed is harmless, while escaping less (`#`, `?`, `%`, `;`) changes the request.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A parsed mount URL `http(s)://[user[:pass]@]host[:port][/prefix]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Base {
    /// `scheme://host[:port][/prefix]`: without credentials and without a trailing slash.
    public: String,
    /// The `Authorization` header value, when the URL carried credentials.
    authorization: Option<String>,
}

// By hand, so that `{:?}` of a driver can never print a password.
impl fmt::Debug for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("public", &self.public)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Base {
    pub(crate) fn parse(url: &str) -> Result<Base> {
        let invalid =
            |why: &str| Error::new(ErrorKind::InvalidName, format!("{}: {why}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("not an http:// or https:// URL"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(invalid("unsupported scheme (want http or https)"));
        }
        if rest.contains(['?', '#']) {
            return Err(invalid("a mount URL takes no query or fragment"));
        }
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let public = format!("{scheme}://{host}{}", prefix.trim_end_matches('/'));
        public
            .parse::<ureq::http::Uri>()
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(Base {
            public,
            authorization: userinfo.map(basic_authorization),
        })
    }

    pub(crate) fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// The URL of a driver path; the root `/` gives `base/`.
    pub(crate) fn url(&self, path: &str) -> String {
        let mut url = self.public.clone();
        for component in path.split('/').skip(1) {
            url.push('/');
            url.extend(utf8_percent_encode(component, COMPONENT));
        }
        url
    }

    /// The URL of a driver path as a directory: always with a trailing slash, which is how
    /// index pages are addressed (and spares a redirect).
    pub(crate) fn dir_url(&self, path: &str) -> String {
        let url = self.url(path);
        if url.ends_with('/') {
            url
        } else {
            url + "/"
        }
    }
}

/// `url` without its `user:pass@`, for messages.
pub(crate) fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}{}", &url[..start], &url[start + at + 1..]),
        None => url.to_owned(),
    }
}

/// `Basic base64(user:pass)`, from a URL's (percent-encoded) userinfo.
fn basic_authorization(userinfo: &str) -> String {
    let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let mut plain: Vec<u8> = percent_decode_str(user).collect();
    plain.push(b':');
    plain.extend(percent_decode_str(pass));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(plain)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_only() {
        assert_eq!(
            Base::parse("http://h:8080/p/").unwrap().url("/"),
            "http://h:8080/p/"
        );
        assert_eq!(Base::parse("HTTPS://h").unwrap().url("/x"), "https://h/x");
        for bad in [
            "ftp://h/x",
            "h/x",
            "http://",
            "http:///x",
            "http://h/x?q=1",
            "http://h/#f",
            "http://h h/",
        ] {
            let err = Base::parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{bad}");
        }
    }

    #[test]
    fn components_are_percent_encoded() {
        let base = Base::parse("http://h/pre%20fix").unwrap();
        assert_eq!(base.url("/dir/a b.txt"), "http://h/pre%20fix/dir/a%20b.txt");
        assert_eq!(base.url("/q?#%;+"), "http://h/pre%20fix/q%3F%23%25%3B%2B");
        assert_eq!(base.url("/ü-._~"), "http://h/pre%20fix/%C3%BC-._~");
        assert_eq!(base.dir_url("/d"), "http://h/pre%20fix/d/");
        assert_eq!(base.dir_url("/"), "http://h/pre%20fix/");
    }

    #[test]
    fn credentials_become_a_header_and_never_a_message() {
        let base = Base::parse("http://us%40er:p%3Ass@h:1/x").unwrap();
        assert_eq!(base.url("/f"), "http://h:1/x/f");
        // base64("us@er:p:ss")
        assert_eq!(base.authorization(), Some("Basic dXNAZXI6cDpzcw=="));
        assert!(!format!("{base:?}").contains("dXNAZXI6cDpzcw"));
        let err = Base::parse("ftp://user:secret@h/x").unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
        assert_eq!(redact("http://u:p@h/a@b"), "http://h/a@b");
        assert_eq!(redact("http://h/a@b"), "http://h/a@b");
    }
}

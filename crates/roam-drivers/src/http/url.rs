//! URLs of the HTTP driver: which mount URLs are accepted, where the credentials of
//! `http://user:pass@host/` go (an `Authorization` header, never a message), where they
//! come from when the URL has no password (netrc, as curl reads it), and how a decoded
//! driver path becomes a percent-encoded URL path.

use std::fmt;
use std::path::Path;

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
    /// Where the login came from, in words (never the password).
    login_source: String,
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
    /// Parses `url`; without a password in it, the entry of the `netrc` file for its host
    /// (and its user, if it names one) gives the login, as `curl --netrc-optional` does.
    pub(crate) fn parse(url: &str, netrc: Option<&Path>) -> Result<Base> {
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
        let (authorization, login_source) = authorization(userinfo, host, netrc);
        Ok(Base {
            public,
            authorization,
            login_source,
        })
    }

    pub(crate) fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// Where the login came from, in words.
    pub(crate) fn login_source(&self) -> &str {
        &self.login_source
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

/// The `Authorization` header for a URL's (percent-encoded) `userinfo` at `authority`
/// (`host[:port]`): its user and password; a user alone takes the password netrc has for
/// it (else none); no userinfo takes netrc's login for the host, whatever the port (as
/// curl), if it has one.
/// Returns the header and where its login came from, in words.
fn authorization(
    userinfo: Option<&str>,
    authority: &str,
    netrc: Option<&Path>,
) -> (Option<String>, String) {
    let decoded = |part: &str| percent_decode_str(part).decode_utf8_lossy().into_owned();
    if let Some((user, pass)) = userinfo.and_then(|info| info.split_once(':')) {
        let source = format!("user {} and password from the URL", decoded(user));
        return (Some(basic(&decoded(user), &decoded(pass))), source);
    }
    let user = userinfo.map(decoded);
    let host = crate::url::split_host_port(authority).map(|(host, _)| host);
    let found = netrc
        .zip(host)
        .and_then(|(file, host)| crate::netrc::read(file, &host, user.as_deref()));
    let source = match (&found, netrc) {
        (Some(entry), Some(file)) => crate::netrc::describe(file, entry),
        (None, Some(file)) => format!("no entry for the host in {}", file.display()),
        (None, None) | (Some(_), None) => "no netrc file".to_owned(),
    };
    let found = found.unwrap_or_default();
    let Some(user) = user.or(found.login) else {
        return (None, format!("none ({source})"));
    };
    let header = basic(&user, found.password.as_deref().unwrap_or(""));
    (Some(header), source)
}

/// `Basic base64(user:pass)`.
fn basic(user: &str, pass: &str) -> String {
    let plain = format!("{user}:{pass}");
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
            Base::parse("http://h:8080/p/", None).unwrap().url("/"),
            "http://h:8080/p/"
        );
        assert_eq!(
            Base::parse("HTTPS://h", None).unwrap().url("/x"),
            "https://h/x"
        );
        for bad in [
            "ftp://h/x",
            "h/x",
            "http://",
            "http:///x",
            "http://h/x?q=1",
            "http://h/#f",
            "http://h h/",
        ] {
            let err = Base::parse(bad, None).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{bad}");
        }
    }

    #[test]
    fn components_are_percent_encoded() {
        let base = Base::parse("http://h/pre%20fix", None).unwrap();
        assert_eq!(base.url("/dir/a b.txt"), "http://h/pre%20fix/dir/a%20b.txt");
        assert_eq!(base.url("/q?#%;+"), "http://h/pre%20fix/q%3F%23%25%3B%2B");
        assert_eq!(base.url("/ü-._~"), "http://h/pre%20fix/%C3%BC-._~");
        assert_eq!(base.dir_url("/d"), "http://h/pre%20fix/d/");
        assert_eq!(base.dir_url("/"), "http://h/pre%20fix/");
    }

    #[test]
    fn credentials_become_a_header_and_never_a_message() {
        let base = Base::parse("http://us%40er:p%3Ass@h:1/x", None).unwrap();
        assert_eq!(base.url("/f"), "http://h:1/x/f");
        // base64("us@er:p:ss")
        assert_eq!(base.authorization(), Some("Basic dXNAZXI6cDpzcw=="));
        assert!(!format!("{base:?}").contains("dXNAZXI6cDpzcw"));
        let err = Base::parse("ftp://user:secret@h/x", None).unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
        assert_eq!(redact("http://u:p@h/a@b"), "http://h/a@b");
        assert_eq!(redact("http://h/a@b"), "http://h/a@b");
    }

    #[test]
    fn urls_without_a_password_take_netrc_logins() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("roam-http-netrc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let netrc = dir.join("netrc");
        std::fs::write(
            &netrc,
            "machine h login alice password wonder\nmachine h login bob password builder\n\
             default login anon password guest\n",
        )
        .unwrap();
        std::fs::set_permissions(&netrc, std::fs::Permissions::from_mode(0o600)).unwrap();
        let auth = |url: &str| {
            Base::parse(url, Some(&netrc))
                .unwrap()
                .authorization()
                .map(str::to_owned)
        };
        let basic_of = |pair: &str| {
            Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ))
        };
        // The first machine entry, whatever the port; the URL's user picks its own entry.
        assert_eq!(auth("http://h:8080/x"), basic_of("alice:wonder"));
        assert_eq!(auth("http://bob@h/x"), basic_of("bob:builder"));
        // A user netrc does not know has no password; other hosts get `default`.
        assert_eq!(auth("http://carol@h/x"), basic_of("carol:"));
        assert_eq!(auth("http://other/x"), basic_of("anon:guest"));
        // A password in the URL wins; without a netrc file there is no login.
        assert_eq!(auth("http://u:p@h/x"), basic_of("u:p"));
        assert_eq!(
            Base::parse("http://h/", None).unwrap().authorization(),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! How HTTP outcomes become driver errors: a status the server chose, or a transport
//! failure on the way, each turned into one POSIX kind and a one-line
//! `METHOD URL: cause` message.

use std::io;

use ureq::http::StatusCode;

use super::tls::Service;
use crate::url::authority;
use crate::{Error, ErrorKind};

/// The error for a final (post-redirect) status that is not a success.
pub(crate) fn status(method: &str, url: &str, status: StatusCode) -> Error {
    let kind = match status.as_u16() {
        404 | 410 => ErrorKind::NotFound,
        401 | 403 => ErrorKind::PermissionDenied,
        _ => ErrorKind::Io,
    };
    Error::new(kind, format!("{method} {url}: {status}"))
}

/// A request that got no usable answer, and the proxy it went through (see
/// [`HttpClient::run`](super::HttpClient::run)).
#[derive(Debug)]
pub(crate) struct Failure {
    pub err: ureq::Error,
    /// `the proxy HOST:PORT (from VAR)`, or why the proxy a variable names is unusable.
    pub via: Option<String>,
}

impl From<ureq::Error> for Failure {
    fn from(err: ureq::Error) -> Failure {
        Failure { err, via: None }
    }
}

/// The error for a request that got no usable answer.
pub(crate) fn transport(method: &str, url: &str, failure: impl Into<Failure>) -> Error {
    transport_for(method, url, failure, authority(url), Service::Http)
}

/// [`transport`] for a `service`, whose refused certificates name its own settings and
/// the `[tls."..."]` key (`host[:port]`) of the server. A failure on the way through a
/// proxy names the proxy.
pub(crate) fn transport_for(
    method: &str,
    url: &str,
    failure: impl Into<Failure>,
    key: &str,
    service: Service,
) -> Error {
    let Failure { err, via } = failure.into();
    let kind = transport_kind(&err);
    let cause = match (super::tls::describe(&err, key, service), err) {
        (Some(cause), _) => cause,
        // The unusable proxy's reason says it all.
        (None, ureq::Error::InvalidProxyUrl) if via.is_some() => {
            return Error::new(kind, format!("{method} {url}: {}", via.unwrap_or_default()))
        }
        // An `Io` error speaks for itself; ureq's own text would prefix it with "io: ".
        (None, ureq::Error::Io(e)) => e.to_string(),
        (None, other) => other.to_string(),
    };
    match via {
        Some(via) => Error::new(kind, format!("{method} {url}: through {via}: {cause}")),
        None => Error::new(kind, format!("{method} {url}: {cause}")),
    }
}

/// The error for a failed read of a response body. ureq hides its own errors (timeouts)
/// inside the `io::Error`s its body reader returns; unwrap them to keep their meaning.
pub(crate) fn body(method: &str, url: &str, err: io::Error) -> Error {
    transport(method, url, ureq::Error::from(err))
}

fn transport_kind(err: &ureq::Error) -> ErrorKind {
    match err {
        ureq::Error::Timeout(_) => ErrorKind::TimedOut,
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => ErrorKind::Unreachable,
        // A proxy's refusal: of us (authentication, its access rules) or of the way on.
        ureq::Error::ConnectProxyFailed(why) if why.contains(" 407/") || why.contains(" 403/") => {
            ErrorKind::PermissionDenied
        }
        ureq::Error::ConnectProxyFailed(_) => ErrorKind::Unreachable,
        ureq::Error::Io(e) => match e.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable => ErrorKind::Unreachable,
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ErrorKind::TimedOut,
            _ if is_name_lookup_failure(e) => ErrorKind::Unreachable,
            _ => ErrorKind::Io,
        },
        _ => ErrorKind::Io,
    }
}

/// Whether `e` is std's failed `getaddrinfo` (unknown host, no DNS), which ureq passes on
/// as is. std gives it no kind of its own, only this message (stable since Rust 1.0; the
/// unit tests check it against a real lookup).
fn is_name_lookup_failure(e: &io::Error) -> bool {
    e.raw_os_error().is_none()
        && e.to_string()
            .starts_with("failed to lookup address information")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        let url = "http://127.0.0.1:8080/missing";
        let e = status("GET", url, StatusCode::NOT_FOUND);
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert_eq!(
            e.message,
            "GET http://127.0.0.1:8080/missing: 404 Not Found"
        );
        assert_eq!(
            status("GET", url, StatusCode::GONE).kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            status("HEAD", url, StatusCode::UNAUTHORIZED).kind,
            ErrorKind::PermissionDenied
        );
        assert_eq!(
            status("HEAD", url, StatusCode::FORBIDDEN).kind,
            ErrorKind::PermissionDenied
        );
        for other in [500, 502, 503, 400, 304, 418] {
            let code = StatusCode::from_u16(other).unwrap();
            assert_eq!(status("GET", url, code).kind, ErrorKind::Io, "{other}");
        }
    }

    #[test]
    fn transport_failures_map_to_kinds() {
        let url = "http://h/x";
        let io = |k: io::ErrorKind| ureq::Error::Io(io::Error::from(k));
        let cases = [
            (io(io::ErrorKind::ConnectionRefused), ErrorKind::Unreachable),
            (io(io::ErrorKind::HostUnreachable), ErrorKind::Unreachable),
            (
                io(io::ErrorKind::NetworkUnreachable),
                ErrorKind::Unreachable,
            ),
            (ureq::Error::HostNotFound, ErrorKind::Unreachable),
            (ureq::Error::ConnectionFailed, ErrorKind::Unreachable),
            (
                ureq::Error::Timeout(ureq::Timeout::Connect),
                ErrorKind::TimedOut,
            ),
            (
                ureq::Error::Timeout(ureq::Timeout::PerRead),
                ErrorKind::TimedOut,
            ),
            (io(io::ErrorKind::TimedOut), ErrorKind::TimedOut),
            (io(io::ErrorKind::ConnectionReset), ErrorKind::Io),
            (ureq::Error::TooManyRedirects, ErrorKind::Io),
        ];
        for (err, kind) in cases {
            let shown = err.to_string();
            let e = transport("GET", url, err);
            assert_eq!(e.kind, kind, "{shown}");
            assert!(e.message.starts_with("GET http://h/x: "), "{}", e.message);
            assert!(!e.message.contains('\n'));
        }
    }

    #[test]
    fn failed_name_lookups_are_unreachable() {
        use std::net::ToSocketAddrs;
        // `.invalid` never resolves (RFC 6761), with or without a network.
        let lookup = "roam-test.invalid:80".to_socket_addrs().unwrap_err();
        assert!(is_name_lookup_failure(&lookup), "{lookup}");
        assert_eq!(
            transport("GET", "http://h/", ureq::Error::Io(lookup)).kind,
            ErrorKind::Unreachable
        );
    }

    #[test]
    fn body_errors_keep_a_wrapped_timeout() {
        let wrapped = ureq::Error::Timeout(ureq::Timeout::PerRead).into_io();
        assert_eq!(body("GET", "http://h/x", wrapped).kind, ErrorKind::TimedOut);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(body("GET", "http://h/x", reset).kind, ErrorKind::Io);
    }
}

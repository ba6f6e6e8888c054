//! How WebDAV statuses become driver errors. WebDAV gives some HTTP statuses a meaning
//! of their own (RFC 4918 §9): those are mapped here, per method where the meaning depends
//! on it; every other status keeps the HTTP driver's mapping and message format
//! (`MKCOL http://h/d/: 405 Method Not Allowed`).
//!
//! | status | errno | why |
//! |---|---|---|
//! | 404, 410 | ENOENT | (HTTP) |
//! | 401, 403 | EACCES | (HTTP) |
//! | 405 on MKCOL | EEXIST | §9.3.1: something exists at the name |
//! | 405 on PROPFIND | ENOTSUP | not a WebDAV server (or PROPFIND not enabled) |
//! | 405 on PUT, DELETE, MOVE | EROFS | the server allows no writes there |
//! | 409 | ENOENT | §9.3.1, §9.7.1, §9.9.4: a parent collection is missing |
//! | 412 | EEXIST | §10.6: `Overwrite: F` met an existing target |
//! | 413, 507 | ENOSPC | the server cannot store this much (POSIX's EFBIG would fit 413 better, but no kind maps to it) |
//! | 423 | EACCES | locked by another client: roam may not write there, as `fcntl` locks refuse with EACCES (an upload that meets another's lock fails as changed instead: see `DavDriver::place`) |
//! | other, 5xx | EIO | (HTTP) |

use ureq::http::StatusCode;

use super::Method;
use crate::http::errors as http;
use crate::{Error, ErrorKind};

/// The error for a final status that is not the success `method` expects.
pub(super) fn status(method: Method, url: &str, status: StatusCode) -> Error {
    let mut err = http::status(method.as_str(), url, status);
    if let Some(kind) = dav_kind(method, status.as_u16()) {
        err.kind = kind;
    }
    err
}

/// The kind of a status that means more in WebDAV than in HTTP.
fn dav_kind(method: Method, code: u16) -> Option<ErrorKind> {
    Some(match (method, code) {
        (Method::Mkcol, 405) => ErrorKind::AlreadyExists,
        (Method::Propfind, 405) => ErrorKind::Unsupported,
        (_, 405) => ErrorKind::ReadOnly,
        (_, 409) => ErrorKind::NotFound,
        (_, 412) => ErrorKind::AlreadyExists,
        (_, 413 | 507) => ErrorKind::NoSpace,
        (_, 423) => ErrorKind::PermissionDenied,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: Method, code: u16) -> ErrorKind {
        status(method, "http://h/x", StatusCode::from_u16(code).unwrap()).kind
    }

    #[test]
    fn statuses_map_to_kinds() {
        use ErrorKind::*;
        let table = [
            (Method::Propfind, 404, NotFound),
            (Method::Delete, 410, NotFound),
            (Method::Put, 401, PermissionDenied),
            (Method::Mkcol, 403, PermissionDenied),
            (Method::Mkcol, 405, AlreadyExists),
            (Method::Propfind, 405, Unsupported),
            (Method::Put, 405, ReadOnly),
            (Method::Delete, 405, ReadOnly),
            (Method::Move, 405, ReadOnly),
            (Method::Mkcol, 409, NotFound),
            (Method::Put, 409, NotFound),
            (Method::Move, 412, AlreadyExists),
            (Method::Put, 413, NoSpace),
            (Method::Put, 507, NoSpace),
            (Method::Mkcol, 507, NoSpace),
            (Method::Move, 423, PermissionDenied),
            (Method::Delete, 423, PermissionDenied),
            (Method::Put, 500, Io),
            (Method::Propfind, 502, Io),
            (Method::Delete, 207, Io),
            (Method::Move, 400, Io),
        ];
        for (method, code, expected) in table {
            assert_eq!(kind(method, code), expected, "{} {code}", method.as_str());
        }
    }

    #[test]
    fn messages_name_method_url_and_status() {
        let e = status(Method::Mkcol, "http://h/d/", StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(e.message, "MKCOL http://h/d/: 405 Method Not Allowed");
    }
}

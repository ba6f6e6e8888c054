//! How S3 replies become driver errors. S3 says what went wrong in the `<Code>` of an XML
//! error body, which is more precise than its status; the status decides only when there
//! is no body (a `HEAD`) or the code is unknown. Messages read
//! `METHOD URL: STATUS CODE: message` and carry nothing of the request's signature.
//!
//! | reply | errno |
//! |---|---|
//! | `NoSuchKey`, `NoSuchBucket`, `NoSuchUpload`, any other 404 | ENOENT |
//! | `AccessDenied`, `AllAccessDisabled`, `AccountProblem`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `InvalidToken`, `ExpiredToken`, `TokenRefreshRequired`, `RequestTimeTooSkewed`, any other 401/403 | EACCES |
//! | `QuotaExceeded` (Ceph RGW) | EDQUOT |
//! | `EntityTooLarge`, `XMinioStorageFull`, 413, 507 | ENOSPC |
//! | `BucketNotEmpty` | ENOTEMPTY |
//! | `BucketAlreadyExists`, `BucketAlreadyOwnedByYou` | EEXIST |
//! | `RequestTimeout` | ETIMEDOUT |
//! | `PreconditionFailed`, `ConditionalRequestConflict`, any other 412 | ESTALE (an upload's precondition: another client changed the object) |
//! | `NotImplemented`, 501 | ENOTSUP |
//! | anything else: 5xx, `SlowDown`, `InternalError`, `PermanentRedirect` (wrong region) ... | EIO |
//!
//! Transport failures are mapped as for HTTP (refused or unknown host → EHOSTUNREACH,
//! timeout → ETIMEDOUT).

use ureq::http::StatusCode;

use super::xml::S3Error;
use crate::{Error, ErrorKind};

/// The error for a reply with a failure `status` and, when the body was one, its `<Error>`.
/// `region` is the bucket's region when the server named it (`x-amz-bucket-region`).
pub(super) fn reply(
    method: &str,
    url: &str,
    status: StatusCode,
    body: Option<S3Error>,
    region: Option<&str>,
) -> Error {
    let code = body.as_ref().map_or("", |e| e.code.as_str());
    let kind = code_kind(code).unwrap_or_else(|| status_kind(status.as_u16()));
    let mut message = format!("{method} {url}: {status}");
    if let Some(body) = body {
        message.push_str(&format!(": {}", body.code));
        if !body.message.is_empty() {
            message.push_str(&format!(": {}", body.message));
        }
    }
    if let Some(region) = region.filter(|_| status.is_redirection()) {
        message.push_str(&format!(" (the bucket is in {region}: set AWS_REGION)"));
    }
    Error::new(kind, message)
}

fn code_kind(code: &str) -> Option<ErrorKind> {
    Some(match code {
        "NoSuchKey" | "NoSuchBucket" | "NoSuchUpload" => ErrorKind::NotFound,
        "AccessDenied"
        | "AllAccessDisabled"
        | "AccountProblem"
        | "InvalidAccessKeyId"
        | "SignatureDoesNotMatch"
        | "InvalidToken"
        | "ExpiredToken"
        | "TokenRefreshRequired"
        | "RequestTimeTooSkewed" => ErrorKind::PermissionDenied,
        "QuotaExceeded" => ErrorKind::QuotaExceeded,
        "EntityTooLarge" | "XMinioStorageFull" => ErrorKind::NoSpace,
        "BucketNotEmpty" => ErrorKind::NotEmpty,
        "BucketAlreadyExists" | "BucketAlreadyOwnedByYou" => ErrorKind::AlreadyExists,
        "RequestTimeout" => ErrorKind::TimedOut,
        "PreconditionFailed" | "ConditionalRequestConflict" => ErrorKind::Changed,
        "NotImplemented" => ErrorKind::Unsupported,
        _ => return None,
    })
}

fn status_kind(status: u16) -> ErrorKind {
    match status {
        404 | 410 => ErrorKind::NotFound,
        401 | 403 => ErrorKind::PermissionDenied,
        412 => ErrorKind::Changed,
        413 | 507 => ErrorKind::NoSpace,
        501 => ErrorKind::Unsupported,
        _ => ErrorKind::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: &str) -> Option<S3Error> {
        Some(S3Error {
            code: code.into(),
            message: String::new(),
        })
    }

    fn kind(status: u16, code: Option<&str>) -> ErrorKind {
        let status = StatusCode::from_u16(status).unwrap();
        reply("GET", "http://h/b/k", status, code.and_then(body), None).kind
    }

    #[test]
    fn codes_decide_before_statuses() {
        use ErrorKind::*;
        let table = [
            (404, Some("NoSuchKey"), NotFound),
            (404, Some("NoSuchBucket"), NotFound),
            (404, Some("NoSuchUpload"), NotFound),
            (404, None, NotFound),
            (403, Some("AccessDenied"), PermissionDenied),
            (403, Some("SignatureDoesNotMatch"), PermissionDenied),
            (403, Some("InvalidAccessKeyId"), PermissionDenied),
            (400, Some("ExpiredToken"), PermissionDenied),
            (403, Some("RequestTimeTooSkewed"), PermissionDenied),
            (403, None, PermissionDenied),
            (403, Some("QuotaExceeded"), QuotaExceeded),
            (400, Some("EntityTooLarge"), NoSpace),
            (507, Some("XMinioStorageFull"), NoSpace),
            (507, None, NoSpace),
            (409, Some("BucketNotEmpty"), NotEmpty),
            (409, Some("BucketAlreadyOwnedByYou"), AlreadyExists),
            (400, Some("RequestTimeout"), TimedOut),
            (412, Some("PreconditionFailed"), Changed),
            (409, Some("ConditionalRequestConflict"), Changed),
            (412, None, Changed),
            (501, Some("NotImplemented"), Unsupported),
            (501, None, Unsupported),
            (500, Some("InternalError"), Io),
            (503, Some("SlowDown"), Io),
            (301, Some("PermanentRedirect"), Io),
            (409, Some("OperationAborted"), Io),
            (400, Some("InvalidArgument"), Io),
        ];
        for (status, code, expected) in table {
            assert_eq!(kind(status, code), expected, "{status} {code:?}");
        }
    }

    #[test]
    fn messages_name_the_request_status_and_code() {
        let body = Some(S3Error {
            code: "NoSuchKey".into(),
            message: "The specified key does not exist.".into(),
        });
        let e = reply("GET", "http://h/b/k", StatusCode::NOT_FOUND, body, None);
        assert_eq!(
            e.message,
            "GET http://h/b/k: 404 Not Found: NoSuchKey: The specified key does not exist."
        );
        let e = reply("HEAD", "http://h/b/k", StatusCode::NOT_FOUND, None, None);
        assert_eq!(e.message, "HEAD http://h/b/k: 404 Not Found");
    }

    #[test]
    fn a_wrong_region_says_which_is_right() {
        let status = StatusCode::MOVED_PERMANENTLY;
        let e = reply(
            "GET",
            "u",
            status,
            body("PermanentRedirect"),
            Some("eu-west-1"),
        );
        assert!(e
            .message
            .ends_with("(the bucket is in eu-west-1: set AWS_REGION)"));
    }
}

//! Chirp's error codes (`chirp_protocol.h`) and their POSIX meaning. A Chirp reply is a
//! decimal integer; a negative one is one of these codes. The server derives each from the
//! errno its own system call failed with (`errno_to_chirp` in `chirp_server.c`), so the
//! mapping back is mostly exact; where roam has no kind for the errno, the row says what
//! it falls back to.

use crate::ErrorKind;

/// `(code, protocol name, what it means, roam's kind)`: the table of docs/ERRORS.md.
pub(crate) const CODES: &[(i64, &str, &str, ErrorKind)] = &[
    (
        -1,
        "NOT_AUTHENTICATED",
        "not authenticated",
        ErrorKind::PermissionDenied,
    ),
    (
        -2,
        "NOT_AUTHORIZED",
        "not authorized by the ACL",
        ErrorKind::PermissionDenied,
    ),
    (
        -3,
        "DOESNT_EXIST",
        "no such file or directory",
        ErrorKind::NotFound,
    ),
    (
        -4,
        "ALREADY_EXISTS",
        "already exists",
        ErrorKind::AlreadyExists,
    ),
    // EFBIG has no kind of its own.
    (-5, "TOO_BIG", "file too large", ErrorKind::Io),
    // The server sends this for both ENOSPC and EDQUOT.
    (
        -6,
        "NO_SPACE",
        "no space left (or over quota)",
        ErrorKind::NoSpace,
    ),
    // ENOMEM, EMFILE, EBUSY, EAGAIN, EBADF have no kind of their own.
    (
        -7,
        "NO_MEMORY",
        "the server is out of memory",
        ErrorKind::Io,
    ),
    // Also what an unknown request gets (the server's ENOSYS).
    (
        -8,
        "INVALID_REQUEST",
        "invalid request",
        ErrorKind::InvalidName,
    ),
    (-9, "TOO_MANY_OPEN", "too many open files", ErrorKind::Io),
    (-10, "BUSY", "busy", ErrorKind::Io),
    (-11, "TRY_AGAIN", "try again", ErrorKind::Io),
    (-12, "BAD_FD", "bad file descriptor", ErrorKind::Io),
    (-13, "IS_DIR", "is a directory", ErrorKind::IsADirectory),
    (-14, "NOT_DIR", "not a directory", ErrorKind::NotADirectory),
    (-15, "NOT_EMPTY", "directory not empty", ErrorKind::NotEmpty),
    (
        -16,
        "CROSS_DEVICE_LINK",
        "cross-device link",
        ErrorKind::CrossDevice,
    ),
    (
        -17,
        "OFFLINE",
        "the service is offline",
        ErrorKind::Unreachable,
    ),
    (-18, "TIMED_OUT", "timed out", ErrorKind::TimedOut),
    // ECONNRESET has no kind of its own.
    (-19, "DISCONNECTED", "disconnected", ErrorKind::Io),
    (
        -20,
        "GRP_UNREACHABLE",
        "host unreachable",
        ErrorKind::Unreachable,
    ),
    // ESRCH and ESPIPE have no kind of their own; neither applies to files. (-21 was
    // NO_SUCH_PROCESS in older servers.)
    (-21, "NO_SUCH_JOB", "no such job", ErrorKind::Io),
    (-22, "IS_A_PIPE", "is a pipe", ErrorKind::Io),
    (
        -23,
        "NOT_SUPPORTED",
        "not supported",
        ErrorKind::Unsupported,
    ),
    // ENAMETOOLONG becomes EINVAL, as in `Error::from_io`.
    (
        -24,
        "NAME_TOO_LONG",
        "file name too long",
        ErrorKind::InvalidName,
    ),
    (-127, "UNKNOWN", "unknown error", ErrorKind::Io),
];

/// The kind and a short description of a (negative) Chirp reply.
pub(crate) fn describe(code: i64) -> (ErrorKind, String) {
    match CODES.iter().find(|row| row.0 == code) {
        Some(&(_, name, text, kind)) => (kind, format!("{text} (Chirp {name}, {code})")),
        None => (ErrorKind::Io, format!("Chirp error {code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_row_and_a_posix_meaning() {
        for (i, row) in CODES.iter().enumerate() {
            assert!(CODES[i + 1..].iter().all(|other| other.0 != row.0));
        }
        let errno = |code| describe(code).0.errno();
        assert_eq!(errno(-2), libc::EACCES);
        assert_eq!(errno(-3), libc::ENOENT);
        assert_eq!(errno(-4), libc::EEXIST);
        assert_eq!(errno(-6), libc::ENOSPC);
        assert_eq!(errno(-13), libc::EISDIR);
        assert_eq!(errno(-14), libc::ENOTDIR);
        assert_eq!(errno(-15), libc::ENOTEMPTY);
        assert_eq!(errno(-16), libc::EXDEV);
        assert_eq!(errno(-18), libc::ETIMEDOUT);
        assert_eq!(errno(-23), libc::ENOTSUP);
        assert_eq!(errno(-99), libc::EIO);
        assert_eq!(
            describe(-3).1,
            "no such file or directory (Chirp DOESNT_EXIST, -3)"
        );
        assert_eq!(describe(-99).1, "Chirp error -99");
    }
}

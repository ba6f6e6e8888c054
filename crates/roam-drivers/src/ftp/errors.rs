//! How FTP outcomes become driver errors: what a reply code says by itself (or that only
//! an interview can tell), what a transport failure means, and the one-line
//! `COMMAND URL: cause (server reply)` message.

use std::io;
use std::time::Duration;

use super::control::Reply;
use crate::{Error, ErrorKind};

/// What a refusal's code tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Known(ErrorKind),
    /// "File unavailable" and friends: any of ENOENT, EACCES, EISDIR, ENOTDIR, EEXIST,
    /// ENOTEMPTY. Parrot's interview asks the server follow-up questions.
    Ask,
}

/// The meaning of a reply code that is not success (RFC 959, 2428, 3659).
pub(super) fn verdict(code: u16) -> Verdict {
    match code {
        // 450 file unavailable (busy), 550 file unavailable, 553 file name not allowed,
        // and 501 "syntax error in arguments", which servers also give for a path of the
        // wrong kind (pyftpdlib: MLSD of a file).
        450 | 501 | 550 | 553 => Verdict::Ask,
        // 452 insufficient storage, 552 exceeded storage allocation.
        452 | 552 => Verdict::Known(ErrorKind::NoSpace),
        // 530 not logged in, 532 need an account for storing files.
        530 | 532 => Verdict::Known(ErrorKind::PermissionDenied),
        // 500 unknown command, 502 not implemented, 504 not implemented for that parameter.
        500 | 502 | 504 => Verdict::Known(ErrorKind::Unsupported),
        // 421 closing, 425/426 data connection failed, 451 local error, 554 bad REST, and
        // any code a command should not have had.
        _ => Verdict::Known(ErrorKind::Io),
    }
}

/// The error for a refusal whose meaning is `kind`.
pub(super) fn refused(label: &str, kind: ErrorKind, reply: &Reply) -> Error {
    Error::new(kind, format!("{label}: {} ({reply})", kind.reason()))
}

/// The error for a failed connection or exchange. A read that timed out says how long we
/// waited, which the OS text ("Resource temporarily unavailable") does not.
pub(super) fn transport(label: &str, err: &io::Error, read_timeout: Duration) -> Error {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::new(
            ErrorKind::TimedOut,
            format!("{label}: no answer within {read_timeout:?}"),
        ),
        _ => Error::from_io(label, err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: u16, text: &str) -> Reply {
        Reply {
            code,
            lines: vec![format!("{code} {text}")],
        }
    }

    #[test]
    fn codes_map_to_verdicts() {
        for ask in [450, 501, 550, 553] {
            assert_eq!(verdict(ask), Verdict::Ask, "{ask}");
        }
        let known = [
            (452, ErrorKind::NoSpace),
            (552, ErrorKind::NoSpace),
            (530, ErrorKind::PermissionDenied),
            (532, ErrorKind::PermissionDenied),
            (500, ErrorKind::Unsupported),
            (502, ErrorKind::Unsupported),
            (504, ErrorKind::Unsupported),
            (421, ErrorKind::Io),
            (425, ErrorKind::Io),
            (426, ErrorKind::Io),
            (451, ErrorKind::Io),
            (554, ErrorKind::Io),
            (250, ErrorKind::Io),
        ];
        for (code, kind) in known {
            assert_eq!(verdict(code), Verdict::Known(kind), "{code}");
        }
    }

    #[test]
    fn messages_name_command_url_reason_and_reply() {
        let e = refused(
            "RETR ftp://h/d",
            ErrorKind::IsADirectory,
            &reply(550, "Failed to open file."),
        );
        assert_eq!(e.errno(), libc::EISDIR);
        assert_eq!(
            e.message,
            "RETR ftp://h/d: is a directory (550 Failed to open file.)"
        );
    }

    #[test]
    fn transport_failures_keep_their_meaning() {
        let t = Duration::from_secs(3);
        let timeout = transport("RETR ftp://h/f", &io::ErrorKind::WouldBlock.into(), t);
        assert_eq!(timeout.kind, ErrorKind::TimedOut);
        assert_eq!(timeout.message, "RETR ftp://h/f: no answer within 3s");
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            transport("connect ftp://h", &refused, t).kind,
            ErrorKind::Unreachable
        );
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "closed");
        assert_eq!(transport("LIST ftp://h/", &eof, t).kind, ErrorKind::Io);
    }
}

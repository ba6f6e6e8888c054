//! Versions of a file: what the cache holds of one ([`Validator`], for conditional
//! fetches), and the one a file's range reads must all come from ([`Pinned`]), so that a
//! file read in pieces at different times is never pieces of two versions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::{changed, secs, Meta, Result};

/// What the cache already holds, so the server may answer "not modified"; what roam knows
/// of a version ([`Pinned`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validator {
    pub etag: Option<String>,
    pub mtime: Option<SystemTime>,
}

impl Validator {
    /// The version `meta` describes.
    pub fn of(meta: &Meta) -> Validator {
        Validator {
            etag: meta.etag.clone(),
            mtime: meta.mtime,
        }
    }

    /// Whether `meta` (what a server says of the bytes it sends) may be another version
    /// than this one: ETags compared where both have one (a weak one as its strong
    /// twin), else modification times to the second, or to the minute when this one's
    /// is a whole minute (a listing's: nginx's index and FTP's `LIST` show minutes).
    /// Nothing to compare is no difference.
    pub fn differs_from(&self, meta: &Meta) -> bool {
        match (self.etag.as_deref(), meta.etag.as_deref()) {
            (Some(a), Some(b)) => opaque(a) != opaque(b),
            _ => match (self.mtime.map(secs), meta.mtime.map(secs)) {
                (Some(a), Some(b)) if a.rem_euclid(60) == 0 => a / 60 != b.div_euclid(60),
                (Some(a), Some(b)) => a != b,
                _ => false,
            },
        }
    }
}

/// The version of a file that its range reads must come from ([`Driver::read_range`]):
/// what roam knew of it at open, made exact by the first answer that tells more (an ETag,
/// a time to the second where a listing gave minutes).
#[derive(Debug, Default)]
pub struct Pinned {
    known: Mutex<Validator>,
    /// A server showed another version: the one pinned is gone.
    changed: AtomicBool,
}

impl Pinned {
    pub fn new(known: Validator) -> Pinned {
        Pinned {
            known: Mutex::new(known),
            changed: AtomicBool::new(false),
        }
    }

    /// Whether a [`Pinned::check`] found another version: nothing more of this one can
    /// be read.
    pub fn changed(&self) -> bool {
        self.changed.load(Ordering::Relaxed)
    }

    /// [`ErrorKind::Changed`] for `what` when `seen` (what a server says of the bytes it
    /// is about to send) is another version; else what `seen` tells more is kept.
    pub fn check(&self, seen: &Meta, what: &str) -> Result<()> {
        let mut known = self.known.lock().unwrap();
        if known.differs_from(seen) {
            self.changed.store(true, Ordering::Relaxed);
            let why = "the file changed on the server since it was opened";
            return Err(changed(what, why));
        }
        if known.etag.is_none() {
            known.etag.clone_from(&seen.etag);
        }
        if known.mtime.is_none_or(|t| secs(t).rem_euclid(60) == 0) && seen.mtime.is_some() {
            known.mtime = seen.mtime;
        }
        Ok(())
    }
}

/// An ETag's opaque part: without a weak marker and quotes.
fn opaque(etag: &str) -> &str {
    etag.trim().trim_start_matches("W/").trim_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn meta(etag: Option<&str>, secs: Option<u64>) -> Meta {
        Meta {
            etag: etag.map(str::to_owned),
            mtime: secs.map(|s| UNIX_EPOCH + Duration::from_secs(s)),
            ..Meta::of_kind(crate::Kind::File)
        }
    }

    #[test]
    fn versions_differ_by_etag_else_by_time() {
        let v = Validator::of(&meta(Some("\"abc\""), Some(1_000_033)));
        assert!(
            !v.differs_from(&meta(Some("W/\"abc\""), Some(5))),
            "the ETag decides"
        );
        assert!(v.differs_from(&meta(Some("\"abd\""), Some(1_000_033))));
        assert!(!v.differs_from(&meta(None, Some(1_000_033))));
        assert!(
            v.differs_from(&meta(None, Some(1_000_034))),
            "to the second"
        );
        assert!(!v.differs_from(&meta(None, None)), "nothing to compare");
        // A listing's time, in minutes: any second of that minute is the same version.
        let listed = Validator::of(&meta(None, Some(1_000_020)));
        assert!(!listed.differs_from(&meta(None, Some(1_000_079))));
        assert!(listed.differs_from(&meta(None, Some(1_000_080))));
    }

    #[test]
    fn a_pinned_version_is_made_exact_by_the_first_answer() {
        let pinned = Pinned::new(Validator::of(&meta(None, Some(1_000_000 - 40))));
        pinned
            .check(&meta(Some("\"a\""), Some(1_000_007)), "read")
            .unwrap();
        assert!(!pinned.changed());
        let err = pinned.check(&meta(Some("\"b\""), Some(1_000_007)), "read");
        assert_eq!(err.unwrap_err().kind, crate::ErrorKind::Changed);
        assert!(pinned.changed());
        let any = Pinned::default();
        any.check(&meta(None, Some(1_000_007)), "read").unwrap();
        assert!(any.check(&meta(None, Some(1_000_008)), "read").is_err());
    }
}

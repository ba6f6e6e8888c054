//! Passwords written into names, found so that nothing roam prints shows them: in URLs
//! (`SCHEME://USER:PASSWORD@HOST/...`) and in the namespace's names of implicit mounts
//! (`/SCHEME/USER:PASSWORD@HOST/...`). roam's log writer, its status and error output and
//! its own argv ([`mask`]) go through here; each driver keeps the credentials it uses out
//! of its messages besides.

use std::borrow::Cow;
use std::ops::Range;

/// Schemes whose `/SCHEME/AUTHORITY/...` names may carry a login.
const SCHEMES: [&str; 8] = ["http", "https", "dav", "davs", "ftp", "sftp", "chirp", "s3"];

/// What stands for a password in text shown to anyone.
pub const HIDDEN: &str = "***";

/// The byte ranges of the passwords in `text`: after the first `:` of each userinfo that
/// follows `://` or `/SCHEME/`, up to its last `@`. Every delimiter is ASCII, so `text`
/// need not be UTF-8 and the ranges fall on character boundaries where it is.
pub fn password_spans(text: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    for slash in (0..text.len()).filter(|&i| text[i] == b'/') {
        let Some(start) = authority_start(text, slash) else {
            continue;
        };
        let rest = &text[start..];
        let end = rest
            .iter()
            .position(|&c| c == b'/' || c.is_ascii_whitespace() || b"\"'`<>\\".contains(&c))
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let Some(userinfo_end) = authority.iter().rposition(|&c| c == b'@') else {
            continue;
        };
        if let Some(colon) = authority[..userinfo_end].iter().position(|&c| c == b':') {
            spans.push(start + colon + 1..start + userinfo_end);
        }
    }
    spans
}

/// Where an authority starts when the `/` at byte `slash` begins `//AUTHORITY` of a URL
/// (`x://`) or `/SCHEME/AUTHORITY` of a namespace name (not inside a longer word).
fn authority_start(text: &[u8], slash: usize) -> Option<usize> {
    let (before, after) = (&text[..slash], &text[slash + 1..]);
    if before.ends_with(b":") && after.starts_with(b"/") {
        return Some(slash + 2);
    }
    if before.last().is_some_and(u8::is_ascii_alphanumeric) {
        return None;
    }
    SCHEMES.iter().find_map(|scheme| {
        let rest = after.strip_prefix(scheme.as_bytes())?.strip_prefix(b"/")?;
        (!rest.is_empty()).then_some(slash + 1 + scheme.len() + 1)
    })
}

/// `text` with each password replaced by [`HIDDEN`].
pub fn scrub(text: &str) -> Cow<'_, str> {
    let spans = password_spans(text.as_bytes());
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in spans {
        out.push_str(&text[from..span.start]);
        out.push_str(HIDDEN);
        from = span.end;
    }
    out.push_str(&text[from..]);
    Cow::Owned(out)
}

/// Overwrites each password in `bytes` with `*`, in place: for memory whose length cannot
/// change, such as a process's argv.
pub fn mask(bytes: &mut [u8]) {
    for span in password_spans(bytes) {
        bytes[span].fill(b'*');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_of_urls_and_names_are_hidden() {
        let cases = [
            ("ftp://u:pw@h/x", "ftp://u:***@h/x"),
            ("-m /x=dav://u:p%40w@h:8/d", "-m /x=dav://u:***@h:8/d"),
            (
                "cat /dav/u:pw@127.0.0.1:80/f",
                "cat /dav/u:***@127.0.0.1:80/f",
            ),
            (
                "open \"/https/a:b:c@h/f\" failed",
                "open \"/https/a:***@h/f\" failed",
            ),
            (
                "/s3/k:s@b/x and http://v:w@h",
                "/s3/k:***@b/x and http://v:***@h",
            ),
            ("a:b@c with ://x:y@", "a:b@c with ://x:***@"),
        ];
        for (text, want) in cases {
            assert_eq!(scrub(text), want, "{text}");
        }
        for same in [
            "http://u@h/x",
            "/dav/h:80/a:b@c",
            "/tmp/dav/h/f",
            "/mydav/u:p@h/f",
            "http://h/a:b@c",
            "",
        ] {
            assert_eq!(scrub(same), same);
        }
    }

    #[test]
    fn masking_keeps_the_length() {
        let mut arg = b"/x=ftp://u:secret@h/".to_vec();
        mask(&mut arg);
        assert_eq!(arg, b"/x=ftp://u:******@h/");
        let mut binary = b"\xff/ftp/u:p\xfew@h/\xff".to_vec();
        mask(&mut binary);
        assert_eq!(binary, b"\xff/ftp/u:***@h/\xff", "bytes need not be UTF-8");
    }
}

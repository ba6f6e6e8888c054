//! A tolerant parser of HTML directory indexes: nginx `autoindex`, Apache
//! `mod_autoindex` (its `<pre>` and `<table>` forms), Python's `http.server`, and, as a
//! partial listing, any other page with relative links.
//!
//! A name comes from a link's `href`, never from its text (nginx truncates long texts).
//! The date and size come from the text after the link: the rest of its line, or the rest
//! of its table row. Anything a server could use to climb out of a mount or out of the
//! cache — `..`, `/`, NUL, absolute or foreign links — is dropped.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percent_encoding::percent_decode_str;

use crate::{is_safe_name, DirEntry, Kind, Listing, Meta};

/// Parses the page `html`, fetched from `page` (named in warnings).
pub(crate) fn parse(html: &str, page: &str) -> Listing {
    let mut seen = HashSet::new();
    let mut entries = Vec::new();
    for link in Links::new(html) {
        let Some((name, kind)) = entry_name(&link.href, page) else {
            continue;
        };
        if !seen.insert(name.clone()) {
            continue;
        }
        let (mtime, size) = details(link.tail);
        let mut meta = Meta::of_kind(kind);
        meta.mtime = mtime;
        if kind == Kind::File {
            meta.size = size;
        }
        entries.push(DirEntry { name, meta });
    }
    Listing {
        entries,
        complete: is_index_page(html),
        stands_alone: true,
    }
}

/// Index pages announce themselves in their title; only then is a name absent from the
/// page known not to exist.
fn is_index_page(html: &str) -> bool {
    let Some(open) = find_tag(html, "title") else {
        return false;
    };
    let Some(text_start) = tag_end(html, open) else {
        return false;
    };
    let text = &html[text_start..];
    let title = &text[..find_tag(text, "/title").unwrap_or(text.len())];
    title.contains("Index of") || title.contains("Directory listing for")
}

/// One `<a href>` and the text that follows it on its line or in its table row.
struct Link<'a> {
    href: String,
    tail: &'a str,
}

/// The links of a page, in order. Tracks whether the scan is inside a table row, because
/// Apache's table form keeps a link's date and size in the following cells.
struct Links<'a> {
    html: &'a str,
    pos: usize,
    in_row: bool,
}

impl<'a> Links<'a> {
    fn new(html: &'a str) -> Links<'a> {
        Links {
            html,
            pos: 0,
            in_row: false,
        }
    }

    /// The text after the link whose opening tag ends at `open_end`: from its `</a>` to
    /// the end of its line (or row), and never past the next link.
    fn tail(&self, open_end: usize) -> &'a str {
        let window = &self.html[open_end..];
        let window = &window[..find_tag(window, "a").unwrap_or(window.len())];
        let start = find_tag(window, "/a")
            .and_then(|close| tag_end(window, close))
            .unwrap_or(0);
        let rest = &window[start..];
        let end = if self.in_row {
            find_tag(rest, "/tr")
        } else {
            rest.find('\n')
        };
        &rest[..end.unwrap_or(rest.len())]
    }
}

impl<'a> Iterator for Links<'a> {
    type Item = Link<'a>;

    fn next(&mut self) -> Option<Link<'a>> {
        loop {
            let start = self.pos + find_tag(&self.html[self.pos..], "a")?;
            if let Some(in_row) = last_row_marker(&self.html[self.pos..start]) {
                self.in_row = in_row;
            }
            let open_end = tag_end(self.html, start)?;
            self.pos = open_end;
            // The attributes lie between `<a` and the closing `>`.
            if let Some(href) = attribute(&self.html[start + 2..open_end - 1], "href") {
                return Some(Link {
                    href,
                    tail: self.tail(open_end),
                });
            }
        }
    }
}

/// `Some(true)` if the last row marker in `segment` opens a row (`<tr>`), `Some(false)` if
/// it closes one, `None` if there is none.
fn last_row_marker(segment: &str) -> Option<bool> {
    let mut marker = None;
    for (i, _) in segment.match_indices('<') {
        let rest = &segment[i + 1..];
        if starts_tag(rest, "tr") {
            marker = Some(true);
        } else if starts_tag(rest, "/tr") {
            marker = Some(false);
        }
    }
    marker
}

/// Offset of the first `<name` tag in `html` (ASCII case-insensitive).
fn find_tag(html: &str, name: &str) -> Option<usize> {
    html.match_indices('<')
        .map(|(i, _)| i)
        .find(|&i| starts_tag(&html[i + 1..], name))
}

/// Whether `s` begins with the tag name `name`, and not merely with a longer name.
fn starts_tag(s: &str, name: &str) -> bool {
    let n = name.len();
    s.len() >= n
        && s.as_bytes()[..n].eq_ignore_ascii_case(name.as_bytes())
        && matches!(
            s.as_bytes().get(n),
            None | Some(b'>' | b'/' | b' ' | b'\t' | b'\n' | b'\r')
        )
}

/// Offset just past the `>` that ends the tag opened at `start`, skipping quoted values.
fn tag_end(html: &str, start: usize) -> Option<usize> {
    let mut quote = None;
    let mut prev = 0u8;
    for (i, b) in html[start..].bytes().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            // A quote opens a value only right after `=`: a stray one must not hide the `>`.
            None if (b == b'"' || b == b'\'') && prev == b'=' => quote = Some(b),
            None if b == b'>' => return Some(start + i + 1),
            None => {}
        }
        if !b.is_ascii_whitespace() {
            prev = b;
        }
    }
    None
}

/// The value of attribute `wanted` in a tag's attribute text, still HTML-escaped.
fn attribute(attrs: &str, wanted: &str) -> Option<String> {
    let mut rest = attrs;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '/');
        if rest.is_empty() {
            return None;
        }
        let name_len = rest
            .find(|c: char| c.is_ascii_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_len);
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('=') {
            Some(value) => attribute_value(value.trim_start()),
            None => ("", after),
        };
        if name.eq_ignore_ascii_case(wanted) {
            return Some(value.to_owned());
        }
        rest = next;
    }
}

/// Splits a quoted or bare attribute value from the text after it.
fn attribute_value(s: &str) -> (&str, &str) {
    match s.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let body = &s[1..];
            match body.find(q) {
                Some(end) => (&body[..end], &body[end + 1..]),
                None => (body, ""),
            }
        }
        _ => s.split_at(s.find(|c: char| c.is_ascii_whitespace()).unwrap_or(s.len())),
    }
}

/// The entry a link names, if it names one: a single safe component, a directory when the
/// link ends with `/`.
fn entry_name(raw_href: &str, page: &str) -> Option<(String, Kind)> {
    let href = unescape(raw_href);
    // Sort links (`?C=N;O=D`), anchors, absolute paths and other sites are not entries.
    if href.starts_with('/') || href.contains(['?', '#']) || has_scheme(&href) {
        return None;
    }
    if matches!(&*href, "" | "." | "./" | ".." | "../") {
        return None;
    }
    // nginx and Apache write `./a:b` so that a name with a colon does not read as a scheme.
    let href = href.strip_prefix("./").unwrap_or(&href);
    let (encoded, kind) = match href.strip_suffix('/') {
        Some(dir) => (dir, Kind::Dir),
        None => (href, Kind::File),
    };
    let Ok(name) = percent_decode_str(encoded).decode_utf8() else {
        tracing::warn!("{page}: dropping the entry {encoded:?}, whose name is not UTF-8");
        return None;
    };
    if !is_safe_name(&name) {
        tracing::warn!("{page}: dropping the unsafe entry name {name:?}");
        return None;
    }
    Some((name.into_owned(), kind))
}

/// Whether a link starts with a URL scheme (`https:`, `mailto:` ...).
fn has_scheme(href: &str) -> bool {
    href.split_once(':').is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// The modification time and exact size in the text after a link. Both servers put the
/// size right after the date; a size with a unit (`1.2K`) or `-` is not exact, so `None`.
fn details(tail: &str) -> (Option<SystemTime>, Option<u64>) {
    let text = strip_tags(tail);
    let text = unescape(&text);
    let tokens: Vec<&str> = text.split_whitespace().collect();
    for (i, pair) in tokens.windows(2).enumerate() {
        if let Some(mtime) = timestamp(pair[0], pair[1]) {
            let size = tokens.get(i + 2).and_then(|t| exact_size(t));
            return (Some(mtime), size);
        }
    }
    (None, None)
}

/// `html` with every tag replaced by a space (table cells become separate tokens).
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

fn exact_size(token: &str) -> Option<u64> {
    if token.bytes().all(|b| b.is_ascii_digit()) {
        token.parse().ok()
    } else {
        None
    }
}

/// A listing date and time, taken as UTC: nginx `22-Nov-2026 06:02` (GMT by default),
/// Apache `2026-11-22 06:02` or `22-Nov-2026 06:02`, lighttpd `2026-Nov-22 06:02:03`.
fn timestamp(date: &str, time: &str) -> Option<SystemTime> {
    let (year, month, day) = parse_date(date)?;
    let (hour, minute, second) = parse_time(time)?;
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

fn parse_date(s: &str) -> Option<(i64, u32, u32)> {
    let mut parts = s.split('-');
    let (a, b, c) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (year, day) = if a.len() == 4 { (a, c) } else { (c, a) };
    if year.len() != 4 {
        return None;
    }
    let (year, month, day) = (number(year)?, month(b)?, number(day)?);
    let valid = (1..=12).contains(&month) && (1..=31).contains(&day);
    valid.then_some((i64::from(year), month, day))
}

fn parse_time(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.split(':');
    let hour = number(parts.next()?)?;
    let minute = number(parts.next()?)?;
    let second = parts.next().map_or(Some(0), number)?;
    let valid = parts.next().is_none() && hour < 24 && minute < 60 && second < 60;
    valid.then_some((hour, minute, second))
}

/// A short run of ASCII digits (no sign, no spaces, unlike `str::parse`).
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A month as a number (`11`) or an English abbreviation (`Nov`).
fn month(s: &str) -> Option<u32> {
    const NAMES: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    if let Some(n) = number(s) {
        return Some(n);
    }
    let i = NAMES.iter().position(|name| name.eq_ignore_ascii_case(s))?;
    u32::try_from(i + 1).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Resolves the HTML character references that index pages use.
fn unescape(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // References are short; a `;` far away belongs to something else.
        let semi = rest.bytes().take(12).position(|b| b == b';');
        match semi.and_then(|semi| Some((reference(&rest[1..semi])?, semi))) {
            Some((c, semi)) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The character of a reference body (`amp`, `#39`, `#x27`).
fn reference(body: &str) -> Option<char> {
    match body {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        "nbsp" => Some('\u{a0}'),
        _ => {
            let code = body.strip_prefix('#')?;
            let value = match code.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => code.parse().ok()?,
            };
            char::from_u32(value)
        }
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

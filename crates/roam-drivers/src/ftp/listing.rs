//! Directory listings as FTP servers send them: RFC 3659 fact lines (MLSD, MLST), which are
//! exact, and LIST output, which is whatever the server's `ls` looks like. Two LIST formats
//! cover nearly every server: Unix `ls -l` (vsftpd, ProFTPD, pure-ftpd) and DOS/IIS.
//!
//! Every name is checked with [`is_safe_name`]: a hostile server must not climb out of the
//! mount or the cache with `..` or `a/b`.

use std::time::{Duration, SystemTime};

use super::time::{month_number, parse_timeval, year_of};
use crate::calendar::{from_civil, unix_secs};
use crate::{is_safe_name, DirEntry, Kind, Listing, Meta};

/// Which command produced a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// MLSD: one fact line per entry.
    Facts,
    /// LIST: Unix or DOS lines.
    List,
}

/// The validator FTP can give for a file: its size and modification time, which change
/// whenever its contents do. Only built from exact times (facts, MDTM), never from LIST's
/// minutes, so every source of the same file yields the same string.
pub(super) fn etag(size: u64, mtime: SystemTime) -> String {
    format!("{size}-{}", unix_secs(mtime))
}

/// One parsed line.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Entry(String, Meta),
    /// A line that names nothing: `total 12`, a blank line, `.` and `..`.
    Skip,
    /// A line in no format we know.
    Unknown,
}

/// Parses a listing's raw bytes. Lines that are not UTF-8 or in no known format make the
/// listing incomplete; unsafe names are dropped with a warning (`source` says whose).
pub(super) fn parse(data: &[u8], format: Format, now: SystemTime, source: &str) -> Listing {
    let mut listing = Listing {
        entries: Vec::new(),
        complete: true,
        stands_alone: true,
    };
    for raw in data.split(|b| *b == b'\n') {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let parsed = match std::str::from_utf8(raw) {
            Ok(line) if format == Format::Facts => facts_line(line),
            Ok(line) => list_line(line, now),
            Err(_) => Line::Unknown,
        };
        match parsed {
            Line::Entry(name, meta) if is_safe_name(&name) => {
                listing.entries.push(DirEntry { name, meta })
            }
            Line::Entry(name, _) => {
                tracing::warn!("{source}: dropping the unsafe name {name:?} the server listed")
            }
            Line::Skip => {}
            Line::Unknown => {
                tracing::warn!(
                    "{source}: cannot parse the listing line {:?}",
                    String::from_utf8_lossy(raw)
                );
                listing.complete = false;
            }
        }
    }
    listing
}

/// The metadata of an MLST reply's fact line (` facts; /path`); `cdir` counts as a directory.
pub(super) fn mlst_meta(line: &str) -> Option<Meta> {
    let (facts, _path) = line.strip_prefix(' ').unwrap_or(line).split_once(' ')?;
    Some(facts_meta(facts)?.0)
}

/// An MLSD line: `fact=value;...; name` (the name is everything after the first space).
fn facts_line(line: &str) -> Line {
    if line.is_empty() {
        return Line::Skip;
    }
    let Some((facts, name)) = line.split_once(' ') else {
        return Line::Unknown;
    };
    match facts_meta(facts) {
        Some((_, true)) => Line::Skip,
        Some((meta, false)) => Line::Entry(name.to_owned(), meta),
        None => Line::Unknown,
    }
}

/// The metadata in a fact list, and whether it is the listed directory itself or its
/// parent (`type=cdir`/`pdir`). `None` without a `type` fact, which every server sends.
fn facts_meta(facts: &str) -> Option<(Meta, bool)> {
    let mut meta = Meta::of_kind(Kind::File);
    let mut dot = None;
    for fact in facts.split(';').filter(|f| !f.is_empty()) {
        let (key, value) = fact.split_once('=')?;
        match key.to_ascii_lowercase().as_str() {
            "type" => {
                let (kind, target, is_dot) = fact_type(value);
                meta.kind = kind;
                meta.symlink_target = target;
                dot = Some(is_dot);
            }
            "size" => meta.size = value.parse().ok(),
            "modify" => meta.mtime = parse_timeval(value),
            "unix.mode" => meta.mode = octal(value),
            _ => {}
        }
    }
    if let (Kind::File, Some(size), Some(mtime)) = (meta.kind, meta.size, meta.mtime) {
        meta.etag = Some(etag(size, mtime));
    }
    Some((meta, dot?))
}

/// A `unix.mode` value: octal, as `0644` or (pyftpdlib, Python's `oct()`) `0o644`.
fn octal(value: &str) -> Option<u32> {
    let digits = value.strip_prefix("0o").unwrap_or(value);
    u32::from_str_radix(digits, 8).ok().map(|m| m & 0o7777)
}

/// The kind a `type` fact names, a symlink's target where given (`OS.unix=slink:target`,
/// ProFTPD), and whether it is `cdir`/`pdir`. Other OS-specific types are files to us.
fn fact_type(value: &str) -> (Kind, Option<String>, bool) {
    let lower = value.to_ascii_lowercase();
    match lower.as_str() {
        "dir" => (Kind::Dir, None, false),
        "cdir" | "pdir" => (Kind::Dir, None, true),
        _ if lower.starts_with("os.unix=slink") || lower.starts_with("os.unix=symlink") => {
            let target = value.split_once(':').map(|(_, t)| t.to_owned());
            (Kind::Symlink, target.filter(|t| !t.is_empty()), false)
        }
        _ => (Kind::File, None, false),
    }
}

/// A LIST line in either format.
fn list_line(line: &str, now: SystemTime) -> Line {
    if line.trim().is_empty() || line.starts_with("total ") {
        return Line::Skip;
    }
    let entry = unix_line(line, now).or_else(|| dos_line(line));
    match entry {
        Some((name, _)) if name == "." || name == ".." => Line::Skip,
        Some((name, meta)) => Line::Entry(name, meta),
        None => Line::Unknown,
    }
}

/// The whitespace-separated tokens of a line with their byte ranges, so that the name (the
/// rest of the line) keeps its inner spaces.
fn tokens(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line
        .char_indices()
        .chain(std::iter::once((line.len(), ' ')))
    {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, &line[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    out
}

/// `drwxr-xr-x 2 user group 4096 Nov 22 06:02 name` (or `... Nov 22  2024 name`, or
/// `lrwxrwxrwx ... name -> target`). Servers differ in the columns before the size (no
/// group, numeric ids), so the date is found by its shape and the size is just before it.
fn unix_line(line: &str, now: SystemTime) -> Option<(String, Meta)> {
    let toks = tokens(line);
    let perms = toks.first()?.1.as_bytes();
    let kind = match perms.first()? {
        b'd' => Kind::Dir,
        b'l' => Kind::Symlink,
        b'-' | b'b' | b'c' | b'p' | b's' => Kind::File,
        _ => return None,
    };
    let mode = mode_of(perms.get(1..10)?)?;
    let at = (2..toks.len().saturating_sub(2)).find(|&i| is_date(&toks[i..i + 3]))?;
    let size = toks[at - 1].1.parse().ok()?;
    let mtime = unix_date(toks[at].1, toks[at + 1].1, toks[at + 2].1, now)?;
    let (pos, last) = toks[at + 2];
    // Exactly one space separates the date from the name, which may begin with spaces.
    let rest = line.get(pos + last.len() + 1..).filter(|r| !r.is_empty())?;
    let (name, target) = match (kind, rest.split_once(" -> ")) {
        (Kind::Symlink, Some((name, target))) => (name, Some(target.to_owned())),
        _ => (rest, None),
    };
    let meta = Meta {
        kind,
        size: Some(size),
        mtime: Some(mtime),
        mode: Some(mode),
        etag: None,
        symlink_target: target,
        nlink: None,
        atime: None,
        fresh_for: None,
    };
    Some((name.to_owned(), meta))
}

/// Whether three tokens look like `Nov 22 06:02` or `Nov 22 2024`.
fn is_date(toks: &[(usize, &str)]) -> bool {
    let day_ok = toks[1]
        .1
        .parse::<u32>()
        .is_ok_and(|d| (1..=31).contains(&d));
    let last = toks[2].1;
    let time_or_year = last.contains(':') || (last.len() == 4 && last.parse::<u32>().is_ok());
    month_number(toks[0].1).is_some() && day_ok && time_or_year
}

/// The time of an `ls` date, taken as UTC (vsftpd's default; others vary and do not say).
/// `ls` omits the year for times within the last six months, so a date that would lie
/// in the future belongs to last year.
fn unix_date(month: &str, day: &str, time_or_year: &str, now: SystemTime) -> Option<SystemTime> {
    let (month, day) = (month_number(month)?, day.parse().ok()?);
    match time_or_year.split_once(':') {
        Some((h, m)) => {
            let (h, m) = (h.parse().ok()?, m.parse().ok()?);
            let this_year = year_of(now);
            let t = from_civil(this_year, month, day, h, m, 0)?;
            let tolerance = Duration::from_secs(86_400);
            match t > now + tolerance {
                true => from_civil(this_year - 1, month, day, h, m, 0),
                false => Some(t),
            }
        }
        None => from_civil(time_or_year.parse().ok()?, month, day, 0, 0, 0),
    }
}

/// Permission bits of `rwxr-sr-T`-style text: `s`/`S` are setuid/setgid, `t`/`T` sticky,
/// lower case when the execute bit is set too.
fn mode_of(perms: &[u8]) -> Option<u32> {
    let mut mode = 0;
    for (i, triple) in perms.chunks(3).enumerate() {
        let shift = 6 - 3 * i;
        let special = [0o4000, 0o2000, 0o1000][i];
        let [r, w, x] = triple else { return None };
        mode |= match r {
            b'r' => 4 << shift,
            b'-' => 0,
            _ => return None,
        };
        mode |= match w {
            b'w' => 2 << shift,
            b'-' => 0,
            _ => return None,
        };
        mode |= match x {
            b'x' => 1 << shift,
            b's' | b't' => 1 << shift | special,
            b'S' | b'T' => special,
            b'-' => 0,
            _ => return None,
        };
    }
    Some(mode)
}

/// `11-22-26  06:02AM       <DIR>          name` or `... 1234 name` (IIS and other DOS-style
/// servers; two-digit years below 70 are this century's, as IIS means them).
fn dos_line(line: &str) -> Option<(String, Meta)> {
    let toks = tokens(line);
    let [(_, date), (_, time), (pos, size), ..] = toks[..] else {
        return None;
    };
    let mut date = date.split('-').map(|p| p.parse::<u32>().ok());
    let (month, day, year) = (date.next()??, date.next()??, date.next()??);
    let year = match year {
        0..=69 => 2000 + year,
        70..=99 => 1900 + year,
        _ => year,
    };
    // Checked: the last two bytes of a hostile time may cut a character (`06:0€`).
    let (clock, half) = time.split_at_checked(time.len().checked_sub(2)?)?;
    let (h, m) = clock.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    let h = match half.to_ascii_uppercase().as_str() {
        "AM" if h <= 12 => h % 12,
        "PM" if h <= 12 => h % 12 + 12,
        _ => return None,
    };
    let mtime = from_civil(i64::from(year), month, day, h, m, 0)?;
    let (kind, size) = match size {
        "<DIR>" => (Kind::Dir, None),
        n => (Kind::File, Some(n.parse().ok()?)),
    };
    let name = line[pos + toks[2].1.len()..].trim_start();
    let meta = Meta {
        size,
        mtime: Some(mtime),
        ..Meta::of_kind(kind)
    };
    (!name.is_empty()).then(|| (name.to_owned(), meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-22 06:30:00 UTC, the "now" of LIST dates without a year.
    fn now() -> SystemTime {
        from_civil(2026, 11, 22, 6, 30, 0).unwrap()
    }

    fn entries(text: &str, format: Format) -> Listing {
        parse(text.as_bytes(), format, now(), "test")
    }

    #[test]
    fn unix_lines() {
        let text = "total 24\r\n\
            drwxr-xr-x    3 102      0            4096 Nov 22 06:29 .\r\n\
            drwxr-xr-x    3 0        0            4096 Nov 22 06:29 ..\r\n\
            -rw-r--r--    1 0        0               2 Nov 22 06:29 .dot\r\n\
            -rw-r-----    1 ftp      ftp            11 Dec 24  2025 a  b.txt\r\n\
            drwxrwsr-t    2 0        0            4096 Dec 30 23:59 sub dir\r\n\
            lrwxrwxrwx    1 0        0               5 Nov 22 06:29 ln -> a.txt\r\n\
            -rwsr-Sr-x    1 owner    77 Jan  1  1999 nogroup\r\n";
        let listing = entries(text, Format::List);
        assert!(listing.complete);
        let names: Vec<_> = listing.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, [".dot", "a  b.txt", "sub dir", "ln", "nogroup"]);
        let e = &listing.entries;
        assert_eq!(e[0].meta.mtime, from_civil(2026, 11, 22, 6, 29, 0));
        assert_eq!((e[0].meta.size, e[0].meta.mode), (Some(2), Some(0o644)));
        assert_eq!(e[1].meta.mtime, from_civil(2025, 12, 24, 0, 0, 0));
        assert_eq!(
            (e[1].meta.mode, e[1].meta.etag.clone()),
            (Some(0o640), None)
        );
        // Dec 30 23:59 would be in the future this year: it is last year's.
        assert_eq!(e[2].meta.mtime, from_civil(2025, 12, 30, 23, 59, 0));
        assert_eq!((e[2].meta.kind, e[2].meta.mode), (Kind::Dir, Some(0o3775)));
        assert_eq!(e[3].meta.kind, Kind::Symlink);
        assert_eq!(e[3].meta.symlink_target.as_deref(), Some("a.txt"));
        assert_eq!((e[4].meta.size, e[4].meta.mode), (Some(77), Some(0o6745)));
    }

    #[test]
    fn dos_lines() {
        let text = "11-22-26  06:02AM       <DIR>          My Documents\r\n\
                    01-02-1999  12:15PM                 1234 report 1.txt\r\n\
                    03-04-70  12:00AM                    0 empty\r\n";
        let listing = entries(text, Format::List);
        assert!(listing.complete);
        let e = &listing.entries;
        assert_eq!(e[0].name, "My Documents");
        assert_eq!(e[0].meta.kind, Kind::Dir);
        assert_eq!(e[0].meta.mtime, from_civil(2026, 11, 22, 6, 2, 0));
        assert_eq!(
            (e[1].name.as_str(), e[1].meta.size),
            ("report 1.txt", Some(1234))
        );
        assert_eq!(e[1].meta.mtime, from_civil(1999, 1, 2, 12, 15, 0));
        assert_eq!(e[2].meta.mtime, from_civil(1970, 3, 4, 0, 0, 0));
    }

    #[test]
    fn fact_lines() {
        let text = "type=cdir;modify=20261122062900; .\r\n\
                    type=file;size=11;modify=20261122062914;unix.mode=0640;perm=r; a b.txt\r\n\
                    Type=DIR;Modify=20250101000000;UNIX.mode=0o2755; sub\r\n\
                    type=OS.unix=slink:/etc/target;size=11; ln\r\n";
        let listing = entries(text, Format::Facts);
        assert!(listing.complete);
        let e = &listing.entries;
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].name, "a b.txt");
        let mtime = parse_timeval("20261122062914").unwrap();
        assert_eq!(
            e[0].meta,
            Meta {
                kind: Kind::File,
                size: Some(11),
                mtime: Some(mtime),
                mode: Some(0o640),
                etag: Some(etag(11, mtime)),
                symlink_target: None,
                nlink: None,
                atime: None,
                fresh_for: None,
            }
        );
        assert_eq!((e[1].name.as_str(), e[1].meta.kind), ("sub", Kind::Dir));
        assert_eq!(e[1].meta.mode, Some(0o2755));
        assert_eq!(e[2].meta.kind, Kind::Symlink);
        assert_eq!(e[2].meta.symlink_target.as_deref(), Some("/etc/target"));
    }

    #[test]
    fn mlst_replies() {
        let meta = mlst_meta(" type=file;size=5;modify=20261122062914; /pub/a b").unwrap();
        assert_eq!((meta.kind, meta.size), (Kind::File, Some(5)));
        assert_eq!(mlst_meta(" type=cdir; /pub").unwrap().kind, Kind::Dir);
        assert_eq!(mlst_meta(" size=5; /pub/x"), None);
    }

    #[test]
    fn hostile_names_are_dropped() {
        let facts = "type=file;size=1; ../escape\r\ntype=file;size=1; a/b\r\ntype=file; ok\r\n";
        let listing = entries(facts, Format::Facts);
        let names: Vec<_> = listing.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["ok"]);
        assert!(listing.complete);
        let list = "-rw-r--r-- 1 u g 1 Nov 22 06:02 ../x\r\n-rw-r--r-- 1 u g 1 Nov 22 06:02 ..\r\n";
        assert!(entries(list, Format::List).entries.is_empty());
    }

    /// Found by fuzzing: splitting `AM`/`PM` off a time by bytes panicked inside a character.
    #[test]
    fn a_dos_time_ending_inside_a_character_is_unknown() {
        let listing = entries("11-22-26  854:9Ko€  12 x\r\n", Format::List);
        assert!(listing.entries.is_empty());
        assert!(!listing.complete);
    }

    #[test]
    fn unknown_lines_make_the_listing_incomplete() {
        let text = b"-rw-r--r-- 1 u g 1 Nov 22 06:02 fine\r\nwhat is this\r\n\xff\xfe\r\n";
        let listing = parse(text, Format::List, now(), "test");
        assert_eq!(listing.entries.len(), 1);
        assert!(!listing.complete);
        let facts = entries("size=1; no-type\r\n", Format::Facts);
        assert!(!facts.complete);
        for bad in [
            "-rw-r--r-- 1 u g x Nov 22 06:02 a",
            "-rw-r--r-- 1 u g 1 Nov 32 06:02 a",
            "-rw-r--r-- 1 u g 1 Nov 22 06:02",
            "?rw-r--r-- 1 u g 1 Nov 22 06:02 a",
            "-rwq-r--r- 1 u g 1 Nov 22 06:02 a",
            "13-22-26  06:02AM  <DIR> a",
            "11-22-26  13:02PM  <DIR> a",
        ] {
            assert_eq!(list_line(bad, now()), Line::Unknown, "{bad}");
        }
    }
}

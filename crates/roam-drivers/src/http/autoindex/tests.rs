//! Parser tests on index pages as real servers write them (CRLF and all), plus pages
//! crafted by a hostile server.

use super::*;

const PAGE: &str = "http://h/dir/";

/// 2026-11-22 06:02 UTC, written independently of the parser's calendar code.
fn nov22(minute: u64) -> SystemTime {
    httpdate::parse_http_date("Sun, 22 Nov 2026 06:00:00 GMT").unwrap()
        + Duration::from_secs(60 * minute)
}

fn entry<'a>(listing: &'a Listing, name: &str) -> &'a Meta {
    &listing
        .entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no {name:?} in {listing:?}"))
        .meta
}

fn names(listing: &Listing) -> Vec<&str> {
    listing.entries.iter().map(|e| e.name.as_str()).collect()
}

const NGINX: &str = "<html>\r
<head><title>Index of /dir/</title></head>\r
<body>\r
<h1>Index of /dir/</h1><hr><pre><a href=\"../\">../</a>\r
<a href=\"sub/\">sub/</a>                                               22-Nov-2026 06:02                   -\r
<a href=\"%3Cb%3E.txt\">&lt;b&gt;.txt</a>                                            22-Nov-2026 06:02                   0\r
<a href=\"a%20b.txt\">a b.txt</a>                                            22-Nov-2026 06:02                 123\r
<a href=\"a%3Ab%26c.txt\">a:b&amp;c.txt</a>                                          22-Nov-2026 06:03                   2\r
<a href=\"big.iso\">big.iso</a>                                            22-Nov-2026 06:04                  3G\r
<a href=\"very-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.txt\">very-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxx..&gt;</a> 22-Nov-2026 06:02              5\r
<a href=\"%C3%BCn%C3%AF.txt\">\u{fc}n\u{ef}.txt</a>                                          22-Nov-2026 06:02                   7\r
</pre><hr></body>\r
</html>\r
";

#[test]
fn nginx_autoindex() {
    let listing = parse(NGINX, PAGE);
    assert!(listing.complete);
    assert_eq!(
        names(&listing),
        [
            "sub",
            "<b>.txt",
            "a b.txt",
            "a:b&c.txt",
            "big.iso",
            "very-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.txt",
            "ünï.txt"
        ]
    );
    let sub = entry(&listing, "sub");
    assert_eq!(
        (sub.kind, sub.size, sub.mtime),
        (Kind::Dir, None, Some(nov22(2)))
    );
    let file = entry(&listing, "a b.txt");
    assert_eq!(
        (file.kind, file.size, file.mtime),
        (Kind::File, Some(123), Some(nov22(2)))
    );
    assert_eq!(entry(&listing, "a:b&c.txt").mtime, Some(nov22(3)));
    assert_eq!(entry(&listing, "<b>.txt").size, Some(0));
    // `autoindex_exact_size off` sizes are rounded: not exact, so unknown.
    assert_eq!(entry(&listing, "big.iso").size, None);
    // The link text was truncated; the href and the details after it were not.
    assert_eq!(
        entry(
            &listing,
            "very-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.txt"
        )
        .size,
        Some(5)
    );
    assert_eq!(entry(&listing, "ünï.txt").size, Some(7));
}

const APACHE_PRE: &str = r#"<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 3.2 Final//EN">
<html>
 <head>
  <title>Index of /dir</title>
 </head>
 <body>
<h1>Index of /dir</h1>
<pre><img src="/icons/blank.gif" alt="Icon "> <a href="?C=N;O=D">Name</a>                    <a href="?C=M;O=A">Last modified</a>      <a href="?C=S;O=A">Size</a>  <a href="?C=D;O=A">Description</a><hr><img src="/icons/back.gif" alt="[PARENTDIR]"> <a href="/">Parent Directory</a>                             -   
<img src="/icons/folder.gif" alt="[DIR]"> <a href="sub/">sub/</a>                    2026-11-22 06:02    -   
<img src="/icons/text.gif" alt="[TXT]"> <a href="a%20b.txt">a b.txt</a>                 2026-11-22 06:02  123   
<img src="/icons/unknown.gif" alt="[   ]"> <a href="./a:b.txt">a:b.txt</a>                 2026-11-22 06:05  1.2K  A description
<img src="/icons/unknown.gif" alt="[   ]"> <a href="old.txt">old.txt</a>                 22-Nov-2026 06:04   42  
<img src="/icons/unknown.gif" alt="[   ]"> <a href="nodate.txt">nodate.txt</a>
<hr></pre>
<address>Apache/2.4.57 (Debian) Server at localhost Port 80</address>
</body></html>
"#;

#[test]
fn apache_pre_autoindex() {
    let listing = parse(APACHE_PRE, PAGE);
    assert!(listing.complete);
    assert_eq!(
        names(&listing),
        ["sub", "a b.txt", "a:b.txt", "old.txt", "nodate.txt"]
    );
    assert_eq!(entry(&listing, "sub").kind, Kind::Dir);
    let file = entry(&listing, "a b.txt");
    assert_eq!(
        (file.kind, file.size, file.mtime),
        (Kind::File, Some(123), Some(nov22(2)))
    );
    let colon = entry(&listing, "a:b.txt");
    assert_eq!((colon.size, colon.mtime), (None, Some(nov22(5))));
    let old = entry(&listing, "old.txt");
    assert_eq!((old.size, old.mtime), (Some(42), Some(nov22(4))));
    let bare = entry(&listing, "nodate.txt");
    assert_eq!((bare.size, bare.mtime), (None, None));
}

const APACHE_TABLE: &str = r#"<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 3.2 Final//EN">
<html>
 <head>
  <title>Index of /dir</title>
 </head>
 <body>
<h1>Index of /dir</h1>
  <table>
   <tr><th valign="top"><img src="/icons/blank.gif" alt="[ICO]"></th><th><a href="?C=N;O=D">Name</a></th><th><a href="?C=M;O=A">Last modified</a></th><th><a href="?C=S;O=A">Size</a></th><th><a href="?C=D;O=A">Description</a></th></tr>
   <tr><th colspan="5"><hr></th></tr>
<tr><td valign="top"><img src="/icons/back.gif" alt="[PARENTDIR]"></td><td><a href="/">Parent Directory</a></td><td>&nbsp;</td><td align="right">  - </td><td>&nbsp;</td></tr>
<tr><td valign="top"><img src="/icons/folder.gif" alt="[DIR]"></td><td><a href="sub/">sub/</a></td><td align="right">2026-11-22 06:02  </td><td align="right">  - </td><td>&nbsp;</td></tr>
<tr><td valign="top"><img src="/icons/text.gif" alt="[TXT]"></td><td><a href="a%20b.txt">a b.txt</a></td><td align="right">2026-11-22 06:02  </td><td align="right">123 </td><td>&nbsp;</td></tr>
<tr><td valign="top"><img src="/icons/compressed.gif" alt="[   ]"></td><td><a href="big.tar.gz">big.tar.gz</a></td><td align="right">2026-11-22 06:07  </td><td align="right">3.4M</td><td>&nbsp;</td></tr>
<tr>
 <td valign="top"><img src="/icons/text.gif" alt="[TXT]"></td>
 <td><A HREF='split.txt'>split.txt</A></td>
 <td align="right">2026-11-22 06:09  </td>
 <td align="right">77 </td>
</tr>
   <tr><th colspan="5"><hr></th></tr>
</table>
<address>Apache/2.4.57 (Debian) Server at localhost Port 80</address>
</body></html>
"#;

#[test]
fn apache_table_autoindex() {
    let listing = parse(APACHE_TABLE, PAGE);
    assert!(listing.complete);
    assert_eq!(
        names(&listing),
        ["sub", "a b.txt", "big.tar.gz", "split.txt"]
    );
    assert_eq!(entry(&listing, "sub").kind, Kind::Dir);
    let file = entry(&listing, "a b.txt");
    assert_eq!(
        (file.kind, file.size, file.mtime),
        (Kind::File, Some(123), Some(nov22(2)))
    );
    let big = entry(&listing, "big.tar.gz");
    assert_eq!((big.size, big.mtime), (None, Some(nov22(7))));
    // A row whose cells are on separate lines still gives its details.
    let split = entry(&listing, "split.txt");
    assert_eq!((split.size, split.mtime), (Some(77), Some(nov22(9))));
}

const PYTHON: &str = r#"<!DOCTYPE HTML>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Directory listing for /dir/</title>
</head>
<body>
<h1>Directory listing for /dir/</h1>
<hr>
<ul>
<li><a href="a%20b.txt">a b.txt</a></li>
<li><a href="a%3Ab%26c.txt">a:b&amp;c.txt</a></li>
<li><a href="link/">link@</a></li>
<li><a href="sub/">sub/</a></li>
<li><a href="%C3%BCn%C3%AF.txt">ünï.txt</a></li>
</ul>
<hr>
</body>
</html>
"#;

#[test]
fn python_http_server() {
    let listing = parse(PYTHON, PAGE);
    assert!(listing.complete);
    assert_eq!(
        names(&listing),
        ["a b.txt", "a:b&c.txt", "link", "sub", "ünï.txt"]
    );
    assert_eq!(entry(&listing, "link").kind, Kind::Dir);
    assert_eq!(*entry(&listing, "a b.txt"), Meta::of_kind(Kind::File));
}

#[test]
fn lighttpd_dates_with_seconds() {
    let html = "<title>Index of /dir/</title>\n<tr class=\"d\"><td class=\"n\"><a href=\"f.txt\">f.txt</a></td>\
                <td class=\"m\">2026-Nov-22 06:02:30</td><td class=\"s\">1.1K</td></tr>\n";
    let listing = parse(html, PAGE);
    assert_eq!(
        entry(&listing, "f.txt").mtime,
        Some(nov22(2) + Duration::from_secs(30))
    );
}

#[test]
fn hostile_names_are_dropped() {
    let html = "<title>Index of /dir/</title><pre>
<a href=\"..%2F..%2Fetc\">passwd</a> 22-Nov-2026 06:02 10
<a href=\"..%2F..%2Fetc/\">etc</a>
<a href=\"a%00b\">a</a>
<a href=\"a&#0;b\">a</a>
<a href=\"%2e%2e\">up</a>
<a href=\"%2E%2E/\">up</a>
<a href=\"%2e\">self</a>
<a href=\"a%2Fb\">a/b</a>
<a href=\"sub/x\">nested</a>
<a href=\"%FF%FE\">not utf-8</a>
<a href=\"\">empty</a>
<a href=\"ok\">ok</a>
</pre>";
    let listing = parse(html, PAGE);
    assert_eq!(names(&listing), ["ok"]);
}

#[test]
fn other_pages_give_their_relative_links_as_an_incomplete_listing() {
    let html = "<!doctype html><html><head><title>Welcome</title></head><body>
<a href=\"x.html\">x</a> <a href=\"https://example.com/\">ext</a> <a href=\"mailto:a@b\">mail</a>
<a href=\"#top\">top</a> <a href=\"/abs\">abs</a> <a href=\"?page=2\">next</a> <a name=\"anchor\">no href</a>
<a class=x href=bare.txt>bare</a> <abbr title=\"a\">not a link</abbr>
</body></html>";
    let listing = parse(html, PAGE);
    assert!(!listing.complete);
    assert_eq!(names(&listing), ["x.html", "bare.txt"]);
}

#[test]
fn duplicate_names_are_listed_once() {
    let html = "<title>Index of /</title><a href=\"a\">a</a>\n<a href=\"a\">a again</a>\n<a href=\"./a\">a</a>";
    assert_eq!(names(&parse(html, PAGE)), ["a"]);
}

#[test]
fn broken_markup_does_not_derail_the_parser() {
    let html = "<title>Index of /</title><a href=\"a\" data-x='q>r'>a</a>\n<a href=\"b\"\n<a href=\"c\">c</a>\n<a href=\"d";
    let listing = parse(html, PAGE);
    assert_eq!(names(&listing), ["a", "b"]);
    assert!(parse("", PAGE).entries.is_empty());
    let unterminated = parse("<title>Index of", PAGE);
    assert!(unterminated.complete && unterminated.entries.is_empty());
}

#[test]
fn references_are_resolved() {
    assert_eq!(
        unescape("a&amp;b&lt;&gt;&quot;&#39;&#x27;&apos;"),
        "a&b<>\"'''"
    );
    assert_eq!(unescape("&unknown; & &#xZZ; &"), "&unknown; & &#xZZ; &");
    assert_eq!(unescape("&nbsp;"), "\u{a0}");
}

#[test]
fn dates_are_checked() {
    assert_eq!(timestamp("22-Nov-2026", "06:02"), Some(nov22(2)));
    assert_eq!(timestamp("2026-11-22", "06:02"), Some(nov22(2)));
    assert_eq!(timestamp("1970-01-01", "00:00"), Some(UNIX_EPOCH));
    assert_eq!(
        timestamp("2024-02-29", "23:59:59"),
        httpdate::parse_http_date("Thu, 29 Feb 2024 23:59:59 GMT").ok()
    );
    for (date, time) in [
        ("22-Foo-2026", "06:02"),
        ("2026-13-01", "06:02"),
        ("2026-11-22", "24:00"),
        ("1969-12-31", "23:59"),
        ("26-11-22", "06:02"),
        ("2026-11-22", "6:2:1:0"),
        ("+026-11-22", "06:02"),
    ] {
        assert_eq!(timestamp(date, time), None, "{date} {time}");
    }
}

#[test]
fn every_truncation_of_a_real_page_parses_without_panicking() {
    for sample in [NGINX, APACHE_PRE, APACHE_TABLE, PYTHON] {
        for (cut, _) in sample.char_indices() {
            let listing = parse(&sample[..cut], PAGE);
            assert!(listing.entries.iter().all(|e| is_safe_name(&e.name)));
        }
    }
}
